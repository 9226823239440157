//! The statement that admits a single fixed-window check by updating its row
//! in place: the window a check anchors over an expired one, and the clock a
//! check decides on after waiting for the row.

mod common;

use common::{ShiftTime, key, policy};

use std::time::Duration;

use runlimit_core::{Check, Limiter};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};

fn config() -> PostgresConfig {
    PostgresConfig::default()
        .with_operation_timeout(Duration::from_secs(10))
        .expect("valid")
}

/// The one stored window's count, and whether it runs for more than `left`.
async fn stored_window(pool: &sqlx::PgPool, left: Duration) -> (i64, bool) {
    sqlx::query_as(
        "SELECT used, \
         window_expires_at > pg_catalog.clock_timestamp() + $1 * interval '1 microsecond' \
         FROM runlimit_fixed_windows",
    )
    .bind(i64::try_from(left.as_micros()).expect("small"))
    .fetch_one(pool)
    .await
    .expect("the stored window")
}

#[tokio::test]
async fn a_check_over_an_expired_window_anchors_a_whole_new_one() {
    let Some(schema) = common::schema("single_anchor").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let limiter = PostgresLimiter::<runlimit_core::FixedWindowPolicy>::new(pool.clone(), config());
    let window = Duration::from_secs(60);
    let policy = policy("anchor", 3, window);
    let check = Check::new(&policy, key(3, 1));
    for remaining in [2, 1] {
        let decision = limiter.check(&check).await.expect("check");
        assert_eq!(decision.remaining(), Some(remaining));
    }
    // The window ended a moment ago: the row is there, its count is not.
    ShiftTime { schema: &schema }.advance_now(window).await;
    let decision = limiter.check(&check).await.expect("check");
    assert_eq!(decision.remaining(), Some(2), "a new window, counting one");
    // Anchored at the clock sample the reply carries: the whole window left.
    assert_eq!(decision.reset_after(), Some(window));
    assert_eq!(
        stored_window(&pool, Duration::from_secs(59)).await,
        (1, true)
    );
}

/// A check that waits for its row while another transaction forgets the
/// window (as a refund of its last units does, expiring it at that
/// transaction's time) must decide on a clock read after the wait: it then
/// finds the window expired and anchors a new one. Deciding on a time read
/// before the wait would count the check in the forgotten window, whose end
/// lies before it, so the next window would open early.
#[tokio::test]
async fn a_check_that_waited_for_its_row_decides_on_the_clock_after_the_wait() {
    let Some(schema) = common::schema("single_wait").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let limiter = PostgresLimiter::<runlimit_core::FixedWindowPolicy>::new(pool.clone(), config());
    let window = Duration::from_secs(60);
    let policy = policy("wait", 5, window);
    let check = Check::new(&policy, key(4, 1));
    assert_eq!(
        limiter
            .check(&check)
            .await
            .expect("first check")
            .remaining(),
        Some(4)
    );

    let mut other = schema.pool(1).await.begin().await.expect("begin");
    let other_pid: i32 = sqlx::query_scalar("SELECT pg_catalog.pg_backend_pid()")
        .fetch_one(&mut *other)
        .await
        .expect("pid");
    sqlx::query("SELECT 1 FROM runlimit_fixed_windows FOR UPDATE")
        .execute(&mut *other)
        .await
        .expect("lock the row");
    let waiting = tokio::spawn({
        let limiter = limiter.clone();
        let policy = policy.clone();
        async move { limiter.check(&Check::new(&policy, key(4, 1))).await }
    });
    // Until the check waits for the row, so it has read the clock once
    // before the window is forgotten.
    let waited = schema.wait_until_blocked_by(other_pid).await;
    sqlx::query(
        "UPDATE runlimit_fixed_windows \
         SET used = 0, window_expires_at = pg_catalog.clock_timestamp()",
    )
    .execute(&mut *other)
    .await
    .expect("forget the window");
    other.commit().await.expect("commit");
    assert!(waited, "the check never waited for the row");

    let decision = waiting.await.expect("task").expect("check");
    assert_eq!(decision.remaining(), Some(4), "counted in a new window");
    let reset = decision.reset_after().expect("allowed");
    assert!(reset > window - Duration::from_secs(5), "{reset:?}");
    // Stored as a new window that runs a whole window from the check, not
    // as the forgotten one that had already ended.
    assert_eq!(
        stored_window(&pool, Duration::from_secs(55)).await,
        (1, true)
    );
}

/// A full window denies from the row as last committed: the denial needs
/// no lock, so it is answered while another transaction holds the row, and
/// writes nothing.
#[tokio::test]
async fn a_full_window_denies_without_waiting_for_the_row() {
    let Some(schema) = common::schema("single_deny").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    // A lock wait would end in the server's lock timeout within a second.
    let config = PostgresConfig::default()
        .with_operation_timeout(Duration::from_secs(1))
        .expect("valid");
    let limiter = PostgresLimiter::<runlimit_core::FixedWindowPolicy>::new(pool.clone(), config);
    let window = Duration::from_secs(60);
    let policy = policy("deny", 1, window);
    let check = Check::new(&policy, key(5, 1));
    assert!(limiter.check(&check).await.expect("first").is_allowed());

    let mut other = schema.pool(1).await.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM runlimit_fixed_windows FOR UPDATE")
        .execute(&mut *other)
        .await
        .expect("lock the row");
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(limiter.check(&check).await);
    }
    // Released before asserting: a failed assertion must not leave the
    // schema locked for its cleanup.
    other.rollback().await.expect("release");
    for answer in answers {
        let denied = answer.expect("denied, not blocked");
        assert!(denied.is_denied());
        let retry = denied.retry_after().expect("quota denial");
        assert!(
            retry <= window && retry > window - Duration::from_secs(5),
            "{retry:?}"
        );
    }
    let used: i64 = sqlx::query_scalar("SELECT used FROM runlimit_fixed_windows")
        .fetch_one(&pool)
        .await
        .expect("row");
    assert_eq!(used, 1, "denials wrote nothing");
}
