//! The ready-made observers on a known sequence of outcomes: the `metrics`
//! observer's counters (through `metrics-util`'s debugging recorder) and the
//! `tracing` observer's events, with no key or subject anywhere in them.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use runlimit_core::{
    Check, FixedWindowPolicy, Limiter, PolicyId, QuotaMode, ScopeId, StoreName, SubjectKey,
    observers::{MetricsObserver, TracingObserver},
};
use runlimit_memory::{DenialCache, ManualClock, MemoryStore, MemoryStoreConfig};

fn window(id: &str, limit: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new(id).expect("valid"),
        ScopeId::new("client").expect("valid"),
        limit,
        Duration::from_secs(60),
    )
    .expect("valid")
}

const SUBJECT: [u8; 32] = [0xAB; 32];

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The known sequence, against a store (and a denial cache) with `observer`:
/// two allowed checks, a quota denial, a cached denial, a shadow denial, a
/// denied batch and a capacity denial.
fn sequence(observer: impl runlimit_core::Observer + Clone + 'static) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let clock = ManualClock::new();
    let store = MemoryStore::new(MemoryStoreConfig::new(2).expect("valid"))
        .with_clock(clock.clone())
        .with_observer(observer.clone());
    let cache =
        Arc::new(DenialCache::new(MemoryStoreConfig::new(10).expect("valid")).with_clock(clock));
    let cached = cache.in_front_of(store).with_observer(observer);
    let login = window("login", 2);
    let shadow = window("shadow", 1).with_quota_mode(QuotaMode::Shadow);
    let subject = SubjectKey::from_digest(SUBJECT);
    let check = Check::new(&login, subject);
    runtime.block_on(async {
        assert!(cached.check(&check).await.expect("ok").is_allowed());
        assert!(cached.check(&check).await.expect("ok").is_allowed());
        // Denied by the store, then by the cache.
        assert!(cached.check(&check).await.expect("ok").is_denied());
        assert!(cached.check(&check).await.expect("ok").is_denied());
        let shadow_check = Check::new(&shadow, subject);
        assert!(cached.check(&shadow_check).await.expect("ok").is_allowed());
        assert!(
            cached
                .check(&shadow_check)
                .await
                .expect("ok")
                .is_shadow_denied()
        );
        // A batch of a fresh login key and the exhausted one: the cache
        // answers it, at the exhausted check.
        let other = Check::new(&login, SubjectKey::from_digest([0xCD; 32]));
        assert!(
            !cached
                .check_all(&[other, check])
                .await
                .expect("ok")
                .is_allowed()
        );
        // The store holds two keys (the batch never reached it): a third is a
        // capacity denial.
        let fourth_policy = window("fourth", 5);
        let fourth = Check::new(&fourth_policy, SubjectKey::from_digest([0xEF; 32]));
        assert!(cached.check(&fourth).await.expect("ok").is_denied());
    });
}

#[test]
fn the_metrics_observer_counts_the_known_sequence() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || sequence(MetricsObserver::new()));
    let mut counters = Vec::new();
    let mut gauges = Vec::new();
    let mut histograms = 0;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|label| (label.key().to_owned(), label.value().to_owned()))
            .collect();
        labels.sort();
        for (_, value) in &labels {
            assert!(
                !value.contains(&hex(&SUBJECT)) && !value.contains("ab, ab"),
                "a label holds a subject: {value}"
            );
        }
        let label = |name: &str| {
            labels
                .iter()
                .find(|(key, _)| key == name)
                .map_or(String::new(), |(_, value)| value.clone())
        };
        match value {
            DebugValue::Counter(count) => counters.push((
                key.name().to_owned(),
                label("policy"),
                label("outcome"),
                label("source"),
                count,
            )),
            DebugValue::Gauge(value) => gauges.push((key.name().to_owned(), value.into_inner())),
            DebugValue::Histogram(values) => histograms += values.len(),
        }
    }
    let count = |name: &str, policy: &str, outcome: &str, source: &str| {
        counters
            .iter()
            .filter(|(n, p, o, s, _)| n == name && p == policy && o == outcome && s == source)
            .map(|(.., count)| *count)
            .sum::<u64>()
    };
    assert_eq!(
        count("runlimit_checks_total", "login", "allowed", "backend"),
        2
    );
    assert_eq!(
        count("runlimit_checks_total", "login", "quota_denied", "backend"),
        1
    );
    // The cached single denial, and both checks of the cached batch.
    assert_eq!(
        count("runlimit_checks_total", "login", "quota_denied", "cache"),
        3
    );
    assert_eq!(
        count("runlimit_denials_total", "login", "quota_denied", "cache"),
        2
    );
    assert_eq!(
        count("runlimit_checks_total", "shadow", "allowed", "backend"),
        1
    );
    assert_eq!(
        count(
            "runlimit_checks_total",
            "shadow",
            "shadow_denied",
            "backend"
        ),
        1
    );
    assert_eq!(
        count(
            "runlimit_denials_total",
            "fourth",
            "capacity_denied",
            "backend"
        ),
        1
    );
    assert_eq!(
        histograms, 8,
        "one duration per operation, cached ones included"
    );
    assert!(
        gauges
            .iter()
            .any(|(name, value)| name == "runlimit_storage_headroom" && *value == 0.0),
        "{gauges:?}"
    );
}

/// Two stores named apart keep capacity gauges of their own, so a change in
/// one never overwrites the other's; a store left unnamed reports as
/// `default`.
#[test]
fn named_stores_report_capacity_gauges_of_their_own() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let store = |max_keys: usize, name: Option<&str>| {
        let store = MemoryStore::new(MemoryStoreConfig::new(max_keys).expect("valid"));
        let store = match name {
            Some(name) => store.with_name(StoreName::new(name).expect("valid")),
            None => store,
        };
        store.with_observer(MetricsObserver::new())
    };
    metrics::with_local_recorder(&recorder, || {
        let (login, api, unnamed) = (
            store(40, Some("login")),
            store(4, Some("api")),
            store(8, None),
        );
        let policy = window("named", 5);
        for n in 0..32 {
            let check = Check::new(&policy, SubjectKey::from_digest([n; 32]));
            assert!(login.check(&check).expect("ok").is_allowed());
        }
        for n in 0..2 {
            let check = Check::new(&policy, SubjectKey::from_digest([n; 32]));
            assert!(api.check(&check).expect("ok").is_allowed());
        }
        let check = Check::new(&policy, SubjectKey::from_digest([0; 32]));
        assert!(unnamed.check(&check).expect("ok").is_allowed());
    });
    let mut gauges = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let DebugValue::Gauge(value) = value else {
            continue;
        };
        let key = key.key();
        let label = |name: &str| {
            key.labels()
                .find(|label| label.key() == name)
                .map(|label| label.value().to_owned())
        };
        gauges.push((
            key.name().to_owned(),
            label("store"),
            label("shard"),
            value.into_inner(),
        ));
    }
    gauges.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let gauge = |name: &str, store: &str, value: f64| {
        (
            name.to_owned(),
            Some(store.to_owned()),
            Some("0".to_owned()),
            value,
        )
    };
    assert_eq!(
        gauges,
        [
            gauge("runlimit_storage_headroom", "api", 2.0),
            gauge("runlimit_storage_headroom", "default", 7.0),
            gauge("runlimit_storage_headroom", "login", 8.0),
            gauge("runlimit_storage_used", "api", 2.0),
            gauge("runlimit_storage_used", "default", 1.0),
            gauge("runlimit_storage_used", "login", 32.0),
        ]
    );
}

/// Records every event's level, message and fields as text.
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

#[test]
fn the_tracing_observer_emits_events_without_keys() {
    use tracing_subscriber::layer::SubscriberExt;
    let events = Events::default();
    let subscriber = tracing_subscriber::registry().with(events.clone());
    tracing::subscriber::with_default(subscriber, || sequence(TracingObserver::new()));
    let events = events.0.lock().expect("lock");
    let at = |level: tracing::Level, needle: &str| {
        events
            .iter()
            .filter(|(l, text)| *l == level && text.contains(needle))
            .count()
    };
    assert_eq!(at(tracing::Level::DEBUG, "outcome=\"allowed\""), 3);
    assert_eq!(at(tracing::Level::INFO, "outcome=\"quota_denied\""), 3);
    assert_eq!(at(tracing::Level::INFO, "cached=true"), 2);
    assert_eq!(at(tracing::Level::INFO, "outcome=\"shadow_denied\""), 1);
    assert_eq!(at(tracing::Level::WARN, "outcome=\"capacity_denied\""), 1);
    // Filling the store's two slots, and the denial for want of a third.
    assert_eq!(at(tracing::Level::WARN, "rate limit storage full"), 2);
    assert_eq!(at(tracing::Level::WARN, "store=\"default\""), 2);
    for (_, text) in events.iter() {
        assert!(
            !text.contains(&hex(&SUBJECT)) && !text.contains("171, 171"),
            "an event holds a subject: {text}"
        );
    }
}
