//! Shared helpers: a fresh schema per test, and service-availability policy.
#![allow(dead_code)]

use std::time::Duration;

use runlimit_conformance::TimeControl;
use runlimit_core::{FixedWindowPolicy, PolicyId, ScopeId, SubjectKey};
use sqlx::{Executor, PgPool, postgres::PgPoolOptions};

/// A database schema of its own for one test, dropped when the test ends.
pub(crate) struct TestSchema {
    pub(crate) name: String,
    admin: PgPool,
    url: String,
}

pub(crate) fn database_url() -> String {
    std::env::var("RUNLIMIT_POSTGRES_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A fresh schema, or `None` (with a printed reason) when PostgreSQL is absent
/// and `RUNLIMIT_REQUIRE_SERVICES` is not `1`.
pub(crate) async fn schema(test: &str) -> Option<TestSchema> {
    let url = database_url();
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&url)
        .await;
    let admin = match admin {
        Ok(admin) => admin,
        Err(error) => {
            if std::env::var("RUNLIMIT_REQUIRE_SERVICES").as_deref() == Ok("1") {
                panic!(
                    "PostgreSQL is required (RUNLIMIT_REQUIRE_SERVICES=1) but unreachable: {error}"
                );
            }
            eprintln!("skipping {test}: PostgreSQL unreachable at {url}: {error}");
            return None;
        }
    };
    let name = format!(
        "rl_{}_{}_{}",
        test.chars()
            .filter(char::is_ascii_alphanumeric)
            .take(24)
            .collect::<String>(),
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    )
    .to_lowercase();
    admin
        .execute(format!("CREATE SCHEMA {name}").as_str())
        .await
        .expect("create schema");
    Some(TestSchema { name, admin, url })
}

impl TestSchema {
    /// A pool whose connections use only this schema.
    pub(crate) async fn pool(&self, max_connections: u32) -> PgPool {
        self.pool_with_path(max_connections, &self.name).await
    }

    /// A pool on this schema with Runlimit's migrations applied.
    pub(crate) async fn migrated_pool(&self, max_connections: u32) -> PgPool {
        let pool = self.pool(max_connections).await;
        runlimit_postgres::migrate(&pool).await.expect("migrate");
        pool
    }

    /// A pool whose connections use `search_path`.
    pub(crate) async fn pool_with_path(&self, max_connections: u32, search_path: &str) -> PgPool {
        let path = search_path.to_owned();
        PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(move |connection, _| {
                let path = path.clone();
                Box::pin(async move {
                    connection
                        .execute(format!("SET search_path TO {path}").as_str())
                        .await
                        .map(|_| ())
                })
            })
            .connect(&self.url)
            .await
            .expect("connect")
    }

    /// Runs SQL as the administrator, in this schema.
    pub(crate) async fn execute(&self, sql: &str) {
        let statement = format!("SET search_path TO {}; {sql}", self.name);
        sqlx::raw_sql(&statement)
            .execute(&self.admin)
            .await
            .expect("admin SQL");
    }

    pub(crate) fn admin(&self) -> &PgPool {
        &self.admin
    }

    /// Waits until some session waits for a lock the backend `pid` holds,
    /// and says whether one did. Bounded, so that a statement which never
    /// waits fails the test that expected it to rather than hanging it.
    pub(crate) async fn wait_until_blocked_by(&self, pid: i32) -> bool {
        for _ in 0..2_000 {
            let blocked: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_catalog.pg_stat_activity \
                 WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))",
            )
            .bind(pid)
            .fetch_one(&self.admin)
            .await
            .expect("activity");
            if blocked > 0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let url = self.url.clone();
        let name = self.name.clone();
        // The test's own runtime may be single-threaded and is blocked here, so
        // drop the schema over a fresh connection on a runtime of its own.
        std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                use sqlx::Connection;
                if let Ok(mut connection) = sqlx::PgConnection::connect(&url).await {
                    let _ = connection
                        .execute(format!("DROP SCHEMA IF EXISTS {name} CASCADE").as_str())
                        .await;
                }
            });
        })
        .join()
        .ok();
    }
}

/// Moves time forward for all state in one schema by shifting it into the past.
///
/// Sliding-window state names its eighth through its expiry, so only shifts
/// by whole eighths of a policy's window are exact for it.
pub(crate) struct ShiftTime<'a> {
    pub(crate) schema: &'a TestSchema,
}

impl ShiftTime<'_> {
    /// [`TimeControl::advance`], callable without the trait in scope.
    pub(crate) async fn advance_now(&self, by: Duration) {
        TimeControl::advance(self, by).await;
    }
}

impl TimeControl for ShiftTime<'_> {
    async fn advance(&self, by: Duration) {
        let micros = by.as_micros();
        self.schema
            .execute(&format!(
                "UPDATE runlimit_fixed_windows SET window_expires_at = window_expires_at - interval '{micros} microseconds'; \
                 UPDATE runlimit_gcra SET tat_us = tat_us - {micros}, expires_at = expires_at - interval '{micros} microseconds'; \
                 UPDATE runlimit_sliding_windows SET expires_at = expires_at - interval '{micros} microseconds';"
            ))
            .await;
    }

    async fn elapse(&self, by: Duration) {
        // Receipts carry the database's own times, which no shift can move.
        tokio::time::sleep(by).await;
    }

    fn receipts_survive_advance(&self) -> bool {
        false
    }

    fn drift(&self) -> Duration {
        // The database clock keeps running between the operations of one case.
        Duration::from_millis(250)
    }
}

/// A fixed-window policy with scope `client`.
pub(crate) fn policy(name: &str, limit: u64, window: Duration) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new(name).expect("valid"),
        ScopeId::new("client").expect("valid"),
        limit,
        window,
    )
    .expect("valid")
}

/// A subject key whose capacity shard (its first byte) is `shard`.
pub(crate) fn key(shard: u8, n: u8) -> SubjectKey {
    let mut digest = [n; 32];
    digest[0] = shard;
    SubjectKey::from_digest(digest)
}
