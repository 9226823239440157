//! Observation helpers keep telemetry from changing admission results.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use runlimit_core::{
    AdmissionObservation, AdmissionOutcome, CapacityObservation, Check, CleanupObservation,
    Consumption, FixedWindowPolicy, Observer, Operation, PolicyId, PolicyLabel, ScopeId,
    SubjectKey, notify,
};

#[derive(Debug, Default)]
struct Recording {
    admissions: AtomicUsize,
}

impl Observer for Recording {
    fn on_admission(&self, observation: &AdmissionObservation<'_>) {
        assert_eq!(observation.batch_size(), 2);
        self.admissions.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Debug)]
struct Panicking;

impl Observer for Panicking {
    fn on_cleanup(&self, _: &CleanupObservation) {
        panic!("exporter bug");
    }
}

fn policy(scope: &str) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("auth.login").expect("valid"),
        ScopeId::new(scope).expect("valid"),
        8,
        Duration::from_secs(60),
    )
    .expect("valid")
}

#[test]
fn admission_observations_label_policies_without_keys() {
    let client = policy("client");
    let identity = policy("identity");
    let checks = [
        Check::new(&client, SubjectKey::from_digest([1; 32])),
        Check::new(&identity, SubjectKey::from_digest([2; 32])),
    ];
    let labels: Vec<PolicyLabel<'_>> = checks.iter().map(PolicyLabel::of).collect();
    let observation = AdmissionObservation::new(
        Operation::Batch,
        &labels,
        Some(1),
        AdmissionOutcome::QuotaDenied,
        Consumption::NotConsumed,
        Duration::from_micros(3),
    );
    assert_eq!(
        observation.policy().map(|label| label.scope.as_str()),
        Some("identity")
    );
    let shown = format!("{observation:?}");
    assert!(
        shown.contains("identity") && !shown.contains("SubjectKey"),
        "{shown}"
    );

    let recording = Recording::default();
    assert!(notify(&recording, |observer| observer.on_admission(&observation)));
    assert_eq!(recording.admissions.load(Ordering::SeqCst), 1);
}

#[test]
fn observer_panics_are_caught() {
    let observation = CleanupObservation::new(10, Some(3), Duration::ZERO);
    assert!(!notify(&Panicking, |observer| observer.on_cleanup(&observation)));
    // Default methods do nothing and do not panic.
    assert!(notify(&Panicking, |observer| {
        observer.on_capacity(&CapacityObservation::new(9, 10, Some(0)));
    }));
    assert_eq!(CapacityObservation::new(9, 10, None).headroom(), 1);
}
