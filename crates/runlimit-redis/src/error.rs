//! Why the Redis backend could not decide, and whether quota may be gone.

use runlimit_core::{BatchError, RefundError};

/// Why a check, batch, refund, peek or reset failed. Fail closed on every
/// variant.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The batch was empty, too large, held duplicate keys or mixed quota modes.
    /// Nothing was sent.
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] BatchError),
    /// A refund's receipt did not match its checks or came from another kind
    /// of backend. Nothing was sent.
    #[error("invalid refund: {0}")]
    InvalidRefund(#[from] RefundError),
    /// The batch's keys live in different cluster hash slots, so no single
    /// script can touch them atomically. Structural; nothing was sent. Choose
    /// [`KeyRouting::SingleSlot`](crate::KeyRouting::SingleSlot) or check the
    /// policies separately.
    #[error("batch keys span {slots} cluster hash slots")]
    CrossSlot {
        /// How many distinct slots the keys occupy.
        slots: usize,
    },
    /// The connection could not be established; nothing was sent.
    #[error("could not reach Redis")]
    Unreachable(#[source] redis::RedisError),
    /// Redis answered with an error (for example out of memory, a cluster
    /// redirection it could not follow, or a script error); the script writes
    /// only after deciding every check, so nothing was consumed.
    #[error("Redis refused the operation")]
    Refused(#[source] redis::RedisError),
    /// The connection failed after sending; the script may have run.
    #[error("the Redis connection failed mid-operation")]
    Connection(#[source] redis::RedisError),
    /// The operation timeout expired after sending; the script may have run.
    #[error("the Redis operation timed out")]
    OperationTimeout,
    /// Redis answered in a shape this version does not understand.
    #[error("unexpected reply from Redis")]
    UnexpectedReply,
}

impl CheckError {
    /// Whether the failed operation may have consumed quota (for a refund or
    /// reset: may have been applied): `false` means it definitely did not;
    /// `true` means the outcome is unknown.
    #[must_use]
    pub fn may_have_consumed_quota(&self) -> bool {
        matches!(
            self,
            Self::Connection(_) | Self::OperationTimeout | Self::UnexpectedReply
        )
    }
}

/// The same failure for another member of a coalesced invocation: the same
/// variant, so the same "may have consumed" classification, with the
/// original error's description.
pub(crate) fn duplicate(error: &CheckError) -> CheckError {
    let copy = |error: &redis::RedisError| {
        redis::RedisError::from((
            error.kind(),
            "the coalesced invocation failed",
            error.to_string(),
        ))
    };
    match error {
        CheckError::InvalidBatch(error) => CheckError::InvalidBatch(error.clone()),
        CheckError::InvalidRefund(error) => CheckError::InvalidRefund(error.clone()),
        CheckError::CrossSlot { slots } => CheckError::CrossSlot { slots: *slots },
        CheckError::Unreachable(error) => CheckError::Unreachable(copy(error)),
        CheckError::Refused(error) => CheckError::Refused(copy(error)),
        CheckError::Connection(error) => CheckError::Connection(copy(error)),
        CheckError::OperationTimeout => CheckError::OperationTimeout,
        CheckError::UnexpectedReply => CheckError::UnexpectedReply,
    }
}

pub(crate) fn classify(error: redis::RedisError) -> CheckError {
    if error.is_connection_refusal() {
        CheckError::Unreachable(error)
    } else if error.is_timeout() {
        CheckError::OperationTimeout
    } else if error.is_io_error() || error.is_connection_dropped() {
        CheckError::Connection(error)
    } else if error.kind() == redis::ErrorKind::TypeError {
        CheckError::UnexpectedReply
    } else {
        CheckError::Refused(error)
    }
}

impl runlimit_core::MayHaveConsumed for CheckError {
    fn may_have_consumed_quota(&self) -> bool {
        Self::may_have_consumed_quota(self)
    }
}
