//! The shared behaviour suite, run against both memory stores.

use std::time::Duration;

use runlimit_conformance::{
    TimeControl, any_policy_carry_suite, carry_drain_suite, fixed_window_carry_suite,
    fixed_window_grant_suite, fixed_window_lifecycle_suite, fixed_window_settle_suite,
    fixed_window_suite, gcra_carry_suite, gcra_grant_suite, gcra_lifecycle_suite,
    gcra_settle_suite, gcra_suite, sliding_window_carry_suite, sliding_window_grant_suite,
    sliding_window_lifecycle_suite, sliding_window_settle_suite, sliding_window_suite,
};
use runlimit_memory::{
    AnyStore, GcraStore, ManualClock, MemoryStore, MemoryStoreConfig, SlidingWindowStore,
};

struct Manual(ManualClock);

impl TimeControl for Manual {
    async fn advance(&self, by: Duration) {
        self.0.advance(by);
    }
}

fn config() -> MemoryStoreConfig {
    MemoryStoreConfig::new(1_000)
        .and_then(|config| config.with_shard_count(4))
        .expect("valid config")
}

#[tokio::test]
async fn memory_store_passes_the_fixed_window_suite() {
    let clock = ManualClock::new();
    let store = MemoryStore::new(config()).with_clock(clock.clone());
    fixed_window_suite(&store, &Manual(clock.clone())).await;
    fixed_window_lifecycle_suite(&store, &Manual(clock.clone())).await;
    fixed_window_settle_suite(&store, &Manual(clock)).await;
    fixed_window_grant_suite(&store).await;
}

#[tokio::test]
async fn single_shard_memory_store_passes_the_fixed_window_suite() {
    let clock = ManualClock::new();
    let store =
        MemoryStore::new(MemoryStoreConfig::new(64).expect("valid")).with_clock(clock.clone());
    fixed_window_suite(&store, &Manual(clock.clone())).await;
    fixed_window_lifecycle_suite(&store, &Manual(clock.clone())).await;
    fixed_window_settle_suite(&store, &Manual(clock)).await;
    fixed_window_grant_suite(&store).await;
}

#[tokio::test]
async fn gcra_store_passes_the_gcra_suite() {
    let clock = ManualClock::new();
    let store = GcraStore::new(config()).with_clock(clock.clone());
    gcra_suite(&store, &Manual(clock.clone())).await;
    gcra_lifecycle_suite(&store, &Manual(clock.clone())).await;
    gcra_settle_suite(&store, &Manual(clock.clone())).await;
    gcra_grant_suite(&store).await;
    carry_drain_suite(&store, &Manual(clock)).await;
}

#[tokio::test]
async fn sliding_window_store_passes_the_sliding_window_suite() {
    // At the start of an eighth of every window the suite uses, and at odd
    // points within one: the cases must hold wherever they run.
    for start in [0, 1_234_567_891, 9_999_999_999] {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(start));
        let store = SlidingWindowStore::new(config()).with_clock(clock.clone());
        sliding_window_suite(&store, &Manual(clock.clone())).await;
        sliding_window_lifecycle_suite(&store, &Manual(clock.clone())).await;
        sliding_window_settle_suite(&store, &Manual(clock)).await;
        sliding_window_grant_suite(&store).await;
    }
}

#[tokio::test]
async fn every_store_carries_state_across_a_change() {
    let clock = ManualClock::new();
    fixed_window_carry_suite(&MemoryStore::new(config()).with_clock(clock.clone())).await;
    sliding_window_carry_suite(&SlidingWindowStore::new(config()).with_clock(clock.clone())).await;
    gcra_carry_suite(&GcraStore::new(config()).with_clock(clock.clone())).await;
    any_policy_carry_suite(&AnyStore::new(config()).with_clock(clock)).await;
}
