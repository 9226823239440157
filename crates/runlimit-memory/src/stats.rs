//! Telemetry snapshots of a store's occupancy.

/// Occupancy of one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct ShardStats {
    /// The shard's position.
    pub index: usize,
    /// Entries stored, including expired entries not yet removed.
    pub entries: usize,
    /// The shard's fixed capacity.
    pub capacity: usize,
    /// Whether a panic poisoned the shard.
    pub poisoned: bool,
}

impl ShardStats {
    /// Entries that still fit without cleanup.
    #[must_use]
    pub fn headroom(&self) -> usize {
        self.capacity.saturating_sub(self.entries)
    }
}

/// Occupancy of a whole store, for telemetry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct MemoryStoreStats {
    /// Entries stored across all shards.
    pub entries: usize,
    /// `max_keys`.
    pub capacity: usize,
    /// Per-shard occupancy, in shard order.
    pub shards: Vec<ShardStats>,
    /// The overflow tier's counters, when the store has one.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub overflow: Option<crate::OverflowStats>,
}

impl MemoryStoreStats {
    /// The smallest headroom of any shard: the bound a skewed key distribution
    /// hits first.
    #[must_use]
    pub fn min_shard_headroom(&self) -> usize {
        self.shards
            .iter()
            .map(ShardStats::headroom)
            .min()
            .unwrap_or(0)
    }
}
