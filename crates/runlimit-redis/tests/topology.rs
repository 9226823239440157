//! The production topology on Redis: a memory gate in front of the shared
//! quota as one admission, and the denial cache keeping denied keys off
//! Redis.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use runlimit_core::{
    AdmissionObservation, BatchDecision, Check, FixedWindowPolicy, Limiter, Observer, PolicyId,
    ScopeId, SubjectKey, TieredPolicy,
};
use runlimit_memory::{DenialCache, MemoryStore, MemoryStoreConfig, Tiered};
use runlimit_redis::RedisLimiter;

/// Counts the operations that reach Redis.
#[derive(Debug, Clone, Default)]
struct RoundTrips(Arc<AtomicUsize>);

impl Observer for RoundTrips {
    fn on_admission(&self, _: &AdmissionObservation<'_>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn window(id: &str, limit: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new(id).expect("valid"),
        ScopeId::new("client").expect("valid"),
        limit,
        Duration::from_secs(60),
    )
    .expect("valid")
}

fn key(n: u8) -> SubjectKey {
    SubjectKey::from_digest([n; 32])
}

#[tokio::test]
async fn the_denial_cache_keeps_a_denied_key_off_redis() {
    let Some(connection) = common::connect("denial cache").await else {
        return;
    };
    let trips = RoundTrips::default();
    let limiter = RedisLimiter::<_, FixedWindowPolicy>::new(connection, common::config("cache"))
        .with_observer(trips.clone());
    let cache = Arc::new(DenialCache::new(
        MemoryStoreConfig::new(1_000).expect("valid"),
    ));
    let cached = cache.in_front_of(limiter);
    let policy = window("cached", 3);
    let check = Check::new(&policy, key(1));
    let mut allowed = 0;
    for _ in 0..50 {
        if cached.check(&check).await.expect("decided").is_allowed() {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 3, "never more than Redis admits");
    assert_eq!(
        trips.0.load(Ordering::SeqCst),
        4,
        "three admissions and one denial"
    );
    assert_eq!(cache.stats().hits, 46);
}

#[tokio::test]
async fn a_memory_gate_in_front_of_redis_is_one_admission() {
    let Some(connection) = common::connect("tiered").await else {
        return;
    };
    let trips = RoundTrips::default();
    let shared = RedisLimiter::<_, FixedWindowPolicy>::new(connection, common::config("tiered"))
        .with_observer(trips.clone());
    let limiter = Tiered::new(
        MemoryStore::new(MemoryStoreConfig::new(1_000).expect("valid")),
        shared,
    );
    let client = window("gate.client", 2);
    let (gate, identity) = (
        TieredPolicy::Gate(client.clone()),
        TieredPolicy::Shared(window("shared.identity", 1)),
    );
    let checks = [Check::new(&gate, key(2)), Check::new(&identity, key(3))];
    assert!(limiter.check_all(&checks).await.expect("ok").is_allowed());
    assert!(matches!(
        limiter.check_all(&checks).await.expect("ok"),
        BatchDecision::Denied { index: 1, .. }
    ));
    let left = limiter
        .gate()
        .peek(&Check::new(&client, key(2)))
        .expect("peek")
        .remaining();
    assert_eq!(left, Some(1), "the shared denial refunded the gate");
    assert!(
        limiter
            .check_all(&[checks[0], Check::new(&identity, key(4))])
            .await
            .expect("ok")
            .is_allowed()
    );
    let before = trips.0.load(Ordering::SeqCst);
    assert!(matches!(
        limiter
            .check_all(&[checks[0], Check::new(&identity, key(5))])
            .await
            .expect("ok"),
        BatchDecision::Denied { index: 0, .. }
    ));
    assert_eq!(trips.0.load(Ordering::SeqCst), before, "no round trip");
}
