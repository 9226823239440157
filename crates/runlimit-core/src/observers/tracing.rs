//! Observations as `tracing` events.

use ::tracing::{Level, event};

use crate::observation::{
    AdmissionObservation, AdmissionOutcome, CapacityObservation, CarryObservation,
    CleanupObservation, Consumption, Observer,
};

/// Emits a `tracing` event (target `runlimit`) for every observation.
///
/// * Operations: `DEBUG` when allowed (and for refunds, peeks and resets),
///   `INFO` for quota and shadow denials, `WARN` for capacity denials and
///   failures. Fields: `operation`, `outcome`, `consumption`, `policy` and
///   `scope` (of the check that decided a denial, else the first), `batch_size`,
///   `cached` (answered by a denial cache), `leased` (admitted from a lease) and
///   `elapsed_us`.
/// * Cleanup: `DEBUG`, with `requested`, `removed` (absent when unknown) and
///   `elapsed_us`.
/// * Capacity: `DEBUG`, or `WARN` with no headroom left, with `store` (the
///   [`StoreName`](crate::StoreName) the application gave the store), `used`,
///   `capacity`, `headroom` and `shard`.
///
/// No event carries a subject, key or error text. Filter with the usual
/// `tracing` machinery, for example `RUST_LOG=runlimit=info`.
///
/// # Examples
///
/// ```
/// use runlimit_core::observers::TracingObserver;
/// use runlimit_core::Observer;
///
/// fn install(observer: impl Observer + 'static) {
///     # let _ = observer;
/// }
/// install(TracingObserver::new());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingObserver {
    _private: (),
}

impl TracingObserver {
    /// An observer emitting events at the levels above.
    #[must_use]
    pub const fn new() -> Self {
        Self { _private: () }
    }
}

fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

macro_rules! admission_event {
    ($level:expr, $observation:expr, $policy:expr, $scope:expr) => {
        event!(
            target: "runlimit",
            $level,
            operation = $observation.operation().as_str(),
            outcome = $observation.outcome().as_str(),
            consumption = $observation.consumption().as_str(),
            policy = $policy,
            scope = $scope,
            batch_size = $observation.batch_size(),
            cached = $observation.cached(),
            leased = $observation.leased(),
            elapsed_us = micros($observation.elapsed()),
            "rate limit {}",
            $observation.operation().as_str(),
        )
    };
}

impl Observer for TracingObserver {
    fn on_admission(&self, observation: &AdmissionObservation<'_>) {
        let label = observation
            .decisive_index()
            .and_then(|index| observation.policies().get(index))
            .or_else(|| observation.policies().first());
        let (policy, scope) = label.map_or(("", ""), |label| {
            (label.policy.as_str(), label.scope.as_str())
        });
        match observation.outcome() {
            AdmissionOutcome::QuotaDenied | AdmissionOutcome::ShadowDenied => {
                admission_event!(Level::INFO, observation, policy, scope);
            }
            AdmissionOutcome::CapacityDenied | AdmissionOutcome::Failed => {
                admission_event!(Level::WARN, observation, policy, scope);
            }
            _ if observation.consumption() == Consumption::PossiblyConsumed => {
                admission_event!(Level::WARN, observation, policy, scope);
            }
            _ => admission_event!(Level::DEBUG, observation, policy, scope),
        }
    }

    fn on_cleanup(&self, observation: &CleanupObservation) {
        event!(
            target: "runlimit",
            Level::DEBUG,
            requested = observation.requested(),
            removed = observation.removed(),
            elapsed_us = micros(observation.elapsed()),
            "rate limit cleanup"
        );
    }

    fn on_capacity(&self, observation: &CapacityObservation<'_>) {
        if observation.headroom() == 0 {
            event!(
                target: "runlimit",
                Level::WARN,
                store = observation.store(),
                used = observation.used(),
                capacity = observation.capacity(),
                headroom = observation.headroom(),
                shard = observation.shard(),
                "rate limit storage full"
            );
        } else {
            event!(
                target: "runlimit",
                Level::DEBUG,
                store = observation.store(),
                used = observation.used(),
                capacity = observation.capacity(),
                headroom = observation.headroom(),
                shard = observation.shard(),
                "rate limit storage"
            );
        }
    }

    fn on_carry(&self, observation: &CarryObservation<'_>) {
        let label = observation.policy();
        event!(
            target: "runlimit",
            Level::DEBUG,
            policy = label.policy.as_str(),
            scope = label.scope.as_str(),
            from = observation.from().as_str(),
            "rate limit counter carried"
        );
    }
}
