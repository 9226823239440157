//! Throughput of the memory stores, side by side with governor's keyed
//! (DashMap) limiter in the same run.
//!
//! Run with `cargo bench -p runlimit-memory --bench memory`. See BENCHMARKS.md
//! for recorded figures and the targets they are held to. The targets that are
//! ratios of two Runlimit measurements (two-thread scaling, a batch against
//! single checks) have a benchmark of their own, `ratios`.
#![allow(missing_docs)]

mod support;

use std::{
    hint::black_box,
    num::NonZeroU32,
    time::{Duration, Instant},
};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use runlimit_core::{Check, SubjectKey};
use runlimit_memory::{GcraStore, MemoryStore, MemoryStoreConfig};
use support::{RANDOM_KEYS, fixed_policy, gcra_policy, governor_quota, random_indices, subject};

const SEQUENCE: usize = 1 << 20;

fn hot_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_key_allowed");
    group.throughput(Throughput::Elements(1));
    let policy = fixed_policy("client");
    let store = MemoryStore::new(MemoryStoreConfig::new(50_000).expect("valid"));
    let key = subject(1);
    group.bench_function("runlimit_fixed_window", |b| {
        b.iter(|| {
            black_box(
                store
                    .check(&Check::new(&policy, black_box(key)))
                    .expect("ok"),
            )
        });
    });
    let gcra = gcra_policy();
    let gcra_store = GcraStore::new(MemoryStoreConfig::new(50_000).expect("valid"));
    group.bench_function("runlimit_gcra", |b| {
        b.iter(|| {
            black_box(
                gcra_store
                    .check(&Check::new(&gcra, black_box(key)))
                    .expect("ok"),
            )
        });
    });
    // Governor keyed by the same 32-byte digest the application would use as
    // its key, and by a bare u64 as a lower bound for what hashing costs it.
    let governor = RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX));
    let digest = *key.as_bytes();
    group.bench_function("governor_keyed_digest", |b| {
        b.iter(|| black_box(governor.check_key(black_box(&digest))));
    });
    let governor = RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX));
    group.bench_function("governor_keyed_u64", |b| {
        b.iter(|| black_box(governor.check_key(&black_box(1u64))));
    });
    group.finish();
}

fn random_keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("random_100k_keys_allowed");
    group.throughput(Throughput::Elements(1));
    let indices = random_indices(SEQUENCE);
    let keys: Vec<SubjectKey> = (0..RANDOM_KEYS as u64).map(subject).collect();
    let policy = gcra_policy();
    let store = GcraStore::new(MemoryStoreConfig::new(RANDOM_KEYS).expect("valid"));
    for key in &keys {
        store.check(&Check::new(&policy, *key)).expect("ok");
    }
    let mut position = 0;
    group.bench_function("runlimit_gcra", |b| {
        b.iter(|| {
            position = (position + 1) % SEQUENCE;
            let key = keys[indices[position]];
            black_box(store.check(&Check::new(&policy, key)).expect("ok"))
        });
    });
    let sharded = GcraStore::new(
        MemoryStoreConfig::new(2 * RANDOM_KEYS)
            .and_then(|config| config.with_shard_count(64))
            .expect("valid"),
    );
    for key in &keys {
        sharded.check(&Check::new(&policy, *key)).expect("ok");
    }
    group.bench_function("runlimit_gcra_64_shards", |b| {
        b.iter(|| {
            position = (position + 1) % SEQUENCE;
            let key = keys[indices[position]];
            black_box(sharded.check(&Check::new(&policy, key)).expect("ok"))
        });
    });
    let governor = RateLimiter::keyed(governor_quota());
    for key in &keys {
        let _ = governor.check_key(key.as_bytes());
    }
    group.bench_function("governor_keyed_digest", |b| {
        b.iter(|| {
            position = (position + 1) % SEQUENCE;
            black_box(governor.check_key(keys[indices[position]].as_bytes()))
        });
    });
    let governor = RateLimiter::keyed(governor_quota());
    for index in 0..RANDOM_KEYS as u64 {
        let _ = governor.check_key(&index);
    }
    group.bench_function("governor_keyed_u64", |b| {
        b.iter(|| {
            position = (position + 1) % SEQUENCE;
            black_box(governor.check_key(&(indices[position] as u64)))
        });
    });
    group.finish();
}

/// Checks on keys never seen before: each stores a new entry, the work a flood
/// of distinct keys causes. Every sample starts from an empty store (or
/// limiter) sized for all its keys, so nothing is denied or cleaned up.
fn new_keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("new_keys_allowed");
    group.throughput(Throughput::Elements(1));
    let policy = fixed_policy("client");
    for shards in [1, 64] {
        group.bench_function(format!("runlimit_fixed_window_{shards}_shards"), |b| {
            b.iter_custom(|iterations| {
                let capacity = usize::try_from(iterations).expect("fits").max(shards);
                let store = MemoryStore::new(
                    MemoryStoreConfig::new(2 * capacity)
                        .and_then(|config| config.with_shard_count(shards))
                        .expect("valid"),
                );
                let started = Instant::now();
                for n in 0..iterations {
                    black_box(store.check(&Check::new(&policy, subject(n))).expect("ok"));
                }
                started.elapsed()
            });
        });
    }
    group.bench_function("governor_keyed_digest", |b| {
        b.iter_custom(|iterations| {
            let governor = RateLimiter::keyed(governor_quota());
            let started = Instant::now();
            for n in 0..iterations {
                black_box(governor.check_key(subject(n).as_bytes()).is_ok());
            }
            started.elapsed()
        });
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = hot_key, random_keys, new_keys
}
criterion_main!(benches);
