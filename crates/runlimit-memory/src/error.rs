//! Why a memory store could not decide.

use runlimit_core::{BatchError, RefundError};

/// Why a memory store could not decide a check or batch, or perform a
/// refund, peek or reset.
///
/// Treat every variant as an admission failure, distinct from a quota denial
/// returned in a `Decision` or `BatchDecision`, and fail closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryStoreError {
    /// The batch was empty, too large, held duplicate keys or mixed quota modes.
    /// Nothing was consumed.
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] BatchError),
    /// A batch needs more distinct new keys on one shard than that shard can ever
    /// hold. Structural: waiting for expiry cannot make it fit. Nothing was
    /// consumed.
    #[error("batch needs {key_count} keys on shard {shard_index}, which holds at most {capacity}")]
    BatchExceedsShardCapacity {
        /// The shard that cannot hold the batch.
        shard_index: usize,
        /// Distinct keys the batch targets on that shard.
        key_count: usize,
        /// That shard's fixed capacity.
        capacity: usize,
    },
    /// A panic while the shard's lock was held left its state untrusted. Its
    /// counters are kept (not reset) until
    /// [`recover_poisoned`](crate::Store::recover_poisoned) is called. Nothing was
    /// consumed.
    #[error("shard {shard_index} is poisoned by an earlier panic")]
    PoisonedShard {
        /// The poisoned shard.
        shard_index: usize,
    },
    /// A refund's receipt did not match its checks or came from another
    /// kind of store. Nothing was changed.
    #[error("invalid refund: {0}")]
    InvalidRefund(#[from] RefundError),
}

/// Every memory-store error is definite: it is returned before anything is
/// consumed.
impl runlimit_core::MayHaveConsumed for MemoryStoreError {
    fn may_have_consumed_quota(&self) -> bool {
        false
    }
}
