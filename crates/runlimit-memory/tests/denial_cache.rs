//! The denial cache against the backend alone.
//!
//! Two identical backends on one injected clock: `alone` answers every check
//! itself, `behind` sits behind a [`DenialCache`]. On random traces of checks
//! (and refunds and resets made on both backends directly, as another
//! replica would), every answer the cache gives without the backend must be a
//! denial the backend gave for that counter, of no larger a cost, counted
//! down to the retry time it gave; without out-of-band refunds or resets it
//! must also be what `alone` says now. Every other answer must be exactly
//! `alone`'s.

use std::{collections::HashMap, sync::Arc, time::Duration};

use proptest::prelude::*;
use runlimit_core::{
    Check, Decision, FixedWindowPolicy, GcraPolicy, Limiter, Policy, PolicyId, ScopeId, SubjectKey,
};
use runlimit_memory::{
    Algorithm, Cached, DenialCache, GcraStore, ManualClock, MemoryStore, MemoryStoreConfig, Store,
};

#[derive(Debug, Clone)]
enum Op {
    /// (subject, cost) checked.
    Check(u8, u64),
    /// A refund on both backends directly: an admission, then its refund.
    RefundElsewhere(u8),
    /// A reset on both backends directly.
    ResetElsewhere(u8),
    /// Advance the clock by this many milliseconds.
    Advance(u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            8 => (0u8..3, 1u64..4).prop_map(|(s, c)| Op::Check(s, c)),
            1 => (0u8..3).prop_map(Op::RefundElsewhere),
            1 => (0u8..3).prop_map(Op::ResetElsewhere),
            3 => (0u64..400).prop_map(Op::Advance),
        ],
        1..200,
    )
}

fn key(n: u8) -> SubjectKey {
    SubjectKey::from_digest([n.wrapping_add(0x21); 32])
}

fn config() -> MemoryStoreConfig {
    MemoryStoreConfig::new(64).expect("valid")
}

/// What the cache was told: a denial of `cost` at `at` (ms), retry `retry`.
#[derive(Debug, Clone, Copy)]
struct Told {
    at: u64,
    cost: u64,
    retry: Duration,
}

fn run_trace<A: Algorithm>(
    policy: &A::Policy,
    ops: &[Op],
    store: impl Fn() -> Store<A>,
) -> Result<(), TestCaseError>
where
    A::Policy: Policy,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_000));
    let alone = store().with_clock(clock.clone());
    let cache = Arc::new(DenialCache::new(config()).with_clock(clock.clone()));
    let behind = cache.in_front_of(store().with_clock(clock.clone()));
    let mut now_ms = 1_000_000u64;
    let mut told: HashMap<u8, Told> = HashMap::new();
    let mut elsewhere: HashMap<u8, bool> = HashMap::new();
    for (index, op) in ops.iter().enumerate() {
        match *op {
            Op::Advance(ms) => {
                now_ms += ms;
                clock.advance(Duration::from_millis(ms));
            }
            Op::RefundElsewhere(s) => {
                let check = Check::new(policy, key(s));
                for store in [&alone, behind.backend()] {
                    if let (_, Some(receipt)) = store.admit(&check).expect("ok").into_parts() {
                        store.refund(&[check], receipt).expect("ok");
                    }
                }
                // A refund of an admission made now gives back only what it
                // took; but take any event elsewhere as possibly freeing quota.
                elsewhere.insert(s, true);
            }
            Op::ResetElsewhere(s) => {
                alone.reset(policy, &key(s)).expect("ok");
                behind.backend().reset(policy, &key(s)).expect("ok");
                elsewhere.insert(s, true);
            }
            Op::Check(s, cost) => {
                let cost = cost.min(policy.capacity());
                let check = Check::weighted(policy, key(s), cost).expect("valid");
                let hits = cache.stats().hits;
                let would = alone.peek(&check).expect("ok");
                // Every other check is decided at once: the same answers,
                // from the cache or the backend, and the same learning.
                let answer: Decision = if index % 2 == 0 {
                    behind
                        .check_now(&check)
                        .expect("a memory backend decides at once")
                } else {
                    runtime.block_on(behind.check(&check))
                }
                .expect("no error");
                if cache.stats().hits > hits {
                    // Answered from the cache: a denial the backend gave.
                    let told = told
                        .get(&s)
                        .copied()
                        .ok_or_else(|| TestCaseError::fail("a cached answer never told"))?;
                    prop_assert!(answer.is_denied(), "the cache admitted {answer:?}");
                    prop_assert!(cost >= told.cost, "denied a smaller cost than told");
                    let until = told.at + u64::try_from(told.retry.as_millis()).expect("ms");
                    prop_assert!(now_ms < until, "denied past the backend's retry time");
                    prop_assert_eq!(
                        answer.retry_after(),
                        Some(Duration::from_millis(until - now_ms))
                    );
                    if !elsewhere.get(&s).copied().unwrap_or(false) {
                        prop_assert!(
                            would.is_denied(),
                            "denied what the backend admits: {would:?}"
                        );
                        prop_assert!(answer.retry_after() <= would.retry_after());
                    }
                } else {
                    // Asked the backend: exactly what the backend alone says.
                    let direct = alone.check(&check).expect("ok");
                    prop_assert_eq!(answer, direct);
                    if let Some(retry) = answer.retry_after().filter(|_| answer.is_denied()) {
                        told.insert(
                            s,
                            Told {
                                at: now_ms,
                                cost,
                                retry,
                            },
                        );
                        elsewhere.insert(s, false);
                    }
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fixed_windows_behind_the_cache_never_admit_what_the_backend_denies(ops in ops()) {
        let policy = FixedWindowPolicy::new(
            PolicyId::new("cached").expect("valid"),
            ScopeId::new("client").expect("valid"),
            3,
            Duration::from_millis(1_000),
        )
        .expect("valid");
        run_trace(&policy, &ops, || MemoryStore::new(config()))?;
    }

    #[test]
    fn gcra_behind_the_cache_never_admits_what_the_backend_denies(ops in ops()) {
        let policy = GcraPolicy::new(
            PolicyId::new("cached").expect("valid"),
            ScopeId::new("client").expect("valid"),
            1,
            Duration::from_millis(300),
            3,
        )
        .expect("valid");
        run_trace(&policy, &ops, || GcraStore::new(config()))?;
    }
}

/// A backend denial decided at once is learned as an awaited one is, and
/// answered at once from then on, even in front of a backend that only
/// decides in its future; a miss in front of that backend is left to it.
#[test]
fn denials_decided_at_once_are_learned_and_answered_at_once() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let clock = ManualClock::new();
    let cache = Arc::new(DenialCache::new(config()).with_clock(clock.clone()));
    let store = Arc::new(MemoryStore::new(config()).with_clock(clock.clone()));
    let at_once = cache.in_front_of(Shared {
        store: Arc::clone(&store),
        at_once: true,
    });
    let awaited = cache.in_front_of(Shared {
        store,
        at_once: false,
    });
    let policy = FixedWindowPolicy::new(
        PolicyId::new("cached").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(60),
    )
    .expect("valid");
    let check = Check::new(&policy, key(1));
    let decided = |limiter: &Cached<Shared>| {
        limiter
            .check_now(&check)
            .map(|decided| decided.expect("no error"))
    };
    assert!(decided(&at_once).expect("at once").is_allowed());
    // Not cached yet, and that backend cannot decide at once.
    assert_eq!(decided(&awaited), None);
    let hits = cache.stats().hits;
    assert!(decided(&at_once).expect("at once").is_denied());
    assert_eq!(cache.stats().hits, hits, "the backend's own denial");
    // Learned: both answer from the cache now, without their backend.
    assert!(decided(&awaited).expect("cached").is_denied());
    assert!(
        runtime
            .block_on(awaited.check(&check))
            .expect("ok")
            .is_denied()
    );
    assert_eq!(cache.stats().hits, hits + 2);
}

/// One memory store behind the async contract, deciding at once only when
/// `at_once` is set (a networked backend never does).
#[derive(Debug)]
struct Shared {
    store: Arc<MemoryStore>,
    at_once: bool,
}

impl Limiter for Shared {
    type Policy = FixedWindowPolicy;
    type Error = runlimit_memory::MemoryStoreError;

    async fn check(&self, check: &Check<'_, FixedWindowPolicy>) -> Result<Decision, Self::Error> {
        self.store.check(check)
    }

    async fn check_all(
        &self,
        checks: &[Check<'_, FixedWindowPolicy>],
    ) -> Result<runlimit_core::BatchDecision, Self::Error> {
        self.store.check_all(checks)
    }

    fn check_now(
        &self,
        check: &Check<'_, FixedWindowPolicy>,
    ) -> Option<Result<Decision, Self::Error>> {
        self.at_once.then(|| self.store.check(check))
    }
}

/// A flood of distinct denied keys: the cache never holds more than its
/// capacity, refuses the rest (they simply ask the backend), and keeps
/// answering the keys it holds.
#[test]
fn a_flood_of_denied_keys_stays_within_the_bound() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let clock = ManualClock::new();
    let capacity = 100;
    let cache = Arc::new(
        DenialCache::new(
            MemoryStoreConfig::new(capacity)
                .and_then(|config| config.with_shard_count(4))
                .expect("valid"),
        )
        .with_clock(clock.clone()),
    );
    let limiter = cache.in_front_of(
        MemoryStore::new(MemoryStoreConfig::new(100_000).expect("valid")).with_clock(clock.clone()),
    );
    let decide = |check: &Check<'_, FixedWindowPolicy>| {
        runtime.block_on(limiter.check(check)).expect("no error")
    };
    let policy = FixedWindowPolicy::new(
        PolicyId::new("flood").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(60),
    )
    .expect("valid");
    // Spread like HMAC output: every byte depends on n.
    let subject = |n: u32| {
        let mut digest = [0u8; 32];
        let mut state = u64::from(n).wrapping_add(0x9E37_79B9_7F4A_7C15);
        for chunk in digest.chunks_mut(8) {
            state ^= state >> 30;
            state = state.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            state ^= state >> 27;
            chunk.copy_from_slice(&state.to_le_bytes());
        }
        SubjectKey::from_digest(digest)
    };
    for n in 0..5_000 {
        let check = Check::new(&policy, subject(n));
        assert!(decide(&check).is_allowed());
        assert!(decide(&check).is_denied());
        let stats = cache.stats();
        assert!(stats.entries <= capacity, "{stats:?}");
    }
    let stats = cache.stats();
    assert_eq!(stats.entries, capacity);
    assert_eq!(stats.refused, 5_000 - capacity as u64);
    // The keys it holds are answered without the backend.
    let before = cache.stats().hits;
    for n in 0..5_000 {
        assert!(decide(&Check::new(&policy, subject(n))).is_denied());
    }
    assert_eq!(
        cache.stats().hits - before,
        capacity as u64,
        "{:?}",
        cache.stats()
    );
    // Once their retry time passes, the denials expire and make room again.
    clock.advance(Duration::from_secs(60));
    let refused = cache.stats().refused;
    let fresh = Check::new(&policy, subject(1_000_000));
    assert!(decide(&fresh).is_allowed());
    assert!(decide(&fresh).is_denied());
    assert_eq!(cache.stats().refused, refused, "room was made");
    assert!(cache.stats().entries <= capacity);
}
