//! The shared behaviour suite against a real Redis server.

mod common;

use runlimit_conformance::{
    fixed_window_lifecycle_suite, fixed_window_suite, gcra_lifecycle_suite, gcra_suite,
};
use runlimit_core::{FixedWindowPolicy, GcraPolicy};
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
        gcra: false,
    };
    let limiter = RedisLimiter::<_, FixedWindowPolicy>::new(connection, config);
    fixed_window_suite(&limiter, &time).await;
    fixed_window_lifecycle_suite(&limiter, &time).await;
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
        gcra: true,
    };
    let limiter = RedisLimiter::<_, GcraPolicy>::new(connection, config);
    gcra_suite(&limiter, &time).await;
    gcra_lifecycle_suite(&limiter, &time).await;
}
