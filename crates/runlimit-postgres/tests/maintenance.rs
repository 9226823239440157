//! Maintenance against a real PostgreSQL server: a round deletes the expired
//! rows of every counter table in bounded statements, and the maintenance
//! task, on tokio's paused clock, cleans the database and gives idle leases
//! back every interval until it is stopped.

mod common;

use std::{sync::Arc, time::Duration};

use runlimit_core::{
    Check, FixedWindowPolicy, GcraPolicy, Lifecycle, Limiter, Maintain, MaintenanceReport,
    PolicyId, ScopeId, SlidingWindowPolicy, SubjectKey,
};
use runlimit_memory::{Clock, LeaseConfig, Leased, maintenance};
use runlimit_postgres::{MAINTENANCE_ROWS_PER_STATEMENT, PostgresConfig, PostgresLimiter};
use sqlx::PgPool;
use tokio::{sync::mpsc, time::Instant};

const MINUTE: Duration = Duration::from_secs(60);

/// The `n`th subject, spread over the capacity shards.
fn subject(n: u32) -> SubjectKey {
    let mut digest = [0x5A; 32];
    digest[..4].copy_from_slice(&n.to_le_bytes());
    SubjectKey::from_digest(digest)
}

fn id(name: &str) -> PolicyId {
    PolicyId::new(name).expect("valid")
}

fn scope() -> ScopeId {
    ScopeId::new("client").expect("valid")
}

/// Rows in `table`, and the rows its capacity ledger counts.
async fn rows(pool: &PgPool, table: &str) -> (i64, i64) {
    let stored: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM runlimit_{table}"))
        .fetch_one(pool)
        .await
        .expect("rows");
    let counted: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(used), 0) FROM runlimit_capacity_ledger WHERE counter_table = $1",
    )
    .bind(table)
    .fetch_one(pool)
    .await
    .expect("ledger");
    (stored, counted)
}

/// Admits one check of `policy` for each of `subjects`, in batches.
async fn admit_each<L: Limiter>(limiter: &L, policy: &L::Policy, subjects: std::ops::Range<u32>) {
    let checks: Vec<_> = subjects.map(|n| Check::new(policy, subject(n))).collect();
    for batch in checks.chunks(256) {
        let decided = limiter.check_all(batch).await.expect("decided");
        assert!(decided.is_allowed());
    }
}

#[tokio::test]
async fn a_round_deletes_the_expired_rows_of_every_table_however_many() {
    let Some(schema) = common::schema("maintain_round").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let config = PostgresConfig::default()
        .with_max_batch_size(256)
        .expect("valid");
    let windows = PostgresLimiter::with_dedicated_pool(pool.clone(), config);
    // More expired fixed windows than one statement deletes, a few of the
    // other tables, and a window still live.
    let expired = MAINTENANCE_ROWS_PER_STATEMENT + 5;
    let short = FixedWindowPolicy::new(id("short"), scope(), 1, MINUTE).expect("valid");
    admit_each(&windows, &short, 0..expired).await;
    let long = FixedWindowPolicy::new(id("long"), scope(), 1, MINUTE * 60 * 24).expect("valid");
    admit_each(&windows, &long, 0..1).await;
    let rates: PostgresLimiter<GcraPolicy> = windows.for_policy();
    let rate = GcraPolicy::new(id("rate"), scope(), 1, MINUTE, 1).expect("valid");
    admit_each(&rates, &rate, 0..3).await;
    let slides: PostgresLimiter<SlidingWindowPolicy> = windows.for_policy();
    let slide = SlidingWindowPolicy::new(id("slide"), scope(), 1, MINUTE).expect("valid");
    admit_each(&slides, &slide, 0..4).await;
    common::ShiftTime { schema: &schema }
        .advance_now(MINUTE * 10)
        .await;

    // One round, from a limiter of any policy type.
    let report: MaintenanceReport = rates.maintain().await;
    assert_eq!(report.failures().len(), 0, "{report:?}");
    assert_eq!(report.removed(), u64::from(expired) + 3 + 4);
    assert_eq!(rows(&pool, "fixed_windows").await, (1, 1));
    assert_eq!(rows(&pool, "gcra").await, (0, 0));
    assert_eq!(rows(&pool, "sliding_windows").await, (0, 0));
    assert_eq!(windows.maintain().await.removed(), 0, "nothing left");
}

/// Tokio's clock, paused in these tests, as a lease's clock.
#[derive(Debug)]
struct TokioClock(Instant);

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// Runs the wrapped limiter's rounds and sends the rows each removed.
struct Rounds<M> {
    limiter: M,
    removed: mpsc::UnboundedSender<u64>,
}

impl<M: Maintain> Maintain for Rounds<M> {
    async fn maintain(&self) -> MaintenanceReport {
        let report = self.limiter.maintain().await;
        assert_eq!(report.failures().len(), 0, "{report:?}");
        let _ = self.removed.send(report.removed());
        report
    }
}

/// Keeps tokio's paused clock from moving by itself while the test waits
/// for the database: a blocking task in progress stops auto-advance, so the
/// clock moves only when the test advances it. Dropping the sender ends the
/// task.
fn hold_clock() -> std::sync::mpsc::Sender<()> {
    let (hold, held) = std::sync::mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        let _ = held.recv();
    });
    hold
}

/// Ends the fixed windows that would end within a minute, by moving their
/// ends ten minutes back (the database's clock is not tokio's); longer
/// windows, and the receipts issued for them, are left as they are.
async fn end_short_windows(schema: &common::TestSchema) {
    schema
        .execute(
            "UPDATE runlimit_fixed_windows \
             SET window_expires_at = window_expires_at - interval '10 minutes' \
             WHERE window_expires_at < pg_catalog.clock_timestamp() + interval '1 minute'",
        )
        .await;
}

#[tokio::test(start_paused = true)]
async fn the_maintenance_task_cleans_the_database_and_gives_idle_leases_back_until_stopped() {
    let _hold = hold_clock();
    let Some(schema) = common::schema("maintain_task").await else {
        return;
    };
    let pool = schema.migrated_pool(2).await;
    let shared = PostgresLimiter::with_dedicated_pool(pool.clone(), PostgresConfig::default());
    let direct = shared.clone();
    let config = LeaseConfig::new(64)
        .and_then(|config| config.with_max_grant(50))
        .expect("valid")
        .with_idle_after(MINUTE / 2);
    let leased = Arc::new(Leased::new(shared, config).with_clock(TokioClock(Instant::now())));

    // A hot key admitted from a lease, its window live for a day.
    let hot = FixedWindowPolicy::new(id("hot"), scope(), 1_000, MINUTE * 60 * 24).expect("valid");
    let hot_check = Check::new(&hot, subject(0));
    for _ in 0..20 {
        assert!(
            leased
                .check(&hot_check)
                .await
                .expect("decided")
                .is_allowed()
        );
    }
    let held = leased.stats().units_held;
    assert!(held > 0, "a lease holds units");
    let used = async || {
        let remaining = direct.peek(&hot_check).await.expect("peek").remaining();
        1_000 - remaining.expect("allowed")
    };
    assert_eq!(used().await, 20 + held);
    // Windows that have ended.
    let short = FixedWindowPolicy::new(id("short"), scope(), 1, MINUTE).expect("valid");
    admit_each(&direct, &short, 1..6).await;
    end_short_windows(&schema).await;

    let (removed, mut rounds) = mpsc::unbounded_channel();
    let maintenance = maintenance::spawn(
        Rounds {
            limiter: Arc::clone(&leased),
            removed,
        },
        MINUTE,
    )
    .expect("spawned");
    tokio::time::advance(MINUTE - Duration::from_secs(1)).await;
    assert_eq!(rows(&pool, "fixed_windows").await, (6, 6), "not yet");
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(rounds.recv().await, Some(5));
    assert_eq!(rows(&pool, "fixed_windows").await, (1, 1));
    let stats = leased.stats();
    assert_eq!((stats.leases, stats.units_held), (0, 0));
    assert_eq!(stats.units_returned, held);
    assert_eq!(used().await, 20);

    // Rows that expire later wait for a later round.
    admit_each(&direct, &short, 6..9).await;
    end_short_windows(&schema).await;
    tokio::time::advance(MINUTE).await;
    assert_eq!(rounds.recv().await, Some(3));

    maintenance.stop().await;
    admit_each(&direct, &short, 9..12).await;
    end_short_windows(&schema).await;
    tokio::time::advance(MINUTE * 10).await;
    assert_eq!(rounds.recv().await, None, "the task ended");
    assert_eq!(rows(&pool, "fixed_windows").await, (4, 4));
}
