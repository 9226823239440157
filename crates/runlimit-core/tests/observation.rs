//! Observation helpers keep telemetry from changing admission results.

use std::{
    pin::pin,
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll, Waker},
    time::Duration,
};

use runlimit_core::{
    AdmissionObservation, AdmissionOutcome, AdmissionReporter, BatchDecision, CapacityObservation,
    Check, CleanupObservation, Consumption, Decision, FixedWindowPolicy, Observer, Operation,
    PolicyId, PolicyLabel, ScopeId, StoreName, SubjectKey, notify,
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

/// A capacity observation names its store: `default` until a backend names
/// it with the application's [`StoreName`].
#[test]
fn capacity_observations_name_their_store() {
    let observation = CapacityObservation::new(9, 10, Some(3));
    assert_eq!(observation.store(), "default");
    let name = StoreName::new("login").expect("valid");
    let named = observation.in_store(&name);
    assert_eq!(named.store(), "login");
    assert_eq!(
        (named.used(), named.capacity(), named.shard()),
        (9, 10, Some(3))
    );
}

/// Records the operation, outcome and consumption of every admission.
#[derive(Debug, Default)]
struct Outcomes(Mutex<Vec<(Operation, AdmissionOutcome, Consumption)>>);

impl Observer for Outcomes {
    fn on_admission(&self, observation: &AdmissionObservation<'_>) {
        self.0.lock().expect("lock").push((
            observation.operation(),
            observation.outcome(),
            observation.consumption(),
        ));
    }
}

/// Polls a future that never waits to completion.
fn ready<T>(future: impl Future<Output = T>) -> T {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(value) => value,
        Poll::Pending => panic!("the test futures never wait"),
    }
}

#[test]
fn remote_admissions_report_outcomes_and_doubtful_consumption() {
    let outcomes = Outcomes::default();
    let client = policy("client");
    let checks = [Check::new(&client, SubjectKey::from_digest([3; 32]))];
    let allowed = Decision::allowed(8, 7, Duration::from_secs(60)).expect("valid");
    let decision = ready(AdmissionReporter::observe_check(
        Some(&outcomes),
        &checks[0],
        async { Ok::<_, bool>(allowed) },
        |&lost_reply| lost_reply,
    ))
    .expect("allowed");
    assert!(decision.is_allowed());
    // A reply lost after sending may have consumed quota; a refusal did not.
    for lost_reply in [true, false] {
        let failed = ready(AdmissionReporter::observe_batch(
            Some(&outcomes),
            &checks,
            async { Err::<BatchDecision, _>(lost_reply) },
            |&lost_reply| lost_reply,
        ));
        assert_eq!(failed, Err(lost_reply));
    }
    // Without an observer the result passes through untouched.
    let unobserved = ready(AdmissionReporter::observe_batch(
        None,
        &checks,
        async { Err::<BatchDecision, _>(true) },
        |&lost_reply| lost_reply,
    ));
    assert_eq!(unobserved, Err(true));
    assert_eq!(
        *outcomes.0.lock().expect("lock"),
        [
            (
                Operation::Check,
                AdmissionOutcome::Allowed,
                Consumption::Consumed
            ),
            (
                Operation::Batch,
                AdmissionOutcome::Failed,
                Consumption::PossiblyConsumed
            ),
            (
                Operation::Batch,
                AdmissionOutcome::Failed,
                Consumption::NotConsumed
            ),
        ]
    );
}
