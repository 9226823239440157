//! The shared behaviour suite against a real PostgreSQL server.

mod common;

use std::sync::Arc;

use proptest::{prelude::*, test_runner::TestRunner};
use runlimit_conformance::{
    Shared, fixed_window_grant_suite, fixed_window_lifecycle_suite, fixed_window_settle_suite,
    fixed_window_suite, gcra_grant_suite, gcra_lifecycle_suite, gcra_settle_suite, gcra_suite,
    leased_trace, leased_weighted_suite, run_leased_trace, sliding_window_grant_suite,
    sliding_window_lifecycle_suite, sliding_window_settle_suite, sliding_window_suite,
};
use runlimit_core::{FixedWindowPolicy, GcraPolicy, SlidingWindowPolicy};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};

#[tokio::test]
async fn fixed_windows_pass_the_conformance_suite() {
    let Some(schema) = common::schema("conf_fixed").await else {
        return;
    };
    let limiter =
        PostgresLimiter::<FixedWindowPolicy>::new(schema.pool(4).await, PostgresConfig::default());
    limiter.migrate().await.expect("migrate");
    fixed_window_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    fixed_window_lifecycle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    fixed_window_settle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    fixed_window_grant_suite(&limiter).await;
}

#[tokio::test]
async fn gcra_passes_the_conformance_suite() {
    let Some(schema) = common::schema("conf_gcra").await else {
        return;
    };
    let limiter =
        PostgresLimiter::<GcraPolicy>::new(schema.pool(4).await, PostgresConfig::default());
    limiter.migrate().await.expect("migrate");
    gcra_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    gcra_lifecycle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    gcra_settle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    gcra_grant_suite(&limiter).await;
}

#[tokio::test]
async fn sliding_windows_pass_the_conformance_suite() {
    let Some(schema) = common::schema("conf_sliding").await else {
        return;
    };
    let limiter = PostgresLimiter::<SlidingWindowPolicy>::new(
        schema.pool(4).await,
        PostgresConfig::default(),
    );
    limiter.migrate().await.expect("migrate");
    sliding_window_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    sliding_window_lifecycle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    sliding_window_settle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    sliding_window_grant_suite(&limiter).await;
}

/// Leased replicas in front of PostgreSQL, checking weighted costs, held to
/// the ledger of `runlimit_conformance::leased` for every algorithm: the
/// weighted case admits the whole limit, and random traces strand nothing,
/// never go over the limit, and deny only what neither the replica's lease
/// nor the table can cover.
#[test]
fn weighted_leased_traces_strand_no_units() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(schema) = runtime.block_on(common::schema("conf_leased")) else {
        return;
    };
    let pool = runtime.block_on(schema.migrated_pool(2));
    let config = PostgresConfig::default();
    let fixed = Shared(Arc::new(PostgresLimiter::<FixedWindowPolicy>::new(
        pool.clone(),
        config,
    )));
    let sliding = Shared(Arc::new(PostgresLimiter::<SlidingWindowPolicy>::new(
        pool.clone(),
        config,
    )));
    let gcra = Shared(Arc::new(PostgresLimiter::<GcraPolicy>::new(pool, config)));
    runtime.block_on(async {
        leased_weighted_suite(&fixed).await;
        leased_weighted_suite(&sliding).await;
        leased_weighted_suite(&gcra).await;
    });
    TestRunner::new(ProptestConfig::with_cases(16))
        .run(&leased_trace(), |trace| {
            runtime
                .block_on(async {
                    run_leased_trace(&fixed, &trace).await?;
                    run_leased_trace(&sliding, &trace).await?;
                    run_leased_trace(&gcra, &trace).await
                })
                .map_err(TestCaseError::fail)?;
            Ok(())
        })
        .expect("every trace");
}
