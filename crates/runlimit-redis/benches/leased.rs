//! Leased checks of one hot key shared by four limiters (a connection each)
//! against Redis's `PING` floor and the unleased check, in one run, rounds
//! alternating; then 100k cold keys, leased and not.
//!
//! Run with `cargo bench -p runlimit-redis --bench leased` (reads
//! `RUNLIMIT_REDIS_TEST_URL`; `BENCH_SECONDS` per cell, default 2;
//! `BENCH_ROUNDS`, default 5). Results are recorded in BENCHMARKS.md.
#![allow(
    missing_docs,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

#[path = "../../runlimit-memory/benches/shared/leased.rs"]
mod leased;

use std::sync::Arc;

use redis::aio::ConnectionManager;
use runlimit_core::FixedWindowPolicy;
use runlimit_redis::{RedisConfig, RedisLimiter};

#[tokio::main]
async fn main() {
    let url = std::env::var("RUNLIMIT_REDIS_TEST_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    let env = |name: &str, default: f64| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(default)
    };
    let (seconds, rounds) = (env("BENCH_SECONDS", 2.0), env("BENCH_ROUNDS", 5.0) as usize);
    let config = RedisConfig::default()
        .with_prefix(format!("rl-bench-leased-{}:", std::process::id()))
        .expect("valid");
    let mut connections = Vec::new();
    for _ in 0..leased::LIMITERS {
        let client = redis::Client::open(url.as_str()).expect("url");
        connections.push(ConnectionManager::new(client).await.expect("connect"));
    }
    let limiter = |connection: &ConnectionManager| {
        RedisLimiter::<_, FixedWindowPolicy>::new(connection.clone(), config.clone())
    };
    let plain: Vec<_> = connections.iter().map(|c| Arc::new(limiter(c))).collect();
    let for_leases: Vec<_> = connections.iter().map(limiter).collect();
    let pings = Arc::new(connections);
    let floor: leased::Op = Arc::new(move |index, _| {
        let mut connection = pings[index].clone();
        Box::pin(async move {
            let _: String = redis::cmd("PING")
                .query_async(&mut connection)
                .await
                .expect("ping");
        })
    });
    leased::compare("Redis", "PING", floor, plain, for_leases, rounds, seconds).await;
}
