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

/// The widest overflow sketch row: 2<sup>24</sup> cells.
pub const MAX_OVERFLOW_WIDTH: usize = 1 << 24;

/// The most rows an overflow sketch may have.
pub const MAX_OVERFLOW_DEPTH: usize = 8;

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
    /// The overflow sketch's width was zero or above [`MAX_OVERFLOW_WIDTH`].
    #[error("overflow width {width} is outside 1..={MAX_OVERFLOW_WIDTH}")]
    OverflowWidthOutOfRange {
        /// The refused value.
        width: usize,
    },
    /// The overflow sketch's depth was zero or above [`MAX_OVERFLOW_DEPTH`].
    #[error("overflow depth {depth} is outside 1..={MAX_OVERFLOW_DEPTH}")]
    OverflowDepthOutOfRange {
        /// The refused value.
        depth: usize,
    },
}

/// The size of a store's overflow tier: a count-min sketch of `depth` rows
/// of `width` cells that decides the keys finding their shard full, instead
/// of denying them with [`Denial::StorageCapacity`](runlimit_core::Denial).
///
/// A sketch only over-counts, so a key it decides is denied whenever the
/// exact limiter would deny it, and sometimes when it would not (a false
/// denial, from keys sharing its cells). With `n` keys counted in a window,
/// each consuming `c` units, a key's estimate exceeds its own count by more
/// than `e·n·c / width` with probability at most `e^-depth` (`e` ≈ 2.718):
/// see the [crate documentation](crate#a-flood-of-distinct-keys) for sizing.
///
/// # Examples
///
/// ```
/// use runlimit_memory::{MemoryStoreConfig, OverflowConfig};
///
/// let config = MemoryStoreConfig::new(50_000)?
///     .with_overflow(OverflowConfig::new(1 << 20, 4)?);
/// assert_eq!(config.overflow().map(|overflow| overflow.width()), Some(1 << 20));
/// # Ok::<(), runlimit_memory::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(try_from = "OverflowRepr", into = "OverflowRepr")
)]
pub struct OverflowConfig {
    width: usize,
    depth: usize,
}

impl OverflowConfig {
    /// A sketch of `depth` rows of `width` cells.
    ///
    /// # Errors
    ///
    /// [`ConfigError::OverflowWidthOutOfRange`] unless
    /// `1 <= width <= MAX_OVERFLOW_WIDTH`;
    /// [`ConfigError::OverflowDepthOutOfRange`] unless
    /// `1 <= depth <= MAX_OVERFLOW_DEPTH`.
    pub fn new(width: usize, depth: usize) -> Result<Self, ConfigError> {
        if !(1..=MAX_OVERFLOW_WIDTH).contains(&width) {
            return Err(ConfigError::OverflowWidthOutOfRange { width });
        }
        if !(1..=MAX_OVERFLOW_DEPTH).contains(&depth) {
            return Err(ConfigError::OverflowDepthOutOfRange { depth });
        }
        Ok(Self { width, depth })
    }

    /// Cells per row.
    #[must_use]
    pub fn width(&self) -> usize {
        self.width
    }

    /// Rows.
    #[must_use]
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The bytes one sketch's cells take: 8 per cell (two 32-bit epoch
    /// counts for windows, one 64-bit arrival time for GCRA). A store keeps
    /// one sketch per window length its overflowing keys use, at most
    /// [`MAX_OVERFLOW_SKETCHES`](crate::MAX_OVERFLOW_SKETCHES).
    #[must_use]
    pub fn sketch_bytes(&self) -> usize {
        self.width * self.depth * 8
    }
}

#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OverflowRepr {
    width: usize,
    depth: usize,
}

#[cfg(feature = "serde")]
impl TryFrom<OverflowRepr> for OverflowConfig {
    type Error = ConfigError;

    fn try_from(repr: OverflowRepr) -> Result<Self, ConfigError> {
        Self::new(repr.width, repr.depth)
    }
}

#[cfg(feature = "serde")]
impl From<OverflowConfig> for OverflowRepr {
    fn from(config: OverflowConfig) -> Self {
        Self {
            width: config.width,
            depth: config.depth,
        }
    }
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
    overflow: Option<OverflowConfig>,
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
            overflow: None,
        })
    }

    /// Decides keys that find their shard full in an overflow sketch of this
    /// size, instead of denying them with
    /// [`Denial::StorageCapacity`](runlimit_core::Denial): a flood of distinct
    /// keys then cannot lock new legitimate keys out. Off by default (the
    /// specification's at-capacity denial); see the
    /// [crate documentation](crate#a-flood-of-distinct-keys).
    #[must_use]
    pub fn with_overflow(mut self, overflow: OverflowConfig) -> Self {
        self.overflow = Some(overflow);
        self
    }

    /// The overflow sketch's size, when the store has one.
    #[must_use]
    pub fn overflow(&self) -> Option<OverflowConfig> {
        self.overflow
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    overflow: Option<OverflowConfig>,
}

#[cfg(feature = "serde")]
impl TryFrom<ConfigRepr> for MemoryStoreConfig {
    type Error = ConfigError;

    fn try_from(repr: ConfigRepr) -> Result<Self, ConfigError> {
        let config = Self::new(repr.max_keys)?
            .with_shard_count(repr.shard_count)?
            .with_cleanup_per_check(repr.cleanup_per_check)?
            .with_max_batch_size(repr.max_batch_size)?;
        Ok(match repr.overflow {
            Some(overflow) => config.with_overflow(overflow),
            None => config,
        })
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
            overflow: config.overflow,
        }
    }
}
