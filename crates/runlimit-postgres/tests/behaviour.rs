//! Migrations, time authority, round trips, contention, failures, capacity and
//! cleanup against a real PostgreSQL server.

mod common;

use common::{key, policy};

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use runlimit_core::{
    Check, Denial, FixedWindowPolicy, GcraPolicy, Lifecycle, Limiter, PolicyId, ScopeId,
    SlidingWindowPolicy,
};
use runlimit_postgres::{CheckError, MIGRATOR, PostgresConfig, PostgresLimiter};
use sqlx::Executor;

fn fast_config() -> PostgresConfig {
    PostgresConfig::default()
        .with_pool_acquire_timeout(Duration::from_millis(200))
        .and_then(|c| c.with_operation_timeout(Duration::from_millis(500)))
        .expect("valid")
}

#[tokio::test]
async fn migrations_coexist_with_host_migrations_and_rerun_idempotently() {
    let Some(schema) = common::schema("migrations").await else {
        return;
    };
    let pool = schema.pool(2).await;
    let host_dir = std::env::temp_dir().join(format!("runlimit-host-migrations-{}", schema.name));
    std::fs::create_dir_all(&host_dir).expect("temp dir");
    std::fs::write(
        host_dir.join("20250101000000_host_accounts.sql"),
        "CREATE TABLE host_accounts (id bigint PRIMARY KEY);",
    )
    .expect("write host migration");
    let mut host = sqlx::migrate::Migrator::new(host_dir.as_path())
        .await
        .expect("host migrator");
    host.set_ignore_missing(true);

    host.run(&pool).await.expect("host first");
    runlimit_postgres::migrate(&pool)
        .await
        .expect("runlimit after host");
    host.run(&pool).await.expect("host again");
    runlimit_postgres::migrate(&pool)
        .await
        .expect("runlimit again is a no-op");
    let versions: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&pool)
        .await
        .expect("history");
    assert_eq!(
        versions,
        i64::try_from(MIGRATOR.iter().count()).expect("small") + 1
    );
    // The strict raw migrator refuses a history it does not own entirely.
    assert!(MIGRATOR.run(&pool).await.is_err());
    std::fs::remove_dir_all(&host_dir).ok();
}

#[tokio::test]
async fn the_vendored_schema_applied_in_order_serves_every_algorithm() {
    let Some(schema) = common::schema("vendored").await else {
        return;
    };
    let pool = schema.pool(1).await;
    // As a host's own migrator would: each statement set in its own
    // transaction, in the slice's order, with no `_sqlx_migrations` of ours.
    for migration in runlimit_postgres::SCHEMA {
        let mut transaction = pool.begin().await.expect("begin");
        sqlx::raw_sql(migration.sql)
            .execute(&mut *transaction)
            .await
            .expect("vendored migration");
        transaction.commit().await.expect("commit");
    }
    let recorded: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&pool)
        .await
        .expect("catalog");
    assert!(!recorded);
    let window = policy("vendored", 2, Duration::from_secs(60));
    let fixed = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), fast_config());
    let check = Check::new(&window, key(9, 1));
    assert_eq!(
        fixed.check(&check).await.expect("check").remaining(),
        Some(1)
    );
    assert_eq!(
        fixed.check(&check).await.expect("check").remaining(),
        Some(0)
    );
    assert!(fixed.check(&check).await.expect("check").is_denied());
    let gcra_policy = GcraPolicy::new(
        PolicyId::new("vendored").expect("valid"),
        ScopeId::new("gcra").expect("valid"),
        1,
        Duration::from_secs(60),
        1,
    )
    .expect("valid");
    let gcra = PostgresLimiter::<GcraPolicy>::new(pool.clone(), fast_config());
    let check = Check::new(&gcra_policy, key(9, 2));
    assert!(gcra.check(&check).await.expect("check").is_allowed());
    assert!(gcra.check(&check).await.expect("check").is_denied());
    let sliding_policy = SlidingWindowPolicy::new(
        PolicyId::new("vendored").expect("valid"),
        ScopeId::new("sliding").expect("valid"),
        1,
        Duration::from_secs(60),
    )
    .expect("valid");
    let sliding = PostgresLimiter::<SlidingWindowPolicy>::new(pool.clone(), fast_config());
    let check = Check::new(&sliding_policy, key(9, 3));
    assert!(sliding.check(&check).await.expect("check").is_allowed());
    assert!(sliding.check(&check).await.expect("check").is_denied());
}

#[tokio::test]
async fn a_hostile_clock_on_the_search_path_has_no_effect() {
    let Some(schema) = common::schema("hostile").await else {
        return;
    };
    let hostile = format!("{}_hostile", schema.name);
    schema
        .admin()
        .execute(
            format!(
                "CREATE SCHEMA {hostile}; \
                 CREATE FUNCTION {hostile}.clock_timestamp() RETURNS timestamptz \
                 LANGUAGE sql AS $$ SELECT timestamptz '2000-01-01 00:00:00+00' $$; \
                 CREATE FUNCTION {hostile}.now() RETURNS timestamptz \
                 LANGUAGE sql AS $$ SELECT timestamptz '2000-01-01 00:00:00+00' $$;"
            )
            .as_str(),
        )
        .await
        .expect("hostile schema");
    let migrated = schema.pool(1).await;
    runlimit_postgres::migrate(&migrated)
        .await
        .expect("migrate");
    // pg_catalog named after the hostile schema: left out, it would be
    // searched first and no function could stand in for the clock at all.
    let pool = schema
        .pool_with_path(2, &format!("{hostile}, pg_catalog, {}", schema.name))
        .await;
    let limiter = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), fast_config());
    let window = Duration::from_secs(60);
    let policy = policy("hostile", 2, window);
    let decision = limiter
        .check(&Check::new(&policy, key(1, 1)))
        .await
        .expect("check");
    let reset = decision.reset_after().expect("allowed");
    assert!(
        reset <= window && reset > window - Duration::from_secs(5),
        "{reset:?}"
    );
    // The second is admitted by updating the row in place, on the real clock
    // too: a clock of 2000 would leave the window decades to run.
    let decision = limiter
        .check(&Check::new(&policy, key(1, 1)))
        .await
        .expect("check");
    assert_eq!(decision.remaining(), Some(0));
    let reset = decision.reset_after().expect("allowed");
    assert!(
        reset <= window && reset > window - Duration::from_secs(5),
        "{reset:?}"
    );
    let stored_in_the_future: bool = sqlx::query_scalar(
        "SELECT bool_and(window_expires_at > pg_catalog.clock_timestamp()) FROM runlimit_fixed_windows",
    )
    .fetch_one(&migrated)
    .await
    .expect("query");
    assert!(
        stored_in_the_future,
        "the window was anchored on the real clock"
    );
    // The third check finds the window full and is denied from the row as
    // last committed, on the real clock too: a clock of 2000 would put the
    // retry decades away.
    let denied = limiter
        .check(&Check::new(&policy, key(1, 1)))
        .await
        .expect("check");
    let retry = denied.retry_after().expect("denied");
    assert!(retry <= window, "{retry:?}");

    // GCRA and sliding windows too: the first check stores its state on the
    // real clock, the second is decided under the row's lock on the real
    // clock (a clock of 2000 would put the stored state decades ahead).
    let one_a_minute = GcraPolicy::new(
        PolicyId::new("hostile").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        window,
        1,
    )
    .expect("valid");
    let retry = second_of_two_checks(&pool, &one_a_minute).await;
    assert!(retry <= window, "{retry:?}");
    let stored_on_the_real_clock: bool = sqlx::query_scalar(
        "SELECT bool_and(expires_at > pg_catalog.clock_timestamp() \
         AND expires_at <= pg_catalog.clock_timestamp() + interval '61 seconds') FROM runlimit_gcra",
    )
    .fetch_one(&migrated)
    .await
    .expect("query");
    assert!(stored_on_the_real_clock);
    let one_a_minute = SlidingWindowPolicy::new(
        PolicyId::new("hostile").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        window,
    )
    .expect("valid");
    // A sliding window frees a unit at most an eighth late.
    let retry = second_of_two_checks(&pool, &one_a_minute).await;
    assert!(retry <= window + window / 8, "{retry:?}");
    schema
        .admin()
        .execute(format!("DROP SCHEMA {hostile} CASCADE").as_str())
        .await
        .ok();
}

/// Two checks of one key under `policy`, which admits one: the first is
/// allowed, and the second's retry (it must be denied) is returned.
async fn second_of_two_checks<P>(pool: &sqlx::PgPool, policy: &P) -> Duration
where
    P: runlimit_postgres::PgPolicy,
    PostgresLimiter<P>: Limiter<Policy = P, Error = CheckError>,
{
    let limiter = PostgresLimiter::<P>::new(pool.clone(), fast_config());
    let first = limiter
        .check(&Check::new(policy, key(1, 1)))
        .await
        .expect("check");
    assert!(first.is_allowed());
    let second = limiter
        .check(&Check::new(policy, key(1, 1)))
        .await
        .expect("check");
    second.retry_after().expect("denied")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_pools_and_sixty_four_tasks_admit_exactly_the_limit() {
    let Some(schema) = common::schema("contention").await else {
        return;
    };
    schema.migrated_pool(1).await;
    let policy = Arc::new(policy("contended", 100, Duration::from_secs(3_600)));
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let limiter = Arc::new(PostgresLimiter::<FixedWindowPolicy>::new(
            schema.pool(4).await,
            PostgresConfig::default()
                .with_operation_timeout(Duration::from_secs(10))
                .and_then(|c| c.with_pool_acquire_timeout(Duration::from_secs(10)))
                .expect("valid"),
        ));
        for _ in 0..16 {
            let (limiter, policy, admitted) = (
                Arc::clone(&limiter),
                Arc::clone(&policy),
                Arc::clone(&admitted),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..4 {
                    let decision = limiter
                        .check(&Check::new(&*policy, key(9, 9)))
                        .await
                        .expect("no error");
                    if decision.is_allowed() {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 100);
}

/// The same contention with a lease per pool: every task checks until it is
/// denied, so every lease is spent, and exactly the limit is admitted
/// across the four replicas, most of it without a round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_leased_pools_admit_exactly_the_limit() {
    let Some(schema) = common::schema("leased_contention").await else {
        return;
    };
    schema.migrated_pool(1).await;
    let policy = Arc::new(policy("leased", 100, Duration::from_secs(3_600)));
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut replicas = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let shared = PostgresLimiter::<FixedWindowPolicy>::new(
            schema.pool(4).await,
            PostgresConfig::default()
                .with_operation_timeout(Duration::from_secs(10))
                .and_then(|c| c.with_pool_acquire_timeout(Duration::from_secs(10)))
                .expect("valid"),
        );
        let config = runlimit_memory::LeaseConfig::new(64)
            .and_then(|config| config.with_max_grant(16))
            .and_then(|config| config.with_remaining_share(100))
            .expect("valid");
        let limiter = Arc::new(runlimit_memory::Leased::new(shared, config));
        replicas.push(Arc::clone(&limiter));
        for _ in 0..16 {
            let (limiter, policy, admitted) = (
                Arc::clone(&limiter),
                Arc::clone(&policy),
                Arc::clone(&admitted),
            );
            tasks.push(tokio::spawn(async move {
                while limiter
                    .check(&Check::new(&*policy, key(9, 8)))
                    .await
                    .expect("no error")
                    .is_allowed()
                {
                    admitted.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 100);
    let grants: u64 = replicas.iter().map(|replica| replica.stats().grants).sum();
    assert!(grants < 100, "{grants} grants for 100 admissions");
    for replica in &replicas {
        assert_eq!(replica.stats().units_held, 0);
    }
}

/// Single checks of an existing row take only its row lock; batches and new
/// counters take advisory locks first. Mixed on one key from four pools, they
/// neither deadlock nor admit past the limit, and resets racing them (which
/// delete the row under a single check waiting for it) end in clean answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_checks_batches_and_resets_of_one_key_interleave_cleanly() {
    let Some(schema) = common::schema("mixed_paths").await else {
        return;
    };
    let shared = policy("shared", 100, Duration::from_secs(3_600));
    let other = policy("other", 10_000, Duration::from_secs(3_600));
    interleave_single_checks_batches_and_resets(&schema, shared, other, 100).await;
}

/// The same for GCRA: a burst of 100 replenishing one unit a day, so the test
/// admits exactly the burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_gcra_checks_batches_and_resets_of_one_key_interleave_cleanly() {
    let Some(schema) = common::schema("mixed_gcra_paths").await else {
        return;
    };
    let daily = |name: &str, quota: u64, burst: u64| {
        GcraPolicy::new(
            PolicyId::new(name).expect("valid"),
            ScopeId::new("client").expect("valid"),
            quota,
            Duration::from_secs(86_400),
            burst,
        )
        .expect("valid")
    };
    let (shared, other) = (daily("shared", 1, 100), daily("other", 10_000, 10_000));
    interleave_single_checks_batches_and_resets(&schema, shared, other, 100).await;
}

/// The same for sliding windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_sliding_checks_batches_and_resets_of_one_key_interleave_cleanly() {
    let Some(schema) = common::schema("mixed_sliding_paths").await else {
        return;
    };
    let hourly = |name: &str, limit: u64| {
        SlidingWindowPolicy::new(
            PolicyId::new(name).expect("valid"),
            ScopeId::new("client").expect("valid"),
            limit,
            Duration::from_secs(3_600),
        )
        .expect("valid")
    };
    let (shared, other) = (hourly("shared", 100), hourly("other", 10_000));
    interleave_single_checks_batches_and_resets(&schema, shared, other, 100).await;
}

/// From four pools, eight tasks each run eight admissions of one key of
/// `shared`: alone, or in a batch with a key of `other` (which never denies).
/// Exactly `limit` are admitted. Then resets of the key race single checks
/// of it, and every one ends without an error.
async fn interleave_single_checks_batches_and_resets<P>(
    schema: &common::TestSchema,
    shared: P,
    other: P,
    limit: usize,
) where
    P: runlimit_postgres::PgPolicy + Send + Sync + 'static,
    PostgresLimiter<P>: runlimit_core::Lifecycle<Policy = P, Error = CheckError>,
{
    use runlimit_core::Lifecycle;
    schema.migrated_pool(1).await;
    let (shared, other) = (Arc::new(shared), Arc::new(other));
    let limiters: Vec<Arc<PostgresLimiter<P>>> = limiters_on_four_pools(schema).await;
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (index, limiter) in limiters.iter().enumerate() {
        for task in 0..8u8 {
            let (limiter, shared, other, admitted) = (
                Arc::clone(limiter),
                Arc::clone(&shared),
                Arc::clone(&other),
                Arc::clone(&admitted),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..8 {
                    let single = Check::new(&*shared, key(9, 9));
                    let allowed = if (index + usize::from(task)) % 2 == 0 {
                        limiter.check(&single).await.expect("no error").is_allowed()
                    } else {
                        let batch = [Check::new(&*other, key(1, task)), single];
                        let outcome = limiter.check_all(&batch).await.expect("no error");
                        outcome.is_allowed()
                    };
                    if allowed {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(admitted.load(Ordering::SeqCst), limit);

    let mut tasks = Vec::new();
    for limiter in &limiters {
        for task in 0..4 {
            let (limiter, shared) = (Arc::clone(limiter), Arc::clone(&shared));
            tasks.push(tokio::spawn(async move {
                for _ in 0..8 {
                    if task == 0 {
                        limiter.reset(&shared, &key(9, 9)).await.expect("no error");
                    } else {
                        limiter
                            .check(&Check::new(&*shared, key(9, 9)))
                            .await
                            .expect("no error");
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
}

/// Four limiters on pools of their own.
async fn limiters_on_four_pools<P: runlimit_postgres::PgPolicy>(
    schema: &common::TestSchema,
) -> Vec<Arc<PostgresLimiter<P>>> {
    let mut limiters = Vec::new();
    for _ in 0..4 {
        limiters.push(Arc::new(PostgresLimiter::<P>::new(
            schema.pool(4).await,
            PostgresConfig::default()
                .with_operation_timeout(Duration::from_secs(10))
                .and_then(|c| c.with_pool_acquire_timeout(Duration::from_secs(10)))
                .expect("valid"),
        )));
    }
    limiters
}

#[tokio::test]
async fn a_check_blocked_on_a_row_lock_ends_with_the_servers_definite_answer() {
    let Some(schema) = common::schema("locktimeout").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let limiter = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), fast_config());
    let policy = policy("locked", 5, Duration::from_secs(60));
    let check = Check::new(&policy, key(6, 6));
    assert_eq!(
        limiter.check(&check).await.expect("first").remaining(),
        Some(4)
    );

    let mut outsider = schema.pool(1).await.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM runlimit_fixed_windows FOR UPDATE")
        .execute(&mut *outsider)
        .await
        .expect("lock rows");
    // The server's lock timeout keeps a margin from the client's deadline, so
    // every blocked check ends with the server's lock-timeout error (nothing
    // consumed), never with the client's uncertain operation timeout.
    for attempt in 0..3 {
        let error = limiter
            .check(&check)
            .await
            .expect_err("blocked past the lock timeout");
        let CheckError::Database(sqlx::Error::Database(database)) = &error else {
            panic!("attempt {attempt}: expected the server's lock timeout, got {error:?}");
        };
        assert_eq!(
            database.code().as_deref(),
            Some("55P03"),
            "lock_not_available"
        );
        assert!(!error.may_have_consumed_quota());
    }
    outsider.rollback().await.expect("release");
    // Definitely not consumed: the counter is where it was.
    assert_eq!(
        limiter.check(&check).await.expect("after").remaining(),
        Some(3)
    );
}

#[tokio::test]
async fn truncating_a_counter_table_frees_its_capacity() {
    let Some(schema) = common::schema("truncate").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let config = fast_config().with_max_rows_per_shard(1).expect("valid");
    let fixed = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), config);
    let gcra = PostgresLimiter::<GcraPolicy>::new(pool.clone(), config);
    let window = policy("truncated", 5, Duration::from_secs(3_600));
    let rate = GcraPolicy::new(
        PolicyId::new("truncated").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(3_600),
        5,
    )
    .expect("valid");
    // One key fills shard 7 of each table; a second key in the shard is refused.
    assert!(
        fixed
            .check(&Check::new(&window, key(7, 1)))
            .await
            .expect("ok")
            .is_allowed()
    );
    assert!(
        gcra.check(&Check::new(&rate, key(7, 1)))
            .await
            .expect("ok")
            .is_allowed()
    );
    let full = Some(&Denial::StorageCapacity { retry_after: None });
    assert_eq!(
        fixed
            .check(&Check::new(&window, key(7, 2)))
            .await
            .expect("ok")
            .denial(),
        full
    );
    assert_eq!(
        gcra.check(&Check::new(&rate, key(7, 2)))
            .await
            .expect("ok")
            .denial(),
        full
    );

    schema
        .execute("TRUNCATE runlimit_fixed_windows; TRUNCATE runlimit_gcra;")
        .await;
    let ledger: i64 = sqlx::query_scalar("SELECT sum(used) FROM runlimit_capacity_ledger")
        .fetch_one(&pool)
        .await
        .expect("ledger");
    assert_eq!(ledger, 0, "TRUNCATE empties the ledger with the tables");
    // The shard has room again: the refused key now fits, and the ledger
    // counts it, so the shard is full once more.
    assert!(
        fixed
            .check(&Check::new(&window, key(7, 2)))
            .await
            .expect("ok")
            .is_allowed()
    );
    assert!(
        gcra.check(&Check::new(&rate, key(7, 2)))
            .await
            .expect("ok")
            .is_allowed()
    );
    assert_eq!(
        fixed
            .check(&Check::new(&window, key(7, 1)))
            .await
            .expect("ok")
            .denial(),
        full
    );
    assert_eq!(
        gcra.check(&Check::new(&rate, key(7, 1)))
            .await
            .expect("ok")
            .denial(),
        full
    );
}

/// Whether a statement failed on a check constraint (SQLSTATE 23514).
fn refused_by_a_check<T>(result: Result<T, sqlx::Error>) -> bool {
    match result {
        Err(sqlx::Error::Database(error)) => error.code().as_deref() == Some("23514"),
        _ => false,
    }
}

#[tokio::test]
async fn the_counter_tables_refuse_malformed_rows() {
    let Some(schema) = common::schema("malformed_rows").await else {
        return;
    };
    let pool = schema.migrated_pool(1).await;
    let key = |length: usize| vec![7u8; length];
    let execute = |sql: &'static str, counter_key: Vec<u8>, value: i64| {
        let pool = pool.clone();
        async move {
            sqlx::query(sql)
                .bind(counter_key)
                .bind(value)
                .execute(&pool)
                .await
        }
    };

    let fixed = "INSERT INTO runlimit_fixed_windows (counter_key, used, window_expires_at) \
                 VALUES ($1, $2, now() + interval '1 hour')";
    let gcra = "INSERT INTO runlimit_gcra (counter_key, tat_us, tat_rem, expires_at) \
                VALUES ($1, 0, $2, now() + interval '1 hour')";
    let sliding = "INSERT INTO runlimit_sliding_windows (counter_key, counts, version, expires_at) \
                   VALUES ($1, pg_catalog.array_fill(0::bigint, ARRAY[$2::integer]), 0, \
                   now() + interval '1 hour')";
    // A key of any length but 64 bytes, a negative count or remainder, and
    // sliding counts of any number but nine are refused.
    assert!(refused_by_a_check(execute(fixed, key(63), 0).await));
    assert!(refused_by_a_check(execute(fixed, key(64), -1).await));
    assert!(refused_by_a_check(execute(gcra, key(65), 0).await));
    assert!(refused_by_a_check(execute(gcra, key(64), -1).await));
    assert!(refused_by_a_check(execute(sliding, key(32), 9).await));
    assert!(refused_by_a_check(execute(sliding, key(64), 8).await));
    execute(fixed, key(64), 0).await.expect("a well-formed row");
    execute(gcra, key(64), 0).await.expect("a well-formed row");
    execute(sliding, key(64), 9)
        .await
        .expect("a well-formed row");

    // An update that would take a count below zero is refused and changes
    // nothing; so is one that would store eight sliding counts.
    assert!(refused_by_a_check(
        sqlx::query("UPDATE runlimit_fixed_windows SET used = used - 1")
            .execute(&pool)
            .await
    ));
    assert!(refused_by_a_check(
        sqlx::query("UPDATE runlimit_gcra SET tat_rem = tat_rem - 1")
            .execute(&pool)
            .await
    ));
    assert!(refused_by_a_check(
        sqlx::query("UPDATE runlimit_sliding_windows SET counts = counts[1:8]")
            .execute(&pool)
            .await
    ));
    let stored: (i64, i64, i32) = sqlx::query_as(
        "SELECT (SELECT used FROM runlimit_fixed_windows), \
         (SELECT tat_rem FROM runlimit_gcra), \
         (SELECT pg_catalog.cardinality(counts) FROM runlimit_sliding_windows)",
    )
    .fetch_one(&pool)
    .await
    .expect("rows");
    assert_eq!(stored, (0, 0, 9));
}

#[tokio::test]
async fn an_exhausted_pool_triggers_the_acquire_timeout() {
    let Some(schema) = common::schema("pooltimeout").await else {
        return;
    };
    let pool = schema.migrated_pool(1).await;
    let limiter = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), fast_config());
    let held = pool.acquire().await.expect("hold the only connection");
    let policy = policy("starved", 5, Duration::from_secs(60));
    let error = limiter
        .check(&Check::new(&policy, key(7, 7)))
        .await
        .expect_err("starved");
    assert!(matches!(error, CheckError::PoolTimeout), "{error:?}");
    assert!(!error.may_have_consumed_quota());
    drop(held);
    assert_eq!(
        limiter
            .check(&Check::new(&policy, key(7, 7)))
            .await
            .expect("ok")
            .remaining(),
        Some(4)
    );
}

#[tokio::test]
async fn full_capacity_shards_deny_new_keys_only() {
    let Some(schema) = common::schema("capacity").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let limiter = PostgresLimiter::<FixedWindowPolicy>::new(
        pool.clone(),
        fast_config().with_max_rows_per_shard(2).expect("valid"),
    );
    let policy = policy("capped", 5, Duration::from_secs(60));
    for n in 0..2 {
        assert!(
            limiter
                .check(&Check::new(&policy, key(40, n)))
                .await
                .expect("fits")
                .is_allowed()
        );
    }
    let denied = limiter
        .check(&Check::new(&policy, key(40, 9)))
        .await
        .expect("decided");
    assert_eq!(
        denied.denial(),
        Some(&Denial::StorageCapacity { retry_after: None })
    );
    // Another shard still has room, and existing keys keep working.
    assert!(
        limiter
            .check(&Check::new(&policy, key(41, 9)))
            .await
            .expect("ok")
            .is_allowed()
    );
    assert_eq!(
        limiter
            .check(&Check::new(&policy, key(40, 0)))
            .await
            .expect("ok")
            .remaining(),
        Some(3)
    );
    // A batch needing one new slot too many is denied whole.
    let batch = [
        Check::new(&policy, key(41, 1)),
        Check::new(&policy, key(41, 2)),
    ];
    assert!(
        limiter
            .check_all(&batch)
            .await
            .expect("decided")
            .would_deny()
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM runlimit_fixed_windows")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(rows, 3);

    // The database refuses to exceed 65,536 rows per shard whatever the writer.
    schema
        .execute("UPDATE runlimit_capacity_ledger SET used = 65536 WHERE counter_table = 'fixed_windows' AND shard = 50")
        .await;
    let foreign = sqlx::query(
        "INSERT INTO runlimit_fixed_windows (counter_key, used, window_expires_at) \
         VALUES (decode(repeat('00', 32) || '32' || repeat('00', 31), 'hex'), 1, now())",
    )
    .execute(&pool)
    .await;
    assert!(
        foreign.is_err(),
        "the ledger's CHECK refuses the 65,537th row"
    );
}

#[tokio::test]
async fn gcra_counters_share_the_capacity_rules() {
    let Some(schema) = common::schema("gcra_capacity").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let limiter = PostgresLimiter::<GcraPolicy>::new(
        pool.clone(),
        fast_config().with_max_rows_per_shard(1).expect("valid"),
    );
    let policy = GcraPolicy::new(
        PolicyId::new("capped").expect("valid"),
        ScopeId::new("client").expect("valid"),
        5,
        Duration::from_secs(60),
        5,
    )
    .expect("valid");
    // A batch of two new keys in one shard with room for one: the first key in
    // the batch takes the room, the second is refused, and nothing is written.
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
    let decisions = [
        limiter.check(&batch[0]).await.expect("fits"),
        limiter.check(&batch[1]).await.expect("decided"),
        limiter.check(&batch[0]).await.expect("existing"),
    ];
    assert!(decisions[0].is_allowed());
    assert_eq!(
        decisions[1].denial(),
        Some(&Denial::StorageCapacity { retry_after: None })
    );
    assert_eq!(decisions[2].remaining(), Some(3));
}

#[tokio::test]
async fn cleanup_removes_at_most_the_requested_expired_rows() {
    let Some(schema) = common::schema("cleanup").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let limiter = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), fast_config());
    let short = policy("short", 5, Duration::from_secs(60));
    // Five capacity shards, one key each.
    for n in 0..5 {
        limiter
            .check(&Check::new(&short, key(60 + n, n)))
            .await
            .expect("ok");
    }
    let long = policy("long", 5, Duration::from_secs(3_600));
    limiter
        .check(&Check::new(&long, key(60, 99)))
        .await
        .expect("ok");
    ledger_counts_every_shards_rows(&pool).await;
    assert_eq!(
        limiter.cleanup_expired(10).await.expect("cleanup"),
        0,
        "nothing expired yet"
    );
    common::ShiftTime { schema: &schema }
        .advance_now(Duration::from_secs(120))
        .await;
    assert_eq!(limiter.cleanup_expired(2).await.expect("cleanup"), 2);
    assert_eq!(limiter.cleanup_expired(2).await.expect("cleanup"), 2);
    assert_eq!(limiter.cleanup_expired(2).await.expect("cleanup"), 1);
    assert_eq!(limiter.cleanup_expired(2).await.expect("cleanup"), 0);
    let ledger: i64 = sqlx::query_scalar(
        "SELECT sum(used) FROM runlimit_capacity_ledger WHERE counter_table = 'fixed_windows'",
    )
    .fetch_one(&pool)
    .await
    .expect("ledger");
    assert_eq!(ledger, 1, "the ledger follows deletions");
    ledger_counts_every_shards_rows(&pool).await;
}

/// Every capacity shard's ledger count is the number of fixed-window rows
/// whose subject key falls in that shard.
async fn ledger_counts_every_shards_rows(pool: &sqlx::PgPool) {
    let mismatched: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runlimit_capacity_ledger AS ledger \
         WHERE ledger.counter_table = 'fixed_windows' AND ledger.used <> \
         (SELECT count(*) FROM runlimit_fixed_windows AS w \
          WHERE pg_catalog.get_byte(w.counter_key, 32) = ledger.shard)",
    )
    .fetch_one(pool)
    .await
    .expect("ledger");
    assert_eq!(mismatched, 0, "shards whose ledger count is not their rows");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backends_give_classified_errors_and_never_extra_admissions() {
    terminate_backends_under_checks("terminate", false).await;
}

/// The same faults with a lease in front of the pool: grants fail like
/// checks, and no unit is admitted that the table did not consume first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backends_under_leases_never_admit_an_unconsumed_unit() {
    terminate_backends_under_checks("terminate_leased", true).await;
}

/// Eight tasks check one key (limit 50) while the pool's backends are
/// terminated five times. Errors are classified, and the stored count is
/// at most the limit and at least the admissions seen.
async fn terminate_backends_under_checks(name: &str, leased: bool) {
    let Some(schema) = common::schema(name).await else {
        return;
    };
    let setup = schema.migrated_pool(1).await;
    let application = format!("runlimit-{}", schema.name);
    let pool = {
        let name = application.clone();
        let path = schema.name.clone();
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .after_connect(move |connection, _| {
                let (name, path) = (name.clone(), path.clone());
                Box::pin(async move {
                    connection
                        .execute(
                            format!("SET search_path TO {path}; SET application_name TO '{name}'")
                                .as_str(),
                        )
                        .await
                        .map(|_| ())
                })
            })
            .connect(
                &std::env::var("RUNLIMIT_POSTGRES_TEST_DATABASE_URL")
                    .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned()),
            )
            .await
            .expect("pool")
    };
    let shared = PostgresLimiter::<FixedWindowPolicy>::new(pool, fast_config());
    let (admitted, possibly) = if leased {
        let config = runlimit_memory::LeaseConfig::new(64)
            .and_then(|config| config.with_max_grant(8))
            .and_then(|config| config.with_remaining_share(100))
            .expect("valid");
        let limiter = Arc::new(runlimit_memory::Leased::new(shared, config));
        let counts = check_while_terminating(&limiter, &schema, &application).await;
        assert!(
            limiter.stats().local_hits > 0,
            "no check was admitted locally"
        );
        // A flush gives back what the leases hold, so the table keeps only
        // what was admitted or may have been.
        let _ = limiter.flush().await;
        counts
    } else {
        check_while_terminating(&Arc::new(shared), &schema, &application).await
    };
    let used: i64 = sqlx::query_scalar("SELECT coalesce(max(used), 0) FROM runlimit_fixed_windows")
        .fetch_one(&setup)
        .await
        .expect("used");
    assert!(admitted <= 50, "admitted {admitted}");
    let used = usize::try_from(used).expect("small");
    assert!(used <= 50, "stored {used}");
    // Every admission was stored first.
    assert!(used >= admitted, "admitted {admitted}, stored {used}");
    if !leased {
        // Every stored unit is an admission the caller saw or one it was
        // told may have happened.
        assert!(used <= admitted + possibly);
    }
}

/// Checks from eight tasks while terminating the pool's backends; returns
/// the admissions seen and the errors classified as "may have applied".
async fn check_while_terminating<L>(
    limiter: &Arc<L>,
    schema: &common::TestSchema,
    application: &str,
) -> (usize, usize)
where
    L: Limiter<Policy = FixedWindowPolicy> + 'static,
    L::Error: runlimit_core::MayHaveConsumed,
{
    use runlimit_core::MayHaveConsumed as _;

    let policy = Arc::new(policy("terminated", 50, Duration::from_secs(3_600)));
    let admitted = Arc::new(AtomicUsize::new(0));
    let possibly = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (limiter, policy, admitted, possibly) = (
            Arc::clone(limiter),
            Arc::clone(&policy),
            Arc::clone(&admitted),
            Arc::clone(&possibly),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                match limiter.check(&Check::new(&*policy, key(70, 1))).await {
                    Ok(decision) if decision.is_allowed() => {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(error) if error.may_have_consumed_quota() => {
                        possibly.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(_) => {}
                }
            }
        }));
    }
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(application)
        .execute(schema.admin())
        .await
        .expect("terminate");
    }
    for task in tasks {
        task.await.expect("task");
    }
    (
        admitted.load(Ordering::SeqCst),
        possibly.load(Ordering::SeqCst),
    )
}

#[tokio::test]
async fn a_cancelled_operation_never_returns_its_connection_to_the_pool() {
    let Some(schema) = common::schema("cancelled").await else {
        return;
    };
    let pool = schema.migrated_pool(1).await;
    let limiter = PostgresLimiter::<FixedWindowPolicy>::new(
        pool.clone(),
        fast_config()
            .with_operation_timeout(Duration::from_secs(5))
            .expect("valid")
            .with_relaxed_durability(true),
    );
    let policy = policy("cancelled", 5, Duration::from_secs(60));
    let check = Check::new(&policy, key(80, 1));
    assert_eq!(
        limiter
            .check(&check)
            .await
            .expect("relaxed commit")
            .remaining(),
        Some(4)
    );
    assert_eq!(pool.size(), 1);

    let mut outsider = schema.pool(1).await.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM runlimit_fixed_windows FOR UPDATE")
        .execute(&mut *outsider)
        .await
        .expect("lock rows");
    // The caller gives up while the statement waits on the lock.
    let cancelled = tokio::time::timeout(Duration::from_millis(200), limiter.check(&check)).await;
    assert!(cancelled.is_err(), "the check was still waiting");
    // Its connection, in an unknown state, was closed rather than pooled.
    assert_eq!(pool.size(), 0);
    outsider.rollback().await.expect("release");
    let after = limiter
        .check(&check)
        .await
        .expect("a fresh connection works");
    // The abandoned statement may or may not have committed once unblocked.
    assert!(matches!(after.remaining(), Some(2 | 3)), "{after:?}");
}

/// Records what the limiter reported: outcome and consumption certainty.
#[derive(Debug, Default)]
struct Recorder(
    std::sync::Mutex<Vec<(runlimit_core::AdmissionOutcome, runlimit_core::Consumption)>>,
    AtomicUsize,
);

impl runlimit_core::Observer for Recorder {
    fn on_admission(&self, observation: &runlimit_core::AdmissionObservation<'_>) {
        self.0
            .lock()
            .expect("lock")
            .push((observation.outcome(), observation.consumption()));
    }

    fn on_cleanup(&self, observation: &runlimit_core::CleanupObservation) {
        self.1.fetch_add(
            usize::try_from(observation.removed().unwrap_or(0)).unwrap_or(0),
            Ordering::SeqCst,
        );
    }
}

#[tokio::test]
async fn observers_see_outcomes_consumption_and_cleanup() {
    use runlimit_core::{AdmissionOutcome as O, Consumption as C};
    let Some(schema) = common::schema("observers").await else {
        return;
    };
    let pool = schema.migrated_pool(1).await;
    let recorder = Arc::new(Recorder::default());
    let limiter = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), fast_config())
        .with_observer(Arc::clone(&recorder));
    let policy = policy("observed", 1, Duration::from_secs(60));
    let check = Check::new(&policy, key(90, 1));
    limiter.check(&check).await.expect("allowed");
    limiter.check(&check).await.expect("denied");
    let held = pool.acquire().await.expect("hold");
    limiter.check(&check).await.expect_err("pool timeout");
    drop(held);
    common::ShiftTime { schema: &schema }
        .advance_now(Duration::from_secs(61))
        .await;
    assert_eq!(limiter.cleanup_expired(10).await.expect("cleanup"), 1);
    assert_eq!(
        *recorder.0.lock().expect("lock"),
        [
            (O::Allowed, C::Consumed),
            (O::QuotaDenied, C::NotConsumed),
            (O::Failed, C::NotConsumed)
        ]
    );
    assert_eq!(recorder.1.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_pools_checking_and_refunding_one_key_never_exceed_the_limit() {
    use runlimit_core::Lifecycle;
    use std::sync::atomic::AtomicU64;
    let Some(schema) = common::schema("refund_race").await else {
        return;
    };
    schema.migrated_pool(1).await;
    let limit = 30;
    let policy = Arc::new(policy("refunded", limit, Duration::from_secs(3_600)));
    let admitted = Arc::new(AtomicU64::new(0));
    let credited = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for pool in 0..4 {
        let limiter = Arc::new(PostgresLimiter::<FixedWindowPolicy>::new(
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
    let used: i64 = sqlx::query_scalar("SELECT used FROM runlimit_fixed_windows")
        .fetch_one(&schema.pool(1).await)
        .await
        .expect("the counter");
    assert_eq!(u64::try_from(used).expect("never below zero"), in_use);
}

#[tokio::test]
async fn peeks_store_nothing_and_resets_delete_the_row() {
    use runlimit_core::Lifecycle;
    let Some(schema) = common::schema("peek_rows").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let fixed = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), fast_config());
    let gcra: PostgresLimiter<GcraPolicy> = fixed.for_policy();
    let window = policy("peeked", 3, Duration::from_secs(60));
    let rate = GcraPolicy::new(
        PolicyId::new("peeked").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(60),
        3,
    )
    .expect("valid");
    let rows = || async {
        let count: i64 = sqlx::query_scalar(
            "SELECT (SELECT count(*) FROM runlimit_fixed_windows) + (SELECT count(*) FROM runlimit_gcra)",
        )
        .fetch_one(&pool)
        .await
        .expect("count");
        let ledger: i64 = sqlx::query_scalar("SELECT sum(used) FROM runlimit_capacity_ledger")
            .fetch_one(&pool)
            .await
            .expect("ledger");
        (count, ledger)
    };
    for n in 0..10 {
        let peeked = fixed
            .peek(&Check::new(&window, key(20, n)))
            .await
            .expect("peek");
        assert_eq!(peeked.remaining(), Some(3));
        let peeked = gcra
            .peek(&Check::new(&rate, key(20, n)))
            .await
            .expect("peek");
        assert_eq!(peeked.remaining(), Some(3));
    }
    assert_eq!(rows().await, (0, 0), "peeks stored and reserved nothing");
    fixed
        .check(&Check::new(&window, key(20, 1)))
        .await
        .expect("check");
    gcra.check(&Check::new(&rate, key(20, 1)))
        .await
        .expect("check");
    assert_eq!(rows().await, (2, 2));
    assert!(fixed.reset(&window, &key(20, 1)).await.expect("reset"));
    assert!(gcra.reset(&rate, &key(20, 1)).await.expect("reset"));
    assert_eq!(
        rows().await,
        (0, 0),
        "a reset deletes the row and frees its slot"
    );
    assert!(!fixed.reset(&window, &key(20, 1)).await.expect("reset"));
}

/// `with_relaxed_durability(true)` must reach every statement that writes a
/// counter (single checks on new and stored keys, batches updated in place and
/// batches the function decides, refunds, on every algorithm), and nothing may
/// relax durability unasked. The setting is transaction-local and gone once
/// the statement commits, so a trigger records it at every write of a counter
/// row.
#[tokio::test]
async fn relaxed_durability_reaches_every_write_and_only_when_asked() {
    let Some(schema) = common::schema("durability").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let name = &schema.name;
    let mut setup = format!(
        "CREATE TABLE durability_seen (setting text NOT NULL);
         CREATE FUNCTION record_durability() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO {name}.durability_seen
                 VALUES (pg_catalog.current_setting('synchronous_commit'));
             RETURN NULL;
         END $$;"
    );
    for table in [
        "runlimit_fixed_windows",
        "runlimit_gcra",
        "runlimit_sliding_windows",
    ] {
        setup.push_str(&format!(
            "CREATE TRIGGER record_durability AFTER INSERT OR UPDATE ON {table}
                 FOR EACH ROW EXECUTE FUNCTION {name}.record_durability();"
        ));
    }
    schema.execute(&setup).await;
    let window = Duration::from_secs(3_600);
    let fixed = policy("durable", 10, window);
    let gcra = GcraPolicy::new(
        PolicyId::new("durable").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        window,
        10,
    )
    .expect("valid");
    let sliding = SlidingWindowPolicy::new(
        PolicyId::new("durable").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        window,
    )
    .expect("valid");
    for (relaxed, expected, shard) in [(false, "on", 90), (true, "off", 91)] {
        let config = || fast_config().with_relaxed_durability(relaxed);
        let limiter = PostgresLimiter::<FixedWindowPolicy>::new(pool.clone(), config());
        let (first, second, refunded) = (key(shard, 1), key(shard, 2), key(shard, 3));
        // A new key, then a stored one.
        for _ in 0..2 {
            assert!(
                limiter
                    .check(&Check::new(&fixed, first))
                    .await
                    .expect("check")
                    .is_allowed()
            );
        }
        // A batch naming a new key (decided by the function), then the same
        // batch on stored keys (updated in place).
        for _ in 0..2 {
            let batch = [Check::new(&fixed, first), Check::new(&fixed, second)];
            let decided = limiter.check_all(&batch).await.expect("batch");
            assert!(matches!(decided, runlimit_core::BatchDecision::Allowed(_)));
        }
        let check = Check::new(&fixed, refunded);
        let (_, receipt) = limiter.admit(&check).await.expect("admit").into_parts();
        let refund = limiter
            .refund(&[check], receipt.expect("admitted with a receipt"))
            .await
            .expect("refund");
        assert_eq!(refund.credited(), 1);
        let gcra_limiter = PostgresLimiter::<GcraPolicy>::new(pool.clone(), config());
        let sliding_limiter = PostgresLimiter::<SlidingWindowPolicy>::new(pool.clone(), config());
        for _ in 0..2 {
            let check = Check::new(&gcra, first);
            assert!(gcra_limiter.check(&check).await.expect("gcra").is_allowed());
            let check = Check::new(&sliding, first);
            assert!(
                sliding_limiter
                    .check(&check)
                    .await
                    .expect("sliding")
                    .is_allowed()
            );
        }
        let seen: Vec<(String, i64)> = sqlx::query_as(&format!(
            "SELECT setting, count(*) FROM {name}.durability_seen GROUP BY setting"
        ))
        .fetch_all(schema.admin())
        .await
        .expect("seen");
        // Every write above recorded: two single checks, three rows of the
        // batches (the first inserts one row, then both rows are updated),
        // at least the admission and its refund, and four of the others.
        assert!(
            matches!(&seen[..], [(setting, count)] if setting == expected && *count >= 11),
            "relaxed {relaxed}: {seen:?}"
        );
        schema.execute("TRUNCATE durability_seen").await;
    }
}
