//! Validated backend configuration.

use std::time::Duration;

use runlimit_core::DEFAULT_MAX_BATCH_SIZE;

/// The database-enforced ceiling on rows per capacity shard.
pub const MAX_ROWS_PER_SHARD: u32 = 65_536;

/// Rows per capacity shard unless configured otherwise.
pub const DEFAULT_ROWS_PER_SHARD: u32 = 4_096;

/// The number of capacity shards, fixed by the migrations.
pub const CAPACITY_SHARDS: u32 = 256;

/// The largest configurable batch.
pub const MAX_BATCH_SIZE: usize = 256;

/// Why a [`PostgresConfig`] value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A timeout was zero, or beyond what PostgreSQL's millisecond settings hold.
    #[error("{name} {value:?} must be between 1 ms and 24 hours")]
    TimeoutOutOfRange {
        /// Which timeout.
        name: &'static str,
        /// The refused value.
        value: Duration,
    },
    /// Rows per shard was zero or above [`MAX_ROWS_PER_SHARD`].
    #[error("maximum rows per shard {rows} is outside 1..={MAX_ROWS_PER_SHARD}")]
    RowsPerShardOutOfRange {
        /// The refused value.
        rows: u32,
    },
    /// The maximum batch size was zero or above [`MAX_BATCH_SIZE`].
    #[error("maximum batch size {size} is outside 1..={MAX_BATCH_SIZE}")]
    BatchSizeOutOfRange {
        /// The refused value.
        size: usize,
    },
}

const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// The most of the operation timeout kept back from the server's lock
/// timeout; see `PostgresConfig::lock_timeout_ms`.
const SERVER_MARGIN: Duration = Duration::from_millis(250);

fn validate_timeout(name: &'static str, value: Duration) -> Result<Duration, ConfigError> {
    if value < Duration::from_millis(1) || value > MAX_TIMEOUT {
        return Err(ConfigError::TimeoutOutOfRange { name, value });
    }
    Ok(value)
}

/// How [`PostgresLimiter`](crate::PostgresLimiter) uses its pool and database.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use runlimit_postgres::PostgresConfig;
///
/// let config = PostgresConfig::default()
///     .with_pool_acquire_timeout(Duration::from_millis(250))?
///     .with_operation_timeout(Duration::from_millis(500))?
///     .with_max_rows_per_shard(16_384)?;
/// assert_eq!(config.max_rows_per_shard(), 16_384);
/// # Ok::<(), runlimit_postgres::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "ConfigRepr", into = "ConfigRepr"))]
pub struct PostgresConfig {
    pool_acquire_timeout: Duration,
    operation_timeout: Duration,
    max_rows_per_shard: u32,
    max_batch_size: usize,
    relaxed_durability: bool,
}

impl Default for PostgresConfig {
    /// One second to acquire a connection, two seconds per operation, 4,096 rows
    /// per shard (about a million keys), batches of up to 16, durable commits.
    fn default() -> Self {
        Self {
            pool_acquire_timeout: Duration::from_secs(1),
            operation_timeout: Duration::from_secs(2),
            max_rows_per_shard: DEFAULT_ROWS_PER_SHARD,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
            relaxed_durability: false,
        }
    }
}

impl PostgresConfig {
    /// Bounds waiting for a pooled connection. Nothing has been sent when it
    /// expires, so no quota is consumed.
    ///
    /// # Errors
    ///
    /// [`ConfigError::TimeoutOutOfRange`] outside 1 ms to 24 hours.
    pub fn with_pool_acquire_timeout(mut self, timeout: Duration) -> Result<Self, ConfigError> {
        self.pool_acquire_timeout = validate_timeout("pool acquire timeout", timeout)?;
        Ok(self)
    }

    /// A fresh budget, after acquisition, for the whole operation: execution
    /// and commit, enforced by the client, which then discards the
    /// connection and reports that quota may have been consumed.
    ///
    /// Lock waits are bounded on the server by a `lock_timeout` a margin
    /// shorter (a quarter of the timeout, at most 250 ms), so a check blocked
    /// on another session's lock ends with the server's definite answer
    /// ([`CheckError::Database`](crate::CheckError::Database), nothing
    /// consumed) rather than racing the client's deadline.
    ///
    /// # Errors
    ///
    /// [`ConfigError::TimeoutOutOfRange`] outside 1 ms to 24 hours.
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Result<Self, ConfigError> {
        self.operation_timeout = validate_timeout("operation timeout", timeout)?;
        Ok(self)
    }

    /// The most rows each of the 256 capacity shards may hold (so at most
    /// 256 × `rows` keys per algorithm). The database itself refuses more than
    /// [`MAX_ROWS_PER_SHARD`] whatever any writer is configured with.
    ///
    /// # Errors
    ///
    /// [`ConfigError::RowsPerShardOutOfRange`] outside `1..=MAX_ROWS_PER_SHARD`.
    pub fn with_max_rows_per_shard(mut self, rows: u32) -> Result<Self, ConfigError> {
        if !(1..=MAX_ROWS_PER_SHARD).contains(&rows) {
            return Err(ConfigError::RowsPerShardOutOfRange { rows });
        }
        self.max_rows_per_shard = rows;
        Ok(self)
    }

    /// The largest atomic batch accepted.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BatchSizeOutOfRange`] outside `1..=MAX_BATCH_SIZE`.
    pub fn with_max_batch_size(mut self, size: usize) -> Result<Self, ConfigError> {
        if !(1..=MAX_BATCH_SIZE).contains(&size) {
            return Err(ConfigError::BatchSizeOutOfRange { size });
        }
        self.max_batch_size = size;
        Ok(self)
    }

    /// Commits the limiter's transactions with `synchronous_commit = off`.
    ///
    /// A commit then returns before its WAL reaches disk, which roughly halves
    /// commit latency. If the server crashes, the last few hundred milliseconds
    /// of admissions (up to three `wal_writer_delay` periods) can be lost and
    /// their quota handed out again after recovery; the database stays
    /// consistent. Other sessions are unaffected. Off by default.
    #[must_use]
    pub fn with_relaxed_durability(mut self, relaxed: bool) -> Self {
        self.relaxed_durability = relaxed;
        self
    }

    /// See [`with_pool_acquire_timeout`](Self::with_pool_acquire_timeout).
    #[must_use]
    pub fn pool_acquire_timeout(&self) -> Duration {
        self.pool_acquire_timeout
    }

    /// See [`with_operation_timeout`](Self::with_operation_timeout).
    #[must_use]
    pub fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// See [`with_max_rows_per_shard`](Self::with_max_rows_per_shard).
    #[must_use]
    pub fn max_rows_per_shard(&self) -> u32 {
        self.max_rows_per_shard
    }

    /// See [`with_max_batch_size`](Self::with_max_batch_size).
    #[must_use]
    pub fn max_batch_size(&self) -> usize {
        self.max_batch_size
    }

    /// See [`with_relaxed_durability`](Self::with_relaxed_durability).
    #[must_use]
    pub fn relaxed_durability(&self) -> bool {
        self.relaxed_durability
    }

    /// The server's share of the operation timeout, in whole milliseconds,
    /// for `lock_timeout`: the operation timeout less a margin of a quarter
    /// of it, at most 250 ms, and at least 1 ms.
    ///
    /// A lock wait that ends on the server is a definite answer (the
    /// transaction rolled back, nothing was consumed), while one the client
    /// gives up on is not (the statement may still commit). The margin lets
    /// the server's lock-timeout error travel back before the client's
    /// deadline, so a check blocked on a lock ends with the definite answer.
    pub(crate) fn lock_timeout_ms(&self) -> i32 {
        let margin = (self.operation_timeout / 4).min(SERVER_MARGIN);
        let budget = self
            .operation_timeout
            .saturating_sub(margin)
            .max(Duration::from_millis(1));
        // Bounded by 24 hours (8.64e7 ms) at construction.
        i32::try_from(budget.as_millis()).unwrap_or(i32::MAX)
    }
}

#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigRepr {
    pool_acquire_timeout: Duration,
    operation_timeout: Duration,
    max_rows_per_shard: u32,
    max_batch_size: usize,
    relaxed_durability: bool,
}

#[cfg(feature = "serde")]
impl TryFrom<ConfigRepr> for PostgresConfig {
    type Error = ConfigError;

    fn try_from(repr: ConfigRepr) -> Result<Self, ConfigError> {
        Ok(Self::default()
            .with_pool_acquire_timeout(repr.pool_acquire_timeout)?
            .with_operation_timeout(repr.operation_timeout)?
            .with_max_rows_per_shard(repr.max_rows_per_shard)?
            .with_max_batch_size(repr.max_batch_size)?
            .with_relaxed_durability(repr.relaxed_durability))
    }
}

#[cfg(feature = "serde")]
impl From<PostgresConfig> for ConfigRepr {
    fn from(config: PostgresConfig) -> Self {
        Self {
            pool_acquire_timeout: config.pool_acquire_timeout,
            operation_timeout: config.operation_timeout,
            max_rows_per_shard: config.max_rows_per_shard,
            max_batch_size: config.max_batch_size,
            relaxed_durability: config.relaxed_durability,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_validated() {
        let config = PostgresConfig::default();
        assert_eq!(config.max_rows_per_shard(), 4_096);
        assert!(!config.relaxed_durability());
        assert_eq!(
            config.with_max_rows_per_shard(0),
            Err(ConfigError::RowsPerShardOutOfRange { rows: 0 })
        );
        assert_eq!(
            config.with_max_rows_per_shard(MAX_ROWS_PER_SHARD + 1),
            Err(ConfigError::RowsPerShardOutOfRange {
                rows: MAX_ROWS_PER_SHARD + 1
            })
        );
        assert!(config.with_max_rows_per_shard(MAX_ROWS_PER_SHARD).is_ok());
        assert_eq!(
            config.with_operation_timeout(Duration::ZERO),
            Err(ConfigError::TimeoutOutOfRange {
                name: "operation timeout",
                value: Duration::ZERO
            })
        );
        assert!(
            config
                .with_pool_acquire_timeout(Duration::from_secs(90_000))
                .is_err()
        );
        assert_eq!(
            config.with_max_batch_size(0),
            Err(ConfigError::BatchSizeOutOfRange { size: 0 })
        );
        // The server's lock budget keeps a margin: a quarter, at most 250 ms.
        let lock_budget = |millis| {
            config
                .with_operation_timeout(Duration::from_millis(millis))
                .map(|c| c.lock_timeout_ms())
        };
        assert_eq!(lock_budget(2_000), Ok(1_750));
        assert_eq!(lock_budget(400), Ok(300));
        assert_eq!(lock_budget(1), Ok(1));
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_goes_through_validation() {
        let config = PostgresConfig::default().with_relaxed_durability(true);
        let value = serde_json::to_value(config).expect("serializes");
        assert_eq!(value["max_rows_per_shard"], 4_096);
        let back: PostgresConfig = serde_json::from_value(value.clone()).expect("round trip");
        assert_eq!(back, config);
        let mut invalid = value;
        invalid["max_rows_per_shard"] = serde_json::json!(70_000);
        assert!(serde_json::from_value::<PostgresConfig>(invalid).is_err());
    }
}
