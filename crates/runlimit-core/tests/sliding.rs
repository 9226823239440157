//! The shared sliding-window arithmetic: reported times are exact, and the
//! microsecond arithmetic of PostgreSQL and Redis decides as the memory
//! store's nanosecond arithmetic does.

use std::time::Duration;

use proptest::prelude::*;
use runlimit_core::{
    PolicyId, ScopeId, SlidingWindowPolicy,
    sliding::{Buckets, SlidingMicros, SlidingNanos, SlidingOutcome},
};

const NANOS_PER_MILLI: u64 = 1_000_000;

fn policy(limit: u64, window_ms: u64) -> SlidingWindowPolicy {
    SlidingWindowPolicy::new(
        PolicyId::new("sliding").expect("valid"),
        ScopeId::new("client").expect("valid"),
        limit,
        Duration::from_millis(window_ms),
    )
    .expect("valid")
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).expect("fits")
}

fn fits(exact: &SlidingNanos, stored: Option<Buckets>, cost: u64, at: u64) -> bool {
    matches!(
        exact.admit(stored, cost, at),
        SlidingOutcome::Allowed { .. }
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// A denial's `retry_after` is the first whole millisecond at which the
    /// cost fits; an admission's `reset_after` the first at which the whole
    /// limit is free again.
    #[test]
    fn reported_times_are_exact_to_the_millisecond(
        limit in 1u64..8,
        window_ms in 1u64..200,
        steps in prop::collection::vec((0u64..40_000, 1u64..4), 1..60),
    ) {
        let policy = policy(limit, window_ms);
        let exact = SlidingNanos::new(&policy);
        let mut now = 1_000 * 1_000 * NANOS_PER_MILLI;
        let mut stored = None;
        for (micros, cost) in steps {
            now += micros * 1_000;
            let cost = cost.min(limit);
            match exact.admit(stored, cost, now) {
                SlidingOutcome::Denied(denial) => {
                    let retry = nanos(denial.retry_after().expect("a quota denial has one"));
                    prop_assert!(retry > 0, "denied now yet retry_after zero");
                    prop_assert!(fits(&exact, stored, cost, now + retry), "still denied after retry_after");
                    prop_assert!(
                        !fits(&exact, stored, cost, now + retry - NANOS_PER_MILLI),
                        "fits a millisecond before retry_after"
                    );
                }
                SlidingOutcome::Allowed { decision, next } => {
                    let reset = nanos(decision.reset_after().expect("allowed"));
                    let full = |at: u64| exact.peek(Some(next), 1, at).ok().and_then(|d| d.remaining());
                    prop_assert_eq!(full(now + reset), Some(limit), "not free after reset_after");
                    prop_assert!(
                        reset < NANOS_PER_MILLI || full(now + reset - NANOS_PER_MILLI) != Some(limit),
                        "free a millisecond before reset_after"
                    );
                    stored = Some(next);
                }
            }
        }
    }

    /// PostgreSQL and Redis count in microseconds, the memory store in
    /// nanoseconds: on whole microseconds they decide and report alike.
    #[test]
    fn microsecond_and_nanosecond_arithmetic_agree(
        limit in 1u64..8,
        window_ms in 1u64..200,
        steps in prop::collection::vec((0u64..40_000, 1u64..4), 1..60),
    ) {
        let policy = policy(limit, window_ms);
        let (micro, nano) = (SlidingMicros::new(&policy), SlidingNanos::new(&policy));
        let mut now_us = 1_000_000_000u64;
        let (mut stored_us, mut stored_ns) = (None, None);
        for (micros, cost) in steps {
            now_us += micros;
            let cost = cost.min(limit);
            match (micro.admit(stored_us, cost, now_us), nano.admit(stored_ns, cost, now_us * 1_000)) {
                (SlidingOutcome::Denied(a), SlidingOutcome::Denied(b)) => prop_assert_eq!(a, b),
                (
                    SlidingOutcome::Allowed { decision: a, next: next_us },
                    SlidingOutcome::Allowed { decision: b, next: next_ns },
                ) => {
                    prop_assert_eq!(a, b);
                    prop_assert_eq!(next_us.counts, next_ns.counts);
                    stored_us = Some(next_us);
                    stored_ns = Some(next_ns);
                }
                (a, b) => prop_assert!(false, "microseconds {a:?}, nanoseconds {b:?}"),
            }
        }
    }
}
