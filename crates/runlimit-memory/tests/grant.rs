//! Grants against what the store itself reports: on random traces of checks,
//! grants and time, a grant takes exactly `min(bound, available)` units when
//! the cost fits (the units a peek reported just before), leaves exactly the
//! rest, and consumes nothing when the cost does not fit.

use std::time::Duration;

use proptest::prelude::*;
use runlimit_core::{
    Check, FixedWindowPolicy, GcraPolicy, Policy, PolicyId, ScopeId, SlidingWindowPolicy,
    SubjectKey,
};
use runlimit_memory::{
    Algorithm, GcraStore, ManualClock, MemoryStore, MemoryStoreConfig, SlidingWindowStore, Store,
};

#[derive(Debug, Clone)]
enum Op {
    /// A check of this cost.
    Check(u8, u64),
    /// A grant of this cost and bound.
    Grant(u8, u64, u64),
    /// Let this many milliseconds pass.
    Advance(u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0u8..2, 1u64..4).prop_map(|(s, c)| Op::Check(s, c)),
            4 => (0u8..2, 1u64..4, 0u64..12).prop_map(|(s, c, n)| Op::Grant(s, c, n)),
            2 => (0u64..400).prop_map(Op::Advance),
        ],
        1..80,
    )
}

fn key(subject: u8) -> SubjectKey {
    SubjectKey::from_digest([subject.wrapping_add(0x51); 32])
}

fn config() -> MemoryStoreConfig {
    MemoryStoreConfig::new(16).expect("valid")
}

fn run<A: Algorithm>(
    store: &Store<A>,
    clock: &ManualClock,
    policy: &A::Policy,
    ops: &[Op],
) -> Result<(), TestCaseError>
where
    A::Policy: Policy,
{
    for op in ops {
        match *op {
            Op::Advance(millis) => clock.advance(Duration::from_millis(millis)),
            Op::Check(s, cost) => {
                let cost = cost.min(policy.capacity());
                store
                    .check(&Check::weighted(policy, key(s), cost).expect("valid"))
                    .expect("no error");
            }
            Op::Grant(s, cost, up_to) => {
                let cost = cost.min(policy.capacity());
                let check = Check::weighted(policy, key(s), cost).expect("valid");
                let before = store.peek(&check).expect("no error");
                let mut granted = store.grant(&check, up_to).expect("no error");
                match before.remaining().filter(|&available| available >= cost) {
                    Some(available) => {
                        let expected = up_to.max(cost).min(available);
                        prop_assert_eq!(granted.units(), expected, "before: {:?}", before);
                        prop_assert!(granted.take_receipt().is_some());
                        prop_assert_eq!(granted.decision().remaining(), Some(available - expected));
                    }
                    None => {
                        prop_assert_eq!(granted.units(), 0);
                        prop_assert!(granted.take_receipt().is_none());
                        prop_assert!(!granted.decision().is_allowed());
                        let after = store.peek(&check).expect("no error");
                        prop_assert_eq!(after, before, "a denied grant consumed");
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
    fn fixed_window_grants_take_exactly_what_fits(limit in 1u64..10, window_ms in 1u64..1_000, ops in ops()) {
        let policy = FixedWindowPolicy::new(
            PolicyId::new("grant").expect("valid"),
            ScopeId::new("s").expect("valid"),
            limit,
            Duration::from_millis(window_ms),
        ).expect("valid");
        let clock = ManualClock::new();
        let store = MemoryStore::new(config()).with_clock(clock.clone());
        run(&store, &clock, &policy, &ops)?;
    }

    #[test]
    fn sliding_window_grants_take_exactly_what_fits(limit in 1u64..10, window_ms in 8u64..1_000, ops in ops()) {
        let policy = SlidingWindowPolicy::new(
            PolicyId::new("grant").expect("valid"),
            ScopeId::new("s").expect("valid"),
            limit,
            Duration::from_millis(window_ms),
        ).expect("valid");
        let clock = ManualClock::new();
        let store = SlidingWindowStore::new(config()).with_clock(clock.clone());
        run(&store, &clock, &policy, &ops)?;
    }

    #[test]
    fn gcra_grants_take_exactly_what_fits(
        quota in 1u64..7,
        period_ms in 1u64..1_000,
        burst in 1u64..10,
        ops in ops(),
    ) {
        let policy = GcraPolicy::new(
            PolicyId::new("grant").expect("valid"),
            ScopeId::new("s").expect("valid"),
            quota,
            Duration::from_millis(period_ms),
            burst,
        ).expect("valid");
        let clock = ManualClock::new();
        let store = GcraStore::new(config()).with_clock(clock.clone());
        run(&store, &clock, &policy, &ops)?;
    }
}
