//! Periodic maintenance on the Tokio runtime, on tokio's paused clock: rounds
//! every interval, failures reported without ending the task, a stop that
//! ends it, and idle leases given back.
#![cfg(feature = "tokio")]

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use runlimit_core::{
    Check, FixedWindowPolicy, Limiter, Maintain, MaintenanceReport, PolicyId, ScopeId, Shared,
    SubjectKey,
};
use runlimit_memory::{
    Clock, LeaseConfig, Leased, MemoryStore, MemoryStoreConfig,
    maintenance::{self, SpawnError},
};
use tokio::{
    sync::{Semaphore, mpsc},
    time::Instant,
};

const MINUTE: Duration = Duration::from_secs(60);

/// What a round reported: the entries it removed and its failures' messages.
type Round = (u64, Vec<String>);

/// Runs the wrapped limiter's rounds and sends what each reported.
struct Rounds<M> {
    limiter: M,
    reports: mpsc::UnboundedSender<Round>,
}

impl<M: Maintain> Rounds<M> {
    fn new(limiter: M) -> (Self, mpsc::UnboundedReceiver<Round>) {
        let (reports, received) = mpsc::unbounded_channel();
        (Self { limiter, reports }, received)
    }
}

impl<M: Maintain> Maintain for Rounds<M> {
    async fn maintain(&self) -> MaintenanceReport {
        let report = self.limiter.maintain().await;
        let failures = report.failures().map(ToString::to_string).collect();
        let _ = self.reports.send((report.removed(), failures));
        report
    }
}

#[derive(Debug, thiserror::Error)]
#[error("round {0} could not reach the database")]
struct Unreachable(usize);

/// A limiter whose rounds remove one entry each, fail on the rounds listed,
/// and wait for a permit of `gate` when it has one.
#[derive(Default)]
struct Fake {
    rounds: AtomicUsize,
    failing: Vec<usize>,
    gate: Option<Arc<Semaphore>>,
}

impl Maintain for Fake {
    async fn maintain(&self) -> MaintenanceReport {
        let round = self.rounds.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(gate) = &self.gate {
            gate.acquire().await.expect("open").forget();
        }
        let mut report = MaintenanceReport::new();
        if self.failing.contains(&round) {
            report.record_failure(Unreachable(round));
        } else {
            report.record_removed(1);
        }
        report
    }
}

#[tokio::test(start_paused = true)]
async fn a_round_runs_every_interval_from_one_interval_after_the_start() {
    let (rounds, mut reports) = Rounds::new(Fake::default());
    let start = Instant::now();
    let _maintenance = maintenance::spawn(rounds, MINUTE).expect("spawned");
    // Counted from the spawn, however late the task first runs.
    tokio::time::advance(MINUTE / 2).await;
    for round in 1..=3u32 {
        // The clock moves on by itself to the next round, and no further.
        assert_eq!(reports.recv().await, Some((1, Vec::new())));
        assert_eq!(start.elapsed(), MINUTE * round);
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_round_is_logged_and_the_next_round_still_runs() {
    use tracing_subscriber::layer::SubscriberExt;
    let events = Events::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(events.clone()));
    let (rounds, mut reports) = Rounds::new(Fake {
        failing: vec![1, 2],
        ..Fake::default()
    });
    let maintenance = maintenance::spawn(rounds, MINUTE).expect("spawned");
    for round in 1..=2 {
        let message = format!("round {round} could not reach the database");
        assert_eq!(reports.recv().await, Some((0, vec![message])));
    }
    assert_eq!(reports.recv().await, Some((1, Vec::new())));
    assert!(!maintenance.is_finished());
    let warnings = events.0.lock().expect("lock").clone();
    for round in 1..=2 {
        let message = format!("round {round} could not reach the database");
        assert_eq!(
            warnings
                .iter()
                .filter(|(level, text)| *level == tracing::Level::WARN && text.contains(&message))
                .count(),
            1,
            "{warnings:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn stop_waits_for_the_round_in_progress_and_no_round_starts_after_it() {
    let gate = Arc::new(Semaphore::new(0));
    let limiter = Arc::new(Fake {
        gate: Some(Arc::clone(&gate)),
        ..Fake::default()
    });
    let maintenance = maintenance::spawn(Arc::clone(&limiter), MINUTE).expect("spawned");
    tokio::time::sleep(MINUTE).await;
    while limiter.rounds.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // The first round is in progress, waiting at the gate.
    let stopping = tokio::spawn(maintenance.stop());
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!stopping.is_finished(), "stop waits for the round");
    gate.add_permits(1);
    stopping.await.expect("stopped");
    gate.add_permits(100);
    tokio::time::sleep(MINUTE * 10).await;
    assert_eq!(limiter.rounds.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_handle_ends_the_maintenance() {
    let limiter = Arc::new(Fake::default());
    let maintenance = maintenance::spawn(Arc::clone(&limiter), MINUTE).expect("spawned");
    tokio::time::sleep(MINUTE + MINUTE / 2).await;
    assert_eq!(limiter.rounds.load(Ordering::SeqCst), 1);
    drop(maintenance);
    tokio::time::sleep(MINUTE * 10).await;
    assert_eq!(limiter.rounds.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_zero_interval_starts_nothing() {
    let error = maintenance::spawn(Fake::default(), Duration::ZERO).expect_err("zero");
    assert_eq!(error, SpawnError::ZeroInterval);
}

#[test]
fn outside_a_runtime_nothing_starts() {
    let error = maintenance::spawn(Fake::default(), MINUTE).expect_err("no runtime");
    assert_eq!(error, SpawnError::NoRuntime);
}

/// Tokio's clock, paused in these tests, as a lease's clock.
#[derive(Debug)]
struct TokioClock(Instant);

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

#[tokio::test(start_paused = true)]
async fn idle_leases_are_given_back_by_the_maintenance() {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::new(64).expect("valid")));
    let config = LeaseConfig::new(64)
        .and_then(|config| config.with_max_grant(50))
        .expect("valid")
        .with_idle_after(MINUTE / 2);
    let leased = Arc::new(
        Leased::new(Shared(Arc::clone(&store)), config).with_clock(TokioClock(Instant::now())),
    );
    let policy = FixedWindowPolicy::new(
        PolicyId::new("maintained").expect("valid"),
        ScopeId::new("tenant").expect("valid"),
        1_000,
        Duration::from_secs(3_600),
    )
    .expect("valid");
    let check = Check::new(&policy, SubjectKey::from_digest([1; 32]));
    for _ in 0..20 {
        assert!(leased.check(&check).await.expect("decided").is_allowed());
    }
    let held = leased.stats().units_held;
    assert!(held > 0, "a lease holds units");
    let used = |store: &MemoryStore| {
        1_000
            - store
                .peek(&check)
                .expect("peek")
                .remaining()
                .expect("allowed")
    };
    assert_eq!(used(&store), 20 + held);

    let (rounds, mut reports) = Rounds::new(Arc::clone(&leased));
    let _maintenance = maintenance::spawn(rounds, MINUTE).expect("spawned");
    assert_eq!(reports.recv().await, Some((0, Vec::new())));
    let stats = leased.stats();
    assert_eq!((stats.leases, stats.units_held), (0, 0));
    assert_eq!(stats.units_returned, held);
    assert_eq!(used(&store), 20);
}

/// Records every event's level and fields as text.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<(tracing::Level, String)>>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut text = String::new();
        event.record(&mut Fields(&mut text));
        self.0
            .lock()
            .expect("lock")
            .push((*event.metadata().level(), text));
    }
}
