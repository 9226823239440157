//! Periodic maintenance: what a round does for this crate's limiters and
//! wrappers, and (with the `tokio` feature) the task that runs the rounds.
//!
//! A deployment's upkeep is one call (with the `tokio` feature, on by
//! default): `spawn` the maintenance of the limiter it admits with, and keep
//! the `MaintenanceHandle` it returns for as long as it should run.
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//!
//! use runlimit_memory::{LeaseConfig, Leased, MemoryStore, MemoryStoreConfig, maintenance};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // In production the shared store is a PostgresLimiter, whose rounds also
//! // delete expired rows.
//! let shared = MemoryStore::new(MemoryStoreConfig::new(10_000)?);
//! let leased = Arc::new(Leased::new(shared, LeaseConfig::new(10_000)?));
//! // Every minute: idle leases given back, then the shared store's round.
//! let maintenance = maintenance::spawn(Arc::clone(&leased), Duration::from_secs(60))?;
//! // … admit through `runlimit_core::Shared(leased)` …
//! maintenance.stop().await;
//! # Ok(())
//! # }
//! ```
//!
//! What a round does, by limiter:
//!
//! | limiter | a round |
//! |---|---|
//! | `runlimit_postgres::PostgresLimiter` | deletes the expired rows of every counter table, in bounded statements |
//! | `runlimit_redis::RedisLimiter` | nothing: keys expire by themselves |
//! | [`MemoryStore`](crate::MemoryStore), [`SlidingWindowStore`](crate::SlidingWindowStore), [`GcraStore`](crate::GcraStore) | nothing: checks clean up as they store new keys |
//! | [`Leased`] | gives back the units of idle leases ([`Leased::flush_idle`]), then runs its shared backend's round |
//! | [`Tiered`], [`Cached`], [`Shared`](runlimit_core::Shared), `Arc` | runs the round of the backend it stands in front of |

use runlimit_core::{Grant, Maintain, MaintenanceReport};

use crate::{Algorithm, Cached, Leasable, Leased, Store, Tiered};

#[cfg(feature = "tokio")]
pub use runner::{MaintenanceHandle, SpawnError, spawn};

/// Nothing to do: a check that stores a new key in a shard at least half
/// full first removes expired entries, so a store never needs a round.
impl<A: Algorithm> Maintain for Store<A> {
    async fn maintain(&self) -> MaintenanceReport {
        MaintenanceReport::new()
    }
}

/// Gives back the unspent units of leases idle for
/// [`idle_after`](crate::LeaseConfig::with_idle_after) (and drops expired
/// leases) with [`flush_idle`](Leased::flush_idle), then runs the shared
/// backend's round. A settlement that failed is in the report; its units
/// stay consumed at the shared store, as `flush_idle` says.
///
/// Several `Leased` in front of one [`Shared`](runlimit_core::Shared) store
/// each run that store's round as well: maintaining each of them is right,
/// and repeats the store's round (for PostgreSQL, a few more statements per
/// interval).
impl<S> Maintain for Leased<S>
where
    S: Grant + Maintain,
    S::Policy: Leasable,
{
    async fn maintain(&self) -> MaintenanceReport {
        let mut report = MaintenanceReport::new();
        if let Err(error) = self.flush_idle().await {
            report.record_failure(error);
        }
        report.merge(self.shared().maintain().await);
        report
    }
}

/// The shared backend's round; the gate, a memory store, needs none.
impl<G: Send + Sync, S: Maintain> Maintain for Tiered<G, S> {
    async fn maintain(&self) -> MaintenanceReport {
        self.shared().maintain().await
    }
}

/// The backend's round; cached denials expire by themselves.
impl<S: Maintain> Maintain for Cached<S> {
    async fn maintain(&self) -> MaintenanceReport {
        self.backend().maintain().await
    }
}

#[cfg(feature = "tokio")]
mod runner {
    use std::{error::Error, fmt, time::Duration};

    use runlimit_core::{Maintain, MaintenanceReport};
    use tokio::{sync::oneshot, task::JoinHandle, time::Instant};

    /// Why [`spawn`] started nothing.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum SpawnError {
        /// The interval between rounds was zero.
        #[error("the maintenance interval must be longer than zero")]
        ZeroInterval,
        /// `spawn` was called outside a Tokio runtime.
        #[error("maintenance must be spawned inside a Tokio runtime")]
        NoRuntime,
    }

    /// Starts `limiter`'s maintenance on the current Tokio runtime: one
    /// [`Maintain`] round every `every`, the first one `every` from now. A
    /// round that takes longer than `every` delays the next rather than
    /// being followed by a burst of them.
    ///
    /// A round's failures never end the task: each is reported where the
    /// backend reports its work (a PostgreSQL cleanup to the limiter's
    /// observer, a lease's settlement to the shared backend's) and as a
    /// `tracing` warning (target `runlimit`) with the error's message, and
    /// the next round tries again.
    ///
    /// Pass an `Arc` (or a clone) of a limiter the application also admits
    /// with. The task runs until [`MaintenanceHandle::stop`], or until the
    /// handle is dropped.
    ///
    /// # Errors
    ///
    /// [`SpawnError::ZeroInterval`] for an `every` of zero,
    /// [`SpawnError::NoRuntime`] outside a Tokio runtime.
    pub fn spawn<M: Maintain + 'static>(
        limiter: M,
        every: Duration,
    ) -> Result<MaintenanceHandle, SpawnError> {
        if every.is_zero() {
            return Err(SpawnError::ZeroInterval);
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| SpawnError::NoRuntime)?;
        let (stop, stopped) = oneshot::channel();
        // Counted from now, not from when the task first runs.
        let first = Instant::now() + every;
        let task = runtime.spawn(run(limiter, first, every, stopped));
        Ok(MaintenanceHandle {
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// Runs a round at `first`, then every `every`, until `stopped`
    /// resolves (a stop, or the handle dropped).
    async fn run<M: Maintain>(
        limiter: M,
        first: Instant,
        every: Duration,
        mut stopped: oneshot::Receiver<()>,
    ) {
        let mut next = first;
        loop {
            if tokio::time::timeout_at(next, &mut stopped).await.is_ok() {
                return;
            }
            report(&limiter.maintain().await);
            // The next round an interval after this one was due, or after
            // it ended if it overran.
            next = (next + every).max(Instant::now());
        }
    }

    fn report(report: &MaintenanceReport) {
        for failure in report.failures() {
            tracing::warn!(
                target: "runlimit",
                error = %Chain(failure),
                "rate limit maintenance failed; the next round tries again"
            );
        }
        tracing::debug!(
            target: "runlimit",
            removed = report.removed(),
            failures = report.failures().len(),
            "rate limit maintenance round"
        );
    }

    /// An error's message followed by its sources', `: `-separated.
    struct Chain<'a>(&'a (dyn Error + 'static));

    impl fmt::Display for Chain<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", self.0)?;
            let mut source = self.0.source();
            while let Some(error) = source {
                write!(f, ": {error}")?;
                source = error.source();
            }
            Ok(())
        }
    }

    /// Stops the maintenance task [`spawn`] started: with
    /// [`stop`](Self::stop), or by being dropped.
    #[must_use = "dropping the handle stops the maintenance"]
    pub struct MaintenanceHandle {
        stop: Option<oneshot::Sender<()>>,
        task: Option<JoinHandle<()>>,
    }

    impl MaintenanceHandle {
        /// Stops the maintenance: no round starts after this, and it returns
        /// once a round in progress has ended.
        pub async fn stop(mut self) {
            self.stop.take();
            if let Some(task) = self.task.take() {
                // A round that panicked has ended the task as well.
                let _ = task.await;
            }
        }

        /// Whether the task has ended.
        #[must_use]
        pub fn is_finished(&self) -> bool {
            self.task.as_ref().is_none_or(JoinHandle::is_finished)
        }
    }

    /// Dropping the handle stops the maintenance as [`stop`](Self::stop)
    /// does, without waiting for a round in progress to end.
    impl Drop for MaintenanceHandle {
        fn drop(&mut self) {
            self.stop.take();
        }
    }

    impl fmt::Debug for MaintenanceHandle {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("MaintenanceHandle")
                .field("finished", &self.is_finished())
                .finish_non_exhaustive()
        }
    }
}
