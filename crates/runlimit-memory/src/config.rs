//! Validated store configuration.

use runlimit_core::DEFAULT_MAX_BATCH_SIZE;

/// The most keys one store may hold: bucket indices are 32-bit.
pub const MAX_KEYS: usize = 1 << 31;

/// The most shards one store may have.
pub const MAX_SHARDS: usize = 4_096;

/// The most expired entries one check may be allowed to remove.
pub const MAX_CLEANUP_PER_CHECK: usize = 1_024;

/// The largest configurable batch.
pub const MAX_BATCH_SIZE: usize = 256;

/// Expired entries a check may remove unless configured otherwise.
pub const DEFAULT_CLEANUP_PER_CHECK: usize = 8;

/// Why a [`MemoryStoreConfig`] value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_keys` was zero or above [`MAX_KEYS`].
    #[error("max_keys {max_keys} is outside 1..={MAX_KEYS}")]
    MaxKeysOutOfRange {
        /// The refused value.
        max_keys: usize,
    },
    /// The shard count was zero, above [`MAX_SHARDS`], or above `max_keys` (a shard
    /// must be able to hold at least one key).
    #[error("shard count {shard_count} is outside 1..={maximum}")]
    ShardCountOutOfRange {
        /// The refused value.
        shard_count: usize,
        /// The largest valid value for this configuration.
        maximum: usize,
    },
    /// The cleanup allowance was zero or above [`MAX_CLEANUP_PER_CHECK`].
    #[error("cleanup per check {cleanup_per_check} is outside 1..={MAX_CLEANUP_PER_CHECK}")]
    CleanupOutOfRange {
        /// The refused value.
        cleanup_per_check: usize,
    },
    /// The maximum batch size was zero or above [`MAX_BATCH_SIZE`].
    #[error("maximum batch size {max_batch_size} is outside 1..={MAX_BATCH_SIZE}")]
    BatchSizeOutOfRange {
        /// The refused value.
        max_batch_size: usize,
    },
}

/// How many keys a store holds, how they are sharded, and how much work each
/// check may spend on cleanup.
///
/// # Examples
///
/// ```
/// use runlimit_memory::MemoryStoreConfig;
///
/// let config = MemoryStoreConfig::new(50_000)?
///     .with_shard_count(64)?
///     .with_cleanup_per_check(4)?
///     .with_max_batch_size(8)?;
/// assert_eq!(config.shard_capacity(0), 782);
/// # Ok::<(), runlimit_memory::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "ConfigRepr", into = "ConfigRepr"))]
pub struct MemoryStoreConfig {
    max_keys: usize,
    shard_count: usize,
    cleanup_per_check: usize,
    max_batch_size: usize,
}

impl MemoryStoreConfig {
    /// A one-shard store holding at most `max_keys` keys, removing at most
    /// [`DEFAULT_CLEANUP_PER_CHECK`] expired entries per check and accepting
    /// batches of up to [`DEFAULT_MAX_BATCH_SIZE`](runlimit_core::DEFAULT_MAX_BATCH_SIZE).
    ///
    /// # Errors
    ///
    /// [`ConfigError::MaxKeysOutOfRange`] unless `1 <= max_keys <= MAX_KEYS`.
    pub fn new(max_keys: usize) -> Result<Self, ConfigError> {
        if !(1..=MAX_KEYS).contains(&max_keys) {
            return Err(ConfigError::MaxKeysOutOfRange { max_keys });
        }
        Ok(Self {
            max_keys,
            shard_count: 1,
            cleanup_per_check: DEFAULT_CLEANUP_PER_CHECK,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
        })
    }

    /// Splits `max_keys` into `shard_count` fixed capacities, each behind its own
    /// lock.
    ///
    /// More shards means less lock contention, but the bound becomes per shard:
    /// an uneven key distribution can fill one shard and deny a new key while
    /// others still have room. The default of one shard makes all of `max_keys`
    /// available regardless of distribution.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ShardCountOutOfRange`] unless
    /// `1 <= shard_count <= min(MAX_SHARDS, max_keys)`.
    pub fn with_shard_count(mut self, shard_count: usize) -> Result<Self, ConfigError> {
        let maximum = MAX_SHARDS.min(self.max_keys);
        if !(1..=maximum).contains(&shard_count) {
            return Err(ConfigError::ShardCountOutOfRange {
                shard_count,
                maximum,
            });
        }
        self.shard_count = shard_count;
        Ok(self)
    }

    /// Sets how many expired entries one check may remove from its shard when it
    /// needs room for a new key.
    ///
    /// # Errors
    ///
    /// [`ConfigError::CleanupOutOfRange`] unless
    /// `1 <= cleanup_per_check <= MAX_CLEANUP_PER_CHECK`.
    pub fn with_cleanup_per_check(mut self, cleanup_per_check: usize) -> Result<Self, ConfigError> {
        if !(1..=MAX_CLEANUP_PER_CHECK).contains(&cleanup_per_check) {
            return Err(ConfigError::CleanupOutOfRange { cleanup_per_check });
        }
        self.cleanup_per_check = cleanup_per_check;
        Ok(self)
    }

    /// Sets the largest atomic batch `check_all` accepts.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BatchSizeOutOfRange`] unless
    /// `1 <= max_batch_size <= MAX_BATCH_SIZE`.
    pub fn with_max_batch_size(mut self, max_batch_size: usize) -> Result<Self, ConfigError> {
        if !(1..=MAX_BATCH_SIZE).contains(&max_batch_size) {
            return Err(ConfigError::BatchSizeOutOfRange { max_batch_size });
        }
        self.max_batch_size = max_batch_size;
        Ok(self)
    }

    /// The most keys the store holds.
    #[must_use]
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The number of shards.
    #[must_use]
    pub fn shard_count(&self) -> usize {
        self.shard_count
    }

    /// The most expired entries one check may remove.
    #[must_use]
    pub fn cleanup_per_check(&self) -> usize {
        self.cleanup_per_check
    }

    /// The largest accepted batch.
    #[must_use]
    pub fn max_batch_size(&self) -> usize {
        self.max_batch_size
    }

    /// The fixed capacity of shard `index`: `max_keys` divided as evenly as
    /// possible, the first `max_keys % shard_count` shards holding one more.
    #[must_use]
    pub fn shard_capacity(&self, index: usize) -> usize {
        let base = self.max_keys / self.shard_count;
        base + usize::from(index < self.max_keys % self.shard_count)
    }
}

#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigRepr {
    max_keys: usize,
    shard_count: usize,
    cleanup_per_check: usize,
    max_batch_size: usize,
}

#[cfg(feature = "serde")]
impl TryFrom<ConfigRepr> for MemoryStoreConfig {
    type Error = ConfigError;

    fn try_from(repr: ConfigRepr) -> Result<Self, ConfigError> {
        Self::new(repr.max_keys)?
            .with_shard_count(repr.shard_count)?
            .with_cleanup_per_check(repr.cleanup_per_check)?
            .with_max_batch_size(repr.max_batch_size)
    }
}

#[cfg(feature = "serde")]
impl From<MemoryStoreConfig> for ConfigRepr {
    fn from(config: MemoryStoreConfig) -> Self {
        Self {
            max_keys: config.max_keys,
            shard_count: config.shard_count,
            cleanup_per_check: config.cleanup_per_check,
            max_batch_size: config.max_batch_size,
        }
    }
}
