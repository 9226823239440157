//! Leased checks of one hot key shared by four limiters (a pool each)
//! against a bare single-statement upsert floor and the unleased check, in
//! one run, rounds alternating; then 100k cold keys, leased and not.
//!
//! Run with `cargo bench -p runlimit-postgres --bench leased` (reads
//! `RUNLIMIT_POSTGRES_TEST_DATABASE_URL`, default the local test database;
//! `BENCH_SECONDS` per cell, default 2; `BENCH_ROUNDS`, default 5). Results
//! are recorded in BENCHMARKS.md.
#![allow(
    missing_docs,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

#[path = "../../runlimit-memory/benches/shared/leased.rs"]
mod leased;

use std::{sync::Arc, time::Duration};

use runlimit_core::FixedWindowPolicy;
use runlimit_postgres::{PostgresConfig, PostgresLimiter};
use sqlx::{Executor, PgPool};

#[tokio::main]
async fn main() {
    let url = std::env::var("RUNLIMIT_POSTGRES_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let env = |name: &str, default: f64| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(default)
    };
    let (seconds, rounds) = (env("BENCH_SECONDS", 2.0), env("BENCH_ROUNDS", 5.0) as usize);
    let schema = format!("rl_bench_leased_{}", std::process::id());
    let admin = PgPool::connect(&url).await.expect("connect");
    admin
        .execute(format!("CREATE SCHEMA {schema}").as_str())
        .await
        .expect("schema");
    let config = PostgresConfig::default()
        .with_max_rows_per_shard(65_536)
        .and_then(|c| c.with_operation_timeout(Duration::from_secs(10)))
        .and_then(|c| c.with_pool_acquire_timeout(Duration::from_secs(10)))
        .expect("valid");
    // Pools for the limiters, and as many for the floor: a dedicated pool's
    // connections belong to its limiter.
    let mut pools = Vec::new();
    for _ in 0..2 * leased::LIMITERS {
        let path = schema.clone();
        let pool = runlimit_postgres::pool_options()
            .max_connections(8)
            .after_connect(move |connection, _| {
                let path = path.clone();
                Box::pin(async move {
                    connection
                        .execute(format!("SET search_path TO {path}").as_str())
                        .await
                        .map(|_| ())
                })
            })
            .connect(&url)
            .await
            .expect("pool");
        pools.push(pool);
    }
    pools[0]
        .execute("CREATE TABLE bench_upsert (k bigint PRIMARY KEY, n bigint NOT NULL) WITH (fillfactor = 80)")
        .await
        .expect("floor table");
    let limiter = |pool: &PgPool| {
        PostgresLimiter::<FixedWindowPolicy>::with_dedicated_pool(pool.clone(), config)
    };
    limiter(&pools[0]).migrate().await.expect("migrate");
    let upserts = Arc::new(pools.split_off(leased::LIMITERS));
    // A dedicated pool's connections belong to its limiter: the leased
    // limiter shares them through `for_policy`.
    let plain: Vec<_> = pools.iter().map(|pool| Arc::new(limiter(pool))).collect();
    let for_leases: Vec<_> = plain.iter().map(|limiter| limiter.for_policy()).collect();
    let floor: leased::Op = Arc::new(move |index, _| {
        let pool = upserts[index].clone();
        Box::pin(async move {
            sqlx::query(
                "INSERT INTO bench_upsert (k, n) VALUES (1, 1) \
                 ON CONFLICT (k) DO UPDATE SET n = bench_upsert.n + 1 RETURNING n",
            )
            .fetch_one(&pool)
            .await
            .expect("upsert");
        })
    });
    leased::compare(
        "PostgreSQL",
        "upsert of one row",
        floor,
        plain,
        for_leases,
        rounds,
        seconds,
    )
    .await;
    admin
        .execute(format!("DROP SCHEMA {schema} CASCADE").as_str())
        .await
        .expect("drop schema");
}
