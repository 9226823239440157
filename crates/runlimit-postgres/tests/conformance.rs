//! The shared behaviour suite against a real PostgreSQL server.

mod common;

use runlimit_conformance::{
    any_policy_carry_suite, fixed_window_carry_suite, fixed_window_grant_suite,
    fixed_window_lifecycle_suite, fixed_window_settle_suite, fixed_window_suite, gcra_carry_suite,
    gcra_grant_suite, gcra_lifecycle_suite, gcra_settle_suite, gcra_suite,
    sliding_window_carry_suite, sliding_window_grant_suite, sliding_window_lifecycle_suite,
    sliding_window_settle_suite, sliding_window_suite,
};
use runlimit_core::{AnyPolicy, FixedWindowPolicy, GcraPolicy, SlidingWindowPolicy};
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

#[tokio::test]
async fn every_algorithm_carries_state_across_a_change() {
    let Some(schema) = common::schema("conf_carry").await else {
        return;
    };
    let limiter =
        PostgresLimiter::<FixedWindowPolicy>::new(schema.pool(4).await, PostgresConfig::default());
    limiter.migrate().await.expect("migrate");
    fixed_window_carry_suite(&limiter).await;
    sliding_window_carry_suite(&limiter.for_policy::<SlidingWindowPolicy>()).await;
    gcra_carry_suite(&limiter.for_policy::<GcraPolicy>()).await;
}

#[tokio::test]
async fn any_policy_limiters_carry_between_every_pair_of_algorithms() {
    let Some(schema) = common::schema("conf_carry_any").await else {
        return;
    };
    let limiter =
        PostgresLimiter::<AnyPolicy>::new(schema.pool(4).await, PostgresConfig::default());
    limiter.migrate().await.expect("migrate");
    any_policy_carry_suite(&limiter).await;
}
