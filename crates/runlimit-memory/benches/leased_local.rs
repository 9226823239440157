//! A check admitted from a lease against a `MemoryStore` check of the same
//! policy and key, one thread, rounds alternating, medians of time per check.
//!
//! Run with `cargo bench -p runlimit-memory --bench leased_local`
//! (`BENCH_ROUNDS`, default 9). Results are recorded in BENCHMARKS.md.
#![allow(missing_docs, clippy::cast_precision_loss)]

use std::{
    hint::black_box,
    pin::pin,
    task::{Context, Poll, Waker},
    time::{Duration, Instant},
};

use runlimit_core::{
    Check, FixedWindowPolicy, Limiter, MAX_LIMIT, MAX_WINDOW, PolicyId, ScopeId, SubjectKey,
};
use runlimit_memory::{LeaseConfig, Leased, MemoryStore, MemoryStoreConfig};

const CHECKS: u32 = 2_000_000;

/// Polls a future that never waits (both limiters here decide at once).
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
}

fn per_check(mut check: impl FnMut()) -> f64 {
    let started = Instant::now();
    for _ in 0..CHECKS {
        check();
    }
    started.elapsed().as_nanos() as f64 / f64::from(CHECKS)
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(9);
    let policy = FixedWindowPolicy::new(
        PolicyId::new("bench").expect("valid"),
        ScopeId::new("tenant").expect("valid"),
        MAX_LIMIT,
        MAX_WINDOW,
    )
    .expect("valid");
    let key = SubjectKey::from_digest([7; 32]);
    let config = || {
        MemoryStoreConfig::new(1 << 20)
            .and_then(|c| c.with_shard_count(64))
            .expect("valid")
    };
    let store = MemoryStore::new(config());
    let leased = Leased::new(
        MemoryStore::new(config()),
        LeaseConfig::new(1 << 20)
            .and_then(|c| c.with_max_grant(1_000_000))
            .and_then(|c| c.with_remaining_share(100))
            .map(|c| c.with_grow_within(Duration::from_secs(3_600)))
            .expect("valid"),
    );
    let check = Check::new(&policy, key);
    let (mut local, mut memory) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut leased_cell = || {
            local.push(per_check(|| {
                black_box(ready(Limiter::check(&leased, black_box(&check))).expect("ok"));
            }));
        };
        let mut memory_cell = || {
            memory.push(per_check(|| {
                black_box(store.check(black_box(&check)).expect("ok"));
            }));
        };
        if round % 2 == 0 {
            leased_cell();
            memory_cell();
        } else {
            memory_cell();
            leased_cell();
        }
    }
    let mut ratios: Vec<f64> = local.iter().zip(&memory).map(|(l, m)| l / m).collect();
    for values in [&mut local, &mut memory, &mut ratios] {
        values.sort_by(f64::total_cmp);
    }
    let median = |values: &[f64]| values[values.len() / 2];
    println!(
        "leased local check {:.1} ns ({:.1}–{:.1}), MemoryStore check {:.1} ns ({:.1}–{:.1}), ratio {:.2}× ({:.2}–{:.2}), {rounds} rounds of {CHECKS}; grants {}",
        median(&local),
        local[0],
        local[rounds - 1],
        median(&memory),
        memory[0],
        memory[rounds - 1],
        median(&ratios),
        ratios[0],
        ratios[rounds - 1],
        leased.stats().grants,
    );
}
