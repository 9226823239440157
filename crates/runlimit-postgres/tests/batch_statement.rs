//! The statement that admits a small fixed-window batch by updating its rows
//! in place: all or nothing at every size it is written for, what it takes
//! back when a row changes while it waits, and the lock order it keeps.

mod common;

use common::{key, policy};

use std::time::Duration;

use runlimit_core::{BatchDecision, Check, FixedWindowPolicy, Limiter};
use runlimit_postgres::{CheckError, PostgresConfig, PostgresLimiter};

fn limiter(pool: &sqlx::PgPool) -> PostgresLimiter<FixedWindowPolicy> {
    let config = PostgresConfig::default()
        .with_operation_timeout(Duration::from_secs(10))
        .expect("valid");
    PostgresLimiter::new(pool.clone(), config)
}

/// The stored count of `check`'s counter.
async fn used(pool: &sqlx::PgPool, check: &Check<'_, FixedWindowPolicy>) -> i64 {
    sqlx::query_scalar("SELECT used FROM runlimit_fixed_windows WHERE counter_key = $1")
        .bind(check.counter_key().to_bytes().to_vec())
        .fetch_one(pool)
        .await
        .expect("the counter's row")
}

/// Two policies of five a minute, whose counters for `key(shard, 1)` have
/// admitted one batch of both.
async fn pair_after_one_batch(
    limiter: &PostgresLimiter<FixedWindowPolicy>,
    name: &str,
    shard: u8,
) -> [FixedWindowPolicy; 2] {
    let window = Duration::from_secs(60);
    let policies = [
        policy(&format!("{name}-a"), 5, window),
        policy(&format!("{name}-b"), 5, window),
    ];
    let checks = policies
        .each_ref()
        .map(|policy| Check::new(policy, key(shard, 1)));
    let first = limiter.check_all(&checks).await.expect("first batch");
    assert!(first.is_allowed());
    policies
}

/// The batch of both `policies` for `key(shard, 1)`, sent from a task of its
/// own.
fn spawn_batch(
    limiter: &PostgresLimiter<FixedWindowPolicy>,
    policies: &[FixedWindowPolicy; 2],
    shard: u8,
) -> tokio::task::JoinHandle<Result<BatchDecision, CheckError>> {
    let (limiter, policies) = (limiter.clone(), policies.clone());
    tokio::spawn(async move {
        let checks = policies
            .each_ref()
            .map(|policy| Check::new(policy, key(shard, 1)));
        limiter.check_all(&checks).await
    })
}

/// A transaction on a connection of `pool`, and its backend's process id.
async fn transaction_with_pid(
    pool: &sqlx::PgPool,
) -> (sqlx::Transaction<'static, sqlx::Postgres>, i32) {
    let mut transaction = pool.begin().await.expect("begin");
    let pid = sqlx::query_scalar("SELECT pg_catalog.pg_backend_pid()")
        .fetch_one(&mut *transaction)
        .await
        .expect("pid");
    (transaction, pid)
}

/// The advisory-lock id the limiter takes for `check`'s counter.
fn lock_id(check: &Check<'_, FixedWindowPolicy>) -> i64 {
    let counter = check.counter_key().to_bytes();
    let mut word = [0u8; 8];
    for (index, byte) in word.iter_mut().enumerate() {
        *byte = counter[index] ^ counter[32 + index];
    }
    i64::from_be_bytes(word)
}

#[tokio::test]
async fn batches_of_every_size_are_admitted_or_denied_whole() {
    let Some(schema) = common::schema("batch_sizes").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let limiter = limiter(&pool);
    let window = Duration::from_secs(60);
    // Up to the largest in-place statement (eight) and one past it.
    for size in [2usize, 3, 5, 8, 9] {
        let policies: Vec<_> = (0..size)
            .map(|index| policy(&format!("size{size}-{index}"), 2, window))
            .collect();
        let checks: Vec<_> = policies
            .iter()
            .map(|policy| Check::new(policy, key(7, 1)))
            .collect();
        let batch = limiter.check_all(&checks).await.expect("first batch");
        assert!(batch.is_allowed(), "{size}");
        for decision in batch.decisions().expect("allowed") {
            assert_eq!(decision.remaining(), Some(1), "{size}");
        }
        // The last counter fills; the next batch is denied and counts nowhere.
        let last = checks.last().expect("checks");
        assert!(limiter.check(last).await.expect("single").is_allowed());
        let batch = limiter.check_all(&checks).await.expect("second batch");
        assert_eq!(batch.denial().map(|(index, _)| index), Some(size - 1));
        for check in &checks[..size - 1] {
            assert_eq!(used(&pool, check).await, 1, "{size}");
        }
        assert_eq!(used(&pool, last).await, 2, "{size}");
    }
}

/// A row that another transaction fills while the batch's update waits for
/// it fails its condition after the wait, after the update has added its
/// check to the other row. The statement takes that back and denies the
/// batch: the other counter ends as it began.
#[tokio::test]
async fn a_batch_takes_back_what_it_added_when_a_row_fills_while_it_waits() {
    let Some(schema) = common::schema("batch_settle").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let limiter = limiter(&pool);
    let policies = pair_after_one_batch(&limiter, "settle", 8).await;
    let checks = policies
        .each_ref()
        .map(|policy| Check::new(policy, key(8, 1)));

    let (mut other, other_pid) = transaction_with_pid(&schema.pool(1).await).await;
    sqlx::query("UPDATE runlimit_fixed_windows SET used = 5 WHERE counter_key = $1")
        .bind(checks[1].counter_key().to_bytes().to_vec())
        .execute(&mut *other)
        .await
        .expect("fill the second window");
    let waiting = spawn_batch(&limiter, &policies, 8);
    let waited = schema.wait_until_blocked_by(other_pid).await;
    other.commit().await.expect("commit");
    assert!(waited, "the batch never waited for the row");

    let batch = waiting.await.expect("task").expect("batch");
    assert_eq!(batch.denial().map(|(index, _)| index), Some(1));
    assert_eq!(used(&pool, &checks[0]).await, 1, "taken back");
    assert_eq!(used(&pool, &checks[1]).await, 5);
}

/// Every statement that locks several counters takes their advisory locks
/// before any row lock; that order is what keeps batches, refunds and the
/// general function from deadlocking. A batch waiting for an advisory lock
/// holds no row.
#[tokio::test]
async fn a_batch_takes_its_advisory_locks_before_any_row_lock() {
    let Some(schema) = common::schema("batch_order").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let limiter = limiter(&pool);
    let policies = pair_after_one_batch(&limiter, "order", 9).await;
    let checks = policies
        .each_ref()
        .map(|policy| Check::new(policy, key(9, 1)));

    let holder = schema.pool(2).await;
    let (mut other, other_pid) = transaction_with_pid(&holder).await;
    // The larger id: the batch takes the smaller one first, and waits here.
    let held = lock_id(&checks[0]).max(lock_id(&checks[1]));
    sqlx::query("SELECT pg_catalog.pg_advisory_xact_lock($1)")
        .bind(held)
        .execute(&mut *other)
        .await
        .expect("hold the advisory lock");
    let waiting = spawn_batch(&limiter, &policies, 9);
    let waited = schema.wait_until_blocked_by(other_pid).await;
    // Neither row is locked while the batch waits.
    let locked = {
        let mut third = holder.begin().await.expect("begin");
        let locked = sqlx::query_scalar::<_, i32>(
            "SELECT count(*)::integer FROM \
             (SELECT 1 FROM runlimit_fixed_windows FOR UPDATE NOWAIT) AS rows",
        )
        .fetch_one(&mut *third)
        .await;
        third.rollback().await.expect("release the rows");
        locked
    };
    other.commit().await.expect("release the advisory lock");
    assert!(waited, "the batch never waited for the advisory lock");
    assert_eq!(locked.expect("rows free while the batch waits"), 2);
    let batch = waiting.await.expect("task").expect("batch");
    assert!(batch.is_allowed());
    assert_eq!(used(&pool, &checks[0]).await, 2);
}

/// Batches naming the same two counters in either order, single checks of
/// one of them and refunds race on eight connections: none deadlocks (which
/// PostgreSQL would end with an error), and neither counter admits past
/// its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_in_either_order_and_single_checks_neither_deadlock_nor_over_admit() {
    use runlimit_core::Lifecycle;
    use std::sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    };
    let Some(schema) = common::schema("batch_race").await else {
        return;
    };
    let pool = schema.migrated_pool(8).await;
    let limiter = limiter(&pool);
    let window = Duration::from_secs(3_600);
    let (first, second) = (
        Arc::new(policy("race-a", 60, window)),
        Arc::new(policy("race-b", 60, window)),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16u64)
        .map(|task| {
            let (limiter, first, second, admitted) = (
                limiter.clone(),
                Arc::clone(&first),
                Arc::clone(&second),
                Arc::clone(&admitted),
            );
            tokio::spawn(async move {
                for round in 0..8u64 {
                    let (a, b) = (
                        Check::new(&*first, key(10, 1)),
                        Check::new(&*second, key(10, 1)),
                    );
                    match (task + round) % 4 {
                        0 => {
                            if limiter
                                .check_all(&[a, b])
                                .await
                                .expect("no error")
                                .is_allowed()
                            {
                                admitted.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        1 => {
                            if limiter
                                .check_all(&[b, a])
                                .await
                                .expect("no error")
                                .is_allowed()
                            {
                                admitted.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        2 => {
                            // Counts on the second counter only.
                            let _ = limiter.check(&b).await.expect("no error");
                        }
                        _ => {
                            // Admitted and refunded: leaves both counts as they were.
                            let pair = [a, b];
                            let (batch, receipt) = limiter
                                .admit_all(&pair)
                                .await
                                .expect("no error")
                                .into_parts();
                            if let Some(receipt) = receipt {
                                assert!(batch.is_allowed());
                                limiter.refund(&pair, receipt).await.expect("no error");
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    let pair = [
        Check::new(&*first, key(10, 1)),
        Check::new(&*second, key(10, 1)),
    ];
    let first_used = used(&pool, &pair[0]).await;
    let second_used = used(&pool, &pair[1]).await;
    assert!(second_used <= 60, "{second_used}");
    // Only batches count on the first counter (64 are sent, more than fit).
    // A refund may fail to credit (when an earlier refund moved the window),
    // never credit twice: the count is at least what the checked batches
    // admitted, and at most the limit.
    let counted = u64::try_from(first_used).expect("count");
    let batches = admitted.load(Ordering::SeqCst);
    assert!(
        batches > 0 && counted >= batches && counted <= 60,
        "{batches} {counted}"
    );
}

/// Once a reply has found a counter full, a batch naming it is denied from
/// the rows as last committed: it neither waits for a row another
/// transaction holds nor writes one.
#[tokio::test]
async fn a_batch_naming_a_counter_found_full_is_denied_without_locks_or_writes() {
    let Some(schema) = common::schema("batch_full").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    // A lock wait would end in the server's lock timeout within a second.
    let config = PostgresConfig::default()
        .with_operation_timeout(Duration::from_secs(1))
        .expect("valid");
    let limiter = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), config);
    let window = Duration::from_secs(60);
    let (room, one) = (policy("full-a", 5, window), policy("full-b", 1, window));
    let checks = [Check::new(&room, key(11, 1)), Check::new(&one, key(11, 1))];
    assert!(
        limiter
            .check_all(&checks)
            .await
            .expect("first")
            .is_allowed()
    );
    // The first denial finds the second counter full.
    let denied = limiter.check_all(&checks).await.expect("second");
    assert_eq!(denied.denial().map(|(index, _)| index), Some(1));

    let versions = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT xmin::text FROM runlimit_fixed_windows ORDER BY counter_key",
        )
        .fetch_all(&pool)
        .await
        .expect("row versions")
    };
    let before = versions().await;
    let mut other = schema.pool(1).await.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM runlimit_fixed_windows FOR UPDATE")
        .execute(&mut *other)
        .await
        .expect("lock the rows");
    let answer = limiter.check_all(&checks).await;
    // Released before asserting, so a failure cannot leave the rows locked.
    other.rollback().await.expect("release");
    let denied = answer.expect("denied, not blocked");
    let (index, denial) = denied.denial().expect("denied");
    assert_eq!(index, 1);
    let retry = denial.retry_after().expect("quota denial");
    assert!(
        retry <= window && retry > window - Duration::from_secs(5),
        "{retry:?}"
    );
    assert_eq!(versions().await, before, "the denial wrote nothing");
    assert_eq!(used(&pool, &checks[0]).await, 1);
}
