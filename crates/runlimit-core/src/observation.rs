//! Operational observations: what backends report to an [`Observer`].
//!
//! Observations carry low-cardinality, non-sensitive facts only: the operation,
//! policy and scope identifiers, the outcome, whether quota was consumed, and how
//! long it took. They never carry subject keys, counter keys, policy fingerprints
//! or backend error text.

use std::{
    fmt,
    panic::{AssertUnwindSafe, catch_unwind},
    time::{Duration, Instant},
};

use crate::{
    check::Check,
    decision::{BatchDecision, Decision, Denial},
    id::{DEFAULT_STORE_NAME, PolicyId, ScopeId, StoreName},
    lifecycle::Refunded,
    policy::Policy,
};

/// Receives operational observations from a backend.
///
/// Callbacks run synchronously on the admission path, after memory locks are
/// released or database transactions are finalized: keep them fast and hand
/// expensive export work to another thread. Backends call them through [`notify`],
/// which catches panics so telemetry can never change an admission result.
///
/// Every method has an empty default, so implement only what you export.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use runlimit_core::{AdmissionObservation, AdmissionOutcome, Observer};
///
/// #[derive(Debug, Default)]
/// struct DenialCounter(AtomicU64);
///
/// impl Observer for DenialCounter {
///     fn on_admission(&self, observation: &AdmissionObservation<'_>) {
///         if observation.outcome() == AdmissionOutcome::QuotaDenied {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
/// ```
pub trait Observer: Send + Sync + fmt::Debug {
    /// Called once for every check or batch the backend evaluated or failed.
    fn on_admission(&self, observation: &AdmissionObservation<'_>) {
        let _ = observation;
    }

    /// Called after bounded cleanup work removed, or tried to remove, expired state.
    fn on_cleanup(&self, observation: &CleanupObservation) {
        let _ = observation;
    }

    /// Called when an operation changed or hit the backend's stored cardinality.
    fn on_capacity(&self, observation: &CapacityObservation<'_>) {
        let _ = observation;
    }

    /// Called when a counter started from another counter's state (see
    /// [`carry`](crate::carry)): once per counter and carry, never with the
    /// subject.
    fn on_carry(&self, observation: &CarryObservation<'_>) {
        let _ = observation;
    }
}

impl<O: Observer + ?Sized> Observer for std::sync::Arc<O> {
    fn on_admission(&self, observation: &AdmissionObservation<'_>) {
        (**self).on_admission(observation);
    }

    fn on_cleanup(&self, observation: &CleanupObservation) {
        (**self).on_cleanup(observation);
    }

    fn on_capacity(&self, observation: &CapacityObservation<'_>) {
        (**self).on_capacity(observation);
    }

    fn on_carry(&self, observation: &CarryObservation<'_>) {
        (**self).on_carry(observation);
    }
}

/// Calls `event` with `observer`, catching any panic so that telemetry cannot
/// change an admission result. Returns `false` if the observer panicked.
pub fn notify<O: Observer + ?Sized>(observer: &O, event: impl FnOnce(&O)) -> bool {
    catch_unwind(AssertUnwindSafe(|| event(observer))).is_ok()
}

/// Times one admission and reports it to an optional observer.
///
/// With no observer it reads no clock and builds nothing, so backends can use it
/// unconditionally on their hot path.
#[derive(Debug)]
pub struct AdmissionReporter<'o> {
    observer: Option<&'o dyn Observer>,
    started: Option<Instant>,
}

impl<'o> AdmissionReporter<'o> {
    /// Starts timing, if there is an observer.
    #[inline]
    #[must_use]
    pub fn start(observer: Option<&'o dyn Observer>) -> Self {
        Self {
            observer,
            started: observer.map(|_| Instant::now()),
        }
    }

    /// Reports the admission of `checks` with `outcome` (from
    /// [`AdmissionOutcome::of_decision`], [`of_batch`](AdmissionOutcome::of_batch)
    /// or [`of_failure`](AdmissionOutcome::of_failure)), catching observer panics.
    #[inline]
    pub fn finish<P: Policy + ?Sized>(
        self,
        operation: Operation,
        checks: &[Check<'_, P>],
        outcome: (AdmissionOutcome, Consumption, Option<usize>),
    ) {
        // Only the test is inlined: without an observer a check pays a branch,
        // not a call.
        if let (Some(observer), Some(started)) = (self.observer, self.started) {
            Self::report(observer, started, operation, checks, outcome);
        }
    }

    #[inline(never)]
    fn report<P: Policy + ?Sized>(
        observer: &dyn Observer,
        started: Instant,
        operation: Operation,
        checks: &[Check<'_, P>],
        (outcome, consumption, decisive_index): (AdmissionOutcome, Consumption, Option<usize>),
    ) {
        let labels: Vec<PolicyLabel<'_>> = checks.iter().map(PolicyLabel::of).collect();
        let observation = AdmissionObservation::new(
            operation,
            &labels,
            decisive_index,
            outcome,
            consumption,
            started.elapsed(),
        );
        notify(observer, |observer| observer.on_admission(&observation));
    }

    /// Runs any backend operation on `checks`, timing it and reporting the
    /// outcome `classify` gives its result; `may_have_applied` tells, for an
    /// error, whether the operation may have taken effect anyway.
    ///
    /// # Errors
    ///
    /// Whatever `operate` returns.
    pub async fn observe<P: Policy + ?Sized, T, E>(
        observer: Option<&'o dyn Observer>,
        operation: Operation,
        checks: &[Check<'_, P>],
        operate: impl Future<Output = Result<T, E>>,
        classify: impl FnOnce(&T) -> (AdmissionOutcome, Consumption, Option<usize>),
        may_have_applied: impl FnOnce(&E) -> bool,
    ) -> Result<T, E> {
        let report = Self::start(observer);
        let result = operate.await;
        let outcome = match &result {
            Ok(value) => classify(value),
            Err(error) => AdmissionOutcome::of_failure(may_have_applied(error)),
        };
        report.finish(operation, checks, outcome);
        result
    }

    /// Runs a backend's single check, timing it and reporting its outcome.
    ///
    /// `decide` is the whole check, caller-error validation included;
    /// `may_have_consumed` tells, for an error, whether quota may have been
    /// consumed anyway (a reply lost after the backend applied the check).
    ///
    /// # Errors
    ///
    /// Whatever `decide` returns.
    pub async fn observe_check<P: Policy + ?Sized, E>(
        observer: Option<&'o dyn Observer>,
        check: &Check<'_, P>,
        decide: impl Future<Output = Result<Decision, E>>,
        may_have_consumed: impl FnOnce(&E) -> bool,
    ) -> Result<Decision, E> {
        Self::observe(
            observer,
            Operation::Check,
            std::slice::from_ref(check),
            decide,
            AdmissionOutcome::of_decision,
            may_have_consumed,
        )
        .await
    }

    /// Runs a backend's atomic batch, timing it and reporting its outcome; see
    /// [`observe_check`](Self::observe_check).
    ///
    /// # Errors
    ///
    /// Whatever `decide` returns.
    pub async fn observe_batch<P: Policy + ?Sized, E>(
        observer: Option<&'o dyn Observer>,
        checks: &[Check<'_, P>],
        decide: impl Future<Output = Result<BatchDecision, E>>,
        may_have_consumed: impl FnOnce(&E) -> bool,
    ) -> Result<BatchDecision, E> {
        Self::observe(
            observer,
            Operation::Batch,
            checks,
            decide,
            AdmissionOutcome::of_batch,
            may_have_consumed,
        )
        .await
    }
}

/// Which operation an observation is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// `Limiter::check` (or `Lifecycle::admit`).
    Check,
    /// `Limiter::check_all` (or `Lifecycle::admit_all`).
    Batch,
    /// [`Lifecycle::refund`](crate::Lifecycle::refund).
    Refund,
    /// [`Lifecycle::peek`](crate::Lifecycle::peek).
    Peek,
    /// [`Lifecycle::reset`](crate::Lifecycle::reset).
    Reset,
}

impl Operation {
    /// A stable lowercase name, suitable for metric labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Check => "check",
            Self::Batch => "batch",
            Self::Refund => "refund",
            Self::Peek => "peek",
            Self::Reset => "reset",
        }
    }
}

/// How an operation ended.
///
/// Checks, batches and peeks end as one of the decision outcomes (a peek's
/// is what a check would get); refunds and resets end with outcomes of
/// their own; every operation can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AdmissionOutcome {
    /// Every check was within quota.
    Allowed,
    /// An enforced quota denied a check.
    QuotaDenied,
    /// A shadow quota would have denied a check; the request was permitted.
    ShadowDenied,
    /// A new key did not fit the backend's storage capacity.
    CapacityDenied,
    /// The backend returned an error (a caller error or a failure).
    Failed,
    /// A refund gave units back to at least one counter.
    Refunded,
    /// A refund gave nothing back: the window had renewed, the counter had
    /// been reset, or time had already replenished what it consumed.
    NotRefunded,
    /// A reset forgot a live counter.
    Reset,
    /// A reset found no live counter.
    NothingToReset,
}

impl AdmissionOutcome {
    /// A stable lowercase name, suitable for metric labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::QuotaDenied => "quota_denied",
            Self::ShadowDenied => "shadow_denied",
            Self::CapacityDenied => "capacity_denied",
            Self::Failed => "failed",
            Self::Refunded => "refunded",
            Self::NotRefunded => "not_refunded",
            Self::Reset => "reset",
            Self::NothingToReset => "nothing_to_reset",
        }
    }

    /// Classifies a peek: the outcome the peeked decision reports, which
    /// consumed nothing.
    #[inline]
    #[must_use]
    pub fn of_peek(decision: &Decision) -> (Self, Consumption, Option<usize>) {
        let (outcome, _, index) = Self::of_decision(decision);
        (outcome, Consumption::NotConsumed, index)
    }

    /// Classifies a refund.
    #[inline]
    #[must_use]
    pub fn of_refund(refunded: &Refunded) -> (Self, Consumption, Option<usize>) {
        let outcome = if refunded.credited() > 0 {
            Self::Refunded
        } else {
            Self::NotRefunded
        };
        (outcome, Consumption::NotConsumed, None)
    }

    /// Classifies a reset: whether a live counter existed.
    #[inline]
    #[must_use]
    pub fn of_reset(existed: bool) -> (Self, Consumption, Option<usize>) {
        let outcome = if existed {
            Self::Reset
        } else {
            Self::NothingToReset
        };
        (outcome, Consumption::NotConsumed, None)
    }
    /// Classifies a single check's decision: its outcome, whether it consumed
    /// quota, and the decisive index (0 for a denial).
    #[inline]
    #[must_use]
    pub fn of_decision(decision: &Decision) -> (Self, Consumption, Option<usize>) {
        match decision.denial() {
            None => (Self::Allowed, Consumption::Consumed, None),
            Some(denial) => (
                Self::of_denial(decision.is_shadow_denied(), denial),
                Consumption::NotConsumed,
                Some(0),
            ),
        }
    }

    /// Classifies a batch decision like [`of_decision`](Self::of_decision).
    #[inline]
    #[must_use]
    pub fn of_batch(batch: &BatchDecision) -> (Self, Consumption, Option<usize>) {
        match batch {
            BatchDecision::Denied { index, denial } => (
                Self::of_denial(false, denial),
                Consumption::NotConsumed,
                Some(*index),
            ),
            BatchDecision::ShadowDenied { index, denial } => (
                Self::of_denial(true, denial),
                Consumption::NotConsumed,
                Some(*index),
            ),
            BatchDecision::Allowed(_) => (Self::Allowed, Consumption::Consumed, None),
        }
    }

    /// Classifies a failed admission: whether quota may have been consumed.
    #[inline]
    #[must_use]
    pub fn of_failure(may_have_consumed: bool) -> (Self, Consumption, Option<usize>) {
        let consumption = if may_have_consumed {
            Consumption::PossiblyConsumed
        } else {
            Consumption::NotConsumed
        };
        (Self::Failed, consumption, None)
    }

    fn of_denial(shadow: bool, denial: &Denial) -> Self {
        if denial.is_storage_capacity() {
            Self::CapacityDenied
        } else if shadow {
            Self::ShadowDenied
        } else {
            Self::QuotaDenied
        }
    }
}

/// Whether an operation consumed quota (for refunds and resets: whether it
/// changed a counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Consumption {
    /// Quota was consumed.
    Consumed,
    /// Quota was definitely not consumed (a failed refund or reset definitely
    /// changed nothing).
    NotConsumed,
    /// The outcome is unknown: for example a database commit whose reply was
    /// lost (for a failed refund or reset: it may have been applied).
    PossiblyConsumed,
}

impl Consumption {
    /// A stable lowercase name, suitable for metric labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Consumed => "consumed",
            Self::NotConsumed => "not_consumed",
            Self::PossiblyConsumed => "possibly_consumed",
        }
    }
}

/// The policy and scope of one check, as observations expose them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicyLabel<'a> {
    /// The policy identifier.
    pub policy: &'a PolicyId,
    /// The scope identifier.
    pub scope: &'a ScopeId,
}

impl<'a> PolicyLabel<'a> {
    /// The label of `check`'s policy.
    #[must_use]
    pub fn of<P: Policy + ?Sized>(check: &Check<'a, P>) -> Self {
        let policy = check.policy();
        Self {
            policy: policy.id(),
            scope: policy.scope(),
        }
    }
}

/// One operation (a check, batch, refund, peek or reset) that a backend
/// performed or failed.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionObservation<'a> {
    operation: Operation,
    policies: &'a [PolicyLabel<'a>],
    decisive_index: Option<usize>,
    outcome: AdmissionOutcome,
    consumption: Consumption,
    elapsed: Duration,
    cached: bool,
    leased: bool,
}

impl<'a> AdmissionObservation<'a> {
    /// Describes an admission of checks labelled `policies` (in input order;
    /// build them with [`PolicyLabel::of`]). `decisive_index` is the input position of the check
    /// that decided a denial, when there is one.
    #[must_use]
    pub fn new(
        operation: Operation,
        policies: &'a [PolicyLabel<'a>],
        decisive_index: Option<usize>,
        outcome: AdmissionOutcome,
        consumption: Consumption,
        elapsed: Duration,
    ) -> Self {
        Self {
            operation,
            policies,
            decisive_index,
            outcome,
            consumption,
            elapsed,
            cached: false,
            leased: false,
        }
    }

    /// The same observation, decided by a denial cache from a denial the
    /// backend gave earlier, without asking the backend.
    #[must_use]
    pub fn from_cache(self) -> Self {
        Self {
            cached: true,
            ..self
        }
    }

    /// Whether a denial cache decided it without asking the backend.
    #[must_use]
    pub fn cached(&self) -> bool {
        self.cached
    }

    /// The same observation, admitted from units a lease already held (a
    /// `runlimit_memory::Leased` replica), without asking the shared backend.
    #[must_use]
    pub fn from_lease(self) -> Self {
        Self {
            leased: true,
            ..self
        }
    }

    /// Whether it was admitted from a lease without asking the backend.
    #[must_use]
    pub fn leased(&self) -> bool {
        self.leased
    }

    /// Single check or batch.
    #[must_use]
    pub fn operation(&self) -> Operation {
        self.operation
    }

    /// Number of checks in the operation.
    #[must_use]
    pub fn batch_size(&self) -> usize {
        self.policies.len()
    }

    /// The policy labels of every check, in input order.
    #[must_use]
    pub fn policies(&self) -> &'a [PolicyLabel<'a>] {
        self.policies
    }

    /// The label that best explains the outcome: the denied check's for denials,
    /// otherwise the first check's.
    #[must_use]
    pub fn policy(&self) -> Option<PolicyLabel<'a>> {
        self.policies.get(self.decisive_index.unwrap_or(0)).copied()
    }

    /// Input position of the check that decided a denial.
    #[must_use]
    pub fn decisive_index(&self) -> Option<usize> {
        self.decisive_index
    }

    /// How the admission ended.
    #[must_use]
    pub fn outcome(&self) -> AdmissionOutcome {
        self.outcome
    }

    /// Whether quota was consumed.
    #[must_use]
    pub fn consumption(&self) -> Consumption {
        self.consumption
    }

    /// Time spent in the backend, measured only when an observer is installed.
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }
}

/// Bounded cleanup work a backend did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupObservation {
    requested: u64,
    removed: Option<u64>,
    elapsed: Duration,
}

impl CleanupObservation {
    /// Describes cleanup that was allowed to remove `requested` entries and removed
    /// `removed` of them (`None` when the outcome is unknown).
    #[must_use]
    pub fn new(requested: u64, removed: Option<u64>, elapsed: Duration) -> Self {
        Self {
            requested,
            removed,
            elapsed,
        }
    }

    /// The most entries the cleanup was allowed to remove.
    #[must_use]
    pub fn requested(&self) -> u64 {
        self.requested
    }

    /// How many were removed, or `None` if unknown (for example a lost commit).
    #[must_use]
    pub fn removed(&self) -> Option<u64> {
        self.removed
    }

    /// Time spent cleaning.
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }
}

/// Stored cardinality against the configured bound, in the store the
/// application named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityObservation<'a> {
    store: &'a str,
    used: u64,
    capacity: u64,
    shard: Option<usize>,
}

impl CapacityObservation<'static> {
    /// Describes `used` of `capacity` entries, in `shard` when the backend
    /// shards, in the store named `default` until
    /// [`in_store`](CapacityObservation::in_store) names it.
    #[must_use]
    pub fn new(used: u64, capacity: u64, shard: Option<usize>) -> Self {
        Self {
            store: DEFAULT_STORE_NAME,
            used,
            capacity,
            shard,
        }
    }
}

impl<'a> CapacityObservation<'a> {
    /// The same observation, in the store named `store`.
    #[must_use]
    pub fn in_store<'b>(self, store: &'b StoreName) -> CapacityObservation<'b> {
        CapacityObservation {
            store: store.as_str(),
            used: self.used,
            capacity: self.capacity,
            shard: self.shard,
        }
    }

    /// The store's name: what the application named it, or `default`.
    #[must_use]
    pub fn store(&self) -> &'a str {
        self.store
    }

    /// Entries stored.
    #[must_use]
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The bound.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Entries that still fit.
    #[must_use]
    pub fn headroom(&self) -> u64 {
        self.capacity.saturating_sub(self.used)
    }

    /// The shard, when the backend shards its storage.
    #[must_use]
    pub fn shard(&self) -> Option<usize> {
        self.shard
    }
}

/// A counter that started from a source's state: which policy, and which
/// kind of source (see [`carry`](crate::carry)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarryObservation<'a> {
    policy: PolicyLabel<'a>,
    from: CarriedFrom,
}

impl<'a> CarryObservation<'a> {
    /// Describes a counter of `policy` that carried the state of a source of
    /// kind `from`.
    #[must_use]
    pub fn new(policy: PolicyLabel<'a>, from: CarriedFrom) -> Self {
        Self { policy, from }
    }

    /// The policy of the counter that carried.
    #[must_use]
    pub fn policy(&self) -> PolicyLabel<'a> {
        self.policy
    }

    /// What it carried from.
    #[must_use]
    pub fn from(&self) -> CarriedFrom {
        self.from
    }
}

/// Which of a check's [`carry sources`](crate::Check::carry_sources) a
/// counter carried from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CarriedFrom {
    /// The same policy's counter under the previous secret.
    PreviousSecret,
    /// The predecessor's counter under the current secret.
    Predecessor,
    /// The predecessor's counter under the previous secret.
    PredecessorUnderPreviousSecret,
}

impl CarriedFrom {
    /// A stable lowercase name, suitable for metric labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::PreviousSecret => "previous_secret",
            Self::Predecessor => "predecessor",
            Self::PredecessorUnderPreviousSecret => "predecessor_previous_secret",
        }
    }
}
