//! The shared behaviour suite against a real PostgreSQL server.

mod common;

use runlimit_conformance::{
    fixed_window_grant_suite, fixed_window_lifecycle_suite, fixed_window_settle_suite,
    fixed_window_suite, gcra_grant_suite, gcra_lifecycle_suite, gcra_settle_suite, gcra_suite,
    sliding_window_grant_suite, sliding_window_lifecycle_suite, sliding_window_settle_suite,
    sliding_window_suite,
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
