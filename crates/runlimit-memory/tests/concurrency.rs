//! Threads racing on one key never admit more than the limit.

use std::{sync::Arc, thread, time::Duration};

use runlimit_core::{Check, FixedWindowPolicy, GcraPolicy, PolicyId, ScopeId, SubjectKey};
use runlimit_memory::{GcraStore, ManualClock, MemoryStore, MemoryStoreConfig};

const THREADS: usize = 2;
const CHECKS_PER_THREAD: usize = 20_000;

fn id() -> PolicyId {
    PolicyId::new("race").expect("valid")
}

fn scope() -> ScopeId {
    ScopeId::new("client").expect("valid")
}

#[test]
fn two_threads_on_one_key_admit_exactly_the_limit_per_window() {
    let limit = 1_000;
    let clock = ManualClock::new();
    let config = MemoryStoreConfig::new(16)
        .and_then(|c| c.with_shard_count(4))
        .expect("valid");
    let store = Arc::new(MemoryStore::new(config).with_clock(clock.clone()));
    let policy = Arc::new(
        FixedWindowPolicy::new(id(), scope(), limit, Duration::from_secs(1)).expect("valid"),
    );
    for window in 0..3 {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (store, policy) = (Arc::clone(&store), Arc::clone(&policy));
                thread::spawn(move || {
                    let check = Check::new(&*policy, SubjectKey::from_digest([9; 32]));
                    (0..CHECKS_PER_THREAD)
                        .filter(|_| store.check(&check).expect("no error").is_allowed())
                        .count()
                })
            })
            .collect();
        let admitted: usize = handles.into_iter().map(|h| h.join().expect("thread")).sum();
        assert_eq!(admitted, 1_000, "window {window}");
        clock.advance(Duration::from_secs(1));
    }
}

#[test]
fn two_threads_batching_on_shared_keys_stay_atomic() {
    let clock = ManualClock::new();
    let config = MemoryStoreConfig::new(64)
        .and_then(|c| c.with_shard_count(8))
        .expect("valid");
    let store = Arc::new(GcraStore::new(config).with_clock(clock));
    let policy = Arc::new(
        GcraPolicy::new(id(), scope(), 1, Duration::from_secs(3_600), 500).expect("valid"),
    );
    let handles: Vec<_> = (0..2u8)
        .map(|thread| {
            let (store, policy) = (Arc::clone(&store), Arc::clone(&policy));
            thread::spawn(move || {
                let shared = Check::new(&*policy, SubjectKey::from_digest([1; 32]));
                let own = Check::new(&*policy, SubjectKey::from_digest([2 + thread; 32]));
                (0..CHECKS_PER_THREAD / 10)
                    .filter(|_| {
                        store
                            .check_all(&[own, shared])
                            .expect("no error")
                            .is_allowed()
                    })
                    .count()
            })
        })
        .collect();
    let admitted: usize = handles.into_iter().map(|h| h.join().expect("thread")).sum();
    // The shared key bounds both threads together.
    assert_eq!(admitted, 500);
}
