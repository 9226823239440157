//! Sliding windows against an exact sliding log
//! ([`runlimit_conformance::sliding_log`]), on an injected clock that steps
//! by any amount, so traces land anywhere within an eighth; and the
//! boundary burst and extremes, exactly.

use std::time::Duration;

use proptest::prelude::*;
use runlimit_conformance::{
    TimeControl,
    sliding_log::{policies, run_trace, trace},
    subject,
};
use runlimit_core::{Check, PolicyId, ScopeId, SlidingWindowPolicy};
use runlimit_memory::{ManualClock, MemoryStoreConfig, SlidingWindowStore};

struct Manual(ManualClock);

impl TimeControl for Manual {
    async fn advance(&self, by: Duration) {
        self.0.advance(by);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn sliding_windows_never_exceed_the_limit_and_deny_at_most_an_eighth_early(
        policies in policies((1u64..60).prop_map(Duration::from_millis)),
        ops in trace(2, (0u64..12_000).prop_map(Duration::from_micros)),
        start_micros in 0u64..10_000_000,
    ) {
        let clock = ManualClock::new();
        clock.set(Duration::from_micros(start_micros));
        let config = MemoryStoreConfig::new(64)
            .and_then(|config| config.with_shard_count(2))
            .expect("valid");
        let store = SlidingWindowStore::new(config).with_clock(clock.clone());
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let outcome = runtime.block_on(run_trace(&store, &Manual(clock), &policies, &ops));
        outcome.map_err(TestCaseError::fail)?;
    }
}

/// The boundary burst a fixed window allows: a whole quota just before its
/// window ends and another just after. A sliding window refuses the second
/// until the first has aged out.
#[test]
fn the_fixed_window_boundary_burst_is_refused() {
    let clock = ManualClock::new();
    let store = SlidingWindowStore::new(MemoryStoreConfig::new(16).expect("valid"))
        .with_clock(clock.clone());
    let policy = SlidingWindowPolicy::new(
        PolicyId::new("burst").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        Duration::from_secs(60),
    )
    .expect("valid");
    let check = Check::weighted(&policy, subject(1), 10).expect("valid");
    clock.set(Duration::from_millis(59_999));
    assert!(store.check(&check).expect("ok").is_allowed());
    clock.set(Duration::from_millis(60_001));
    let denied = store.check(&check).expect("ok");
    assert!(denied.is_denied(), "a second quota across the boundary");
    // Admitted in the eighth 52.5..60 s, the units stop counting when the
    // ninth eighth after it begins, at 120 s: 7.5 s after 59.999 s + 60 s at
    // most.
    assert_eq!(
        denied.retry_after(),
        Some(Duration::from_millis(120_000 - 60_001))
    );
    clock.set(Duration::from_millis(119_999));
    assert!(store.check(&check).expect("ok").is_denied());
    clock.set(Duration::from_millis(120_000));
    assert!(store.check(&check).expect("ok").is_allowed());
}

/// `MAX_LIMIT` units over `MAX_WINDOW`: exact at the extremes.
#[test]
fn the_largest_policy_is_exact() {
    use runlimit_core::{MAX_LIMIT, MAX_WINDOW};
    let clock = ManualClock::new();
    let store = SlidingWindowStore::new(MemoryStoreConfig::new(16).expect("valid"))
        .with_clock(clock.clone());
    let policy = SlidingWindowPolicy::new(
        PolicyId::new("extreme").expect("valid"),
        ScopeId::new("client").expect("valid"),
        MAX_LIMIT,
        MAX_WINDOW,
    )
    .expect("valid");
    clock.set(Duration::from_secs(1_800_000_000));
    let all = Check::weighted(&policy, subject(2), MAX_LIMIT).expect("valid");
    let admitted = store.check(&all).expect("ok");
    assert_eq!(admitted.remaining(), Some(0));
    let one = Check::new(&policy, subject(2));
    let denied = store.check(&one).expect("ok");
    // 1.8e9 s is a whole number of eighths of MAX_WINDOW only by chance; the
    // unit counted in the current eighth stops counting nine eighths after
    // that eighth began.
    let eighth = MAX_WINDOW / 8;
    let into = Duration::from_nanos(
        u64::try_from(Duration::from_secs(1_800_000_000).as_nanos() % eighth.as_nanos())
            .expect("fits"),
    );
    assert_eq!(denied.retry_after(), Some(eighth * 9 - into));
    assert_eq!(admitted.reset_after(), Some(eighth * 9 - into));
    clock.advance(eighth * 9 - into);
    assert_eq!(store.check(&all).expect("ok").remaining(), Some(0));
}
