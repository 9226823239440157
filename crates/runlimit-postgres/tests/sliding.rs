//! Sliding windows on PostgreSQL against the exact sliding log, and the
//! capacity, cleanup and reset rules they share with the other tables.
//!
//! Windows are eight hours long: time moves only by whole hours (eighths)
//! shifted into the stored state, and no test runs long enough for the
//! database's own clock to cross more than one eighth boundary, which the
//! guarantee and the bound both tolerate.

mod common;

use std::time::Duration;

use common::{ShiftTime, key};
use proptest::{prelude::*, test_runner::TestRunner};
use runlimit_conformance::sliding_log::{policies, run_trace, trace};
use runlimit_core::{Check, Denial, Lifecycle, Limiter, PolicyId, ScopeId, SlidingWindowPolicy};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};

const HOUR: Duration = Duration::from_secs(3_600);

#[test]
fn traces_never_exceed_the_limit_and_deny_at_most_an_eighth_early() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(schema) = runtime.block_on(common::schema("sliding_trace")) else {
        return;
    };
    let pool = runtime.block_on(schema.migrated_pool(2));
    let limiter = PostgresLimiter::<SlidingWindowPolicy>::new(pool, PostgresConfig::default());
    let time = ShiftTime { schema: &schema };
    let mut runner = TestRunner::new(ProptestConfig::with_cases(32));
    let strategy = (
        policies(Just(HOUR * 8)),
        trace(2, (0u32..10).prop_map(|hours| HOUR * hours)),
    );
    runner
        .run(&strategy, |(policies, ops)| {
            let outcome = runtime.block_on(run_trace(&limiter, &time, &policies, &ops));
            outcome.map_err(TestCaseError::fail)?;
            Ok(())
        })
        .expect("every trace");
}

fn sliding(name: &str, limit: u64, window: Duration) -> SlidingWindowPolicy {
    SlidingWindowPolicy::new(
        PolicyId::new(name).expect("valid"),
        ScopeId::new("client").expect("valid"),
        limit,
        window,
    )
    .expect("valid")
}

#[tokio::test]
async fn sliding_windows_share_the_capacity_cleanup_and_reset_rules() {
    let Some(schema) = common::schema("sliding_rules").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let config = PostgresConfig::default()
        .with_max_rows_per_shard(1)
        .expect("valid");
    let limiter = PostgresLimiter::<SlidingWindowPolicy>::new(pool.clone(), config);
    let policy = sliding("capped", 5, Duration::from_secs(80));
    // Two new keys in one shard with room for one: the batch is refused for
    // capacity and writes nothing; alone, the first fits and the second not.
    let batch = [
        Check::new(&policy, key(42, 1)),
        Check::new(&policy, key(42, 2)),
    ];
    assert!(
        limiter
            .check_all(&batch)
            .await
            .expect("decided")
            .would_deny()
    );
    assert!(limiter.check(&batch[0]).await.expect("fits").is_allowed());
    assert_eq!(
        limiter.check(&batch[1]).await.expect("decided").denial(),
        Some(&Denial::StorageCapacity { retry_after: None })
    );
    // Peeks store nothing.
    let peeked = limiter
        .peek(&Check::new(&policy, key(43, 1)))
        .await
        .expect("peek");
    assert_eq!(peeked.remaining(), Some(5));
    let rows = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT (SELECT count(*) FROM runlimit_sliding_windows) * 1000 \
             + (SELECT sum(used) FROM runlimit_capacity_ledger WHERE counter_table = 'sliding_windows')",
        )
        .fetch_one(&pool)
        .await
        .expect("rows")
    };
    assert_eq!(rows().await, 1_001, "one row, one ledger slot");

    // Eight eighths later the unit still counts, so the row is kept; after
    // the ninth nothing in its window remains and cleanup may take it.
    assert_eq!(limiter.cleanup_expired(10).await.expect("cleanup"), 0);
    let time = ShiftTime { schema: &schema };
    time.advance_now(Duration::from_secs(70)).await;
    assert_eq!(limiter.cleanup_expired(10).await.expect("cleanup"), 0);
    time.advance_now(Duration::from_secs(20)).await;
    assert_eq!(limiter.cleanup_expired(10).await.expect("cleanup"), 1);
    assert_eq!(rows().await, 0, "the ledger follows deletions");

    // A reset deletes the row and frees its slot.
    assert!(limiter.check(&batch[1]).await.expect("fits").is_allowed());
    assert!(limiter.reset(&policy, &key(42, 2)).await.expect("reset"));
    assert_eq!(rows().await, 0);
    assert!(!limiter.reset(&policy, &key(42, 2)).await.expect("reset"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_pools_admitting_and_refunding_one_key_never_exceed_the_limit() {
    use std::sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    };
    let Some(schema) = common::schema("sliding_race").await else {
        return;
    };
    schema.migrated_pool(1).await;
    let limit = 30;
    let policy = Arc::new(sliding("raced", limit, HOUR * 8));
    let admitted = Arc::new(AtomicU64::new(0));
    let credited = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for pool in 0..4 {
        let limiter = Arc::new(PostgresLimiter::<SlidingWindowPolicy>::new(
            schema.pool(4).await,
            PostgresConfig::default()
                .with_operation_timeout(Duration::from_secs(10))
                .and_then(|c| c.with_pool_acquire_timeout(Duration::from_secs(10)))
                .expect("valid"),
        ));
        for task in 0..8u64 {
            let (limiter, policy) = (Arc::clone(&limiter), Arc::clone(&policy));
            let (admitted, credited) = (Arc::clone(&admitted), Arc::clone(&credited));
            tasks.push(tokio::spawn(async move {
                let check = Check::new(&*policy, key(12, 12));
                for round in 0..12u64 {
                    let admission = limiter.admit(&check).await.expect("no error");
                    let (_, Some(receipt)) = admission.into_parts() else {
                        continue;
                    };
                    admitted.fetch_add(1, Ordering::SeqCst);
                    // Refund two admissions in three, keep the third.
                    if (round + task + pool) % 3 != 0 {
                        let refunded = limiter.refund(&[check], receipt).await.expect("no error");
                        credited.fetch_add(refunded.credited() as u64, Ordering::SeqCst);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    let in_use = admitted.load(Ordering::SeqCst) - credited.load(Ordering::SeqCst);
    assert!(in_use <= limit, "{in_use} units in use of {limit}");
    let counted: i64 = sqlx::query_scalar(
        "SELECT sum(c)::bigint FROM runlimit_sliding_windows, unnest(counts) AS c",
    )
    .fetch_one(&schema.pool(1).await)
    .await
    .expect("the counter");
    assert_eq!(u64::try_from(counted).expect("never below zero"), in_use);
}
