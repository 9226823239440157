//! The overflow tier never admits what an exact limiter would deny.
//!
//! A protected store (a tiny table, a tiny sketch, so most keys overflow and
//! share cells) runs random checks over many keys; every check it admits is
//! replayed on an exact reference, the same algorithm with room for every
//! key (itself held to plain models by `model.rs` and `sliding.rs`), which
//! must admit it too. The reference sees only what the protected store
//! admitted: that is the history whose every window the policy bounds.

use std::time::Duration;

use proptest::prelude::*;
use runlimit_core::{
    AnyPolicy, Check, Decision, Denial, FixedWindowPolicy, GcraPolicy, PolicyId, ScopeId,
    SlidingWindowPolicy, SubjectKey,
};
use runlimit_memory::{
    Algorithm, AnyStore, GcraStore, ManualClock, MemoryStore, MemoryStoreConfig, OverflowConfig,
    SlidingWindowStore, Store,
};

#[derive(Debug, Clone)]
enum Op {
    /// (policy, subject, cost) checked alone.
    Check(usize, u16, u64),
    /// Checked as one atomic batch (duplicates dropped).
    Batch(Vec<(usize, u16)>),
    /// Advance the clock by this many milliseconds.
    Advance(u64),
    /// Forget a counter in both stores.
    Reset(usize, u16),
}

const SUBJECTS: u16 = 48;

fn ops(policies: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        8 => (0..policies, 0..SUBJECTS, 1u64..3).prop_map(|(p, s, c)| Op::Check(p, s, c)),
        1 => prop::collection::vec((0..policies, 0..SUBJECTS), 1..4).prop_map(Op::Batch),
        3 => (0u64..700).prop_map(Op::Advance),
        1 => (0..policies, 0..SUBJECTS).prop_map(|(p, s)| Op::Reset(p, s)),
    ];
    prop::collection::vec(op, 1..300)
}

fn key(subject: u16) -> SubjectKey {
    let mut digest = [0u8; 32];
    let mut word = (u64::from(subject) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for chunk in digest.chunks_mut(8) {
        word ^= word >> 31;
        word = word.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

fn scope(index: usize) -> ScopeId {
    ScopeId::new(format!("scope-{index}")).expect("valid")
}

fn window(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

/// A tiny store: `max_keys` keys over `shards` shards, and a sketch of
/// `depth` rows of `width` cells.
#[derive(Debug, Clone, Copy)]
struct Tiny {
    max_keys: usize,
    shards: usize,
    width: usize,
    depth: usize,
}

fn tiny() -> impl Strategy<Value = Tiny> {
    (1usize..4, 1usize..3, 1usize..6, 1usize..4).prop_map(|(max_keys, shards, width, depth)| Tiny {
        max_keys,
        shards: shards.min(max_keys),
        width,
        depth,
    })
}

fn protected<A: Algorithm>(tiny: Tiny, clock: &ManualClock) -> Store<A> {
    let config = MemoryStoreConfig::new(tiny.max_keys)
        .and_then(|config| config.with_shard_count(tiny.shards))
        .expect("valid")
        .with_overflow(OverflowConfig::new(tiny.width, tiny.depth).expect("valid"));
    Store::<A>::new(config).with_clock(clock.clone())
}

fn exact<A: Algorithm>(clock: &ManualClock) -> Store<A> {
    Store::<A>::new(MemoryStoreConfig::new(1 << 16).expect("valid")).with_clock(clock.clone())
}

fn is_capacity(decision: &Decision) -> bool {
    matches!(decision.denial(), Some(Denial::StorageCapacity { .. }))
}

/// Runs `ops`; fails on the first check the protected store admits and the
/// exact reference denies, or on a capacity denial (the tier decides every
/// key of these few window lengths). Returns how many checks the protected
/// store decided in its sketch.
fn run<A: Algorithm>(policies: &[A::Policy], tiny: Tiny, ops: &[Op]) -> Result<u64, TestCaseError> {
    let clock = ManualClock::new();
    let store = protected::<A>(tiny, &clock);
    let reference = exact::<A>(&clock);
    for op in ops {
        match op {
            Op::Check(policy, subject, cost) => {
                let policy = &policies[*policy];
                // A cost above the policy's capacity is refused when built.
                let check = Check::weighted(policy, key(*subject), *cost)
                    .unwrap_or_else(|_| Check::new(policy, key(*subject)));
                let peeked = store.peek(&check).expect("healthy");
                let decision = store.check(&check).expect("healthy");
                prop_assert!(!is_capacity(&decision), "denied for capacity: {decision:?}");
                // A peek reads what the check then decides, sketch or table.
                prop_assert_eq!(peeked.is_allowed(), decision.is_allowed());
                if decision.is_allowed() {
                    let exact = reference.check(&check).expect("healthy");
                    prop_assert!(
                        exact.is_allowed(),
                        "admitted what the exact limiter denies: {exact:?}"
                    );
                }
            }
            Op::Batch(items) => {
                let mut seen = Vec::new();
                let checks: Vec<_> = items
                    .iter()
                    .filter(|item| {
                        let fresh = !seen.contains(*item);
                        seen.push(**item);
                        fresh
                    })
                    .map(|&(policy, subject)| Check::new(&policies[policy], key(subject)))
                    .collect();
                let Ok(batch) = store.check_all(&checks) else {
                    // A batch larger than a tiny shard is refused whole.
                    continue;
                };
                if batch.is_allowed() {
                    let exact = reference.check_all(&checks).expect("healthy");
                    prop_assert!(
                        exact.is_allowed(),
                        "admitted a batch the exact limiter denies"
                    );
                }
            }
            Op::Advance(millis) => clock.advance(Duration::from_millis(*millis)),
            Op::Reset(policy, subject) => {
                store
                    .reset(&policies[*policy], &key(*subject))
                    .expect("healthy");
                reference
                    .reset(&policies[*policy], &key(*subject))
                    .expect("healthy");
            }
        }
    }
    Ok(store.stats().overflow.expect("configured").checks)
}

fn fixed_policies() -> impl Strategy<Value = Vec<FixedWindowPolicy>> {
    prop::collection::vec((1u64..6, 1u64..4), 1..3).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (limit, seconds))| {
                FixedWindowPolicy::new(
                    PolicyId::new("overflow").expect("valid"),
                    scope(index),
                    limit,
                    window(seconds),
                )
                .expect("valid")
            })
            .collect()
    })
}

fn sliding_policies() -> impl Strategy<Value = Vec<SlidingWindowPolicy>> {
    prop::collection::vec((1u64..6, 1u64..4), 1..3).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (limit, seconds))| {
                SlidingWindowPolicy::new(
                    PolicyId::new("overflow").expect("valid"),
                    scope(index),
                    limit,
                    window(seconds),
                )
                .expect("valid")
            })
            .collect()
    })
}

fn gcra_policies() -> impl Strategy<Value = Vec<GcraPolicy>> {
    prop::collection::vec((1u64..5, 200u64..3_000, 1u64..5), 1..3).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (quota, period_ms, burst))| {
                GcraPolicy::new(
                    PolicyId::new("overflow").expect("valid"),
                    scope(index),
                    quota,
                    Duration::from_millis(period_ms),
                    burst,
                )
                .expect("valid")
            })
            .collect()
    })
}

fn any_policies() -> impl Strategy<Value = Vec<AnyPolicy>> {
    (fixed_policies(), sliding_policies(), gcra_policies()).prop_map(|(fixed, sliding, gcra)| {
        let mut policies: Vec<AnyPolicy> = Vec::new();
        // Distinct scopes, so two policies never share a counter.
        for (offset, policy) in fixed.into_iter().enumerate() {
            policies.push(AnyPolicy::FixedWindow(
                FixedWindowPolicy::new(
                    PolicyId::new("overflow").expect("valid"),
                    scope(10 + offset),
                    policy.limit(),
                    window(1 + policy.window_millis() / 1_000 % 3),
                )
                .expect("valid"),
            ));
        }
        for (offset, policy) in sliding.into_iter().enumerate() {
            policies.push(AnyPolicy::SlidingWindow(
                SlidingWindowPolicy::new(
                    PolicyId::new("overflow").expect("valid"),
                    scope(20 + offset),
                    policy.limit(),
                    window(1 + policy.window_millis() / 1_000 % 3),
                )
                .expect("valid"),
            ));
        }
        policies.extend(gcra.into_iter().map(AnyPolicy::Gcra));
        policies
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn fixed_windows_never_admit_what_the_exact_limiter_denies(
        (policies, ops) in fixed_policies().prop_flat_map(|p| { let n = p.len(); (Just(p), ops(n)) }),
        tiny in tiny(),
    ) {
        run::<runlimit_memory::FixedWindow>(&policies, tiny, &ops)?;
    }

    #[test]
    fn sliding_windows_never_admit_what_the_exact_limiter_denies(
        (policies, ops) in sliding_policies().prop_flat_map(|p| { let n = p.len(); (Just(p), ops(n)) }),
        tiny in tiny(),
    ) {
        run::<runlimit_memory::SlidingWindow>(&policies, tiny, &ops)?;
    }

    #[test]
    fn gcra_never_admits_what_the_exact_limiter_denies(
        (policies, ops) in gcra_policies().prop_flat_map(|p| { let n = p.len(); (Just(p), ops(n)) }),
        tiny in tiny(),
    ) {
        run::<runlimit_memory::Gcra>(&policies, tiny, &ops)?;
    }

    #[test]
    fn any_store_never_admits_what_the_exact_limiter_denies(
        (policies, ops) in any_policies().prop_flat_map(|p| { let n = p.len(); (Just(p), ops(n)) }),
        tiny in tiny(),
    ) {
        run::<runlimit_memory::AnyAlgorithm>(&policies, tiny, &ops)?;
    }
}

/// The sketch is exercised at all: with one key of room, most of 48 keys
/// overflow.
#[test]
fn a_full_table_sends_new_keys_to_the_sketch() {
    let policy = FixedWindowPolicy::new(
        PolicyId::new("overflow").expect("valid"),
        scope(0),
        3,
        window(60),
    )
    .expect("valid");
    let tiny = Tiny {
        max_keys: 1,
        shards: 1,
        width: 64,
        depth: 2,
    };
    let ops: Vec<Op> = (0..SUBJECTS)
        .map(|subject| Op::Check(0, subject, 1))
        .collect();
    let decided = run::<runlimit_memory::FixedWindow>(&[policy], tiny, &ops).expect("safe");
    assert_eq!(decided, u64::from(SUBJECTS) - 1);
}

#[test]
fn overflow_sizes_are_validated_when_built() {
    use runlimit_memory::{ConfigError, MAX_OVERFLOW_DEPTH, MAX_OVERFLOW_WIDTH};
    assert_eq!(
        OverflowConfig::new(0, 4),
        Err(ConfigError::OverflowWidthOutOfRange { width: 0 })
    );
    assert_eq!(
        OverflowConfig::new(MAX_OVERFLOW_WIDTH + 1, 4),
        Err(ConfigError::OverflowWidthOutOfRange {
            width: MAX_OVERFLOW_WIDTH + 1
        })
    );
    assert_eq!(
        OverflowConfig::new(8, 0),
        Err(ConfigError::OverflowDepthOutOfRange { depth: 0 })
    );
    assert_eq!(
        OverflowConfig::new(8, MAX_OVERFLOW_DEPTH + 1),
        Err(ConfigError::OverflowDepthOutOfRange {
            depth: MAX_OVERFLOW_DEPTH + 1
        })
    );
    let config = OverflowConfig::new(MAX_OVERFLOW_WIDTH, MAX_OVERFLOW_DEPTH).expect("valid");
    assert_eq!(
        config.sketch_bytes(),
        MAX_OVERFLOW_WIDTH * MAX_OVERFLOW_DEPTH * 8
    );
    assert_eq!(MemoryStoreConfig::new(1).expect("valid").overflow(), None);
}

/// Type aliases name the same stores the property tests run.
#[test]
fn every_store_type_takes_the_overflow_config() {
    let config = MemoryStoreConfig::new(4)
        .expect("valid")
        .with_overflow(OverflowConfig::new(16, 2).expect("valid"));
    assert_eq!(
        MemoryStore::new(config).config().overflow(),
        config.overflow()
    );
    assert_eq!(
        GcraStore::new(config).config().overflow(),
        config.overflow()
    );
    assert_eq!(
        SlidingWindowStore::new(config).config().overflow(),
        config.overflow()
    );
    assert_eq!(AnyStore::new(config).config().overflow(), config.overflow());
}

fn fixed_policy(limit: u64, seconds: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("overflow").expect("valid"),
        scope(0),
        limit,
        window(seconds),
    )
    .expect("valid")
}

/// A key the sketch counted stays with the sketch while its count can
/// matter, even once the table has room, and is stored again after.
#[test]
fn a_counted_key_returns_to_the_table_only_once_its_count_has_dropped_out() {
    let policy = fixed_policy(2, 10);
    let clock = ManualClock::new();
    let store = protected::<runlimit_memory::FixedWindow>(
        Tiny {
            max_keys: 1,
            shards: 1,
            width: 64,
            depth: 2,
        },
        &clock,
    );
    let checked = |subject: u16| {
        store
            .check(&Check::new(&policy, key(subject)))
            .expect("healthy")
            .is_allowed()
    };
    let sketch_checks = || store.stats().overflow.expect("configured").checks;
    assert!(checked(0), "the first key is stored");
    assert!(checked(1) && checked(1), "the second overflows");
    assert!(!checked(1), "and is held to its limit");
    assert_eq!(sketch_checks(), 3);
    // The stored key's window ends, so its entry may be reclaimed; key 1's
    // units still count in the sketch's previous epoch, so the sketch keeps
    // deciding it, and denies it.
    clock.advance(Duration::from_secs(11));
    assert!(!checked(1));
    assert_eq!(sketch_checks(), 4);
    // Two epochs on, nothing counts for it: it is stored like any new key.
    clock.advance(Duration::from_secs(20));
    let before = sketch_checks();
    assert!(checked(1));
    assert_eq!(sketch_checks(), before);
    assert_eq!(store.stats().entries, 1);
}

/// Threads checking many keys at once through a tiny table and sketch never
/// admit more than a key's limit within its window.
#[test]
fn concurrent_checks_never_admit_beyond_a_keys_limit() {
    use std::sync::atomic::{AtomicU64, Ordering};
    const KEYS: u16 = 64;
    let policy = fixed_policy(3, 60);
    let clock = ManualClock::new();
    let store = protected::<runlimit_memory::FixedWindow>(
        Tiny {
            max_keys: 8,
            shards: 2,
            width: 16,
            depth: 2,
        },
        &clock,
    );
    let admitted: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|scope| {
        for thread in 0..4u64 {
            let (store, policy, admitted) = (&store, &policy, &admitted);
            scope.spawn(move || {
                let mut state = 0x9E37_79B9_7F4A_7C15 ^ thread;
                for _ in 0..5_000 {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let subject = u16::try_from(state % u64::from(KEYS)).expect("small");
                    let decision = store
                        .check(&Check::new(policy, key(subject)))
                        .expect("healthy");
                    if decision.is_allowed() {
                        admitted[usize::from(subject)].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert!(store.stats().overflow.expect("configured").checks > 0);
    // The clock never moved: one window, at most the limit per key.
    for (subject, count) in admitted.iter().enumerate() {
        let count = count.load(Ordering::Relaxed);
        assert!(count <= 3, "key {subject} admitted {count} times");
    }
}

/// The sketch only counts up: refunding what it admitted credits nothing, and
/// the key stays held to its limit.
#[test]
fn refunding_a_sketch_admission_credits_nothing() {
    let policy = fixed_policy(1, 60);
    let store = protected::<runlimit_memory::FixedWindow>(
        Tiny {
            max_keys: 1,
            shards: 1,
            width: 64,
            depth: 2,
        },
        &ManualClock::new(),
    );
    assert!(
        store
            .check(&Check::new(&policy, key(0)))
            .expect("healthy")
            .is_allowed()
    );
    let check = Check::new(&policy, key(1));
    let (decision, receipt) = store.admit(&check).expect("healthy").into_parts();
    assert!(decision.is_allowed());
    assert_eq!(store.stats().overflow.expect("configured").admitted, 1);
    let refunded = store
        .refund(&[check], receipt.expect("an admission's receipt"))
        .expect("its own receipt");
    assert_eq!(refunded.credited(), 0);
    assert!(!store.check(&check).expect("healthy").is_allowed());
}

/// A GCRA key the sketch counts is stored as soon as its shard has room,
/// from the arrival time its cells bound: it keeps what the sketch counted.
#[test]
fn a_counted_gcra_key_is_stored_with_its_bound_once_there_is_room() {
    // Two units of burst, one replenished every ten seconds.
    let policy = GcraPolicy::new(
        PolicyId::new("overflow").expect("valid"),
        scope(0),
        1,
        Duration::from_secs(10),
        2,
    )
    .expect("valid");
    let clock = ManualClock::new();
    let store = protected::<runlimit_memory::Gcra>(
        Tiny {
            max_keys: 1,
            shards: 1,
            width: 64,
            depth: 2,
        },
        &clock,
    );
    let checked = |subject: u16| {
        store
            .check(&Check::new(&policy, key(subject)))
            .expect("healthy")
            .is_allowed()
    };
    let sketch_checks = || store.stats().overflow.expect("configured").checks;
    assert!(checked(0), "the first key is stored");
    assert!(checked(1) && checked(1), "the second overflows");
    assert_eq!(sketch_checks(), 2);
    // Key 0 replenishes fully (its entry may go); key 1 has one unit back.
    clock.advance(Duration::from_secs(11));
    assert!(
        checked(1),
        "stored from its bound, with the unit replenished"
    );
    assert_eq!(sketch_checks(), 2, "decided by the table");
    assert!(
        !checked(1),
        "and nothing more: the sketch's count came along"
    );
}
