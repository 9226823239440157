//! The targets that are ratios of measurements of Runlimit itself:
//!
//! - two-thread scaling of random-key GCRA checks (100k keys, 64 shards), side
//!   by side with governor's keyed limiter;
//! - an atomic batch of two stored keys against two single checks;
//! - a peek, an admission with a receipt and a refund against a check, on a
//!   hot key of each algorithm;
//! - a sliding-window check against a fixed-window check, on a hot key and
//!   on 100k random stored keys;
//! - a check of a subject already carried across a change of policy, and one
//!   whose key carries its key under a previous secret, against the same
//!   check of a policy without a predecessor, on a hot key and on 100k random
//!   stored keys, for each algorithm;
//! - every check path against governor's keyed limiter (digest keys): a hot
//!   key allowed and denied on one thread and on two sharing it, 100k random
//!   keys on one and two threads, and a flood of keys never seen before; and
//!   the same paths in the README's store configuration (1 << 20 keys, 64
//!   shards) with GCRA states that replenish between checks.
//!
//! A ratio of two criterion groups compares measurements taken seconds apart,
//! and on a shared VM the host's load moves more in that time than the figure
//! being measured. So this benchmark alternates short fixed-work runs of the
//! two sides and reports the median ratio over the rounds.
//!
//! Run with `cargo bench -p runlimit-memory --bench ratios` (add `-- batch`,
//! `-- scaling`, `-- lifecycle`, `-- sliding`, `-- carry` or `-- governor` for one part); it prints each round's
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
use support::{
    RANDOM_KEYS, fixed_policy, gcra_policy, governor_quota, random_indices, sliding_policy, subject,
};

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
                pin(thread);
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

/// Pins the calling thread to core `thread` (modulo the cores), so the
/// scheduler cannot stack two benchmark threads on one core.
fn pin(thread: usize) {
    if let Some(core) = core_affinity::get_core_ids()
        .and_then(|cores| cores.get(thread % cores.len().max(1)).copied())
    {
        core_affinity::set_for_current(core);
    }
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
    if wanted("carry") {
        carry();
    }
    if wanted("governor") {
        against_governor();
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
    let indices = random_indices(usize::try_from(CALLS_PER_ROUND).expect("fits"));
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

/// Work for one benchmark thread: called with the thread's number and the
/// call's number.
type Work = Arc<dyn Fn(usize, usize) + Send + Sync>;

/// Nanoseconds per call per thread: `threads` pinned threads, started
/// together, each making `calls` calls of `work`.
fn per_thread_call(work: &Work, threads: usize, calls: usize) -> f64 {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let (work, barrier) = (Arc::clone(work), Arc::clone(&barrier));
            thread::spawn(move || {
                pin(thread);
                barrier.wait();
                for call in 0..calls {
                    work(thread, call);
                }
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    for handle in handles {
        handle.join().expect("thread");
    }
    started.elapsed().as_secs_f64() * 1e9 / calls as f64
}

/// Checks of one stored key, which the store holds before the first call.
fn hot_checks<A: Algorithm>(store: Store<A>, policy: Arc<A::Policy>) -> Work
where
    A::Policy: Send + Sync + 'static,
{
    let key = subject(0);
    store.check(&Check::new(&*policy, key)).expect("ok");
    Arc::new(move |_, _| {
        black_box(
            store
                .check(&Check::new(&*policy, black_box(key)))
                .expect("ok"),
        );
    })
}

/// Checks of `keys` in `order` (each thread from its own offset), all of
/// which the store holds before the first call.
fn random_checks<A: Algorithm>(
    store: Store<A>,
    policy: Arc<A::Policy>,
    keys: Arc<Vec<SubjectKey>>,
    order: Arc<Vec<usize>>,
) -> Work
where
    A::Policy: Send + Sync + 'static,
{
    for key in keys.iter() {
        store.check(&Check::new(&*policy, *key)).expect("ok");
    }
    Arc::new(move |thread, call| {
        let index = order[(call + thread * 7_919) % order.len()];
        black_box(store.check(&Check::new(&*policy, keys[index])).expect("ok"));
    })
}

/// Checks of keys the store has never seen: `keys` holds `FLOOD_KEYS` for
/// each thread.
fn flood_checks<A: Algorithm>(
    store: Store<A>,
    policy: Arc<A::Policy>,
    keys: Arc<Vec<SubjectKey>>,
) -> Work
where
    A::Policy: Send + Sync + 'static,
{
    Arc::new(move |thread, call| {
        let key = keys[thread * FLOOD_KEYS + call];
        black_box(store.check(&Check::new(&*policy, key)).expect("ok"));
    })
}

/// Governor's side of a hot-key path: one key, checked once before the run.
fn governor_hot(quota: governor::Quota) -> Box<dyn Fn() -> Work> {
    Box::new(move || {
        let governor = RateLimiter::keyed(quota);
        let digest = *subject(0).as_bytes();
        let _ = governor.check_key(&digest);
        Arc::new(move |_, _| {
            black_box(governor.check_key(black_box(&digest)).is_ok());
        })
    })
}

/// Governor's side of a random-key path: every digest checked once before
/// the run, then `digests` in `order`, as [`random_checks`] does.
fn governor_random(
    quota: governor::Quota,
    digests: &Arc<Vec<[u8; 32]>>,
    order: &Arc<Vec<usize>>,
) -> impl Fn() -> Work + Clone + 'static {
    let (digests, order) = (Arc::clone(digests), Arc::clone(order));
    move || -> Work {
        let governor = RateLimiter::keyed(quota);
        for digest in digests.iter() {
            let _ = governor.check_key(digest);
        }
        let (digests, order) = (Arc::clone(&digests), Arc::clone(&order));
        Arc::new(move |thread, call| {
            let index = order[(call + thread * 7_919) % order.len()];
            black_box(governor.check_key(&digests[index]).is_ok());
        })
    }
}

/// One path, measured on both sides. Each side's work is built afresh for a
/// round (the flood needs empty maps), untimed, right before that side runs
/// and dropped after: each side runs straight after its own setup, with
/// nothing of the other side's in the caches or in memory.
struct Path {
    name: &'static str,
    threads: usize,
    calls: usize,
    runlimit: Box<dyn Fn() -> Work>,
    governor: Box<dyn Fn() -> Work>,
}

/// Keys never seen before, per thread of the flood.
const FLOOD_KEYS: usize = 500_000;

/// Every path a check takes, Runlimit against governor 0.10's keyed limiter
/// keyed by the same 32-byte digest, alternating sides (and which goes first)
/// round by round.
fn against_governor() {
    use governor::Quota;
    use runlimit_core::{FixedWindowPolicy, GcraPolicy, MAX_LIMIT, PolicyId, ScopeId};
    use std::{num::NonZeroU32, time::Duration};

    let year = Duration::from_secs(366 * 24 * 3_600);
    let id = || PolicyId::new("bench").expect("valid");
    let scope = || ScopeId::new("client").expect("valid");
    // Allowed for every call: the largest fixed window; a billion a second
    // with a burst of a billion (governor: the same).
    let fixed_open = Arc::new(fixed_policy("client"));
    let gcra_open = Arc::new(
        GcraPolicy::new(id(), scope(), MAX_LIMIT, Duration::from_secs(1), MAX_LIMIT)
            .expect("valid"),
    );
    let billion = NonZeroU32::new(1_000_000_000).expect("non-zero");
    let governor_open = Quota::per_second(billion).allow_burst(billion);
    // Denied for every call after the first: one per year (governor: per hour).
    let fixed_shut = Arc::new(FixedWindowPolicy::new(id(), scope(), 1, year).expect("valid"));
    let gcra_shut = Arc::new(GcraPolicy::new(id(), scope(), 1, year, 1).expect("valid"));
    let governor_shut = Quota::per_hour(NonZeroU32::MIN).allow_burst(NonZeroU32::MIN);

    let default_config = MemoryStoreConfig::new(2 * RANDOM_KEYS).expect("valid");
    let sharded = default_config.with_shard_count(64).expect("valid");
    // The store the README configures, where production keys' GCRA states
    // replenish between checks: a billion a second finds every state
    // replenished at the next check.
    let readme = MemoryStoreConfig::new(1 << 20)
        .and_then(|config| config.with_shard_count(64))
        .expect("valid");
    let gcra_hourly =
        Arc::new(GcraPolicy::new(id(), scope(), 1, Duration::from_secs(3_600), 1).expect("valid"));
    let keys: Arc<Vec<SubjectKey>> = Arc::new((0..RANDOM_KEYS as u64).map(subject).collect());
    let digests: Arc<Vec<[u8; 32]>> = Arc::new(keys.iter().map(|key| *key.as_bytes()).collect());
    let flood_keys: Arc<Vec<SubjectKey>> = Arc::new(
        (0..2 * FLOOD_KEYS as u64)
            .map(|n| subject(n + RANDOM_KEYS as u64))
            .collect(),
    );
    let flood_digests: Arc<Vec<[u8; 32]>> =
        Arc::new(flood_keys.iter().map(|key| *key.as_bytes()).collect());
    // The same pseudo-random key order on both sides; a thread starts at its
    // own offset in it.
    let calls = usize::try_from(CHECKS_PER_THREAD).expect("fits");
    let order: Arc<Vec<usize>> = Arc::new(random_indices(calls));

    let mut paths: Vec<Path> = Vec::new();
    for threads in [1, 2] {
        for (name, fixed, gcra, quota) in [
            ("hot key allowed", &fixed_open, &gcra_open, governor_open),
            ("hot key denied", &fixed_shut, &gcra_shut, governor_shut),
        ] {
            let hot = |algorithm: &'static str, runlimit: Box<dyn Fn() -> Work>| Path {
                name: leak(format!("{name}, {algorithm}, {threads} thread(s)")),
                threads,
                calls,
                runlimit,
                governor: governor_hot(quota),
            };
            let policy = Arc::clone(fixed);
            paths.push(hot(
                "fixed window",
                Box::new(move || hot_checks(MemoryStore::new(default_config), Arc::clone(&policy))),
            ));
            let policy = Arc::clone(gcra);
            paths.push(hot(
                "GCRA",
                Box::new(move || hot_checks(GcraStore::new(default_config), Arc::clone(&policy))),
            ));
        }
        for (name, policy, quota) in [
            (
                "hot key allowed, GCRA replenished",
                &gcra_open,
                governor_open,
            ),
            (
                "hot key denied, GCRA 1 per hour",
                &gcra_hourly,
                governor_shut,
            ),
        ] {
            let policy = Arc::clone(policy);
            paths.push(Path {
                name: leak(format!("{name}, README store, {threads} thread(s)")),
                threads,
                calls,
                runlimit: Box::new(move || hot_checks(GcraStore::new(readme), Arc::clone(&policy))),
                governor: governor_hot(quota),
            });
        }
        let (policy, keys_, order_) = (
            Arc::clone(&gcra_open),
            Arc::clone(&keys),
            Arc::clone(&order),
        );
        paths.push(Path {
            name: leak(format!(
                "100k random keys, GCRA replenished, README store, {threads} thread(s)"
            )),
            threads,
            calls,
            runlimit: Box::new(move || {
                random_checks(
                    GcraStore::new(readme),
                    Arc::clone(&policy),
                    Arc::clone(&keys_),
                    Arc::clone(&order_),
                )
            }),
            governor: Box::new(governor_random(governor_open, &digests, &order)),
        });
        let config = if threads == 1 {
            default_config
        } else {
            sharded
        };
        let governor_random = governor_random(governor_quota(), &digests, &order);
        let (policy, keys_, order_) = (
            Arc::clone(&fixed_open),
            Arc::clone(&keys),
            Arc::clone(&order),
        );
        paths.push(Path {
            name: leak(format!(
                "100k random keys, fixed window, {threads} thread(s)"
            )),
            threads,
            calls,
            runlimit: Box::new(move || {
                random_checks(
                    MemoryStore::new(config),
                    Arc::clone(&policy),
                    Arc::clone(&keys_),
                    Arc::clone(&order_),
                )
            }),
            governor: Box::new(governor_random.clone()),
        });
        // Ten a second with a burst of a million: no key's state replenishes
        // during the run (the README-store path above has them replenish).
        let (policy, keys_, order_) = (
            Arc::new(gcra_policy()),
            Arc::clone(&keys),
            Arc::clone(&order),
        );
        paths.push(Path {
            name: leak(format!("100k random keys, GCRA, {threads} thread(s)")),
            threads,
            calls,
            runlimit: Box::new(move || {
                random_checks(
                    GcraStore::new(config),
                    Arc::clone(&policy),
                    Arc::clone(&keys_),
                    Arc::clone(&order_),
                )
            }),
            governor: Box::new(governor_random),
        });
        // A flood: every check a key never seen before, into empty maps sized
        // for the flood (Runlimit's table is bounded and allocated up front;
        // governor's grows as it goes, as it would in service). The states
        // outlive the run (an hour's worth each), so the flood measures
        // storing keys; a store that must also forget replenished keys pays
        // for that as well, which governor never does.
        let flood_config = MemoryStoreConfig::new(2 * FLOOD_KEYS)
            .and_then(|config| config.with_shard_count(if threads == 1 { 1 } else { 64 }))
            .expect("valid");
        let hourly_gcra = Arc::new(
            GcraPolicy::new(id(), scope(), 1, Duration::from_secs(3_600), 1_000).expect("valid"),
        );
        let hourly_quota =
            Quota::per_hour(NonZeroU32::MIN).allow_burst(NonZeroU32::new(1_000).expect("non-zero"));
        let flood = |algorithm: &'static str, runlimit: Box<dyn Fn() -> Work>| {
            let digests = Arc::clone(&flood_digests);
            Path {
                name: leak(format!(
                    "flood of new keys, {algorithm}, {threads} thread(s)"
                )),
                threads,
                calls: FLOOD_KEYS,
                runlimit,
                governor: Box::new(move || {
                    let governor = RateLimiter::keyed(hourly_quota);
                    let digests = Arc::clone(&digests);
                    Arc::new(move |thread, call| {
                        black_box(
                            governor
                                .check_key(&digests[thread * FLOOD_KEYS + call])
                                .is_ok(),
                        );
                    })
                }),
            }
        };
        let (policy, keys) = (Arc::clone(&fixed_open), Arc::clone(&flood_keys));
        paths.push(flood(
            "fixed window",
            Box::new(move || {
                flood_checks(
                    MemoryStore::new(flood_config),
                    Arc::clone(&policy),
                    Arc::clone(&keys),
                )
            }),
        ));
        let (policy, keys) = (Arc::clone(&hourly_gcra), Arc::clone(&flood_keys));
        paths.push(flood(
            "GCRA",
            Box::new(move || {
                flood_checks(
                    GcraStore::new(flood_config),
                    Arc::clone(&policy),
                    Arc::clone(&keys),
                )
            }),
        ));
    }

    // `BENCH_PATHS=hot` (say) measures only the paths whose names contain it.
    if let Ok(wanted) = std::env::var("BENCH_PATHS") {
        paths.retain(|path| path.name.contains(wanted.as_str()));
    }
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); paths.len()];
    for round in 1..=ROUNDS {
        for (path, ratios) in paths.iter().zip(&mut ratios) {
            let measure =
                |prepare: &dyn Fn() -> Work| per_thread_call(&prepare(), path.threads, path.calls);
            let (ours, theirs) = if round % 2 == 0 {
                let theirs = measure(&*path.governor);
                (measure(&*path.runlimit), theirs)
            } else {
                let ours = measure(&*path.runlimit);
                (ours, measure(&*path.governor))
            };
            ratios.push(ours / theirs);
            println!(
                "round {round}, {}: runlimit {ours:.1} ns, governor {theirs:.1} ns, {:.2}x",
                path.name,
                ours / theirs
            );
        }
    }
    println!("median over {ROUNDS} rounds, Runlimit's time per check / governor's (digest keys):");
    for (path, ratios) in paths.iter().zip(&mut ratios) {
        println!("  {}: {:.2}x", path.name, median(ratios));
    }
}

/// A path's name, built once per benchmark run.
fn leak(name: String) -> &'static str {
    Box::leak(name.into_boxed_str())
}

/// Checks of subjects already carried across a change against the same
/// checks of a policy without a predecessor: the path a carried subject takes
/// from its second check on, and a rotating hasher's key (which carries the
/// previous secret's key too), on one hot key and on 100k stored keys.
fn carry() {
    let config = MemoryStoreConfig::new(4 * RANDOM_KEYS).expect("valid");
    carry_of("fixed_window", &MemoryStore::new(config), fixed_policy);
    carry_of(
        "sliding_window",
        &SlidingWindowStore::new(config),
        sliding_policy,
    );
    carry_of("gcra", &GcraStore::new(config), |scope| {
        runlimit_core::GcraPolicy::new(
            runlimit_core::PolicyId::new("bench").expect("valid"),
            runlimit_core::ScopeId::new(scope).expect("valid"),
            runlimit_core::MAX_LIMIT,
            std::time::Duration::from_secs(24 * 3_600),
            runlimit_core::MAX_LIMIT,
        )
        .expect("valid")
    });
}

fn carry_of<A: Algorithm>(name: &str, store: &Store<A>, policy: impl Fn(&str) -> A::Policy)
where
    A::Policy: Continuing,
{
    // The same limits under another scope for each contender, so each has
    // counters of its own; the predecessor differs from the policy only in
    // its (smaller) limit, which the carried policies raised.
    let plain = policy("plain");
    let changed = policy("changed").continuing_half();
    let rotated = policy("rotated");
    let keys: Vec<SubjectKey> = (0..RANDOM_KEYS as u64).map(subject).collect();
    let rotating: Vec<SubjectKey> = keys
        .iter()
        .map(|key| key.with_previous(*subject(u64::MAX - u64::from(key.as_bytes()[0])).as_bytes()))
        .collect();
    // Every key stored (and carried) before timing.
    for (key, rotating) in keys.iter().zip(&rotating) {
        store.check(&Check::new(&plain, *key)).expect("ok");
        store.check(&Check::new(&changed, *key)).expect("ok");
        store.check(&Check::new(&rotated, *rotating)).expect("ok");
    }
    let order = random_indices(CALLS_PER_ROUND as usize);
    let (mut hot_changed, mut hot_rotated, mut random_changed, mut random_rotated) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let timed = |policy: &A::Policy, keys: &[SubjectKey], hot: bool| {
            let mut next = order.iter().copied().cycle();
            per_call(|| {
                let index = if hot { 0 } else { next.next().unwrap_or(0) };
                black_box(
                    store
                        .check(black_box(&Check::new(policy, keys[index])))
                        .expect("ok"),
                );
            })
        };
        let hot = [
            timed(&plain, &keys, true),
            timed(&changed, &keys, true),
            timed(&rotated, &rotating, true),
        ];
        let random = [
            timed(&plain, &keys, false),
            timed(&changed, &keys, false),
            timed(&rotated, &rotating, false),
        ];
        hot_changed.push(hot[1] / hot[0]);
        hot_rotated.push(hot[2] / hot[0]);
        random_changed.push(random[1] / random[0]);
        random_rotated.push(random[2] / random[0]);
        println!(
            "round {round}, {name}: hot plain {:.1} ns, carried {:.1} ns ({:.3}x), rotated {:.1} ns \
             ({:.3}x); random plain {:.1} ns, carried {:.1} ns ({:.3}x), rotated {:.1} ns ({:.3}x)",
            hot[0],
            hot[1],
            hot[1] / hot[0],
            hot[2],
            hot[2] / hot[0],
            random[0],
            random[1],
            random[1] / random[0],
            random[2],
            random[2] / random[0],
        );
    }
    println!(
        "median over {ROUNDS} rounds, {name}: hot carried / plain {:.3}x, rotated / plain {:.3}x; \
         random carried / plain {:.3}x, rotated / plain {:.3}x",
        median(&mut hot_changed),
        median(&mut hot_rotated),
        median(&mut random_changed),
        median(&mut random_rotated)
    );
}

/// Builds a policy's predecessor for the carry benchmark.
trait Continuing: Sized {
    /// The policy, continuing from one of the same algorithm with half its
    /// capacity.
    fn continuing_half(self) -> Self;
}

impl Continuing for runlimit_core::FixedWindowPolicy {
    fn continuing_half(self) -> Self {
        let old = Self::new(
            self.id().clone(),
            self.scope().clone(),
            self.limit() / 2,
            self.window(),
        )
        .expect("valid");
        self.continuing(&old).expect("same id and scope")
    }
}

impl Continuing for runlimit_core::SlidingWindowPolicy {
    fn continuing_half(self) -> Self {
        let old = Self::new(
            self.id().clone(),
            self.scope().clone(),
            self.limit() / 2,
            self.window(),
        )
        .expect("valid");
        self.continuing(&old).expect("same id and scope")
    }
}

impl Continuing for runlimit_core::GcraPolicy {
    fn continuing_half(self) -> Self {
        let old = Self::new(
            self.id().clone(),
            self.scope().clone(),
            self.quota(),
            self.period(),
            self.burst_capacity() / 2,
        )
        .expect("valid");
        self.continuing(&old).expect("same id and scope")
    }
}
