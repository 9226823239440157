//! Observations as `metrics` counters, histograms and gauges.

use ::metrics::{counter, gauge, histogram};

use crate::observation::{
    AdmissionObservation, AdmissionOutcome, CapacityObservation, CarryObservation,
    CleanupObservation, Consumption, Observer,
};

/// Records every observation through the `metrics` crate's global (or
/// thread-local) recorder, so any exporter (`metrics-exporter-prometheus`,
/// StatsD, OpenTelemetry) can serve them. Names follow the `metrics` and
/// Prometheus conventions: snake case, a `runlimit_` prefix, `_total` for
/// counters, base units (seconds) in the name.
///
/// # Which exporter
///
/// This observer records through the `metrics` 0.24 facade. An exporter
/// sees only what is recorded through the facade version it was built on,
/// so install one built on `metrics` 0.24: for Prometheus,
/// `metrics-exporter-prometheus` 0.18 (what this project builds and tests
/// with). An exporter on another facade version (0.23, say) installs
/// without error and serves none of these metrics; `cargo tree --duplicates`
/// lists `metrics` when two versions are in the build.
///
/// | metric | kind | labels |
/// |---|---|---|
/// | `runlimit_checks_total` | counter, one per check of an operation | `operation`, `policy`, `scope`, `outcome`, `source` |
/// | `runlimit_denials_total` | counter, one per denied operation, for the check that decided it | `policy`, `scope`, `outcome`, `source` |
/// | `runlimit_operation_duration_seconds` | histogram | `operation`, `outcome` |
/// | `runlimit_may_have_consumed_errors_total` | counter: failures that may have consumed quota | `operation` |
/// | `runlimit_storage_headroom` | gauge: keys that still fit | `store`, `shard` |
/// | `runlimit_storage_used` | gauge: keys stored | `store`, `shard` |
/// | `runlimit_cleanup_removed_total` | counter: expired keys removed | |
/// | `runlimit_cleanup_runs_total` | counter: bounded cleanup passes | |
/// | `runlimit_carried_total` | counter: counters started from another's state ([`carry`](crate::carry)) | `policy`, `scope`, `from` |
///
/// `outcome` is [`AdmissionOutcome::as_str`] (`allowed`, `quota_denied`,
/// `shadow_denied`, `capacity_denied`, `failed`, `refunded`, …); `source`
/// is `backend`, `cache` for denials a denial cache answered, or `lease` for
/// admissions from units a lease already held; `store` is the
/// [`StoreName`](crate::StoreName) the application gave the store (`default`
/// when it gave none: name every store apart when a process has several, or
/// their gauges overwrite each other's); `shard` is
/// the shard number, or `all` for backends that report one total. A check of a
/// denied batch counts under the batch's outcome; the check that decided it
/// also counts in `runlimit_denials_total`.
///
/// Labels hold policy and scope identifiers and store names only, which are
/// low-cardinality by construction. Never a subject.
///
/// # Examples
///
/// ```
/// use runlimit_core::observers::MetricsObserver;
/// use runlimit_core::Observer;
///
/// fn install(observer: impl Observer + 'static) {
///     # let _ = observer;
/// }
/// install(MetricsObserver::new());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsObserver {
    _private: (),
}

impl MetricsObserver {
    /// An observer recording the metrics above.
    #[must_use]
    pub const fn new() -> Self {
        Self { _private: () }
    }
}

fn source(observation: &AdmissionObservation<'_>) -> &'static str {
    if observation.cached() {
        "cache"
    } else if observation.leased() {
        "lease"
    } else {
        "backend"
    }
}

impl Observer for MetricsObserver {
    fn on_admission(&self, observation: &AdmissionObservation<'_>) {
        let operation = observation.operation().as_str();
        let outcome = observation.outcome().as_str();
        let source = source(observation);
        for label in observation.policies() {
            counter!(
                "runlimit_checks_total",
                "operation" => operation,
                "policy" => label.policy.as_str().to_owned(),
                "scope" => label.scope.as_str().to_owned(),
                "outcome" => outcome,
                "source" => source
            )
            .increment(1);
        }
        if matches!(
            observation.outcome(),
            AdmissionOutcome::QuotaDenied
                | AdmissionOutcome::ShadowDenied
                | AdmissionOutcome::CapacityDenied
        ) && let Some(label) = observation.policy()
        {
            counter!(
                "runlimit_denials_total",
                "policy" => label.policy.as_str().to_owned(),
                "scope" => label.scope.as_str().to_owned(),
                "outcome" => outcome,
                "source" => source
            )
            .increment(1);
        }
        if observation.consumption() == Consumption::PossiblyConsumed {
            counter!("runlimit_may_have_consumed_errors_total", "operation" => operation)
                .increment(1);
        }
        histogram!(
            "runlimit_operation_duration_seconds",
            "operation" => operation,
            "outcome" => outcome
        )
        .record(observation.elapsed().as_secs_f64());
    }

    fn on_cleanup(&self, observation: &CleanupObservation) {
        counter!("runlimit_cleanup_runs_total").increment(1);
        if let Some(removed) = observation.removed() {
            counter!("runlimit_cleanup_removed_total").increment(removed);
        }
    }

    #[allow(clippy::cast_precision_loss)]
    fn on_capacity(&self, observation: &CapacityObservation<'_>) {
        let store = observation.store().to_owned();
        let shard = observation
            .shard()
            .map_or_else(|| "all".to_owned(), |shard| shard.to_string());
        gauge!("runlimit_storage_headroom", "store" => store.clone(), "shard" => shard.clone())
            .set(observation.headroom() as f64);
        gauge!("runlimit_storage_used", "store" => store, "shard" => shard)
            .set(observation.used() as f64);
    }

    fn on_carry(&self, observation: &CarryObservation<'_>) {
        let label = observation.policy();
        counter!(
            "runlimit_carried_total",
            "policy" => label.policy.as_str().to_owned(),
            "scope" => label.scope.as_str().to_owned(),
            "from" => observation.from().as_str()
        )
        .increment(1);
    }
}
