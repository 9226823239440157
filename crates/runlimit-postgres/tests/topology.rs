//! The production topology on PostgreSQL: a memory gate in front of the
//! shared quota as one admission, and the denial cache keeping denied keys
//! off the database.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{key, policy};
use runlimit_core::{AdmissionObservation, BatchDecision, Check, Limiter, Observer, TieredPolicy};
use runlimit_memory::{DenialCache, MemoryStore, MemoryStoreConfig, Tiered};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};

/// Counts the operations that reach the database.
#[derive(Debug, Clone, Default)]
struct RoundTrips(Arc<AtomicUsize>);

impl Observer for RoundTrips {
    fn on_admission(&self, _: &AdmissionObservation<'_>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn the_denial_cache_keeps_a_denied_key_off_the_database() {
    let Some(schema) = common::schema("denial_cache").await else {
        return;
    };
    let trips = RoundTrips::default();
    let limiter = PostgresLimiter::<runlimit_core::FixedWindowPolicy>::new(
        schema.migrated_pool(2).await,
        PostgresConfig::default(),
    )
    .with_observer(trips.clone());
    let cache = Arc::new(DenialCache::new(
        MemoryStoreConfig::new(1_000).expect("valid"),
    ));
    let cached = cache.in_front_of(limiter);
    let window = policy("cached", 3, Duration::from_secs(60));
    let check = Check::new(&window, key(9, 1));
    let mut allowed = 0;
    for _ in 0..50 {
        let decision = cached.check(&check).await.expect("decided");
        if decision.is_allowed() {
            allowed += 1;
        } else {
            assert!(decision.retry_after() <= Some(Duration::from_secs(60)));
        }
    }
    assert_eq!(allowed, 3, "never more than the database admits");
    assert_eq!(
        trips.0.load(Ordering::SeqCst),
        4,
        "three admissions and one denial"
    );
    assert_eq!(cache.stats().hits, 46);
    // Another key still reaches the database.
    assert!(
        cached
            .check(&Check::new(&window, key(9, 2)))
            .await
            .expect("ok")
            .is_allowed()
    );
    assert_eq!(trips.0.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn a_memory_gate_in_front_of_postgres_is_one_admission() {
    let Some(schema) = common::schema("tiered").await else {
        return;
    };
    let trips = RoundTrips::default();
    let shared = PostgresLimiter::<runlimit_core::FixedWindowPolicy>::new(
        schema.migrated_pool(2).await,
        PostgresConfig::default(),
    )
    .with_observer(trips.clone());
    let limiter = Tiered::new(
        MemoryStore::new(MemoryStoreConfig::new(1_000).expect("valid")),
        shared,
    );
    let client = policy("gate.client", 3, Duration::from_secs(60));
    let (gate, identity) = (
        TieredPolicy::Gate(client.clone()),
        TieredPolicy::Shared(policy("shared.identity", 1, Duration::from_secs(60))),
    );
    let checks = [
        Check::new(&gate, key(7, 1)),
        Check::new(&identity, key(7, 2)),
    ];
    assert!(limiter.check_all(&checks).await.expect("ok").is_allowed());
    // The shared quota is spent: its denial refunds the gate.
    assert!(matches!(
        limiter.check_all(&checks).await.expect("ok"),
        BatchDecision::Denied { index: 1, .. }
    ));
    let left = limiter
        .gate()
        .peek(&Check::new(&client, key(7, 1)))
        .expect("peek")
        .remaining();
    assert_eq!(
        left,
        Some(2),
        "the denied batch consumed nothing on the gate"
    );
    // Spend the gate: its denial never reaches the database.
    let other = [
        Check::new(&gate, key(7, 1)),
        Check::new(&identity, key(7, 3)),
    ];
    assert!(limiter.check_all(&other).await.expect("ok").is_allowed());
    assert!(
        limiter
            .check_all(&[other[0], Check::new(&identity, key(7, 4))])
            .await
            .expect("ok")
            .is_allowed()
    );
    let before = trips.0.load(Ordering::SeqCst);
    assert!(matches!(
        limiter
            .check_all(&[other[0], Check::new(&identity, key(7, 5))])
            .await
            .expect("ok"),
        BatchDecision::Denied { index: 0, .. }
    ));
    assert_eq!(trips.0.load(Ordering::SeqCst), before, "no round trip");
}
