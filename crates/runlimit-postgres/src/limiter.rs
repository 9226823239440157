//! The PostgreSQL limiter.

use std::{
    fmt,
    marker::PhantomData,
    sync::Arc,
    time::{Duration, Instant},
};

use runlimit_core::{
    Admission, AdmissionOutcome, AdmissionReporter, Admitted, Backend, BatchDecision, CarriedFrom,
    CarryObservation, Check, CleanupObservation, CounterKey, Credits, Decision, Denial,
    FixedWindowPolicy, GcraPolicy, Grant, Granted, Lifecycle, Limiter, Observer, Operation, Policy,
    PolicyLabel, Receipt, Refunded, Settle, SlidingWindowPolicy, Stamp, Storage, SubjectKey,
    gcra::{ExactMicros, GcraMicros},
    grant::grant_bound,
    notify,
    sliding::{Buckets, COUNTED, SlidingMicros, SlidingOutcome},
    validate_batch,
};
use sqlx::{
    PgConnection, PgPool, Postgres, Row,
    postgres::{PgArguments, PgRow},
    query::Query,
};

use crate::{
    batch, carry,
    config::PostgresConfig,
    connections::{Connections, Held, TakeError},
    counters::{self, Sources},
    error::{CheckError, MaintenanceError, classify, classify_maintenance},
    full_counters::FullCounters,
    migrate::migrate,
    single::{CHECK_FIXED_WINDOW, CHECK_LIVE_FIXED_WINDOW, EpochMicros},
};

mod sealed {
    pub trait Sealed {}
    impl Sealed for runlimit_core::FixedWindowPolicy {}
    impl Sealed for runlimit_core::GcraPolicy {}
    impl Sealed for runlimit_core::SlidingWindowPolicy {}
    impl Sealed for runlimit_core::AnyPolicy {}
}

/// The policies PostgreSQL can evaluate: [`FixedWindowPolicy`],
/// [`SlidingWindowPolicy`], [`GcraPolicy`] and [`AnyPolicy`](runlimit_core::AnyPolicy) (any of the
/// three, chosen per check). Sealed.
pub trait PgPolicy: Policy + sealed::Sealed + 'static {
    /// The cleanup function for this policy's table.
    #[doc(hidden)]
    const CLEANUP: &'static str;

    /// The issuer name on this policy type's receipts.
    #[doc(hidden)]
    const ISSUER: &'static str;

    /// Decides every check in one statement (carrying the state of counters
    /// that carry; see the `carry` module) and returns one decision per
    /// check, in input order, with what a receipt needs, having changed
    /// nothing unless every check was allowed (carried states excepted).
    ///
    /// `full` remembers counters recent replies found full, for the policies
    /// whose batches it routes.
    #[doc(hidden)]
    fn decide(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        config: &PostgresConfig,
        full: &FullCounters,
    ) -> impl Future<Output = Result<Vec<Decided>, sqlx::Error>> + Send;

    /// Grants `check` between its cost and `up_to` units (already bounded by
    /// the policy's capacity) in one statement: the units granted (0 when
    /// denied) and what a check of that cost decided.
    #[doc(hidden)]
    fn grant(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
        up_to: u64,
        config: &PostgresConfig,
        full: &FullCounters,
    ) -> impl Future<Output = Result<(u64, Decided), sqlx::Error>> + Send;

    /// Credits `units` (one amount per check, none zero) to `checks` under
    /// the stamps `admitted` records, in one statement; whether each check
    /// was credited.
    #[doc(hidden)]
    fn refund(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        admitted: &[Admitted],
        units: &[u64],
        config: &PostgresConfig,
    ) -> impl Future<Output = Result<Vec<bool>, sqlx::Error>> + Send;

    /// What `check` would get now, in one read-only statement.
    #[doc(hidden)]
    fn peek(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
    ) -> impl Future<Output = Result<Decision, sqlx::Error>> + Send;

    /// Deletes `check`'s counter in one statement; whether it was live.
    #[doc(hidden)]
    fn reset(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
        config: &PostgresConfig,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;
}

/// One check's decision and what its receipt records.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Decided {
    decision: Decision,
    stamp: Stamp,
    /// What the check's counter carried its state from, when it did.
    carried: Option<CarriedFrom>,
}

impl Decided {
    /// The decision, recording that its counter carried a state from `from`.
    pub(crate) fn carried(mut self, from: Option<CarriedFrom>) -> Self {
        self.carried = from;
        self
    }
}

/// A quota shared by every replica connected to one PostgreSQL database.
///
/// Each [`check`](Limiter::check) or [`check_all`](Limiter::check_all) is a
/// single statement, a single round trip: in general a server-side function
/// takes advisory locks on the counters in a global order, locks their rows,
/// reserves capacity for new keys in the 256-shard ledger, decides every check
/// against one `pg_catalog.clock_timestamp()` sample, and writes only if the
/// whole batch is allowed; single checks and small fixed-window batches of
/// counters that exist are admitted by an `UPDATE` in place, under the same
/// lock order. See the [crate documentation](crate) for operations.
///
/// `PostgresLimiter<FixedWindowPolicy>` (the default),
/// `PostgresLimiter<SlidingWindowPolicy>` and `PostgresLimiter<GcraPolicy>`
/// share one pool and schema but separate tables;
/// `PostgresLimiter<AnyPolicy>` checks all three, and decides a batch that
/// mixes them in one statement, all admitted or none consumed. Counters whose
/// policy continues from a predecessor, or whose subject key keeps a previous
/// secret's, carry their state on a subject's first check, in its one round
/// trip; see the crate documentation.
pub struct PostgresLimiter<P = FixedWindowPolicy> {
    connections: Arc<Connections>,
    config: PostgresConfig,
    full: Arc<FullCounters>,
    observer: Option<Arc<dyn Observer>>,
    policy: PhantomData<fn() -> P>,
}

impl<P> Clone for PostgresLimiter<P> {
    fn clone(&self) -> Self {
        Self {
            connections: Arc::clone(&self.connections),
            config: self.config,
            full: Arc::clone(&self.full),
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
    /// limiters of one database, or the [`AnyPolicy`](runlimit_core::AnyPolicy) limiter of all three.
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
            full: Arc::clone(&self.full),
            observer: self.observer.clone(),
            policy: PhantomData,
        }
    }

    fn build(connections: Connections, config: PostgresConfig) -> Self {
        Self {
            connections: Arc::new(connections),
            config,
            full: Arc::new(FullCounters::new()),
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

    /// Runs one statement on a connection within the operation timeout, and
    /// classifies its failure. A connection whose statement ended cleanly
    /// (answered, or refused by the server, which rolled back) is kept or
    /// returned; any other is closed.
    async fn run<T>(
        &self,
        operate: impl AsyncFnOnce(&mut PgConnection) -> Result<T, sqlx::Error>,
    ) -> Result<T, CheckError> {
        let mut guard = self.acquire().await?;
        let ran =
            tokio::time::timeout(self.config.operation_timeout(), operate(guard.connection()))
                .await;
        match ran {
            // The guard closes the connection: the statement may still be running.
            Err(_) => Err(CheckError::OperationTimeout),
            Ok(Ok(value)) => {
                guard.keep();
                Ok(value)
            }
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

    /// Decides `checks` in one statement: a decision, and a stamp for the
    /// receipt, per check.
    async fn decide(&self, checks: &[Check<'_, P>]) -> Result<Vec<Decided>, CheckError> {
        let decided = self
            .run(async |connection| P::decide(connection, checks, &self.config, &self.full).await)
            .await?;
        if decided.len() == checks.len() {
            self.report_carries(checks, &decided);
            Ok(decided)
        } else {
            Err(CheckError::UnexpectedReply)
        }
    }

    /// Tells the observer of each counter that carried a state: its policy
    /// and the kind of source, never the subject.
    fn report_carries(&self, checks: &[Check<'_, P>], decided: &[Decided]) {
        let Some(observer) = &self.observer else {
            return;
        };
        for (check, decided) in checks.iter().zip(decided) {
            if let Some(from) = decided.carried {
                let observation = CarryObservation::new(PolicyLabel::of(check), from);
                notify(&**observer, |observer| observer.on_carry(&observation));
            }
        }
    }

    /// Deletes at most `maximum_rows` expired rows of this policy type's table
    /// (of all three for [`AnyPolicy`](runlimit_core::AnyPolicy), a share of the bound each),
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

    async fn check_one(&self, check: &Check<'_, P>) -> Result<Decided, CheckError> {
        let decide = async {
            let mut decided = self.decide(std::slice::from_ref(check)).await?;
            decided.pop().ok_or(CheckError::UnexpectedReply)
        };
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Check,
            std::slice::from_ref(check),
            decide,
            |decided| AdmissionOutcome::of_decision(&decided.decision),
            CheckError::may_have_consumed_quota,
        )
        .await
    }

    async fn check_batch(
        &self,
        checks: &[Check<'_, P>],
    ) -> Result<(BatchDecision, Vec<Decided>), CheckError> {
        let decide = async {
            validate_batch(checks, self.config.max_batch_size())
                .map_err(CheckError::InvalidBatch)?;
            let decided = self.decide(checks).await?;
            let batch = BatchDecision::from_decisions(
                decided.iter().map(|decided| decided.decision).collect(),
            );
            Ok((batch, decided))
        };
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Batch,
            checks,
            decide,
            |(batch, _)| AdmissionOutcome::of_batch(batch),
            CheckError::may_have_consumed_quota,
        )
        .await
    }

    async fn admit_one(&self, check: &Check<'_, P>) -> Result<Admission<Decision>, CheckError> {
        let decided = self.check_one(check).await?;
        let receipt = decided
            .decision
            .is_allowed()
            .then(|| Receipt::new(P::ISSUER, [Admitted::new(check, decided.stamp)]));
        Ok(Admission::new(decided.decision, receipt))
    }

    async fn admit_batch(
        &self,
        checks: &[Check<'_, P>],
    ) -> Result<Admission<BatchDecision>, CheckError> {
        let (batch, decided) = self.check_batch(checks).await?;
        let receipt = batch.is_allowed().then(|| {
            Receipt::new(
                P::ISSUER,
                checks
                    .iter()
                    .zip(&decided)
                    .map(|(check, decided)| Admitted::new(check, decided.stamp)),
            )
        });
        Ok(Admission::new(batch, receipt))
    }

    async fn grant_units(&self, check: &Check<'_, P>, up_to: u64) -> Result<Granted, CheckError> {
        let up_to = grant_bound(check, up_to);
        let grant = async {
            let (units, decided) = self
                .run(async |connection| {
                    P::grant(connection, check, up_to, &self.config, &self.full).await
                })
                .await?;
            self.report_carries(std::slice::from_ref(check), std::slice::from_ref(&decided));
            if !decided.decision.is_allowed() {
                return Ok(Granted::new(decided.decision, 0, None));
            }
            let granted = Check::weighted(check.policy(), *check.subject(), units)
                .map_err(|_| CheckError::UnexpectedReply)?;
            let receipt = Receipt::new(P::ISSUER, [Admitted::new(&granted, decided.stamp)]);
            Ok(Granted::new(decided.decision, units, Some(receipt)))
        };
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Check,
            std::slice::from_ref(check),
            grant,
            |granted| AdmissionOutcome::of_decision(granted.decision()),
            CheckError::may_have_consumed_quota,
        )
        .await
    }

    /// Gives back `used` (one amount per check; `None` for a whole refund)
    /// of what `receipt` records for `checks`, in one statement; checks that
    /// keep their whole cost are not sent, and nothing is sent when none
    /// gives anything back.
    async fn refund_receipt(
        &self,
        checks: &[Check<'_, P>],
        receipt: Receipt,
        used: Option<&[u64]>,
    ) -> Result<Refunded, CheckError> {
        let refund = async {
            let Credits {
                checks: sent,
                admitted,
                units,
            } = receipt.credits(P::ISSUER, checks, used)?;
            if sent.is_empty() {
                return Ok(Refunded::new(0, checks.len()));
            }
            let credited = self
                .run(async |connection| {
                    P::refund(connection, &sent, &admitted, &units, &self.config).await
                })
                .await?;
            if credited.len() != sent.len() {
                return Err(CheckError::UnexpectedReply);
            }
            let count = credited.iter().filter(|&&credited| credited).count();
            Ok(Refunded::new(count, checks.len()))
        };
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Refund,
            checks,
            refund,
            AdmissionOutcome::of_refund,
            CheckError::may_have_consumed_quota,
        )
        .await
    }

    async fn peek_check(&self, check: &Check<'_, P>) -> Result<Decision, CheckError> {
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Peek,
            std::slice::from_ref(check),
            self.run(async |connection| P::peek(connection, check).await),
            AdmissionOutcome::of_peek,
            // A read-only statement changes nothing, whatever became of it.
            |_| false,
        )
        .await
    }

    async fn reset_counter(&self, policy: &P, subject: &SubjectKey) -> Result<bool, CheckError> {
        let check = Check::new(policy, *subject);
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Reset,
            std::slice::from_ref(&check),
            self.run(async |connection| P::reset(connection, &check, &self.config).await),
            |existed| AdmissionOutcome::of_reset(*existed),
            CheckError::may_have_consumed_quota,
        )
        .await
    }
}

impl<P: PgPolicy> Limiter for PostgresLimiter<P> {
    type Policy = P;
    type Error = CheckError;

    async fn check(&self, check: &Check<'_, P>) -> Result<Decision, CheckError> {
        self.check_one(check).await.map(|decided| decided.decision)
    }

    async fn check_all(&self, checks: &[Check<'_, P>]) -> Result<BatchDecision, CheckError> {
        self.check_batch(checks).await.map(|(batch, _)| batch)
    }
}

/// Shared by every replica connected to the database.
impl<P: PgPolicy> Backend for PostgresLimiter<P> {
    fn storage(&self, _policy: &P) -> Storage {
        Storage::Shared
    }
}

/// Each refund, peek and reset is one statement (one round trip) on
/// PostgreSQL's clock, with the lock order and error classes of
/// checks; see [`Lifecycle`] and the algorithm's refund rule.
impl<P: PgPolicy> Lifecycle for PostgresLimiter<P> {
    async fn admit(&self, check: &Check<'_, P>) -> Result<Admission<Decision>, CheckError> {
        self.admit_one(check).await
    }

    async fn admit_all(
        &self,
        checks: &[Check<'_, P>],
    ) -> Result<Admission<BatchDecision>, CheckError> {
        self.admit_batch(checks).await
    }

    async fn refund(
        &self,
        checks: &[Check<'_, P>],
        receipt: Receipt,
    ) -> Result<Refunded, CheckError> {
        self.refund_receipt(checks, receipt, None).await
    }

    async fn peek(&self, check: &Check<'_, P>) -> Result<Decision, CheckError> {
        self.peek_check(check).await
    }

    async fn reset(&self, policy: &P, subject: &SubjectKey) -> Result<bool, CheckError> {
        self.reset_counter(policy, subject).await
    }
}

/// A grant is one statement: the counter's locks, its room read on
/// PostgreSQL's clock, and the admission of that many units.
impl<P: PgPolicy> Grant for PostgresLimiter<P> {
    async fn grant(&self, check: &Check<'_, P>, up_to: u64) -> Result<Granted, CheckError> {
        self.grant_units(check, up_to).await
    }
}

/// A settlement is a refund of the unused units: one statement, or
/// none when every check keeps its whole cost.
impl<P: PgPolicy> Settle for PostgresLimiter<P> {
    async fn settle(
        &self,
        checks: &[Check<'_, P>],
        receipt: Receipt,
        used: &[u64],
    ) -> Result<Refunded, CheckError> {
        self.refund_receipt(checks, receipt, Some(used)).await
    }
}

/// The advisory-lock id of one check's counter.
pub(crate) fn lock_id<P: Policy>(check: &Check<'_, P>) -> i64 {
    counter_lock_id(&check.counter_key())
}

/// The advisory-lock id of one counter key.
pub(crate) fn counter_lock_id(counter: &CounterKey) -> i64 {
    let key = counter.to_bytes();
    let mut word = [0u8; 8];
    for (index, byte) in word.iter_mut().enumerate() {
        *byte = key[index] ^ key[32 + index];
    }
    i64::from_be_bytes(word)
}

/// The advisory-lock ids of a batch: derived from each counter key, sorted and
/// deduplicated so every transaction locks in one global order.
pub(crate) fn lock_ids<P: Policy>(checks: &[Check<'_, P>]) -> Vec<i64> {
    sorted_lock_ids(checks.iter().map(lock_id).collect())
}

/// `ids` sorted and deduplicated: the order every transaction locks in.
pub(crate) fn sorted_lock_ids(mut ids: Vec<i64>) -> Vec<i64> {
    ids.sort_unstable();
    ids.dedup();
    ids
}

pub(crate) fn counter_keys<P: Policy>(checks: &[Check<'_, P>]) -> Vec<Vec<u8>> {
    checks
        .iter()
        .map(|check| check.counter_key().to_bytes().to_vec())
        .collect()
}

/// The parameters every admission function takes last: the rows a capacity
/// shard may hold, the lock timeout, and whether commits may skip the
/// write-ahead-log flush.
pub(crate) trait BindSettings {
    fn bind_settings(self, config: &PostgresConfig) -> Self;
}

impl BindSettings for Query<'_, Postgres, PgArguments> {
    fn bind_settings(self, config: &PostgresConfig) -> Self {
        self.bind(i32::try_from(config.max_rows_per_shard()).unwrap_or(i32::MAX))
            .bind(config.lock_timeout_ms())
            .bind(config.relaxed_durability())
    }
}

pub(crate) fn as_i64(value: u64) -> i64 {
    // Every value passed is bounded by MAX_LIMIT or MAX_WINDOW in microseconds.
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn as_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A stamp word as the signed integer PostgreSQL stores (and back): the
/// bit pattern is kept, so every value round-trips.
pub(crate) fn word_to_i64(word: u64) -> i64 {
    i64::from_ne_bytes(word.to_ne_bytes())
}

fn i64_to_word(value: i64) -> u64 {
    u64::from_ne_bytes(value.to_ne_bytes())
}

const OUTCOME_ALLOWED: i16 = 0;
const OUTCOME_QUOTA: i16 = 1;

fn capacity_decision() -> Decision {
    // The capacity ledger cannot tell when cleanup will free a slot.
    Decision::denied(Denial::StorageCapacity { retry_after: None })
}

fn micros_between(later: i64, earlier: i64) -> Duration {
    Duration::from_micros(as_u64(later.saturating_sub(earlier)))
}

impl PgPolicy for FixedWindowPolicy {
    const CLEANUP: &'static str = "SELECT runlimit_cleanup_fixed_windows($1, $2)";
    const ISSUER: &'static str = "runlimit-postgres/fixed_window";

    async fn decide(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        config: &PostgresConfig,
        full: &FullCounters,
    ) -> Result<Vec<Decided>, sqlx::Error> {
        let limit = |check: &Check<'_, Self>| as_i64(check.policy().limit());
        let window_us =
            |check: &Check<'_, Self>| as_i64(check.policy().window_millis().saturating_mul(1_000));
        let cost = |check: &Check<'_, Self>| as_i64(check.cost());
        // Counters that may carry another's state take the same statements,
        // with their carry sources for fallbacks that carry (see the `carry`
        // module).
        let carrying = checks.iter().any(Check::carries);
        if carrying && checks.len() > batch::MAX_CHECKS {
            return counters::decide(connection, checks, config, full).await;
        }
        let sources = if carrying {
            Sources::of(checks)
        } else {
            Sources::default()
        };
        // Each check's outcome, count, window expiry and clock sample, and
        // the source it carried from.
        let rows: Vec<(batch::Reply, i64)> = if let [check] = checks {
            // One check: a statement that admits it by updating its row in
            // place, or else calls the function of one row.
            let mut query = sqlx::query(if carrying {
                CHECK_LIVE_FIXED_WINDOW
            } else {
                CHECK_FIXED_WINDOW
            })
            .bind(check.counter_key().to_bytes().to_vec())
            .bind(lock_id(check))
            .bind(limit(check))
            .bind(window_us(check))
            .bind(cost(check))
            .bind_settings(config);
            if carrying {
                query = query.bind(&sources.keys).bind(&sources.words);
            }
            let row = query.fetch_one(connection).await?;
            let (EpochMicros(expires_us), EpochMicros(now_us)) = (row.try_get(2)?, row.try_get(3)?);
            let carried = if carrying {
                row.try_get::<Option<i32>, _>(4)?.map_or(0, i64::from)
            } else {
                0
            };
            vec![(
                (row.try_get(0)?, row.try_get(1)?, expires_us, now_us),
                carried,
            )]
        } else if checks.len() <= batch::MAX_CHECKS {
            // A small batch: a statement that admits it by updating its rows
            // in place, or else settles it; a batch naming a counter found
            // full goes to the settling function directly. `check_batch`
            // validated it, so no counter appears twice, which the
            // statement's take-back relies on.
            let mut locks: Vec<i64> = checks.iter().map(lock_id).collect();
            let statement = if full.any(locks.iter().copied()) {
                batch::settle_statement(checks.len(), carrying)
            } else {
                batch::statement(checks.len(), carrying)
            };
            locks.sort_unstable();
            let mut query = sqlx::query(statement);
            for check in checks {
                query = query.bind(check.counter_key().to_bytes().to_vec());
            }
            for value in checks.iter().map(limit) {
                query = query.bind(value);
            }
            for value in checks.iter().map(cost) {
                query = query.bind(value);
            }
            for value in checks.iter().map(window_us) {
                query = query.bind(value);
            }
            for value in locks {
                query = query.bind(value);
            }
            query = query.bind_settings(config);
            if carrying {
                query = query.bind(&sources.keys).bind(&sources.words);
            }
            batch::replies(&query.fetch_all(connection).await?, checks.len(), carrying)?
        } else {
            sqlx::query(
                "SELECT r_outcome, r_used, r_expires_us, r_now_us \
                 FROM runlimit_check_fixed_windows($1, $2, $3, $4, $5, $6, $7, $8) ORDER BY r_index",
            )
            .bind(counter_keys(checks))
            .bind(lock_ids(checks))
            .bind(checks.iter().map(limit).collect::<Vec<_>>())
            .bind(checks.iter().map(window_us).collect::<Vec<_>>())
            .bind(checks.iter().map(cost).collect::<Vec<_>>())
            .bind_settings(config)
            .fetch_all(connection)
            .await?
            .iter()
            .map(|row| {
                let reply = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?, row.try_get(3)?);
                Ok((reply, 0))
            })
            .collect::<Result<_, sqlx::Error>>()?
        };
        checks
            .iter()
            .zip(rows)
            .map(|(check, (reply, carried))| {
                Ok(fixed_window_decided(check, reply, full)?
                    .carried(sources.carried(Some(carried))?))
            })
            .collect()
    }

    async fn grant(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
        up_to: u64,
        config: &PostgresConfig,
        full: &FullCounters,
    ) -> Result<(u64, Decided), sqlx::Error> {
        if check.carries() {
            return counters::grant(connection, check, up_to, config, full).await;
        }
        let policy = check.policy();
        let row = sqlx::query(
            "SELECT r_granted, r_outcome, r_used, r_expires_us, r_now_us \
             FROM runlimit_grant_fixed_window($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(check.counter_key().to_bytes().to_vec())
        .bind(lock_id(check))
        .bind(as_i64(policy.limit()))
        .bind(as_i64(policy.window_millis().saturating_mul(1_000)))
        .bind(as_i64(check.cost()))
        .bind(as_i64(up_to))
        .bind_settings(config)
        .fetch_one(connection)
        .await?;
        let granted = as_u64(row.try_get(0)?);
        let reply = (
            row.try_get(1)?,
            row.try_get(2)?,
            row.try_get(3)?,
            row.try_get(4)?,
        );
        Ok((granted, fixed_window_decided(check, reply, full)?))
    }

    async fn refund(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        admitted: &[Admitted],
        units: &[u64],
        config: &PostgresConfig,
    ) -> Result<Vec<bool>, sqlx::Error> {
        let stamp_word = |index: usize| -> Vec<i64> {
            admitted
                .iter()
                .map(|admitted| word_to_i64(admitted.stamp().words()[index]))
                .collect()
        };
        let costs: Vec<i64> = units.iter().map(|&units| as_i64(units)).collect();
        let windows: Vec<i64> = checks
            .iter()
            .map(|check| as_i64(check.policy().window_millis().saturating_mul(1_000)))
            .collect();
        let rows = sqlx::query(
            "SELECT r_credited FROM runlimit_refund_fixed_windows($1, $2, $3, $4, $5, $6, $7, $8) \
             ORDER BY r_index",
        )
        .bind(counter_keys(checks))
        .bind(lock_ids(checks))
        .bind(costs)
        .bind(stamp_word(0))
        .bind(stamp_word(1))
        .bind(windows)
        .bind(config.lock_timeout_ms())
        .bind(config.relaxed_durability())
        .fetch_all(connection)
        .await?;
        rows.into_iter().map(|row| row.try_get(0)).collect()
    }

    async fn peek(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
    ) -> Result<Decision, sqlx::Error> {
        if check.carries() {
            return carry::peek(connection, check).await;
        }
        let row = sqlx::query(
            "SELECT w.used, (EXTRACT(EPOCH FROM w.window_expires_at) * 1000000)::bigint, \
             (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000000)::bigint \
             FROM runlimit_fixed_windows AS w WHERE w.counter_key = $1",
        )
        .bind(check.counter_key().to_bytes().to_vec())
        .fetch_optional(connection)
        .await?;
        let live = match row {
            Some(row) => {
                let used: i64 = row.try_get(0)?;
                let expires_us: i64 = row.try_get(1)?;
                let now_us: i64 = row.try_get(2)?;
                (expires_us > now_us && used > 0)
                    .then(|| (as_u64(used), micros_between(expires_us, now_us)))
            }
            None => None,
        };
        let (used, left) = live.unwrap_or((0, Duration::ZERO));
        Ok(check.policy().peek_decision(used, left, check.cost()))
    }

    async fn reset(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
        config: &PostgresConfig,
    ) -> Result<bool, sqlx::Error> {
        if check.carries() {
            return carry::reset(connection, check, config).await;
        }
        sqlx::query_scalar("SELECT runlimit_reset_fixed_windows($1, $2, $3, $4)")
            .bind(check.counter_key().to_bytes().to_vec())
            .bind(lock_id(check))
            .bind(config.lock_timeout_ms())
            .bind(config.relaxed_durability())
            .fetch_one(connection)
            .await
    }
}

/// A fixed-window check's decision from its outcome, count, window expiry
/// and clock sample, recording a quota denial in `full`.
pub(crate) fn fixed_window_decided(
    check: &Check<'_, FixedWindowPolicy>,
    (outcome, used, expires_us, now_us): (i16, i64, i64, i64),
    full: &FullCounters,
) -> Result<Decided, sqlx::Error> {
    let left = micros_between(expires_us, now_us);
    full.record(lock_id(check), (outcome == OUTCOME_QUOTA).then_some(left));
    let policy = check.policy();
    let decision = match outcome {
        OUTCOME_ALLOWED => Decision::allowed(
            policy.limit(),
            policy.limit().saturating_sub(as_u64(used)),
            left,
        )
        .map_err(|error| sqlx::Error::Decode(Box::new(error)))?,
        OUTCOME_QUOTA => Decision::for_mode(
            policy.quota_mode(),
            Denial::QuotaExceeded {
                capacity: policy.limit(),
                retry_after: left,
            },
        ),
        _ => capacity_decision(),
    };
    // The window the admission counts in, and the count it left.
    let stamp = Stamp::new([i64_to_word(expires_us), as_u64(used), 0]);
    Ok(Decided {
        decision,
        stamp,
        carried: None,
    })
}

impl PgPolicy for GcraPolicy {
    const CLEANUP: &'static str = "SELECT runlimit_cleanup_gcra($1, $2)";
    const ISSUER: &'static str = "runlimit-postgres/gcra";

    async fn decide(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        config: &PostgresConfig,
        full: &FullCounters,
    ) -> Result<Vec<Decided>, sqlx::Error> {
        let exact: Vec<GcraMicros> = checks
            .iter()
            .map(|check| GcraMicros::new(check.policy(), check.cost()))
            .collect();
        let column = |value: fn(&GcraMicros) -> u64| -> Vec<i64> {
            exact.iter().map(|check| as_i64(value(check))).collect()
        };
        // A counter that may carry another's state: the single check's
        // function taking its carry sources too (and what a new counter's
        // general path takes); batches go to the function of every
        // algorithm.
        let carrying = checks.iter().any(Check::carries);
        let mut sources = Sources::default();
        let rows = if let ([check], [one]) = (checks, exact.as_slice()) {
            // One check: the function of one row (decided under the row's
            // lock when it exists), no arrays, no set to sort.
            let mut query = sqlx::query(if carrying {
                "SELECT r_outcome, r_ahead_us, r_ahead_rem, r_now_us, r_version, r_carried \
                 FROM runlimit_check_live_gcra_counter(\
                 $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
            } else {
                "SELECT r_outcome, r_ahead_us, r_ahead_rem, r_now_us, r_version \
                 FROM runlimit_check_gcra_counter($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            })
            .bind(check.counter_key().to_bytes().to_vec())
            .bind(lock_id(check))
            .bind(as_i64(one.quota))
            .bind(as_i64(one.increment.whole))
            .bind(as_i64(one.increment.remainder))
            .bind(as_i64(one.tolerance.whole))
            .bind(as_i64(one.tolerance.remainder))
            .bind_settings(config);
            if carrying {
                sources = Sources::of(checks);
                query = query
                    .bind(as_i64(check.policy().period_millis().saturating_mul(1_000)))
                    .bind(as_i64(check.cost()))
                    .bind(&sources.keys)
                    .bind(&sources.words);
            }
            vec![query.fetch_one(connection).await?]
        } else if carrying {
            return counters::decide(connection, checks, config, full).await;
        } else {
            sqlx::query(
                "SELECT r_outcome, r_ahead_us, r_ahead_rem, r_now_us, r_version \
                 FROM runlimit_check_gcra($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ORDER BY r_index",
            )
            .bind(counter_keys(checks))
            .bind(lock_ids(checks))
            .bind(column(|check| check.quota))
            .bind(column(|check| check.increment.whole))
            .bind(column(|check| check.increment.remainder))
            .bind(column(|check| check.tolerance.whole))
            .bind(column(|check| check.tolerance.remainder))
            .bind_settings(config)
            .fetch_all(connection)
            .await?
        };
        checks
            .iter()
            .zip(rows)
            .zip(&exact)
            .map(|((check, row), exact)| {
                Ok(gcra_decided(check, exact, &GcraReply::read(&row, 0)?)?
                    .carried(carried_from(&row, 5, carrying, &sources)?))
            })
            .collect()
    }

    async fn grant(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
        up_to: u64,
        config: &PostgresConfig,
        full: &FullCounters,
    ) -> Result<(u64, Decided), sqlx::Error> {
        if check.carries() {
            return counters::grant(connection, check, up_to, config, full).await;
        }
        let policy = check.policy();
        let exact = GcraMicros::new(policy, check.cost());
        let row = sqlx::query(
            "SELECT r_granted, r_outcome, r_ahead_us, r_ahead_rem, r_now_us, r_version \
             FROM runlimit_grant_gcra($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(check.counter_key().to_bytes().to_vec())
        .bind(lock_id(check))
        .bind(as_i64(exact.quota))
        .bind(as_i64(policy.period_millis().saturating_mul(1_000)))
        .bind(as_i64(exact.tolerance.whole))
        .bind(as_i64(exact.tolerance.remainder))
        .bind(as_i64(check.cost()))
        .bind(as_i64(up_to))
        .bind_settings(config)
        .fetch_one(connection)
        .await?;
        let granted = as_u64(row.try_get(0)?);
        // The decision does not depend on the cost decided: the arrival time
        // the statement reports already holds it.
        Ok((
            granted,
            gcra_decided(check, &exact, &GcraReply::read(&row, 1)?)?,
        ))
    }

    async fn refund(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        admitted: &[Admitted],
        units: &[u64],
        config: &PostgresConfig,
    ) -> Result<Vec<bool>, sqlx::Error> {
        // The increment of the units given back, not of the whole cost.
        let exact: Vec<GcraMicros> = checks
            .iter()
            .zip(units)
            .map(|(check, &units)| GcraMicros::new(check.policy(), units))
            .collect();
        let column = |value: fn(&GcraMicros) -> u64| -> Vec<i64> {
            exact.iter().map(|check| as_i64(value(check))).collect()
        };
        let stamp_word = |index: usize| -> Vec<i64> {
            admitted
                .iter()
                .map(|admitted| word_to_i64(admitted.stamp().words()[index]))
                .collect()
        };
        let rows = sqlx::query(
            "SELECT r_credited FROM runlimit_refund_gcra($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ORDER BY r_index",
        )
        .bind(counter_keys(checks))
        .bind(lock_ids(checks))
        .bind(column(|check| check.quota))
        .bind(column(|check| check.increment.whole))
        .bind(column(|check| check.increment.remainder))
        .bind(stamp_word(0))
        .bind(stamp_word(1))
        .bind(stamp_word(2))
        .bind(config.lock_timeout_ms())
        .bind(config.relaxed_durability())
        .fetch_all(connection)
        .await?;
        rows.into_iter().map(|row| row.try_get(0)).collect()
    }

    async fn peek(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
    ) -> Result<Decision, sqlx::Error> {
        if check.carries() {
            return carry::peek(connection, check).await;
        }
        let row = sqlx::query(
            "SELECT g.tat_us, g.tat_rem, \
             (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000000)::bigint \
             FROM runlimit_gcra AS g WHERE g.counter_key = $1",
        )
        .bind(check.counter_key().to_bytes().to_vec())
        .fetch_optional(connection)
        .await?;
        let exact = GcraMicros::new(check.policy(), check.cost());
        let ahead = match row {
            Some(row) => {
                let tat = ExactMicros {
                    whole: as_u64(row.try_get(0)?),
                    remainder: as_u64(row.try_get(1)?),
                };
                let now = ExactMicros::from_whole(as_u64(row.try_get(2)?));
                tat.saturating_sub(now, exact.quota)
            }
            None => ExactMicros::from_whole(0),
        };
        Ok(exact.peek_decision(check.policy(), ahead))
    }

    async fn reset(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
        config: &PostgresConfig,
    ) -> Result<bool, sqlx::Error> {
        if check.carries() {
            return carry::reset(connection, check, config).await;
        }
        sqlx::query_scalar("SELECT runlimit_reset_gcra($1, $2, $3, $4)")
            .bind(check.counter_key().to_bytes().to_vec())
            .bind(lock_id(check))
            .bind(config.lock_timeout_ms())
            .bind(config.relaxed_durability())
            .fetch_one(connection)
            .await
    }
}

/// The source a carrying single check's reply names in `column`.
fn carried_from(
    row: &PgRow,
    column: usize,
    carrying: bool,
    sources: &Sources,
) -> Result<Option<CarriedFrom>, sqlx::Error> {
    if !carrying {
        return Ok(None);
    }
    sources.carried(row.try_get::<Option<i32>, _>(column)?.map(i64::from))
}

/// What a GCRA function replies for one check: outcome, how far ahead of
/// now the arrival time lies, the clock sample and the row's version.
pub(crate) struct GcraReply {
    pub(crate) outcome: i16,
    pub(crate) ahead_us: i64,
    pub(crate) ahead_rem: i64,
    pub(crate) now_us: i64,
    pub(crate) version: i64,
}

impl GcraReply {
    /// The reply in `row`'s columns starting at `first`.
    fn read(row: &PgRow, first: usize) -> Result<Self, sqlx::Error> {
        Ok(Self {
            outcome: row.try_get(first)?,
            ahead_us: row.try_get(first + 1)?,
            ahead_rem: row.try_get(first + 2)?,
            now_us: row.try_get(first + 3)?,
            version: row.try_get(first + 4)?,
        })
    }
}

/// A GCRA check's decision from its reply.
pub(crate) fn gcra_decided(
    check: &Check<'_, GcraPolicy>,
    exact: &GcraMicros,
    &GcraReply {
        outcome,
        ahead_us,
        ahead_rem,
        now_us,
        version,
    }: &GcraReply,
) -> Result<Decided, sqlx::Error> {
    let ahead = ExactMicros {
        whole: as_u64(ahead_us),
        remainder: as_u64(ahead_rem),
    };
    let decision = match outcome {
        OUTCOME_ALLOWED | OUTCOME_QUOTA => exact.decision(check.policy(), ahead),
        _ => capacity_decision(),
    };
    // The arrival time the admission left, and the row's version.
    let stamp = Stamp::new([
        i64_to_word(now_us.saturating_add(ahead_us)),
        ahead.remainder,
        i64_to_word(version),
    ]);
    Ok(Decided {
        decision,
        stamp,
        carried: None,
    })
}

impl PgPolicy for SlidingWindowPolicy {
    const CLEANUP: &'static str = "SELECT runlimit_cleanup_sliding_windows($1, $2)";
    const ISSUER: &'static str = "runlimit-postgres/sliding_window";

    /// The function counts and decides; the reported quantities come from the
    /// counts it judged, through the arithmetic the memory store shares. The
    /// two must agree on the outcome, or the reply is refused.
    async fn decide(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        config: &PostgresConfig,
        full: &FullCounters,
    ) -> Result<Vec<Decided>, sqlx::Error> {
        let exact: Vec<SlidingMicros> = checks
            .iter()
            .map(|check| SlidingMicros::new(check.policy()))
            .collect();
        let limits: Vec<i64> = checks
            .iter()
            .map(|check| as_i64(check.policy().limit()))
            .collect();
        let sub_windows: Vec<i64> = exact.iter().map(|exact| as_i64(exact.sub_window)).collect();
        let costs: Vec<i64> = checks.iter().map(|check| as_i64(check.cost())).collect();
        // A counter that may carry another's state: the single check's
        // function taking its carry sources too; batches go to the function
        // of every algorithm.
        let carrying = checks.iter().any(Check::carries);
        let mut sources = Sources::default();
        let rows = if let ([check], [limit], [sub_window], [cost]) = (
            checks,
            limits.as_slice(),
            sub_windows.as_slice(),
            costs.as_slice(),
        ) {
            // One check: the function of one row (decided under the row's
            // lock when it exists), no arrays, no set to sort.
            let mut query = sqlx::query(if carrying {
                "SELECT r_outcome, r_latest, r_counts, r_now_us, r_version, r_carried \
                 FROM runlimit_check_live_sliding_window($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            } else {
                "SELECT r_outcome, r_latest, r_counts, r_now_us, r_version \
                 FROM runlimit_check_sliding_window($1, $2, $3, $4, $5, $6, $7, $8)"
            })
            .bind(check.counter_key().to_bytes().to_vec())
            .bind(lock_id(check))
            .bind(*limit)
            .bind(*sub_window)
            .bind(*cost)
            .bind_settings(config);
            if carrying {
                sources = Sources::of(checks);
                query = query.bind(&sources.keys).bind(&sources.words);
            }
            vec![query.fetch_one(connection).await?]
        } else if carrying {
            return counters::decide(connection, checks, config, full).await;
        } else {
            sqlx::query(
                "SELECT r_outcome, r_latest, r_counts, r_now_us, r_version \
                 FROM runlimit_check_sliding_windows($1, $2, $3, $4, $5, $6, $7, $8) ORDER BY r_index",
            )
            .bind(counter_keys(checks))
            .bind(lock_ids(checks))
            .bind(limits)
            .bind(sub_windows)
            .bind(costs)
            .bind_settings(config)
            .fetch_all(connection)
            .await?
        };
        checks
            .iter()
            .zip(rows)
            .zip(&exact)
            .map(|((check, row), exact)| {
                Ok(
                    sliding_window_decided(check, exact, &SlidingReply::read(&row, 0)?)?
                        .carried(carried_from(&row, 5, carrying, &sources)?),
                )
            })
            .collect()
    }

    async fn grant(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
        up_to: u64,
        config: &PostgresConfig,
        full: &FullCounters,
    ) -> Result<(u64, Decided), sqlx::Error> {
        if check.carries() {
            return counters::grant(connection, check, up_to, config, full).await;
        }
        let policy = check.policy();
        let exact = SlidingMicros::new(policy);
        let row = sqlx::query(
            "SELECT r_granted, r_outcome, r_latest, r_counts, r_now_us, r_version \
             FROM runlimit_grant_sliding_window($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(check.counter_key().to_bytes().to_vec())
        .bind(lock_id(check))
        .bind(as_i64(policy.limit()))
        .bind(as_i64(exact.sub_window))
        .bind(as_i64(check.cost()))
        .bind(as_i64(up_to))
        .bind_settings(config)
        .fetch_one(connection)
        .await?;
        let granted = as_u64(row.try_get(0)?);
        // Decided as the check of the units granted (of its cost when denied).
        let decided_as = Check::weighted(policy, *check.subject(), granted.max(check.cost()))
            .map_err(|error| sqlx::Error::Decode(Box::new(error)))?;
        Ok((
            granted,
            sliding_window_decided(&decided_as, &exact, &SlidingReply::read(&row, 1)?)?,
        ))
    }

    async fn refund(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        admitted: &[Admitted],
        units: &[u64],
        config: &PostgresConfig,
    ) -> Result<Vec<bool>, sqlx::Error> {
        let sub_windows: Vec<i64> = checks
            .iter()
            .map(|check| as_i64(SlidingMicros::new(check.policy()).sub_window))
            .collect();
        let costs: Vec<i64> = units.iter().map(|&units| as_i64(units)).collect();
        let stamp_word = |index: usize| -> Vec<i64> {
            admitted
                .iter()
                .map(|admitted| word_to_i64(admitted.stamp().words()[index]))
                .collect()
        };
        let rows = sqlx::query(
            "SELECT r_credited FROM runlimit_refund_sliding_windows($1, $2, $3, $4, $5, $6, $7, $8) \
             ORDER BY r_index",
        )
        .bind(counter_keys(checks))
        .bind(lock_ids(checks))
        .bind(sub_windows)
        .bind(costs)
        .bind(stamp_word(0))
        .bind(stamp_word(1))
        .bind(config.lock_timeout_ms())
        .bind(config.relaxed_durability())
        .fetch_all(connection)
        .await?;
        rows.into_iter().map(|row| row.try_get(0)).collect()
    }

    async fn peek(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
    ) -> Result<Decision, sqlx::Error> {
        if check.carries() {
            return carry::peek(connection, check).await;
        }
        let exact = SlidingMicros::new(check.policy());
        let row = sqlx::query(
            "SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000000)::bigint, \
             (SELECT ARRAY[(EXTRACT(EPOCH FROM s.expires_at) * 1000000)::bigint] || s.counts \
              FROM runlimit_sliding_windows AS s WHERE s.counter_key = $1)",
        )
        .bind(check.counter_key().to_bytes().to_vec())
        .fetch_one(connection)
        .await?;
        let now_us = as_u64(row.try_get(0)?);
        let stored = match row.try_get::<Option<Vec<i64>>, _>(1)? {
            Some(words) => {
                let (expires_us, counts) = words.split_first().ok_or_else(malformed)?;
                let counts: [i64; COUNTED] = counts.try_into().map_err(|_| malformed())?;
                Some(Buckets {
                    latest_start: exact.latest_start_of(as_u64(*expires_us)),
                    counts: counts.map(as_u64),
                })
            }
            None => None,
        };
        Ok(exact.peek_decision(check.policy(), stored, check.cost(), now_us))
    }

    async fn reset(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
        config: &PostgresConfig,
    ) -> Result<bool, sqlx::Error> {
        if check.carries() {
            return carry::reset(connection, check, config).await;
        }
        sqlx::query_scalar("SELECT runlimit_reset_sliding_windows($1, $2, $3, $4)")
            .bind(check.counter_key().to_bytes().to_vec())
            .bind(lock_id(check))
            .bind(config.lock_timeout_ms())
            .bind(config.relaxed_durability())
            .fetch_one(connection)
            .await
    }
}

/// What a sliding-window function replies for one check: outcome, the
/// eighth and counts it was judged against, the clock sample and the row's
/// version.
pub(crate) struct SlidingReply {
    pub(crate) outcome: i16,
    pub(crate) latest: i64,
    pub(crate) counts: Vec<i64>,
    pub(crate) now_us: i64,
    pub(crate) version: i64,
}

impl SlidingReply {
    /// The reply in `row`'s columns starting at `first`.
    fn read(row: &PgRow, first: usize) -> Result<Self, sqlx::Error> {
        Ok(Self {
            outcome: row.try_get(first)?,
            latest: row.try_get(first + 1)?,
            counts: row.try_get(first + 2)?,
            now_us: row.try_get(first + 3)?,
            version: row.try_get(first + 4)?,
        })
    }
}

/// A sliding-window check's decision from its reply.
pub(crate) fn sliding_window_decided(
    check: &Check<'_, SlidingWindowPolicy>,
    exact: &SlidingMicros,
    reply: &SlidingReply,
) -> Result<Decided, sqlx::Error> {
    let outcome = reply.outcome;
    let judged = buckets(exact, reply.latest, &reply.counts)?;
    let now_us = as_u64(reply.now_us);
    let version = reply.version;
    let policy = check.policy();
    let decision = match (outcome, exact.admit(Some(judged), check.cost(), now_us)) {
        (OUTCOME_ALLOWED, SlidingOutcome::Allowed { decision, .. }) => decision,
        (OUTCOME_QUOTA, SlidingOutcome::Denied(denial)) => {
            Decision::for_mode(policy.quota_mode(), denial)
        }
        (OUTCOME_ALLOWED | OUTCOME_QUOTA, _) => {
            return Err(sqlx::Error::Protocol(
                "the sliding-window function and the client disagree on a decision".to_owned(),
            ));
        }
        _ => capacity_decision(),
    };
    // The number of the eighth the admission counted in, and the
    // row's version.
    let stamp = Stamp::new([
        judged.latest_start / exact.sub_window,
        i64_to_word(version),
        0,
    ]);
    Ok(Decided {
        decision,
        stamp,
        carried: None,
    })
}

fn malformed() -> sqlx::Error {
    sqlx::Error::Protocol("a sliding-window row without nine counts".to_owned())
}

/// Counts as the function returned them: the number of the eighth they end
/// with, and nine counts.
fn buckets(exact: &SlidingMicros, latest: i64, counts: &[i64]) -> Result<Buckets, sqlx::Error> {
    let counts: [i64; COUNTED] = counts.try_into().map_err(|_| malformed())?;
    Ok(Buckets {
        latest_start: exact.start_of(as_u64(latest)),
        counts: counts.map(as_u64),
    })
}
