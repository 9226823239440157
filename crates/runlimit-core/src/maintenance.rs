//! Periodic upkeep: what a limiter needs done beside its checks.

use std::{error::Error, fmt, future::Future, sync::Arc};

use crate::shared::Shared;

/// A failure of one part of a maintenance round, as its backend reported it.
pub type MaintenanceFailure = Box<dyn Error + Send + Sync + 'static>;

/// The upkeep a limiter needs beside its checks, one round at a time: a
/// capability beside [`Limiter`](crate::Limiter), so a limiter, fake or
/// application-owned enum that has none need not implement it.
///
/// What a round does is the backend's: a PostgreSQL limiter deletes expired
/// rows (only deletion frees their capacity), a lease gives back the units of
/// idle leases and then runs its shared backend's round, wrappers run the
/// round of the backend they stand in front of, and stores that clean up as
/// they go (the memory stores, Redis, whose keys expire) have nothing to do.
/// A scheduler (`runlimit_memory::maintenance::spawn` on Tokio) calls it
/// periodically; core depends on no runtime.
///
/// # Contract
///
/// * A round is bounded: it does at most a fixed amount of work, and work
///   left over waits for the next round.
/// * A round never fails as a whole: each part that failed is in the
///   report, the others still run, and the next round tries again. Nothing a
///   round does changes what a check decides.
/// * Dropping the future mid-round may leave work undone (or, as a failed
///   settlement does, units consumed), never lets a check admit more.
///
/// ```
/// use runlimit_core::{Maintain, MaintenanceReport};
///
/// /// A limiter of the application's that keeps expired entries.
/// struct Sessions;
///
/// impl Maintain for Sessions {
///     async fn maintain(&self) -> MaintenanceReport {
///         let mut report = MaintenanceReport::new();
///         report.record_removed(3); // what the round cleaned up
///         report
///     }
/// }
/// ```
pub trait Maintain: Send + Sync {
    /// Runs one round of upkeep and reports what it removed and what failed.
    fn maintain(&self) -> impl Future<Output = MaintenanceReport> + Send;
}

/// What one maintenance round did: the expired entries it removed, and the
/// parts of it that failed.
///
/// Failures carry the backend's own error (a PostgreSQL cleanup's
/// `MaintenanceError`, a lease's settlement error), never a subject or key.
#[derive(Default)]
pub struct MaintenanceReport {
    removed: u64,
    failures: Vec<MaintenanceFailure>,
}

impl MaintenanceReport {
    /// A report of a round that has done nothing yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts `entries` expired entries (rows, keys) removed.
    pub fn record_removed(&mut self, entries: u64) {
        self.removed = self.removed.saturating_add(entries);
    }

    /// Records that a part of the round failed with `error`.
    pub fn record_failure(&mut self, error: impl Into<MaintenanceFailure>) {
        self.failures.push(error.into());
    }

    /// Adds what another part of the round (a wrapped backend's) did.
    pub fn merge(&mut self, other: Self) {
        self.record_removed(other.removed);
        self.failures.extend(other.failures);
    }

    /// The expired entries the round removed.
    #[must_use]
    pub fn removed(&self) -> u64 {
        self.removed
    }

    /// The parts of the round that failed, in the order they ran.
    pub fn failures(&self) -> impl ExactSizeIterator<Item = &(dyn Error + Send + Sync + 'static)> {
        self.failures.iter().map(|failure| &**failure)
    }
}

impl fmt::Debug for MaintenanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The failures' messages: what their `Display` says and nothing more.
        let failures: Vec<String> = self.failures.iter().map(ToString::to_string).collect();
        f.debug_struct("MaintenanceReport")
            .field("removed", &self.removed)
            .field("failures", &failures)
            .finish()
    }
}

/// The round of the limiter behind the [`Arc`].
impl<M: Maintain + ?Sized> Maintain for Arc<M> {
    fn maintain(&self) -> impl Future<Output = MaintenanceReport> + Send {
        (**self).maintain()
    }
}

/// The round of the shared limiter.
impl<L: Maintain> Maintain for Shared<L> {
    fn maintain(&self) -> impl Future<Output = MaintenanceReport> + Send {
        self.0.maintain()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("table {0} could not be cleaned")]
    struct Failed(&'static str);

    #[test]
    fn a_merged_report_holds_both_parts_in_order() {
        let mut report = MaintenanceReport::new();
        report.record_removed(2);
        report.record_failure(Failed("first"));
        let mut wrapped = MaintenanceReport::new();
        wrapped.record_removed(5);
        wrapped.record_failure(Failed("second"));
        report.merge(wrapped);
        assert_eq!(report.removed(), 7);
        let failures: Vec<String> = report.failures().map(ToString::to_string).collect();
        assert_eq!(
            failures,
            [
                "table first could not be cleaned",
                "table second could not be cleaned"
            ]
        );
        assert_eq!(
            format!("{report:?}"),
            "MaintenanceReport { removed: 7, failures: [\"table first could not be cleaned\", \"table second could not be cleaned\"] }"
        );
    }
}
