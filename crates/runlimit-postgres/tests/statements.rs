//! Every check and batch is one statement: counted from SQLx's per-query
//! trace events. Kept in a test binary of its own so no concurrently running
//! test can race the thread-local trace subscriber (tracing caches whether a
//! call site is enabled across threads).

mod common;

use common::{key, policy};

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use runlimit_core::{
    Check, FixedWindowPolicy, GcraPolicy, Lifecycle, Limiter, PolicyId, ScopeId,
    SlidingWindowPolicy,
};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};

/// Counts the statements SQLx executes, from its per-query trace events.
#[derive(Clone, Default)]
struct StatementCounter(Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for StatementCounter {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target().starts_with("sqlx::query") {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn gcra_policy() -> GcraPolicy {
    GcraPolicy::new(
        PolicyId::new("gcra").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(1),
        5,
    )
    .expect("valid")
}

#[tokio::test]
async fn every_check_and_batch_is_a_single_statement() {
    use tracing_subscriber::layer::SubscriberExt;
    let Some(schema) = common::schema("statements").await else {
        return;
    };
    let pool = schema.migrated_pool(1).await;
    let fixed = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), PostgresConfig::default());
    let gcra = PostgresLimiter::<GcraPolicy>::new(pool.clone(), PostgresConfig::default());
    let sliding: PostgresLimiter<SlidingWindowPolicy> = fixed.for_policy();
    let counter = StatementCounter::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(counter.clone()));

    let policies: Vec<FixedWindowPolicy> = (0..8)
        .map(|n| policy(&format!("batch{n}"), 5, Duration::from_secs(60)))
        .collect();
    let gcra_policy = gcra_policy();
    let sliding_policies: Vec<SlidingWindowPolicy> = (0..4)
        .map(|n| {
            SlidingWindowPolicy::new(
                PolicyId::new(format!("sliding{n}")).expect("valid"),
                ScopeId::new("client").expect("valid"),
                5,
                Duration::from_secs(60),
            )
            .expect("valid")
        })
        .collect();
    for round in 0..3 {
        let before = counter.0.load(Ordering::SeqCst);
        fixed
            .check(&Check::new(&policies[0], key(2, round)))
            .await
            .expect("check");
        assert_eq!(counter.0.load(Ordering::SeqCst) - before, 1, "single check");

        let before = counter.0.load(Ordering::SeqCst);
        let checks: Vec<_> = policies
            .iter()
            .map(|p| Check::new(p, key(3, round)))
            .collect();
        assert!(fixed.check_all(&checks).await.expect("batch").is_allowed());
        assert_eq!(counter.0.load(Ordering::SeqCst) - before, 1, "batch of 8");

        let before = counter.0.load(Ordering::SeqCst);
        gcra.check_all(&[
            Check::new(&gcra_policy, key(4, round)),
            Check::new(&gcra_policy, key(5, round)),
        ])
        .await
        .expect("gcra batch");
        assert_eq!(counter.0.load(Ordering::SeqCst) - before, 1, "GCRA batch");

        let before = counter.0.load(Ordering::SeqCst);
        let admission = fixed.admit_all(&checks[..2]).await.expect("admit");
        let receipt = admission.into_parts().1.expect("allowed");
        assert_eq!(counter.0.load(Ordering::SeqCst) - before, 1, "admission");
        let before = counter.0.load(Ordering::SeqCst);
        fixed.refund(&checks[..2], receipt).await.expect("refund");
        assert_eq!(
            counter.0.load(Ordering::SeqCst) - before,
            1,
            "refund of a batch"
        );
        let before = counter.0.load(Ordering::SeqCst);
        gcra.peek(&Check::new(&gcra_policy, key(4, round)))
            .await
            .expect("peek");
        assert_eq!(counter.0.load(Ordering::SeqCst) - before, 1, "peek");
        let before = counter.0.load(Ordering::SeqCst);
        gcra.reset(&gcra_policy, &key(4, round))
            .await
            .expect("reset");
        assert_eq!(counter.0.load(Ordering::SeqCst) - before, 1, "reset");

        // Sliding windows: one statement per batch, refund, peek and reset.
        let sliding_checks: Vec<_> = sliding_policies
            .iter()
            .map(|p| Check::new(p, key(6, round)))
            .collect();
        let before = counter.0.load(Ordering::SeqCst);
        let admission = sliding.admit_all(&sliding_checks).await.expect("admit");
        assert_eq!(
            counter.0.load(Ordering::SeqCst) - before,
            1,
            "sliding batch"
        );
        let receipt = admission.into_parts().1.expect("allowed");
        let before = counter.0.load(Ordering::SeqCst);
        let refunded = sliding
            .refund(&sliding_checks, receipt)
            .await
            .expect("refund");
        assert_eq!(refunded.credited(), 4, "every check credited");
        assert_eq!(
            counter.0.load(Ordering::SeqCst) - before,
            1,
            "sliding refund"
        );
        let before = counter.0.load(Ordering::SeqCst);
        sliding.peek(&sliding_checks[0]).await.expect("peek");
        assert_eq!(counter.0.load(Ordering::SeqCst) - before, 1, "sliding peek");
        let before = counter.0.load(Ordering::SeqCst);
        sliding
            .reset(&sliding_policies[0], &key(6, round))
            .await
            .expect("reset");
        assert_eq!(
            counter.0.load(Ordering::SeqCst) - before,
            1,
            "sliding reset"
        );
    }

    // A counter carrying its predecessor's state: the first check of each
    // subject, which carries, is one statement, and so is the next.
    let old = policy("carried", 5, Duration::from_secs(60));
    let new = policy("carried", 6, Duration::from_secs(60))
        .continuing(&old)
        .expect("lineage");
    for round in 0..3 {
        fixed
            .check(&Check::new(&old, key(7, round)))
            .await
            .expect("check");
        let check = Check::new(&new, key(7, round));
        let before = counter.0.load(Ordering::SeqCst);
        let carried = fixed.check(&check).await.expect("check");
        assert_eq!(carried.remaining(), Some(4), "one unit carried");
        assert_eq!(
            counter.0.load(Ordering::SeqCst) - before,
            1,
            "the first carried check"
        );
        let before = counter.0.load(Ordering::SeqCst);
        fixed.check(&check).await.expect("check");
        assert_eq!(
            counter.0.load(Ordering::SeqCst) - before,
            1,
            "the next check of a carried subject"
        );
    }
}
