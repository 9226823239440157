//! README "Choosing a backend": the PostgreSQL, Redis and maintenance
//! fragments.

use std::time::Duration;

use runlimit_core::{Check, FixedWindowPolicy, GcraPolicy, Limiter, PolicyId, ScopeId, SubjectKey};
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

    let maintenance =
        runlimit_memory::maintenance::spawn(limiter.clone(), Duration::from_secs(60))?;
    // … and at shutdown:
    maintenance.stop().await;
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
    let rates: RedisLimiter<_, GcraPolicy> = limiter.for_policy(); // same connection
    let cluster = RedisLimiter::<_, GcraPolicy>::connect_cluster(
        ["redis://node-a:6379/"],
        RedisConfig::default(),
    )
    .await?;
    let _ = (rates, cluster);
    Ok(())
}

/// Limiters whose policy type follows from their checks: no annotation,
/// so this compiles only while the constructors leave it to inference.
///
/// # Errors
///
/// Connection and backend errors.
pub async fn inferred(
    redis_url: &str,
    cluster_nodes: &[&str],
    database_url: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let window = FixedWindowPolicy::new(
        PolicyId::new("api.requests")?,
        ScopeId::new("client")?,
        100,
        Duration::from_secs(60),
    )?;
    let subject = SubjectKey::from_digest([7; 32]);

    let redis = RedisLimiter::connect(redis_url, RedisConfig::default()).await?;
    redis.check(&Check::new(&window, subject)).await?;
    let cluster =
        RedisLimiter::connect_cluster(cluster_nodes.iter().copied(), RedisConfig::default())
            .await?;
    cluster.check(&Check::new(&window, subject)).await?;

    let pool = runlimit_postgres::pool_options()
        .connect(database_url)
        .await?;
    let shared = PostgresLimiter::new(pool.clone(), PostgresConfig::default());
    shared.check(&Check::new(&window, subject)).await?;
    let dedicated = PostgresLimiter::with_dedicated_pool(pool, PostgresConfig::default());
    dedicated.check(&Check::new(&window, subject)).await?;
    Ok(())
}
