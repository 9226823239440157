//! `ShouldRateLimit`: matching a request's descriptors to rules and
//! deciding them on a limiter.
//!
//! [`Decider`] answers requests with any [`Limiter`] of [`AnyPolicy`] that
//! also offers [`Lifecycle`] (refunds and peeks): the memory store, and the
//! shared stores of `runlimit-redis` and `runlimit-postgres`.
//!
//! # What a request gets
//!
//! * **Validation.** An empty domain, no descriptors, more than
//!   [`with_max_descriptors`](Decider::with_max_descriptors) of them, a
//!   descriptor without entries, an empty key, negative hits, or a limit
//!   override with the unit `UNKNOWN` (or a number the protocol does not
//!   define) or 0 requests per unit: [`InvalidRequest`], gRPC
//!   `INVALID_ARGUMENT`. Nothing is counted.
//! * **Cost.** A descriptor's `hits_addend` when set (0: the descriptor is
//!   checked without counting), else the request's, 0 meaning 1. A cost
//!   above what a rule can ever admit is over its limit.
//! * **Matching.** Each descriptor's entries select a rule of the domain
//!   ([`Domain::resolve`](crate::config::Domain::resolve)); a descriptor
//!   with a `limit` of its own uses a fixed window of that many requests
//!   per unit instead, counted apart from the configuration's rules (the
//!   domain must exist). An unknown domain limits nothing. Then every rule
//!   named in a matched rule's `replaces` is dropped from the request.
//! * **Counting.** Descriptors whose rules are enforced are one atomic
//!   batch: all are counted or none is. `unlimited` and
//!   `requests_per_unit: 0` rules never reach the store. Several
//!   descriptors of one counter are counted once, at the sum of their
//!   costs. Quota-mode descriptors are counted each on its own. Shadow
//!   rules are one batch of their own, counted only when the request is
//!   within its limits, as the enforced batch would be: if one of them
//!   is over, none counts.
//! * **The overall code** is `OVER_LIMIT` when an enforced descriptor is
//!   over, or when the request has quota-mode descriptors and every one of
//!   them is over; shadow rules never make it `OVER_LIMIT`.
//! * **A request answered `OVER_LIMIT` consumes nothing.** The enforced
//!   batch is decided first; quota-mode descriptors are counted only when
//!   it is admitted, and shadow rules only when the request is within its
//!   limits. When every quota-mode descriptor turns out over, the enforced
//!   batch is given back with the limiter's receipt before the answer. For
//!   that moment its units are held, so a concurrent request may be refused
//!   that would otherwise have passed (never the reverse).
//! * **Statuses**, one per descriptor in request order: `OK` with no
//!   `current_limit` when no limit applies; `OK` with `limit_remaining`
//!   `u32::MAX` for an unlimited rule; otherwise `current_limit`
//!   (`requests_per_unit`, `unit`, `name`), `limit_remaining` (units left
//!   after this request; 0 when over) and `duration_until_reset` (the
//!   time until the quota is whole again, or, when over, until this cost
//!   fits; a unit for a limit that can never admit it), rounded up to whole
//!   seconds. A shadow rule over its limit reports `OK` with 0 remaining.
//!   Descriptors that were not counted because the request was over report
//!   what they would get now.
//! * **Cost 0** peeks: the status says whether one more unit would be
//!   admitted now (`OVER_LIMIT` when none is left), and nothing is counted.
//! * **Subjects.** A counter is keyed by the server's [`KeyHasher`] over
//!   the entries' keys and values (length-prefixed), so no value reaches
//!   the store, logs, metrics or errors.
//!
//! # Failure
//!
//! Every limiter call a request makes runs within a budget (10 ms unless
//! [`with_budget`](Decider::with_budget) says otherwise). A limiter error,
//! or no decision within the budget, answers [`ServiceError::Unavailable`]:
//! gRPC `UNAVAILABLE`, never `OK`, so that Envoy's `failure_mode_deny`
//! decides. Units counted before the failure stay counted.

mod decide;
mod plan;
mod respond;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use runlimit_core::{AnyPolicy, DEFAULT_MAX_BATCH_SIZE, KeyHasher, Lifecycle, Limiter, MAX_LIMIT};
use tonic::{Request, Response, Status};

use crate::{
    metrics::Metrics,
    proto::{RateLimitRequest, RateLimitResponse, RateLimitService},
    reload::SharedConfig,
};

/// The budget of a request's limiter calls unless configured otherwise.
pub const DEFAULT_BUDGET: Duration = Duration::from_millis(10);

/// Which rate-limit headers a response asks the proxy to add.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, clap::ValueEnum)]
#[non_exhaustive]
pub enum ResponseHeaders {
    /// None (the default).
    #[default]
    None,
    /// `RateLimit-Policy` and `RateLimit` of the IETF draft 11, one member
    /// per limited descriptor, named by its rule's name (else its path).
    Draft11,
    /// `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` (whole
    /// seconds) of one descriptor, as the reference service chooses it: the
    /// last enforced one over its limit, else the one with the fewest units
    /// left.
    Legacy,
    /// Both.
    Both,
}

impl ResponseHeaders {
    fn legacy(self) -> bool {
        matches!(self, Self::Legacy | Self::Both)
    }

    fn draft_11(self) -> bool {
        matches!(self, Self::Draft11 | Self::Both)
    }
}

/// Why a request was malformed. Messages name descriptors and entries by
/// their index, never by value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidRequest {
    /// The domain is empty.
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// There are no descriptors.
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// There are more descriptors than a request may have.
    #[error("{count} descriptors, more than the {max} a request may have")]
    TooManyDescriptors {
        /// How many there are.
        count: usize,
        /// How many a request may have.
        max: usize,
    },
    /// A descriptor has no entries.
    #[error("descriptor {descriptor} has no entries")]
    NoEntries {
        /// Its index in the request.
        descriptor: usize,
    },
    /// An entry's key is empty.
    #[error("entry {entry} of descriptor {descriptor} has an empty key")]
    EmptyKey {
        /// The descriptor's index in the request.
        descriptor: usize,
        /// The entry's index in the descriptor.
        entry: usize,
    },
    /// A descriptor asks for its hits to be given back, which this service
    /// does not do (an admission is given back only with its receipt).
    #[error("descriptor {descriptor} has negative hits, which this service does not give back")]
    NegativeHits {
        /// Its index in the request.
        descriptor: usize,
    },
    /// A descriptor's limit has the unit `UNKNOWN` or a number the protocol
    /// does not define.
    #[error("the limit of descriptor {descriptor} has the unit {unit}, not SECOND (1) to YEAR (6)")]
    OverrideUnit {
        /// Its index in the request.
        descriptor: usize,
        /// The unit's number.
        unit: i32,
    },
    /// A descriptor's limit allows 0 requests, or more than the stores
    /// count.
    #[error(
        "the limit of descriptor {descriptor} allows {requests_per_unit} requests per unit, not 1 to {MAX_LIMIT}"
    )]
    OverrideLimit {
        /// Its index in the request.
        descriptor: usize,
        /// The requests per unit it asked for.
        requests_per_unit: u32,
    },
}

/// Why a request got no decision.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The request is malformed: gRPC `INVALID_ARGUMENT`, HTTP 400.
    #[error("invalid request: {0}")]
    InvalidRequest(#[from] InvalidRequest),
    /// The limiter failed or did not decide in time: gRPC `UNAVAILABLE`,
    /// HTTP 503.
    #[error("the rate-limit backend is unavailable: {0}")]
    Unavailable(#[source] Unavailable),
}

/// Why the limiter gave no decision.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Unavailable {
    /// The limiter returned an error.
    #[error("the backend failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The limiter did not decide within the budget.
    #[error("no decision within {budget:?}")]
    BudgetExceeded {
        /// The budget.
        budget: Duration,
    },
}

impl ServiceError {
    /// The gRPC status that answers it. The message names no request value
    /// and no backend detail.
    #[must_use]
    pub fn to_status(&self) -> Status {
        match self {
            Self::InvalidRequest(invalid) => Status::invalid_argument(invalid.to_string()),
            Self::Unavailable(unavailable) => Status::unavailable(format!(
                "the rate-limit backend is unavailable: {unavailable}"
            )),
        }
    }
}

/// Answers `ShouldRateLimit` from the configuration in use and a limiter;
/// see the [module documentation](self) for what a request gets.
pub struct Decider<L> {
    limiter: L,
    config: Arc<SharedConfig>,
    hasher: KeyHasher,
    metrics: Metrics,
    budget: Duration,
    max_descriptors: usize,
    headers: ResponseHeaders,
    dynamic_metadata: bool,
    /// When a failure was last logged, in seconds since `started`.
    logged: AtomicU64,
    started: Instant,
}

impl<L> std::fmt::Debug for Decider<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decider")
            .field("budget", &self.budget)
            .field("max_descriptors", &self.max_descriptors)
            .field("headers", &self.headers)
            .field("dynamic_metadata", &self.dynamic_metadata)
            .finish_non_exhaustive()
    }
}

impl<L> Decider<L>
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle,
{
    /// Decides on `limiter` with the rules of `config`, keying counters
    /// with `hasher`, counting in `metrics`; a budget of
    /// [`DEFAULT_BUDGET`], at most [`DEFAULT_MAX_BATCH_SIZE`] descriptors,
    /// no headers, no dynamic metadata.
    #[must_use]
    pub fn new(limiter: L, config: Arc<SharedConfig>, hasher: KeyHasher, metrics: Metrics) -> Self {
        Self {
            limiter,
            config,
            hasher,
            metrics,
            budget: DEFAULT_BUDGET,
            max_descriptors: DEFAULT_MAX_BATCH_SIZE,
            headers: ResponseHeaders::None,
            dynamic_metadata: false,
            logged: AtomicU64::new(u64::MAX),
            started: Instant::now(),
        }
    }

    /// The time a request's limiter calls may take together. A budget of
    /// zero answers only what the limiter decides without waiting.
    #[must_use]
    pub fn with_budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// The most descriptors a request may have (more are
    /// [`InvalidRequest::TooManyDescriptors`]); the limiter must accept
    /// batches of that many checks.
    #[must_use]
    pub fn with_max_descriptors(mut self, max_descriptors: usize) -> Self {
        self.max_descriptors = max_descriptors;
        self
    }

    /// The rate-limit headers responses ask the proxy to add.
    #[must_use]
    pub fn with_response_headers(mut self, headers: ResponseHeaders) -> Self {
        self.headers = headers;
        self
    }

    /// Whether responses carry dynamic metadata as the reference service's
    /// do: the domain, each descriptor's entries as `key=value` (the values
    /// the proxy sent, returned to it), costs, quota mode's violations, and
    /// the configured `metadata` of the descriptors within their limits.
    #[must_use]
    pub fn with_dynamic_metadata(mut self, enabled: bool) -> Self {
        self.dynamic_metadata = enabled;
        self
    }

    /// The limiter.
    #[must_use]
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    /// The configuration in use.
    #[must_use]
    pub fn config(&self) -> &Arc<SharedConfig> {
        &self.config
    }

    /// The counters.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Decides `request`.
    ///
    /// # Errors
    ///
    /// [`ServiceError::InvalidRequest`] for a malformed request;
    /// [`ServiceError::Unavailable`] when the limiter failed or did not
    /// decide within the budget.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime with its timer enabled: the budget is a
    /// Tokio timeout.
    pub async fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, ServiceError> {
        let config = self.config.load();
        let plan = plan::Plan::new(
            &config,
            request,
            &self.hasher,
            &self.metrics,
            self.max_descriptors,
        )?;
        let refund_failed = |failed: decide::RefundFailed<L::Error>| {
            self.log_failure(&failed.0, "a refund failed: the request keeps its units");
        };
        let decided = tokio::time::timeout(
            self.budget,
            decide::decide(&self.limiter, &plan, refund_failed),
        )
        .await;
        let decided = match decided {
            Ok(Ok(decided)) => decided,
            Ok(Err(error)) => {
                self.metrics.backend_error();
                self.log_failure(&error, "the backend failed: answered UNAVAILABLE");
                return Err(ServiceError::Unavailable(Unavailable::Backend(Box::new(
                    error,
                ))));
            }
            Err(_) => {
                self.metrics.budget_exceeded();
                let budget = self.budget;
                self.log_failure(
                    &Unavailable::BudgetExceeded { budget },
                    "answered UNAVAILABLE",
                );
                return Err(ServiceError::Unavailable(Unavailable::BudgetExceeded {
                    budget,
                }));
            }
        };
        respond::count(&plan, &decided);
        let extras = respond::Extras {
            headers: self.headers,
            dynamic_metadata: self.dynamic_metadata,
        };
        Ok(respond::respond(request, &plan, &decided, extras))
    }

    /// Logs a failure with its causes, at most once a second: an outage
    /// would otherwise log every request. (Errors name no subject or value.)
    fn log_failure(&self, error: &dyn std::error::Error, message: &str) {
        let now = self.started.elapsed().as_secs();
        let last = self.logged.swap(now, Ordering::Relaxed);
        if last != now {
            tracing::warn!(error = %Causes(error), "{message}");
        }
    }
}

/// An error and its sources, as `error: cause: cause`.
struct Causes<'a>(&'a dyn std::error::Error);

impl std::fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

impl<L> RateLimitService for Decider<L>
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle + 'static,
{
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        Decider::should_rate_limit(self, request.get_ref())
            .await
            .map(Response::new)
            .map_err(|error| error.to_status())
    }
}

#[cfg(test)]
mod tests {
    use super::Causes;

    #[derive(Debug, thiserror::Error)]
    #[error("the backend failed")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("connection refused")]
    struct Inner;

    #[test]
    fn a_logged_failure_names_its_causes() {
        assert_eq!(
            Causes(&Outer(Inner)).to_string(),
            "the backend failed: connection refused"
        );
    }
}
