//! Why the PostgreSQL backend could not decide, and whether quota may be gone.

use runlimit_core::{BatchError, RefundError};

/// Why a check, batch, refund, peek or reset failed. Fail closed on every
/// variant.
///
/// [`may_have_consumed_quota`](Self::may_have_consumed_quota) separates failures
/// that definitely changed nothing from those whose commit outcome is unknown
/// (for a refund or reset: that may have been applied); do not blindly retry
/// the latter as part of a non-idempotent operation.
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
    /// No pooled connection became available in time. Nothing was sent.
    #[error("timed out acquiring a database connection")]
    PoolTimeout,
    /// Acquiring a connection failed. Nothing was sent.
    #[error("could not acquire a database connection")]
    Acquire(#[source] sqlx::Error),
    /// The server reported an error (including lock and statement timeouts). The
    /// transaction was rolled back, so nothing was consumed.
    #[error("the database refused the operation")]
    Database(#[source] sqlx::Error),
    /// The connection failed after the operation was sent; it may have
    /// committed.
    #[error("the database connection failed mid-operation")]
    Connection(#[source] sqlx::Error),
    /// The operation timeout expired after the operation was sent; it may still
    /// commit. The connection was discarded.
    #[error("the database operation timed out")]
    OperationTimeout,
    /// The server answered in a shape this version does not understand. The
    /// operation ran and may have committed.
    #[error("unexpected reply from the database")]
    UnexpectedReply,
}

impl CheckError {
    /// Whether the failed operation may have consumed quota: `false` means it
    /// definitely did not; `true` means its commit outcome is unknown.
    #[must_use]
    pub fn may_have_consumed_quota(&self) -> bool {
        matches!(
            self,
            Self::Connection(_) | Self::OperationTimeout | Self::UnexpectedReply
        )
    }
}

/// Why bounded maintenance failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MaintenanceError {
    /// No pooled connection became available in time. Nothing was sent.
    #[error("timed out acquiring a database connection")]
    PoolTimeout,
    /// Acquiring a connection failed. Nothing was sent.
    #[error("could not acquire a database connection")]
    Acquire(#[source] sqlx::Error),
    /// The server reported an error; nothing was removed.
    #[error("the database refused the cleanup")]
    Database(#[source] sqlx::Error),
    /// The connection failed after the cleanup was sent; it may have committed.
    #[error("the database connection failed mid-cleanup")]
    Connection(#[source] sqlx::Error),
    /// The operation timeout expired after the cleanup was sent.
    #[error("the cleanup timed out")]
    OperationTimeout,
    /// Migrations failed.
    #[error("migration failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
}

impl MaintenanceError {
    /// Whether rows may have been removed: `false` means definitely not.
    #[must_use]
    pub fn may_have_removed_rows(&self) -> bool {
        matches!(self, Self::Connection(_) | Self::OperationTimeout)
    }
}

/// Classifies an error from executing an already-sent statement.
pub(crate) fn classify(error: sqlx::Error) -> CheckError {
    match error {
        sqlx::Error::Database(_) => CheckError::Database(error),
        sqlx::Error::PoolTimedOut => CheckError::PoolTimeout,
        sqlx::Error::PoolClosed => CheckError::Acquire(error),
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::TypeNotFound { .. } => CheckError::UnexpectedReply,
        other => CheckError::Connection(other),
    }
}

pub(crate) fn classify_maintenance(error: sqlx::Error) -> MaintenanceError {
    match error {
        sqlx::Error::Database(_) => MaintenanceError::Database(error),
        sqlx::Error::PoolTimedOut => MaintenanceError::PoolTimeout,
        sqlx::Error::PoolClosed => MaintenanceError::Acquire(error),
        other => MaintenanceError::Connection(other),
    }
}

impl runlimit_core::MayHaveConsumed for CheckError {
    fn may_have_consumed_quota(&self) -> bool {
        Self::may_have_consumed_quota(self)
    }
}
