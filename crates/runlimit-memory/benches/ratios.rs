//! The targets that are ratios of measurements of Runlimit itself:
//!
//! - two-thread scaling of random-key GCRA checks (100k keys, 64 shards), side
//!   by side with governor's keyed limiter;
//! - an atomic batch of two stored keys against two single checks;
//! - a peek, an admission with a receipt and a refund against a check, on a
//!   hot key of each algorithm;
//! - a sliding-window check against a fixed-window check, on a hot key and
//!   on 100k random stored keys.
//!
//! A ratio of two criterion groups compares measurements taken seconds apart,
//! and on a shared VM the host's load moves more in that time than the figure
//! being measured. So this benchmark alternates short fixed-work runs of the
//! two sides and reports the median ratio over the rounds.
//!
//! Run with `cargo bench -p runlimit-memory --bench ratios` (add `-- batch`,
//! `-- scaling`, `-- lifecycle` or `-- sliding` for one part); it prints each round's
//! nanoseconds and ratio, then the medians.
#![allow(missing_docs)]

mod support;

use std::{
    hint::black_box,
    sync::{Arc, Barrier},
    thread,
    time::Instant,
};

use governor::RateLimiter;
use runlimit_core::{Check, Policy, Receipt, SubjectKey};
use runlimit_memory::{
    Algorithm, GcraStore, MemoryStore, MemoryStoreConfig, SlidingWindowStore, Store,
};
use support::{RANDOM_KEYS, fixed_policy, gcra_policy, governor_quota, sliding_policy, subject};

const ROUNDS: usize = 9;
const CHECKS_PER_THREAD: u64 = 2_000_000;
const CALLS_PER_ROUND: u32 = 1_000_000;

/// Nanoseconds per check per thread for `threads` pinned threads, each running
/// `CHECKS_PER_THREAD` calls of `work` with its own pseudo-random key indices.
fn per_check<W>(work: &Arc<W>, threads: usize) -> f64
where
    W: Fn(usize) + Send + Sync + 'static,
{
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let (work, barrier) = (Arc::clone(work), Arc::clone(&barrier));
            thread::spawn(move || {
                // Pin each thread to its own core so the scheduler cannot stack
                // both on one core.
                if let Some(core) = core_affinity::get_core_ids()
                    .and_then(|cores| cores.get(thread % cores.len().max(1)).copied())
                {
                    core_affinity::set_for_current(core);
                }
                let mut state = 0x2545_F491_4F6C_DD1Du64.wrapping_mul(thread as u64 + 1);
                barrier.wait();
                for _ in 0..CHECKS_PER_THREAD {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    work(usize::try_from(state % RANDOM_KEYS as u64).expect("fits"));
                }
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    for handle in handles {
        handle.join().expect("thread");
    }
    started.elapsed().as_secs_f64() * 1e9 / CHECKS_PER_THREAD as f64
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Nanoseconds per call of `work`, over `CALLS_PER_ROUND` calls.
fn per_call(mut work: impl FnMut()) -> f64 {
    let started = Instant::now();
    for _ in 0..CALLS_PER_ROUND {
        work();
    }
    started.elapsed().as_secs_f64() * 1e9 / f64::from(CALLS_PER_ROUND)
}

/// The seed's login batch (a client and an identity key, one shard) against
/// the same two keys checked one at a time.
fn batch_of_two() {
    let client = fixed_policy("client");
    let identity = fixed_policy("identity");
    let store = MemoryStore::new(MemoryStoreConfig::new(50_000).expect("valid"));
    let checks = [
        Check::new(&client, subject(1)),
        Check::new(&identity, subject(2)),
    ];
    let mut ratios = Vec::new();
    for round in 1..=ROUNDS {
        let singles = per_call(|| {
            black_box(store.check(black_box(&checks[0])).expect("ok"));
            black_box(store.check(black_box(&checks[1])).expect("ok"));
        });
        let batch = per_call(|| {
            black_box(store.check_all(black_box(&checks)).expect("ok"));
        });
        let ratio = batch / singles;
        ratios.push(ratio);
        println!(
            "round {round}, batch_of_two: two single checks {singles:.1} ns, \
             one atomic batch {batch:.1} ns, ratio {ratio:.2}x"
        );
    }
    println!(
        "median over {ROUNDS} rounds: batch of two / two single checks {:.2}x",
        median(&mut ratios)
    );
}

/// Refunds timed per round: each needs a receipt admitted beforehand.
const REFUNDS_PER_ROUND: usize = 100_000;

/// A peek, an admission that keeps its receipt, and a refund, each against a
/// plain check of the same hot key.
fn lifecycle_of<A: Algorithm>(name: &str, store: &Store<A>, check: &Check<'_, A::Policy>)
where
    A::Policy: Policy,
{
    store.check(check).expect("ok");
    let (mut peeks, mut admits, mut refunds) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let checked = per_call(|| {
            black_box(store.check(black_box(check)).expect("ok"));
        });
        let peeked = per_call(|| {
            black_box(store.peek(black_box(check)).expect("ok"));
        });
        let admitted = per_call(|| {
            black_box(store.admit(black_box(check)).expect("ok"));
        });
        // Receipts for this round's refunds, admitted untimed; refunded
        // latest first, so each refund credits what it names, as a refund
        // shortly after its own admission does.
        let mut receipts: Vec<Receipt> = (0..REFUNDS_PER_ROUND)
            .map(|_| {
                store
                    .admit(check)
                    .expect("ok")
                    .into_parts()
                    .1
                    .expect("allowed")
            })
            .collect();
        let started = Instant::now();
        while let Some(receipt) = receipts.pop() {
            black_box(
                store
                    .refund(std::slice::from_ref(check), receipt)
                    .expect("ok"),
            );
        }
        let refunded = started.elapsed().as_secs_f64() * 1e9 / REFUNDS_PER_ROUND as f64;
        let ratios = [peeked / checked, admitted / checked, refunded / checked];
        peeks.push(ratios[0]);
        admits.push(ratios[1]);
        refunds.push(ratios[2]);
        println!(
            "round {round}, {name}: check {checked:.1} ns, peek {peeked:.1} ns ({:.2}x), \
             admit {admitted:.1} ns ({:.2}x), refund {refunded:.1} ns ({:.2}x)",
            ratios[0], ratios[1], ratios[2]
        );
    }
    println!(
        "median over {ROUNDS} rounds, {name}: peek / check {:.2}x, admit / check {:.2}x, \
         refund / check {:.2}x",
        median(&mut peeks),
        median(&mut admits),
        median(&mut refunds)
    );
}

fn lifecycle() {
    let config = MemoryStoreConfig::new(50_000).expect("valid");
    let fixed = fixed_policy("client");
    lifecycle_of(
        "fixed_window",
        &MemoryStore::new(config),
        &Check::new(&fixed, subject(1)),
    );
    // A burst of a billion, replenished over a day: millions of admissions a
    // round never exhaust it.
    let gcra = runlimit_core::GcraPolicy::new(
        runlimit_core::PolicyId::new("bench").expect("valid"),
        runlimit_core::ScopeId::new("client").expect("valid"),
        runlimit_core::MAX_LIMIT,
        std::time::Duration::from_secs(24 * 3_600),
        runlimit_core::MAX_LIMIT,
    )
    .expect("valid");
    lifecycle_of(
        "gcra",
        &GcraStore::new(config),
        &Check::new(&gcra, subject(1)),
    );
}

fn main() {
    // `cargo bench --bench ratios -- batch` (or `-- scaling`) runs one half.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with("--"))
        .collect();
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    if wanted("batch_of_two") {
        batch_of_two();
    }
    if wanted("scaling") {
        scaling();
    }
    if wanted("lifecycle") {
        lifecycle();
    }
    if wanted("sliding") {
        sliding();
    }
}

/// A sliding-window check against a fixed-window check of the same limit
/// and window: on one hot key, and on 100k stored keys in a pseudo-random
/// order (one shard, as the default store).
fn sliding() {
    let config = MemoryStoreConfig::new(2 * RANDOM_KEYS).expect("valid");
    let (fixed, sliding) = (fixed_policy("client"), sliding_policy("client"));
    let fixed_store = MemoryStore::new(config);
    let sliding_store = SlidingWindowStore::new(config);
    let keys: Vec<SubjectKey> = (0..RANDOM_KEYS as u64).map(subject).collect();
    for key in &keys {
        fixed_store.check(&Check::new(&fixed, *key)).expect("ok");
        sliding_store
            .check(&Check::new(&sliding, *key))
            .expect("ok");
    }
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let indices: Vec<usize> = (0..CALLS_PER_ROUND)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            usize::try_from(state % RANDOM_KEYS as u64).expect("fits")
        })
        .collect();
    let random = |work: &dyn Fn(SubjectKey)| {
        let mut position = 0;
        per_call(|| {
            work(keys[indices[position]]);
            position += 1;
        })
    };
    let (mut hot, mut spread) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let hot_fixed = per_call(|| {
            black_box(
                fixed_store
                    .check(&Check::new(&fixed, black_box(keys[0])))
                    .expect("ok"),
            );
        });
        let hot_sliding = per_call(|| {
            black_box(
                sliding_store
                    .check(&Check::new(&sliding, black_box(keys[0])))
                    .expect("ok"),
            );
        });
        let spread_fixed = random(&|key| {
            black_box(fixed_store.check(&Check::new(&fixed, key)).expect("ok"));
        });
        let spread_sliding = random(&|key| {
            black_box(sliding_store.check(&Check::new(&sliding, key)).expect("ok"));
        });
        hot.push(hot_sliding / hot_fixed);
        spread.push(spread_sliding / spread_fixed);
        println!(
            "round {round}, sliding: hot key fixed {hot_fixed:.1} ns, sliding {hot_sliding:.1} ns \
             ({:.2}x); 100k keys fixed {spread_fixed:.1} ns, sliding {spread_sliding:.1} ns ({:.2}x)",
            hot_sliding / hot_fixed,
            spread_sliding / spread_fixed
        );
    }
    println!(
        "median over {ROUNDS} rounds: sliding / fixed window, hot key {:.2}x, 100k keys {:.2}x",
        median(&mut hot),
        median(&mut spread)
    );
}

fn scaling() {
    let config = MemoryStoreConfig::new(2 * RANDOM_KEYS)
        .and_then(|config| config.with_shard_count(64))
        .expect("valid");
    let store = GcraStore::new(config);
    let keys: Arc<Vec<SubjectKey>> = Arc::new((0..RANDOM_KEYS as u64).map(subject).collect());
    let policy = gcra_policy();
    for key in keys.iter() {
        store.check(&Check::new(&policy, *key)).expect("ok");
    }
    let runlimit = Arc::new(move |index: usize| {
        black_box(store.check(&Check::new(&policy, keys[index])).expect("ok"));
    });
    let governor = RateLimiter::keyed(governor_quota());
    let digests: Vec<[u8; 32]> = (0..RANDOM_KEYS as u64)
        .map(|n| *subject(n).as_bytes())
        .collect();
    for digest in &digests {
        let _ = governor.check_key(digest);
    }
    let governor = Arc::new(move |index: usize| {
        black_box(governor.check_key(&digests[index]).is_ok());
    });

    let (mut runlimit_scaling, mut governor_scaling) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        for (name, ratios, one, two) in [
            (
                "runlimit_gcra",
                &mut runlimit_scaling,
                per_check(&runlimit, 1),
                per_check(&runlimit, 2),
            ),
            (
                "governor_keyed_digest",
                &mut governor_scaling,
                per_check(&governor, 1),
                per_check(&governor, 2),
            ),
        ] {
            let ratio = 2.0 * one / two;
            ratios.push(ratio);
            println!(
                "round {round}, {name}: 1 thread {one:.1} ns/check, \
                 2 threads {two:.1} ns/check per thread, scaling {ratio:.2}x"
            );
        }
    }
    println!(
        "median scaling over {ROUNDS} rounds: runlimit_gcra {:.2}x, governor_keyed_digest {:.2}x",
        median(&mut runlimit_scaling),
        median(&mut governor_scaling)
    );
}
