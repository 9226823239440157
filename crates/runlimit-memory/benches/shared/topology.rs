//! The production topology's benchmark, shared by the PostgreSQL and Redis
//! benches (each includes this file): a credential-stuffing burst with and
//! without the denial cache, and the tiered admission's cost over the shared
//! backend alone.
//!
//! Both halves alternate their two sides over rounds, in one process, and
//! report each round and the medians.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use runlimit_core::{
    AdmissionObservation, Check, FixedWindowPolicy, Lifecycle, Limiter, MAX_LIMIT, Observer,
    PolicyId, ScopeId, SubjectKey, TieredPolicy,
};
use runlimit_memory::{DenialCache, MemoryStore, MemoryStoreConfig, Tiered};

const ROUNDS: usize = 3;
const TASKS: usize = 32;
/// Accounts under attack, each already over its limit.
const ATTACKED: u64 = 100;

/// Counts the operations that reach the shared backend.
#[derive(Debug, Clone, Default)]
pub(crate) struct RoundTrips(pub(crate) Arc<AtomicUsize>);

impl Observer for RoundTrips {
    fn on_admission(&self, _: &AdmissionObservation<'_>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn subject(domain: u64, n: u64) -> SubjectKey {
    let mut digest = [0u8; 32];
    let mut state = n.wrapping_add(domain.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for chunk in digest.chunks_mut(8) {
        state ^= state >> 31;
        state = state.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        state ^= state >> 29;
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

fn policy(id: &str, scope: &str, limit: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new(id).expect("valid"),
        ScopeId::new(scope).expect("valid"),
        limit,
        Duration::from_secs(3_600),
    )
    .expect("valid")
}

/// Checks per second of `check(task, iteration)` over `TASKS` tasks for
/// `seconds`.
async fn rate<F, Fut>(seconds: f64, check: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let check = Arc::new(check);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..TASKS)
        .map(|task| {
            let check = Arc::clone(&check);
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    check(task, done).await;
                    done += 1;
                }
                done
            })
        })
        .collect();
    let mut total = 0;
    for handle in handles {
        total += handle.await.expect("task");
    }
    total as f64 / seconds
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The burst: 95% of checks name one of `ATTACKED` accounts already over
/// their limit (denied), 5% a fresh account (allowed), against `backend`
/// alone and behind a denial cache. `trips` counts what reaches `backend`.
pub(crate) async fn burst<L>(name: &str, backend: L, trips: RoundTrips, seconds: f64)
where
    L: Limiter<Policy = FixedWindowPolicy> + Clone + 'static,
{
    let identity = Arc::new(policy("bench.burst", "identity", 3));
    for account in 0..ATTACKED {
        for _ in 0..4 {
            let _ = backend
                .check(&Check::new(&identity, subject(1, account)))
                .await;
        }
    }
    let fresh = Arc::new(AtomicUsize::new(0));
    let (mut speedups, mut savings) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let mut measured = Vec::new();
        for cached in [false, true] {
            let cache = Arc::new(DenialCache::new(
                MemoryStoreConfig::new(100_000).expect("valid"),
            ));
            let front = cache.in_front_of(backend.clone());
            let backend = backend.clone();
            let (identity, fresh) = (Arc::clone(&identity), Arc::clone(&fresh));
            let front = Arc::new(front);
            let before = trips.0.load(Ordering::Relaxed);
            let checks = rate(seconds, move |task, iteration| {
                let (front, backend, identity, fresh) = (
                    Arc::clone(&front),
                    backend.clone(),
                    Arc::clone(&identity),
                    Arc::clone(&fresh),
                );
                async move {
                    let pick = (task as u64).wrapping_mul(7_919) ^ iteration.wrapping_mul(104_729);
                    let key = if pick.is_multiple_of(20) {
                        subject(2, fresh.fetch_add(1, Ordering::Relaxed) as u64)
                    } else {
                        subject(1, pick % ATTACKED)
                    };
                    let check = Check::new(&*identity, key);
                    let decided = if cached {
                        front.check(&check).await
                    } else {
                        backend.check(&check).await
                    };
                    decided.expect("no error");
                }
            })
            .await;
            let reached = trips.0.load(Ordering::Relaxed) - before;
            let per_check = reached as f64 / (checks * seconds);
            println!(
                "round {round}, {name} burst, {}: {checks:.0} checks/s, {reached} round trips \
                 ({per_check:.3} per check)",
                if cached {
                    "with the denial cache"
                } else {
                    "backend alone"
                }
            );
            measured.push((checks, per_check));
        }
        speedups.push(measured[1].0 / measured[0].0);
        savings.push(measured[0].1 / measured[1].1.max(f64::MIN_POSITIVE));
    }
    println!(
        "median over {ROUNDS} rounds, {name} burst at {TASKS} tasks: the cache gives {:.1}x \
         the check rate with {:.1}x fewer round trips",
        median(&mut speedups),
        median(&mut savings)
    );
}

/// The tiered admission (a memory gate check and a shared check, one batch)
/// against the shared check alone, when both allow.
pub(crate) async fn tiered_overhead<L>(name: &str, shared: L, seconds: f64)
where
    L: Lifecycle<Policy = FixedWindowPolicy> + Clone + 'static,
{
    let identity = Arc::new(policy("bench.tiered", "identity", MAX_LIMIT));
    let client = policy("bench.tiered.local", "client", MAX_LIMIT);
    let tiered = Arc::new(Tiered::new(
        MemoryStore::new(MemoryStoreConfig::new(100_000).expect("valid")),
        shared.clone(),
    ));
    let gate_policy = Arc::new(TieredPolicy::Gate(client));
    let shared_policy = Arc::new(TieredPolicy::<FixedWindowPolicy, _>::Shared(
        (*identity).clone(),
    ));
    let mut ratios = Vec::new();
    for round in 1..=ROUNDS {
        let alone = {
            let (shared, identity) = (shared.clone(), Arc::clone(&identity));
            rate(seconds, move |task, iteration| {
                let (shared, identity) = (shared.clone(), Arc::clone(&identity));
                async move {
                    let key = subject(3, (task as u64 * 1_000 + iteration) % 10_000);
                    let decision = shared
                        .check(&Check::new(&*identity, key))
                        .await
                        .expect("ok");
                    assert!(decision.is_allowed());
                }
            })
            .await
        };
        let both = {
            let (tiered, gate, account) = (
                Arc::clone(&tiered),
                Arc::clone(&gate_policy),
                Arc::clone(&shared_policy),
            );
            rate(seconds, move |task, iteration| {
                let (tiered, gate, account) =
                    (Arc::clone(&tiered), Arc::clone(&gate), Arc::clone(&account));
                async move {
                    let n = (task as u64 * 1_000 + iteration) % 10_000;
                    let checks = [
                        Check::new(&*gate, subject(4, n % 256)),
                        Check::new(&*account, subject(3, n)),
                    ];
                    let batch = tiered.check_all(&checks).await.expect("ok");
                    assert!(batch.is_allowed());
                }
            })
            .await
        };
        ratios.push(alone / both);
        println!(
            "round {round}, {name} tiered: shared check alone {alone:.0}/s, gate + shared \
             {both:.0}/s, cost {:.3}x",
            alone / both
        );
    }
    println!(
        "median over {ROUNDS} rounds, {name} at {TASKS} tasks: tiered admission costs {:.3}x \
         the shared check alone",
        median(&mut ratios)
    );
}
