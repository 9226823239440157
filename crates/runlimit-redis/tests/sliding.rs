//! Sliding windows on Redis against the exact sliding log, and the expiry
//! that lets Redis forget a counter once nothing in its window remains.
//!
//! Windows are eight hours long: time moves only by whole hours (eighths)
//! shifted into the stored state, and no test runs long enough for Redis's
//! own clock to cross more than one eighth boundary, which the guarantee and
//! the bound both tolerate.

mod common;

use std::time::Duration;

use common::{Layout, ShiftTime};
use proptest::{prelude::*, test_runner::TestRunner};
use runlimit_conformance::{
    sliding_log::{policies, run_trace, trace},
    sliding_window, subject,
};
use runlimit_core::{Check, Lifecycle, Limiter, SlidingWindowPolicy};
use runlimit_redis::RedisLimiter;

const HOUR: Duration = Duration::from_secs(3_600);

#[test]
fn traces_never_exceed_the_limit_and_deny_at_most_an_eighth_early() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(connection) = runtime.block_on(common::connect("sliding trace")) else {
        return;
    };
    let config = common::config("sliding-trace");
    let time = ShiftTime {
        connection: connection.clone(),
        prefix: config.prefix().to_owned(),
        layout: Layout::SlidingWindow,
    };
    let limiter = RedisLimiter::<_, SlidingWindowPolicy>::new(connection, config);
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

#[tokio::test]
async fn redis_forgets_a_counter_once_nothing_in_its_window_remains() {
    let Some(mut connection) = common::connect("sliding expiry").await else {
        return;
    };
    let config = common::config("sliding-expiry");
    let prefix = config.prefix().to_owned();
    let limiter = RedisLimiter::<_, SlidingWindowPolicy>::new(connection.clone(), config);
    let window = Duration::from_secs(80);
    let policy = sliding_window("expiry", 3, window);
    let check = Check::new(&policy, subject(1));
    let keys = async |connection: &mut redis::aio::ConnectionManager| {
        redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query_async::<Vec<String>>(connection)
            .await
            .expect("keys")
    };
    assert_eq!(
        limiter.peek(&check).await.expect("peek").remaining(),
        Some(3)
    );
    assert!(
        keys(&mut connection).await.is_empty(),
        "a peek stores nothing"
    );
    let admitted = limiter.check(&check).await.expect("check");
    let stored = keys(&mut connection).await;
    assert_eq!(stored.len(), 1);
    // The key lives exactly as long as the admission counts: until the ninth
    // eighth after its own begins, which the decision reports as reset_after.
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&stored[0])
        .query_async(&mut connection)
        .await
        .expect("pttl");
    let reset_after = admitted.reset_after().expect("allowed");
    let ttl = Duration::from_millis(u64::try_from(ttl).expect("an expiry"));
    assert!(
        ttl > window && ttl <= window + window / 8 + Duration::from_millis(2),
        "expires in {ttl:?}"
    );
    assert!(
        ttl.abs_diff(reset_after) <= Duration::from_millis(250),
        "expires in {ttl:?}, reported {reset_after:?}"
    );
    assert!(limiter.reset(&policy, &subject(1)).await.expect("reset"));
    assert!(
        keys(&mut connection).await.is_empty(),
        "a reset deletes the key"
    );
}
