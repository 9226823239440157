//! The PostgreSQL limiter.

use std::{
    fmt,
    marker::PhantomData,
    sync::Arc,
    time::{Duration, Instant},
};

use runlimit_core::{
    AdmissionReporter, BatchDecision, Check, CleanupObservation, Decision, Denial,
    FixedWindowPolicy, GcraPolicy, Limiter, Observer, Policy,
    gcra::{ExactMicros, GcraMicros},
    notify, validate_batch,
};
use sqlx::{PgConnection, PgPool, Row};

use crate::{
    config::PostgresConfig,
    connections::{Connections, Held, TakeError},
    error::{CheckError, MaintenanceError, classify, classify_maintenance},
    migrate::migrate,
};

mod sealed {
    pub trait Sealed {}
    impl Sealed for runlimit_core::FixedWindowPolicy {}
    impl Sealed for runlimit_core::GcraPolicy {}
}

/// The policies PostgreSQL can evaluate: [`FixedWindowPolicy`] and
/// [`GcraPolicy`]. Sealed.
pub trait PgPolicy: Policy + sealed::Sealed + 'static {
    /// The cleanup function for this policy's table.
    #[doc(hidden)]
    const CLEANUP: &'static str;

    /// Decides every check in one statement and returns one decision per check,
    /// in input order, having changed nothing unless every check was allowed.
    #[doc(hidden)]
    fn decide(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        config: &PostgresConfig,
    ) -> impl Future<Output = Result<Vec<Decision>, sqlx::Error>> + Send;
}

/// A quota shared by every replica connected to one PostgreSQL database.
///
/// Each [`check`](Limiter::check) or [`check_all`](Limiter::check_all) is a
/// single statement, a single round trip: a server-side function takes
/// advisory locks on the counters in a global order, locks their rows, reserves
/// capacity for new keys in the 256-shard ledger, decides every check against
/// one `pg_catalog.clock_timestamp()` sample, and writes only if the whole batch
/// is allowed. See the [crate documentation](crate) for operations.
///
/// `PostgresLimiter<FixedWindowPolicy>` (the default) and
/// `PostgresLimiter<GcraPolicy>` share one pool and schema but separate tables.
pub struct PostgresLimiter<P = FixedWindowPolicy> {
    connections: Arc<Connections>,
    config: PostgresConfig,
    observer: Option<Arc<dyn Observer>>,
    policy: PhantomData<fn() -> P>,
}

impl<P> Clone for PostgresLimiter<P> {
    fn clone(&self) -> Self {
        Self {
            connections: Arc::clone(&self.connections),
            config: self.config,
            observer: self.observer.clone(),
            policy: PhantomData,
        }
    }
}

impl<P> fmt::Debug for PostgresLimiter<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresLimiter")
            .field("policy", &std::any::type_name::<P>())
            .field("config", &self.config)
            .field("observer", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

impl<P: PgPolicy> PostgresLimiter<P> {
    /// A limiter over `pool`, which it may share with the application: each
    /// operation takes a connection and gives it back. Apply the schema first
    /// with [`migrate`](Self::migrate) (or your own vendored migrations).
    ///
    /// SQLx pings a connection given back to its pool, so on a shared pool
    /// every check is followed by a second exchange on the wire (after the
    /// check has answered). For exactly one round trip per check, give the
    /// limiter a pool of its own with
    /// [`with_dedicated_pool`](Self::with_dedicated_pool).
    #[must_use]
    pub fn new(pool: PgPool, config: PostgresConfig) -> Self {
        Self::build(Connections::new(pool, false), config)
    }

    /// A limiter that is the only user of `pool`: it keeps the connections
    /// it has used between operations (at most as many as it ran at once)
    /// rather than giving each back to the pool, so a check is exactly one
    /// statement on the wire. Each kept connection goes back to the pool
    /// after a minute, at its next use, so the pool's lifetime and idle
    /// rules still apply. Build the pool with [`pool_options`](crate::pool_options).
    ///
    /// Do not run the application's own queries on `pool`: they would wait
    /// for connections the limiter keeps. For the other policy type on the
    /// same pool, use [`for_policy`](Self::for_policy), which shares the
    /// kept connections, rather than a second dedicated limiter.
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
    /// limiter.migrate().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_dedicated_pool(pool: PgPool, config: PostgresConfig) -> Self {
        Self::build(Connections::new(pool, true), config)
    }

    /// A limiter for policy type `Q` sharing this one's pool, kept
    /// connections, configuration and observer: the fixed-window and GCRA
    /// limiters of one database.
    ///
    /// ```no_run
    /// # use runlimit_core::{FixedWindowPolicy, GcraPolicy};
    /// # use runlimit_postgres::PostgresLimiter;
    /// # fn run(windows: PostgresLimiter<FixedWindowPolicy>) {
    /// let rates: PostgresLimiter<GcraPolicy> = windows.for_policy();
    /// # let _ = rates;
    /// # }
    /// ```
    #[must_use]
    pub fn for_policy<Q: PgPolicy>(&self) -> PostgresLimiter<Q> {
        PostgresLimiter {
            connections: Arc::clone(&self.connections),
            config: self.config,
            observer: self.observer.clone(),
            policy: PhantomData,
        }
    }

    fn build(connections: Connections, config: PostgresConfig) -> Self {
        Self {
            connections: Arc::new(connections),
            config,
            observer: None,
            policy: PhantomData,
        }
    }

    /// Installs an observer for admission and cleanup observations.
    #[must_use]
    pub fn with_observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The pool.
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        self.connections.pool()
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &PostgresConfig {
        &self.config
    }

    /// Applies the bundled migrations, tolerating the host's own migrations in
    /// the same history; see [`migrate`](crate::migrate()).
    ///
    /// # Errors
    ///
    /// [`MaintenanceError::Migrate`] when a migration fails.
    pub async fn migrate(&self) -> Result<(), MaintenanceError> {
        migrate(self.connections.pool()).await
    }

    async fn acquire(&self) -> Result<Held<'_>, CheckError> {
        self.connections
            .take(self.config.pool_acquire_timeout())
            .await
            .map_err(|error| match error {
                TakeError::Timeout => CheckError::PoolTimeout,
                TakeError::Acquire(error) => CheckError::Acquire(error),
            })
    }

    async fn decide(&self, checks: &[Check<'_, P>]) -> Result<Vec<Decision>, CheckError> {
        let mut guard = self.acquire().await?;
        let decided = tokio::time::timeout(
            self.config.operation_timeout(),
            P::decide(guard.connection(), checks, &self.config),
        )
        .await;
        match decided {
            // The guard closes the connection: the statement may still be running.
            Err(_) => Err(CheckError::OperationTimeout),
            Ok(Ok(decisions)) if decisions.len() == checks.len() => {
                guard.keep();
                Ok(decisions)
            }
            Ok(Ok(_)) => Err(CheckError::UnexpectedReply),
            Ok(Err(error)) => {
                let error = classify(error);
                if matches!(error, CheckError::Database(_)) {
                    // The statement failed and its transaction rolled back; the
                    // connection itself is in a clean state.
                    guard.keep();
                }
                Err(error)
            }
        }
    }

    /// Deletes at most `maximum_rows` expired rows of this policy type's table,
    /// oldest first, and returns how many it removed. Expired rows never affect
    /// decisions, but only deletion frees their capacity-ledger slot. Rows an
    /// admission holds are skipped, so cleanup does not block admissions.
    ///
    /// # Errors
    ///
    /// A [`MaintenanceError`]; check
    /// [`may_have_removed_rows`](MaintenanceError::may_have_removed_rows) before
    /// deciding whether an unconfirmed cleanup needs repeating.
    pub async fn cleanup_expired(&self, maximum_rows: u32) -> Result<u64, MaintenanceError> {
        let started = self.observer.as_ref().map(|_| Instant::now());
        let result = self.cleanup_inner(maximum_rows).await;
        if let (Some(observer), Some(started)) = (&self.observer, started) {
            let removed = match &result {
                Ok(removed) => Some(*removed),
                Err(error) if !error.may_have_removed_rows() => Some(0),
                Err(_) => None,
            };
            let observation =
                CleanupObservation::new(u64::from(maximum_rows), removed, started.elapsed());
            notify(&**observer, |observer| observer.on_cleanup(&observation));
        }
        result
    }

    async fn cleanup_inner(&self, maximum_rows: u32) -> Result<u64, MaintenanceError> {
        let mut guard = self
            .connections
            .take(self.config.pool_acquire_timeout())
            .await
            .map_err(|error| match error {
                TakeError::Timeout => MaintenanceError::PoolTimeout,
                TakeError::Acquire(error) => MaintenanceError::Acquire(error),
            })?;
        let maximum = i32::try_from(maximum_rows).unwrap_or(i32::MAX);
        let query = sqlx::query_scalar::<_, i64>(P::CLEANUP)
            .bind(maximum)
            .bind(self.config.lock_timeout_ms());
        match tokio::time::timeout(
            self.config.operation_timeout(),
            query.fetch_one(guard.connection()),
        )
        .await
        {
            Err(_) => Err(MaintenanceError::OperationTimeout),
            Ok(Ok(removed)) => {
                guard.keep();
                Ok(u64::try_from(removed).unwrap_or(0))
            }
            Ok(Err(error)) => {
                let error = classify_maintenance(error);
                if matches!(error, MaintenanceError::Database(_)) {
                    guard.keep();
                }
                Err(error)
            }
        }
    }

    async fn check_one(&self, check: &Check<'_, P>) -> Result<Decision, CheckError> {
        let decide = async {
            let mut decisions = self.decide(std::slice::from_ref(check)).await?;
            decisions.pop().ok_or(CheckError::UnexpectedReply)
        };
        AdmissionReporter::observe_check(
            self.observer.as_deref(),
            check,
            decide,
            CheckError::may_have_consumed_quota,
        )
        .await
    }

    async fn check_batch(&self, checks: &[Check<'_, P>]) -> Result<BatchDecision, CheckError> {
        let decide = async {
            validate_batch(checks, self.config.max_batch_size())
                .map_err(CheckError::InvalidBatch)?;
            self.decide(checks).await.map(BatchDecision::from_decisions)
        };
        AdmissionReporter::observe_batch(
            self.observer.as_deref(),
            checks,
            decide,
            CheckError::may_have_consumed_quota,
        )
        .await
    }
}

macro_rules! limiter_for {
    ($policy:ty) => {
        impl Limiter for PostgresLimiter<$policy> {
            type Policy = $policy;
            type Error = CheckError;

            async fn check(&self, check: &Check<'_, $policy>) -> Result<Decision, CheckError> {
                self.check_one(check).await
            }

            async fn check_all(
                &self,
                checks: &[Check<'_, $policy>],
            ) -> Result<BatchDecision, CheckError> {
                self.check_batch(checks).await
            }
        }
    };
}

limiter_for!(FixedWindowPolicy);
limiter_for!(GcraPolicy);

/// The advisory-lock ids of a batch: derived from each counter key, sorted and
/// deduplicated so every transaction locks in one global order.
fn lock_ids<P: Policy>(checks: &[Check<'_, P>]) -> Vec<i64> {
    let mut ids: Vec<i64> = checks
        .iter()
        .map(|check| {
            let key = check.counter_key().to_bytes();
            let mut word = [0u8; 8];
            for (index, byte) in word.iter_mut().enumerate() {
                *byte = key[index] ^ key[32 + index];
            }
            i64::from_be_bytes(word)
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

fn counter_keys<P: Policy>(checks: &[Check<'_, P>]) -> Vec<Vec<u8>> {
    checks
        .iter()
        .map(|check| check.counter_key().to_bytes().to_vec())
        .collect()
}

fn as_i64(value: u64) -> i64 {
    // Every value passed is bounded by MAX_LIMIT or MAX_WINDOW in microseconds.
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn as_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

const OUTCOME_ALLOWED: i16 = 0;
const OUTCOME_QUOTA: i16 = 1;

fn capacity_decision() -> Decision {
    // The capacity ledger cannot tell when cleanup will free a slot.
    Decision::denied(Denial::StorageCapacity { retry_after: None })
}

impl PgPolicy for FixedWindowPolicy {
    const CLEANUP: &'static str = "SELECT runlimit_cleanup_fixed_windows($1, $2)";

    async fn decide(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        config: &PostgresConfig,
    ) -> Result<Vec<Decision>, sqlx::Error> {
        let limits: Vec<i64> = checks
            .iter()
            .map(|check| as_i64(check.policy().limit()))
            .collect();
        let windows: Vec<i64> = checks
            .iter()
            .map(|check| as_i64(check.policy().window_millis().saturating_mul(1_000)))
            .collect();
        let costs: Vec<i64> = checks.iter().map(|check| as_i64(check.cost())).collect();
        let rows = sqlx::query(
            "SELECT r_outcome, r_used, r_expires_us, r_now_us \
             FROM runlimit_check_fixed_windows($1, $2, $3, $4, $5, $6, $7, $8) ORDER BY r_index",
        )
        .bind(counter_keys(checks))
        .bind(lock_ids(checks))
        .bind(limits)
        .bind(windows)
        .bind(costs)
        .bind(i32::try_from(config.max_rows_per_shard()).unwrap_or(i32::MAX))
        .bind(config.lock_timeout_ms())
        .bind(config.relaxed_durability())
        .fetch_all(connection)
        .await?;
        checks
            .iter()
            .zip(rows)
            .map(|(check, row)| {
                let outcome: i16 = row.try_get(0)?;
                let used = as_u64(row.try_get(1)?);
                let left = Duration::from_micros(as_u64(
                    row.try_get::<i64, _>(2)? - row.try_get::<i64, _>(3)?,
                ));
                let policy = check.policy();
                Ok(match outcome {
                    OUTCOME_ALLOWED => {
                        Decision::allowed(policy.limit(), policy.limit().saturating_sub(used), left)
                            .map_err(|error| sqlx::Error::Decode(Box::new(error)))?
                    }
                    OUTCOME_QUOTA => Decision::for_mode(
                        policy.quota_mode(),
                        Denial::QuotaExceeded {
                            capacity: policy.limit(),
                            retry_after: left,
                        },
                    ),
                    _ => capacity_decision(),
                })
            })
            .collect()
    }
}

impl PgPolicy for GcraPolicy {
    const CLEANUP: &'static str = "SELECT runlimit_cleanup_gcra($1, $2)";

    async fn decide(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        config: &PostgresConfig,
    ) -> Result<Vec<Decision>, sqlx::Error> {
        let exact: Vec<GcraMicros> = checks
            .iter()
            .map(|check| GcraMicros::new(check.policy(), check.cost()))
            .collect();
        let column = |value: fn(&GcraMicros) -> u64| -> Vec<i64> {
            exact.iter().map(|check| as_i64(value(check))).collect()
        };
        let rows = sqlx::query(
            "SELECT r_outcome, r_ahead_us, r_ahead_rem \
             FROM runlimit_check_gcra($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ORDER BY r_index",
        )
        .bind(counter_keys(checks))
        .bind(lock_ids(checks))
        .bind(column(|check| check.quota))
        .bind(column(|check| check.increment.whole))
        .bind(column(|check| check.increment.remainder))
        .bind(column(|check| check.tolerance.whole))
        .bind(column(|check| check.tolerance.remainder))
        .bind(i32::try_from(config.max_rows_per_shard()).unwrap_or(i32::MAX))
        .bind(config.lock_timeout_ms())
        .bind(config.relaxed_durability())
        .fetch_all(connection)
        .await?;
        checks
            .iter()
            .zip(rows)
            .zip(&exact)
            .map(|((check, row), exact)| {
                let outcome: i16 = row.try_get(0)?;
                let ahead = ExactMicros {
                    whole: as_u64(row.try_get(1)?),
                    remainder: as_u64(row.try_get(2)?),
                };
                Ok(match outcome {
                    OUTCOME_ALLOWED | OUTCOME_QUOTA => exact.decision(check.policy(), ahead),
                    _ => capacity_decision(),
                })
            })
            .collect()
    }
}
