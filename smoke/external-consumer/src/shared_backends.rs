//! README "Choosing a backend": the PostgreSQL and Redis fragments.

use runlimit_core::{FixedWindowPolicy, GcraPolicy};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};
use runlimit_redis::{RedisConfig, RedisLimiter};

/// PostgreSQL: a pool of the limiter's own.
///
/// # Errors
///
/// Connection and migration errors.
pub async fn postgres(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let pool = runlimit_postgres::pool_options()
        .max_connections(16)
        .connect(url)
        .await?;
    let limiter =
        PostgresLimiter::<FixedWindowPolicy>::with_dedicated_pool(pool, PostgresConfig::default());
    limiter.migrate().await?;
    let gcra: PostgresLimiter<GcraPolicy> = limiter.for_policy(); // same pool and connections
    let _ = gcra;
    Ok(())
}

/// Redis: connections built for admission.
///
/// # Errors
///
/// Connection errors.
pub async fn redis() -> Result<(), Box<dyn std::error::Error>> {
    let limiter = RedisLimiter::<_, FixedWindowPolicy>::connect(
        "redis://cache:6379/",
        RedisConfig::default(),
    )
    .await?;
    let cluster = RedisLimiter::<_, GcraPolicy>::connect_cluster(
        ["redis://node-a:6379/"],
        RedisConfig::default(),
    )
    .await?;
    let _ = (limiter, cluster);
    Ok(())
}
