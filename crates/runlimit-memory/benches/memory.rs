//! Throughput of the memory stores, side by side with governor's keyed
//! (DashMap) limiter in the same run.
//!
//! Run with `cargo bench -p runlimit-memory --bench memory`. See BENCHMARKS.md
//! for recorded figures and the targets they are held to.
#![allow(missing_docs)]

use std::{
    hint::black_box,
    num::NonZeroU32,
    sync::{Arc, Barrier},
    thread,
    time::{Duration, Instant},
};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use runlimit_core::{
    Check, FixedWindowPolicy, GcraPolicy, MAX_LIMIT, PolicyId, ScopeId, SubjectKey,
};
use runlimit_memory::{GcraStore, MemoryStore, MemoryStoreConfig};

const RANDOM_KEYS: usize = 100_000;
const SEQUENCE: usize = 1 << 20;

fn subject(n: u64) -> SubjectKey {
    // Spread like HMAC output: every byte depends on n.
    let mut digest = [0u8; 32];
    let mut state = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    for chunk in digest.chunks_mut(8) {
        state ^= state >> 30;
        state = state.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        state ^= state >> 27;
        state = state.wrapping_mul(0x94D0_49BB_1331_11EB);
        state ^= state >> 31;
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

/// A fixed pseudo-random sequence of key indices, the same for every contender.
fn random_indices() -> Vec<usize> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    (0..SEQUENCE)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            usize::try_from(state % RANDOM_KEYS as u64).expect("fits")
        })
        .collect()
}

fn fixed_policy(scope: &str) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("bench").expect("valid"),
        ScopeId::new(scope).expect("valid"),
        MAX_LIMIT,
        Duration::from_secs(366 * 24 * 3_600),
    )
    .expect("valid")
}

/// Ten per second with a burst no benchmark exhausts: every check is allowed and
/// no entry replenishes (expires) while the benchmark runs.
fn gcra_policy() -> GcraPolicy {
    GcraPolicy::new(
        PolicyId::new("bench").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        Duration::from_secs(1),
        1_000_000,
    )
    .expect("valid")
}

fn governor_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(10).expect("non-zero"))
        .allow_burst(NonZeroU32::new(1_000_000).expect("non-zero"))
}

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
    let indices = random_indices();
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

fn batch(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch_of_two");
    let client = fixed_policy("client");
    let identity = fixed_policy("identity");
    let store = MemoryStore::new(MemoryStoreConfig::new(50_000).expect("valid"));
    let checks = [
        Check::new(&client, subject(1)),
        Check::new(&identity, subject(2)),
    ];
    group.bench_function("two_single_checks", |b| {
        b.iter(|| {
            black_box(store.check(black_box(&checks[0])).expect("ok"));
            black_box(store.check(black_box(&checks[1])).expect("ok"))
        });
    });
    group.bench_function("one_atomic_batch", |b| {
        b.iter(|| black_box(store.check_all(black_box(&checks)).expect("ok")));
    });
    group.finish();
}

/// Wall time for `threads` pinned threads, each running `per_thread` calls of
/// `work` with its own pseudo-random key indices.
fn run_threads<W>(work: &Arc<W>, threads: usize, per_thread: u64) -> Duration
where
    W: Fn(usize) + Send + Sync + 'static,
{
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let (work, barrier) = (Arc::clone(work), Arc::clone(&barrier));
            thread::spawn(move || {
                // Pin each thread to its own core so the scheduler cannot stack
                // both on one core for a whole sample.
                if let Some(core) = core_affinity::get_core_ids()
                    .and_then(|cores| cores.get(thread % cores.len().max(1)).copied())
                {
                    core_affinity::set_for_current(core);
                }
                let mut state = 0x2545_F491_4F6C_DD1Du64.wrapping_mul(thread as u64 + 1);
                barrier.wait();
                for _ in 0..per_thread {
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
    started.elapsed()
}

fn scaling(c: &mut Criterion) {
    let mut group = c.benchmark_group("threads_100k_keys_64_shards");
    let config = MemoryStoreConfig::new(2 * RANDOM_KEYS)
        .and_then(|config| config.with_shard_count(64))
        .expect("valid");
    let store = Arc::new(GcraStore::new(config));
    let keys: Arc<Vec<SubjectKey>> = Arc::new((0..RANDOM_KEYS as u64).map(subject).collect());
    let policy = Arc::new(gcra_policy());
    for key in keys.iter() {
        store.check(&Check::new(&*policy, *key)).expect("ok");
    }
    let runlimit = Arc::new(move |index: usize| {
        black_box(store.check(&Check::new(&*policy, keys[index])).expect("ok"));
    });
    let governor = Arc::new(RateLimiter::keyed(governor_quota()));
    let digests: Vec<[u8; 32]> = (0..RANDOM_KEYS as u64)
        .map(|n| *subject(n).as_bytes())
        .collect();
    for digest in &digests {
        let _ = governor.check_key(digest);
    }
    let governor = Arc::new(move |index: usize| {
        black_box(governor.check_key(&digests[index]).is_ok());
    });
    for threads in [1usize, 2] {
        group.throughput(Throughput::Elements(threads as u64));
        group.bench_with_input(
            BenchmarkId::new("runlimit_gcra", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iterations| run_threads(&runlimit, threads, iterations));
            },
        );
        group.bench_with_input(
            BenchmarkId::new("governor_keyed_digest", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iterations| run_threads(&governor, threads, iterations));
            },
        );
    }
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
    targets = hot_key, random_keys, batch, scaling
}
criterion_main!(benches);
