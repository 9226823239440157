//! Pool options that keep every check at one round trip.

use sqlx::postgres::PgPoolOptions;

/// SQLx pool options for a limiter's own pool: SQLx's defaults, except that
/// a connection is not pinged when it is taken from the pool.
///
/// SQLx's default `test_before_acquire(true)` (what `PgPool::connect` uses)
/// sends a `Sync` and waits for the server before every acquisition of an
/// idle connection, so a check would cost two round trips instead of one.
/// Hand the pool to
/// [`PostgresLimiter::with_dedicated_pool`](crate::PostgresLimiter::with_dedicated_pool),
/// which also avoids SQLx's ping when a connection is given back.
/// Skipping the ping is safe for a limiter: every check is one statement whose
/// failure is classified (a dead connection surfaces as
/// [`CheckError::Connection`](crate::CheckError::Connection), quota possibly
/// consumed, and the connection is discarded, never returned to the pool), so
/// a broken pooled connection costs one failed check rather than a wrong
/// answer. Set the pool size and timeouts on the returned options as usual.
///
/// # Examples
///
/// ```no_run
/// use runlimit_core::FixedWindowPolicy;
/// use runlimit_postgres::{PostgresConfig, PostgresLimiter};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = runlimit_postgres::pool_options()
///     .max_connections(16)
///     .connect("postgres://app@db/app")
///     .await?;
/// let limiter =
///     PostgresLimiter::<FixedWindowPolicy>::with_dedicated_pool(pool, PostgresConfig::default());
/// # let _ = limiter;
/// # Ok(())
/// # }
/// ```
#[must_use]
pub fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new().test_before_acquire(false)
}
