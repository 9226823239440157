//! Bounds, cleanup, poisoning, observers and configuration of the memory stores.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use runlimit_core::{
    AdmissionObservation, AdmissionOutcome, BatchDecision, BatchError, CapacityObservation, Check,
    CleanupObservation, Consumption, Denial, FixedWindowPolicy, GcraPolicy, Limiter, Observer,
    PolicyId, QuotaMode, ScopeId, SubjectKey,
};
use runlimit_memory::{
    Clock, ConfigError, GcraStore, MAX_BATCH_SIZE, MAX_CLEANUP_PER_CHECK, MAX_KEYS, MAX_SHARDS,
    ManualClock, MemoryStore, MemoryStoreConfig, MemoryStoreError,
};

fn policy(limit: u64, window: Duration) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("auth.login").expect("valid"),
        ScopeId::new("client").expect("valid"),
        limit,
        window,
    )
    .expect("valid")
}

fn key(n: u32) -> SubjectKey {
    let mut digest = [0x3C; 32];
    digest[..4].copy_from_slice(&n.to_le_bytes());
    digest[8..12].copy_from_slice(&n.wrapping_mul(2_654_435_761).to_le_bytes());
    SubjectKey::from_digest(digest)
}

fn store(max_keys: usize, clock: &ManualClock) -> MemoryStore {
    MemoryStore::new(MemoryStoreConfig::new(max_keys).expect("valid")).with_clock(clock.clone())
}

#[test]
fn config_values_are_validated() {
    assert_eq!(
        MemoryStoreConfig::new(0),
        Err(ConfigError::MaxKeysOutOfRange { max_keys: 0 })
    );
    assert_eq!(
        MemoryStoreConfig::new(MAX_KEYS + 1),
        Err(ConfigError::MaxKeysOutOfRange {
            max_keys: MAX_KEYS + 1
        })
    );
    let config = MemoryStoreConfig::new(10).expect("valid");
    assert_eq!(config.shard_count(), 1, "one shard by default");
    assert_eq!(
        config.with_shard_count(11),
        Err(ConfigError::ShardCountOutOfRange {
            shard_count: 11,
            maximum: 10
        })
    );
    assert_eq!(
        MemoryStoreConfig::new(MAX_KEYS)
            .expect("valid")
            .with_shard_count(MAX_SHARDS + 1),
        Err(ConfigError::ShardCountOutOfRange {
            shard_count: MAX_SHARDS + 1,
            maximum: MAX_SHARDS
        })
    );
    assert_eq!(
        config.with_shard_count(0),
        Err(ConfigError::ShardCountOutOfRange {
            shard_count: 0,
            maximum: 10
        })
    );
    assert_eq!(
        config.with_cleanup_per_check(0),
        Err(ConfigError::CleanupOutOfRange {
            cleanup_per_check: 0
        })
    );
    assert_eq!(
        config.with_cleanup_per_check(MAX_CLEANUP_PER_CHECK + 1),
        Err(ConfigError::CleanupOutOfRange {
            cleanup_per_check: MAX_CLEANUP_PER_CHECK + 1
        })
    );
    assert_eq!(
        config.with_max_batch_size(0),
        Err(ConfigError::BatchSizeOutOfRange { max_batch_size: 0 })
    );
    assert_eq!(
        config.with_max_batch_size(MAX_BATCH_SIZE + 1),
        Err(ConfigError::BatchSizeOutOfRange {
            max_batch_size: MAX_BATCH_SIZE + 1
        })
    );
    let split = config.with_shard_count(3).expect("valid");
    let capacities: Vec<usize> = (0..3).map(|index| split.shard_capacity(index)).collect();
    assert_eq!(capacities, [4, 3, 3]);
}

#[test]
fn a_flood_of_distinct_keys_never_exceeds_max_keys() {
    let clock = ManualClock::new();
    for shards in [1, 7] {
        let config = MemoryStoreConfig::new(100)
            .and_then(|config| config.with_shard_count(shards))
            .expect("valid");
        let store = MemoryStore::new(config).with_clock(clock.clone());
        let policy = policy(5, Duration::from_secs(60));
        let mut capacity_denials = 0;
        for n in 0..5_000 {
            let decision = store.check(&Check::new(&policy, key(n))).expect("no error");
            if decision.denial().is_some_and(Denial::is_storage_capacity) {
                capacity_denials += 1;
            }
            let stats = store.stats();
            assert!(stats.entries <= 100, "{} entries", stats.entries);
            assert!(
                stats
                    .shards
                    .iter()
                    .all(|shard| shard.entries <= shard.capacity)
            );
        }
        assert_eq!(store.stats().entries, 100);
        assert_eq!(capacity_denials, 4_900);
    }
}

#[test]
fn full_store_denies_new_keys_but_never_evicts_active_ones() {
    let clock = ManualClock::new();
    let store = store(2, &clock);
    let policy = policy(3, Duration::from_secs(10));
    for n in 0..2 {
        assert!(
            store
                .check(&Check::new(&policy, key(n)))
                .expect("ok")
                .is_allowed()
        );
    }
    clock.advance(Duration::from_secs(4));
    let denied = store.check(&Check::new(&policy, key(9))).expect("ok");
    assert_eq!(
        denied.denial(),
        Some(&Denial::StorageCapacity {
            retry_after: Some(Duration::from_secs(6))
        })
    );
    assert!(!denied.permits_request());
    // Existing keys keep their counters and keep working.
    assert_eq!(
        store
            .check(&Check::new(&policy, key(0)))
            .expect("ok")
            .remaining(),
        Some(1)
    );

    // Shadow mode does not open a capacity denial.
    let shadow = policy.clone().with_quota_mode(QuotaMode::Shadow);
    let denied = store.check(&Check::new(&shadow, key(10))).expect("ok");
    assert!(denied.is_denied() && denied.denial().is_some_and(Denial::is_storage_capacity));

    // Once the windows expire, a new key fits by removing an expired entry.
    clock.advance(Duration::from_secs(6));
    assert!(
        store
            .check(&Check::new(&policy, key(9)))
            .expect("ok")
            .is_allowed()
    );
    assert_eq!(
        store.stats().entries,
        1,
        "both expired entries were removed"
    );
}

#[test]
fn each_check_removes_at_most_its_cleanup_allowance() {
    let clock = ManualClock::new();
    let config = MemoryStoreConfig::new(10)
        .and_then(|config| config.with_cleanup_per_check(3))
        .expect("valid");
    let store = MemoryStore::new(config).with_clock(clock.clone());
    let policy = policy(1, Duration::from_secs(1));
    for n in 0..10 {
        store.check(&Check::new(&policy, key(n))).expect("ok");
    }
    clock.advance(Duration::from_secs(1));
    store.check(&Check::new(&policy, key(100))).expect("ok");
    // Three expired entries removed, one new key inserted.
    assert_eq!(store.stats().entries, 8);
    store.check(&Check::new(&policy, key(101))).expect("ok");
    assert_eq!(store.stats().entries, 6);
    // Existing keys need no room and remove nothing.
    store.check(&Check::new(&policy, key(100))).expect("ok");
    assert_eq!(store.stats().entries, 6);

    // A batch gets one allowance per check on the shard: 2 checks × 3.
    let batch = [Check::new(&policy, key(200)), Check::new(&policy, key(201))];
    assert!(store.check_all(&batch).expect("ok").is_allowed());
    assert_eq!(
        store.stats().entries,
        4,
        "4 expired removed (all there were), 2 inserted"
    );
}

#[test]
fn below_half_full_expired_entries_stay_and_are_updated_in_place() {
    let clock = ManualClock::new();
    let store = store(10, &clock);
    let policy = policy(1, Duration::from_secs(1));
    store.check(&Check::new(&policy, key(0))).expect("ok");
    store.check(&Check::new(&policy, key(1))).expect("ok");
    clock.advance(Duration::from_secs(1));
    // Below half full, a new key removes nothing: the expired entries stay...
    store.check(&Check::new(&policy, key(2))).expect("ok");
    assert_eq!(store.stats().entries, 3);
    // ...and a key checked again is updated in place, as a fresh window.
    let again = store.check(&Check::new(&policy, key(0))).expect("ok");
    assert_eq!(again.remaining(), Some(0));
    assert_eq!(store.stats().entries, 3);
    store.check(&Check::new(&policy, key(3))).expect("ok");
    store.check(&Check::new(&policy, key(4))).expect("ok");
    assert_eq!(store.stats().entries, 5);
    // Half full: the next new key first removes the entry that expired (key
    // 0's was renewed in place and stays).
    store.check(&Check::new(&policy, key(5))).expect("ok");
    assert_eq!(store.stats().entries, 5);
    assert!(
        store
            .peek(&Check::new(&policy, key(0)))
            .expect("ok")
            .is_denied(),
        "the renewed key kept its window, spent"
    );
}

#[test]
fn batches_that_can_never_fit_a_shard_are_structural_errors() {
    let clock = ManualClock::new();
    let store = store(2, &clock);
    let policy = policy(1, Duration::from_secs(1));
    let checks: Vec<_> = (0..3).map(|n| Check::new(&policy, key(n))).collect();
    assert_eq!(
        store.check_all(&checks),
        Err(MemoryStoreError::BatchExceedsShardCapacity {
            shard_index: 0,
            key_count: 3,
            capacity: 2
        })
    );
    assert_eq!(store.stats().entries, 0, "nothing consumed");
}

#[test]
fn a_batch_that_would_not_fit_now_is_denied_whole() {
    let clock = ManualClock::new();
    let store = store(3, &clock);
    let policy = policy(5, Duration::from_secs(10));
    store.check(&Check::new(&policy, key(0))).expect("ok");
    store.check(&Check::new(&policy, key(1))).expect("ok");
    let batch = [
        Check::new(&policy, key(0)),
        Check::new(&policy, key(2)),
        Check::new(&policy, key(3)),
    ];
    match store.check_all(&batch).expect("no error") {
        BatchDecision::Denied { index: 2, denial } => assert!(denial.is_storage_capacity()),
        other => panic!("expected a capacity denial at 2, got {other:?}"),
    }
    // Nothing was consumed: key 0 still has 4 of 5 left.
    assert_eq!(
        store
            .check(&Check::new(&policy, key(0)))
            .expect("ok")
            .remaining(),
        Some(3)
    );
    assert_eq!(store.stats().entries, 2);
}

#[test]
fn caller_errors_consume_nothing() {
    let clock = ManualClock::new();
    let config = MemoryStoreConfig::new(10)
        .and_then(|c| c.with_max_batch_size(2))
        .expect("valid");
    let store = MemoryStore::new(config).with_clock(clock.clone());
    let policy = policy(5, Duration::from_secs(10));
    let checks: Vec<_> = (0..3).map(|n| Check::new(&policy, key(n))).collect();
    assert_eq!(
        store.check_all(&checks),
        Err(MemoryStoreError::InvalidBatch(BatchError::TooLarge {
            size: 3,
            maximum: 2
        }))
    );
    assert_eq!(
        store.check_all(&[checks[0], checks[0]]),
        Err(MemoryStoreError::InvalidBatch(BatchError::DuplicateKey {
            first: 0,
            second: 1
        }))
    );
    assert_eq!(store.stats().entries, 0);
}

/// A clock that panics on demand, to poison whichever shard reads it.
#[derive(Debug, Clone, Default)]
struct PanickingClock {
    inner: ManualClock,
    panic_next: Arc<AtomicBool>,
}

impl Clock for PanickingClock {
    fn now(&self) -> Duration {
        if self.panic_next.swap(false, Ordering::SeqCst) {
            panic!("injected clock failure");
        }
        self.inner.now()
    }
}

#[test]
fn a_panic_under_a_shard_lock_poisons_only_that_shard_until_recovered() {
    let clock = PanickingClock::default();
    let config = MemoryStoreConfig::new(64)
        .and_then(|c| c.with_shard_count(2))
        .expect("valid");
    let store = MemoryStore::new(config).with_clock(clock.clone());
    let policy = policy(3, Duration::from_secs(60));
    // Find one key per shard.
    let (mut on_zero, mut on_one) = (None, None);
    for n in 0..64 {
        store.check(&Check::new(&policy, key(n))).expect("ok");
        let stats = store.stats();
        let target = if stats.shards[0].entries > usize::from(on_zero.is_some()) {
            &mut on_zero
        } else {
            &mut on_one
        };
        target.get_or_insert(n);
        if on_zero.is_some() && on_one.is_some() {
            break;
        }
    }
    let (zero, one) = (
        on_zero.expect("a key on shard 0"),
        on_one.expect("a key on shard 1"),
    );

    clock.panic_next.store(true, Ordering::SeqCst);
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        store.check(&Check::new(&policy, key(zero)))
    }));
    assert!(panicked.is_err());
    assert_eq!(
        store.check(&Check::new(&policy, key(zero))),
        Err(MemoryStoreError::PoisonedShard { shard_index: 0 })
    );
    assert!(
        store
            .check_all(&[
                Check::new(&policy, key(zero)),
                Check::new(&policy, key(one))
            ])
            .is_err()
    );
    assert_eq!(
        store.clear(),
        Err(MemoryStoreError::PoisonedShard { shard_index: 0 })
    );
    // The healthy shard keeps working and keeps its counter.
    assert_eq!(
        store
            .check(&Check::new(&policy, key(one)))
            .expect("healthy")
            .remaining(),
        Some(1)
    );
    let stats = store.stats();
    assert!(stats.shards[0].poisoned && !stats.shards[1].poisoned);
    assert_eq!(stats.shards[0].entries, 1, "poisoning keeps the counters");

    assert_eq!(store.recover_poisoned(), 1);
    assert_eq!(store.recover_poisoned(), 0);
    // The recovered shard was emptied; the healthy one was not.
    assert_eq!(
        store
            .check(&Check::new(&policy, key(zero)))
            .expect("recovered")
            .remaining(),
        Some(2)
    );
    assert_eq!(
        store
            .check(&Check::new(&policy, key(one)))
            .expect("healthy")
            .remaining(),
        Some(0)
    );
}

#[test]
fn time_never_moves_backwards_within_a_shard() {
    let clock = ManualClock::new();
    let store = store(10, &clock);
    let policy = policy(1, Duration::from_secs(10));
    clock.set(Duration::from_secs(100));
    store.check(&Check::new(&policy, key(1))).expect("ok");
    clock.set(Duration::from_secs(5));
    let denied = store.check(&Check::new(&policy, key(1))).expect("ok");
    assert_eq!(
        denied.retry_after(),
        Some(Duration::from_secs(10)),
        "no replay of an earlier time"
    );
    clock.set(Duration::from_secs(110));
    assert!(
        store
            .check(&Check::new(&policy, key(1)))
            .expect("ok")
            .is_allowed()
    );

    // A batch of stored keys (read-locked, entry-locked) keeps the same rule.
    store.check(&Check::new(&policy, key(2))).expect("ok");
    clock.set(Duration::from_secs(5));
    let batch = store
        .check_all(&[Check::new(&policy, key(1)), Check::new(&policy, key(2))])
        .expect("ok");
    assert!(!batch.permits_request());
    assert_eq!(
        batch.retry_after(),
        Some(Duration::from_secs(10)),
        "no replay of an earlier time"
    );
}

#[test]
fn peeks_store_nothing_and_resets_forget_without_growing_the_store() {
    let clock = ManualClock::new();
    let store = store(8, &clock);
    let policy = policy(3, Duration::from_secs(60));
    for n in 0..20 {
        let peeked = store.peek(&Check::new(&policy, key(n))).expect("no error");
        assert_eq!(peeked.remaining(), Some(3), "a key never seen reads full");
    }
    assert_eq!(store.stats().entries, 0, "peeks stored nothing");
    assert!(!store.reset(&policy, &key(1)).expect("no error"));
    assert_eq!(
        store.stats().entries,
        0,
        "a reset of an absent key stores nothing"
    );
    store.check(&Check::new(&policy, key(1))).expect("no error");
    assert!(store.reset(&policy, &key(1)).expect("no error"));
    assert_eq!(
        store.stats().entries,
        1,
        "the entry is reclaimed by cleanup, not by reset"
    );
    let fresh = store.check(&Check::new(&policy, key(1))).expect("no error");
    assert_eq!(fresh.remaining(), Some(2));
    assert_eq!(store.stats().entries, 1, "the reset entry is reused");
}

#[test]
fn clear_forgets_every_counter() {
    let clock = ManualClock::new();
    let store = store(10, &clock);
    let policy = policy(1, Duration::from_secs(10));
    store.check(&Check::new(&policy, key(1))).expect("ok");
    store.clear().expect("healthy");
    assert_eq!(store.stats().entries, 0);
    assert!(
        store
            .check(&Check::new(&policy, key(1)))
            .expect("ok")
            .is_allowed()
    );
}

/// What an admission observation said: outcome, consumption, batch size, scope.
type Admission = (AdmissionOutcome, Consumption, usize, Option<String>);

#[derive(Debug, Default)]
struct Recorder {
    store: Mutex<Option<Arc<MemoryStore>>>,
    admissions: Mutex<Vec<Admission>>,
    cleanups: Mutex<Vec<CleanupObservation>>,
    /// Each capacity observation's used, capacity and shard.
    capacities: Mutex<Vec<(u64, u64, Option<usize>)>>,
    reentered: AtomicUsize,
}

impl Observer for Recorder {
    fn on_admission(&self, observation: &AdmissionObservation<'_>) {
        // Calling back into the store proves no shard lock is held here:
        // recovery holds every shard exclusively (and changes nothing while no
        // shard is poisoned), so a shard still held for reading or writing by
        // this thread would deadlock.
        if let Some(store) = self.store.lock().expect("lock").as_ref() {
            assert_eq!(store.recover_poisoned(), 0);
            self.reentered.fetch_add(1, Ordering::SeqCst);
        }
        self.admissions.lock().expect("lock").push((
            observation.outcome(),
            observation.consumption(),
            observation.batch_size(),
            observation.policy().map(|label| label.scope.to_string()),
        ));
    }

    fn on_cleanup(&self, observation: &CleanupObservation) {
        self.cleanups.lock().expect("lock").push(*observation);
    }

    fn on_capacity(&self, observation: &CapacityObservation<'_>) {
        self.capacities.lock().expect("lock").push((
            observation.used(),
            observation.capacity(),
            observation.shard(),
        ));
    }
}

#[test]
fn observers_run_after_locks_are_released_and_see_no_keys() {
    let clock = ManualClock::new();
    let recorder = Arc::new(Recorder::default());
    let store = Arc::new(
        MemoryStore::new(MemoryStoreConfig::new(1).expect("valid"))
            .with_clock(clock.clone())
            .with_observer(Arc::clone(&recorder)),
    );
    *recorder.store.lock().expect("lock") = Some(Arc::clone(&store));
    let policy = policy(1, Duration::from_secs(1));
    store.check(&Check::new(&policy, key(1))).expect("ok");
    store.check(&Check::new(&policy, key(1))).expect("ok");
    store.check(&Check::new(&policy, key(2))).expect("ok");
    clock.advance(Duration::from_secs(1));
    store.check(&Check::new(&policy, key(2))).expect("ok");
    let _ = store.check_all(&[Check::new(&policy, key(2)), Check::new(&policy, key(2))]);

    let admissions = recorder.admissions.lock().expect("lock").clone();
    let client = Some("client".to_owned());
    assert_eq!(
        admissions,
        [
            (
                AdmissionOutcome::Allowed,
                Consumption::Consumed,
                1,
                client.clone()
            ),
            (
                AdmissionOutcome::QuotaDenied,
                Consumption::NotConsumed,
                1,
                client.clone()
            ),
            (
                AdmissionOutcome::CapacityDenied,
                Consumption::NotConsumed,
                1,
                client.clone()
            ),
            (
                AdmissionOutcome::Allowed,
                Consumption::Consumed,
                1,
                client.clone()
            ),
            (
                AdmissionOutcome::Failed,
                Consumption::NotConsumed,
                2,
                client
            ),
        ]
    );
    assert_eq!(recorder.reentered.load(Ordering::SeqCst), 5);
    let cleanups = recorder.cleanups.lock().expect("lock").clone();
    assert_eq!(cleanups.len(), 1);
    assert_eq!(
        (cleanups[0].requested(), cleanups[0].removed()),
        (8, Some(1))
    );
    let capacities = recorder.capacities.lock().expect("lock").clone();
    assert!(
        capacities
            .iter()
            .all(|&(_, capacity, shard)| capacity == 1 && shard == Some(0))
    );
    assert_eq!(
        capacities
            .last()
            .map(|&(used, capacity, _)| capacity - used),
        Some(0)
    );
    *recorder.store.lock().expect("lock") = None;
}

#[derive(Debug)]
struct PanickingObserver;

impl Observer for PanickingObserver {
    fn on_admission(&self, _: &AdmissionObservation<'_>) {
        panic!("telemetry bug");
    }
}

#[test]
fn observer_panics_do_not_change_results_or_poison() {
    let store =
        GcraStore::new(MemoryStoreConfig::new(4).expect("valid")).with_observer(PanickingObserver);
    let policy = GcraPolicy::new(
        PolicyId::new("api.read").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(60),
        2,
    )
    .expect("valid");
    let check = Check::new(&policy, key(1));
    assert_eq!(store.check(&check).expect("ok").remaining(), Some(1));
    assert_eq!(store.check(&check).expect("ok").remaining(), Some(0));
    assert!(store.check(&check).expect("ok").is_denied());
    assert!(!store.stats().shards[0].poisoned);
}

#[test]
fn limiter_futures_do_nothing_until_polled() {
    let store = MemoryStore::new(MemoryStoreConfig::new(4).expect("valid"));
    let policy = policy(1, Duration::from_secs(60));
    let check = Check::new(&policy, key(1));
    let future = Limiter::check(&store, &check);
    assert_eq!(
        store.stats().entries,
        0,
        "creating the future consumed nothing"
    );
    drop(future);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let decision = runtime
        .block_on(Limiter::check(&store, &check))
        .expect("ok");
    assert!(decision.is_allowed());
    let batch = runtime
        .block_on(Limiter::check_all(&store, &[check]))
        .expect("ok");
    assert!(batch.would_deny());
}

#[test]
fn stores_decide_at_once_exactly_as_their_futures_do() {
    // `check_now` is the store's check without the future: the same
    // decisions, consuming the same quota, interleaved with awaited checks.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let clock = ManualClock::new();
    let (mixed, awaited) = (store(8, &clock), store(8, &clock));
    let policy = policy(3, Duration::from_secs(60));
    let check = Check::new(&policy, key(7));
    for round in 0..5 {
        let expected = runtime
            .block_on(Limiter::check(&awaited, &check))
            .expect("ok");
        let decided = if round % 2 == 0 {
            Limiter::check_now(&mixed, &check).expect("decides at once")
        } else {
            runtime.block_on(Limiter::check(&mixed, &check))
        };
        assert_eq!(decided.expect("ok"), expected, "round {round}");
    }
    assert!(
        Limiter::check_now(&mixed, &check)
            .expect("decides at once")
            .expect("ok")
            .is_denied()
    );

    let gcra = GcraStore::new(MemoryStoreConfig::new(8).expect("valid")).with_clock(clock.clone());
    let policy = GcraPolicy::new(
        PolicyId::new("api.read").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(1),
        2,
    )
    .expect("valid");
    let check = Check::new(&policy, key(8));
    let allowed: Vec<bool> = (0..3)
        .map(|_| {
            Limiter::check_now(&gcra, &check)
                .expect("decides at once")
                .expect("ok")
                .is_allowed()
        })
        .collect();
    assert_eq!(allowed, [true, true, false]);
}

#[test]
fn gcra_entries_expire_when_the_full_burst_has_replenished() {
    let clock = ManualClock::new();
    let store = GcraStore::new(MemoryStoreConfig::new(1).expect("valid")).with_clock(clock.clone());
    let policy = GcraPolicy::new(
        PolicyId::new("api.read").expect("valid"),
        ScopeId::new("client").expect("valid"),
        2,
        Duration::from_secs(1),
        4,
    )
    .expect("valid");
    store
        .check(&Check::weighted(&policy, key(1), 3).expect("valid"))
        .expect("ok");
    // 3 units at 500 ms each replenish in 1.5 s; until then the entry is active.
    clock.advance(Duration::from_millis(1_499));
    let denied = store.check(&Check::new(&policy, key(2))).expect("ok");
    assert_eq!(
        denied.denial(),
        Some(&Denial::StorageCapacity {
            retry_after: Some(Duration::from_millis(1))
        })
    );
    clock.advance(Duration::from_millis(1));
    assert!(
        store
            .check(&Check::new(&policy, key(2)))
            .expect("ok")
            .is_allowed()
    );
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn stores_and_errors_are_send_and_sync() {
    assert_send_sync::<MemoryStore>();
    assert_send_sync::<GcraStore>();
    assert_send_sync::<MemoryStoreError>();
    assert_send_sync::<MemoryStoreConfig>();
    assert_send_sync::<ManualClock>();
}

/// Counts how often the store reads its injected clock.
#[derive(Debug, Clone, Default)]
struct CountingClock {
    inner: ManualClock,
    reads: Arc<AtomicUsize>,
}

impl Clock for CountingClock {
    fn now(&self) -> Duration {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.now()
    }
}

#[test]
fn each_operation_reads_the_clock_once_with_or_without_an_observer() {
    let policy = policy(10, Duration::from_secs(1));
    let checks = [Check::new(&policy, key(1)), Check::new(&policy, key(2))];
    for observed in [false, true] {
        let clock = CountingClock::default();
        let config = MemoryStoreConfig::new(8)
            .and_then(|c| c.with_shard_count(4))
            .expect("valid");
        let store = MemoryStore::new(config).with_clock(clock.clone());
        let store = if observed {
            store.with_observer(Recorder::default())
        } else {
            store
        };
        store.check(&checks[0]).expect("ok");
        assert_eq!(
            clock.reads.load(Ordering::SeqCst),
            1,
            "observed: {observed}"
        );
        store.check_all(&checks).expect("ok");
        assert_eq!(
            clock.reads.load(Ordering::SeqCst),
            2,
            "observed: {observed}"
        );
        // Caller errors are refused before the clock is read.
        let _ = store.check_all(&[checks[0], checks[0]]);
        assert_eq!(
            clock.reads.load(Ordering::SeqCst),
            2,
            "observed: {observed}"
        );
    }
}
