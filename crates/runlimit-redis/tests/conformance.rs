//! The shared behaviour suite against a real Redis server.

mod common;

use runlimit_conformance::{
    fixed_window_grant_suite, fixed_window_lifecycle_suite, fixed_window_settle_suite,
    fixed_window_suite, gcra_grant_suite, gcra_lifecycle_suite, gcra_settle_suite, gcra_suite,
    sliding_window_grant_suite, sliding_window_lifecycle_suite, sliding_window_settle_suite,
    sliding_window_suite,
};
use runlimit_core::{FixedWindowPolicy, GcraPolicy, SlidingWindowPolicy};
use runlimit_redis::RedisLimiter;

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
