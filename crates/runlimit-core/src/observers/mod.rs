//! Ready-made [`Observer`]s for the Rust telemetry ecosystem, and how to
//! combine several.
//!
//! * `TracingObserver` (feature `tracing`): an event per operation,
//!   cleanup and capacity change, through the `tracing` crate.
//! * `MetricsObserver` (feature `metrics`): counters, a latency histogram
//!   and capacity gauges through the `metrics` 0.24 facade, for any of its
//!   exporters built on that version (Prometheus: `metrics-exporter-prometheus`
//!   0.18; StatsD, OpenTelemetry).
//!
//! Both label what they report with policy and scope identifiers and store
//! names ([`StoreName`](crate::StoreName)) only: never
//! a subject key, counter key, fingerprint or error text (observations carry
//! none). A tuple of observers is an observer that hands every observation to
//! each in turn, so one backend can feed both:
//!
//! ```
//! use runlimit_core::{AdmissionObservation, Observer};
//!
//! #[derive(Debug)]
//! struct Audit;
//! impl Observer for Audit {}
//!
//! #[derive(Debug)]
//! struct Alerts;
//! impl Observer for Alerts {}
//!
//! fn install(observer: impl Observer + 'static) {
//!     # let _ = observer;
//! }
//! install((Audit, Alerts));
//! ```
//!
//! One member's panic is caught before the next is called, as backends catch
//! an observer's.

#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "tracing")]
mod tracing;

#[cfg(feature = "metrics")]
pub use self::metrics::MetricsObserver;
#[cfg(feature = "tracing")]
pub use self::tracing::TracingObserver;

use crate::observation::{
    AdmissionObservation, CapacityObservation, CleanupObservation, Observer, notify,
};

macro_rules! tuple_observer {
    ($($member:ident . $index:tt),+) => {
        /// Every observation goes to each member in turn.
        impl<$($member: Observer),+> Observer for ($($member,)+) {
            fn on_admission(&self, observation: &AdmissionObservation<'_>) {
                $(notify(&self.$index, |observer| observer.on_admission(observation));)+
            }

            fn on_cleanup(&self, observation: &CleanupObservation) {
                $(notify(&self.$index, |observer| observer.on_cleanup(observation));)+
            }

            fn on_capacity(&self, observation: &CapacityObservation<'_>) {
                $(notify(&self.$index, |observer| observer.on_capacity(observation));)+
            }
        }
    };
}

tuple_observer!(A.0, B.1);
tuple_observer!(A.0, B.1, C.2);
tuple_observer!(A.0, B.1, C.2, D.3);
