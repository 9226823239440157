//! The shared behaviour suite against a real Redis server.

mod common;

use runlimit_conformance::{
    any_policy_carry_suite, carry_drain_suite, fixed_window_carry_suite, fixed_window_grant_suite,
    fixed_window_lifecycle_suite, fixed_window_settle_suite, fixed_window_suite, gcra_carry_suite,
    gcra_grant_suite, gcra_lifecycle_suite, gcra_settle_suite, gcra_suite,
    sliding_window_carry_suite, sliding_window_grant_suite, sliding_window_lifecycle_suite,
    sliding_window_settle_suite, sliding_window_suite,
};
use runlimit_core::{AnyPolicy, FixedWindowPolicy, GcraPolicy, SlidingWindowPolicy};
use runlimit_redis::{DEFAULT_COALESCED, RedisLimiter};

/// A subject's state carries across a change of policy or secret, for each
/// algorithm and from every algorithm to every other (`AnyPolicy`), through
/// coalesced invocations (the default) and single ones.
#[tokio::test]
async fn state_carries_across_a_change_of_policy_or_secret() {
    let Some(connection) = common::connect("conformance").await else {
        return;
    };
    for coalescing in [DEFAULT_COALESCED, 1] {
        let config = common::config("conf-carry")
            .with_coalescing(coalescing)
            .expect("valid");
        fixed_window_carry_suite(&RedisLimiter::<_, FixedWindowPolicy>::new(
            connection.clone(),
            config.clone(),
        ))
        .await;
        sliding_window_carry_suite(&RedisLimiter::<_, SlidingWindowPolicy>::new(
            connection.clone(),
            config.clone(),
        ))
        .await;
        gcra_carry_suite(&RedisLimiter::<_, GcraPolicy>::new(
            connection.clone(),
            config.clone(),
        ))
        .await;
        any_policy_carry_suite(&RedisLimiter::<_, AnyPolicy>::new(
            connection.clone(),
            config,
        ))
        .await;
    }
}

#[tokio::test]
async fn fixed_windows_pass_the_conformance_suite() {
    let Some(connection) = common::connect("conformance").await else {
        return;
    };
    let config = common::config("conf-fixed");
    let time = common::ShiftTime {
        connection: connection.clone(),
        prefix: config.prefix().to_owned(),
        layout: common::Layout::FixedWindow,
    };
    let limiter = RedisLimiter::<_, FixedWindowPolicy>::new(connection, config);
    fixed_window_suite(&limiter, &time).await;
    fixed_window_lifecycle_suite(&limiter, &time).await;
    fixed_window_settle_suite(&limiter, &time).await;
    fixed_window_grant_suite(&limiter).await;
}

#[tokio::test]
async fn gcra_passes_the_conformance_suite() {
    let Some(connection) = common::connect("conformance").await else {
        return;
    };
    let config = common::config("conf-gcra");
    let time = common::ShiftTime {
        connection: connection.clone(),
        prefix: config.prefix().to_owned(),
        layout: common::Layout::Gcra,
    };
    let limiter = RedisLimiter::<_, GcraPolicy>::new(connection, config);
    gcra_suite(&limiter, &time).await;
    gcra_lifecycle_suite(&limiter, &time).await;
    gcra_settle_suite(&limiter, &time).await;
    gcra_grant_suite(&limiter).await;
    carry_drain_suite(&limiter, &time).await;
}

#[tokio::test]
async fn sliding_windows_pass_the_conformance_suite() {
    let Some(connection) = common::connect("conformance").await else {
        return;
    };
    let config = common::config("conf-sliding");
    let time = common::ShiftTime {
        connection: connection.clone(),
        prefix: config.prefix().to_owned(),
        layout: common::Layout::SlidingWindow,
    };
    let limiter = RedisLimiter::<_, SlidingWindowPolicy>::new(connection, config);
    sliding_window_suite(&limiter, &time).await;
    sliding_window_lifecycle_suite(&limiter, &time).await;
    sliding_window_settle_suite(&limiter, &time).await;
    sliding_window_grant_suite(&limiter).await;
}

/// Leased replicas in front of Redis, checking weighted costs, held to the
/// ledger of `runlimit_conformance::leased` for every algorithm: the
/// weighted case admits the whole limit, and random traces strand nothing,
/// never go over the limit, and deny only what neither the replica's lease
/// nor Redis can cover.
#[test]
fn weighted_leased_traces_strand_no_units() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(connection) = runtime.block_on(common::connect("conformance leased")) else {
        return;
    };
    let config = common::config("conf-leased");
    common::leased_suites(&runtime, connection, config, false);
}
