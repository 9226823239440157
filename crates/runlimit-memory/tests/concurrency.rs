//! Threads racing on shared keys never admit more, or less, than the limit.

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

/// Checks on stored keys hold their shard only for reading and lock the entry;
/// inserts and batches hold it exclusively. Racing all three over many keys on
/// a few shards must still admit exactly the limit for every key.
#[test]
fn stored_key_checks_inserts_and_batches_racing_admit_exactly_the_limit() {
    const KEYS: u8 = 48;
    const LIMIT: u64 = 150;
    const ROUNDS: usize = 400;
    // Room for every key on any one shard: no capacity denials.
    let config = MemoryStoreConfig::new(3 * usize::from(KEYS))
        .and_then(|c| c.with_shard_count(3))
        .expect("valid");
    let store = Arc::new(MemoryStore::new(config).with_clock(ManualClock::new()));
    let policy = Arc::new(
        FixedWindowPolicy::new(id(), scope(), LIMIT, Duration::from_secs(60)).expect("valid"),
    );
    let start = Arc::new(std::sync::Barrier::new(4));
    let handles: Vec<_> = (0..4usize)
        .map(|thread| {
            let (store, policy, start) =
                (Arc::clone(&store), Arc::clone(&policy), Arc::clone(&start));
            thread::spawn(move || {
                let check = |key: u8| Check::new(&*policy, SubjectKey::from_digest([key; 32]));
                let mut admitted = [0u64; KEYS as usize];
                start.wait();
                for round in 0..ROUNDS {
                    for step in 0..KEYS {
                        // Each thread walks the keys in its own order, so new keys
                        // are inserted while others are checked.
                        let key = u8::try_from(
                            (usize::from(step) * (2 * thread + 1) + round) % usize::from(KEYS),
                        )
                        .expect("below KEYS");
                        if thread == 3 {
                            let other = (key + 1) % KEYS;
                            let batch = store
                                .check_all(&[check(key), check(other)])
                                .expect("no error");
                            if batch.is_allowed() {
                                admitted[usize::from(key)] += 1;
                                admitted[usize::from(other)] += 1;
                            }
                        } else if store.check(&check(key)).expect("no error").is_allowed() {
                            admitted[usize::from(key)] += 1;
                        }
                    }
                }
                admitted
            })
        })
        .collect();
    let mut totals = [0u64; KEYS as usize];
    for handle in handles {
        for (total, admitted) in totals.iter_mut().zip(handle.join().expect("thread")) {
            *total += admitted;
        }
    }
    // Every key is attempted far more often than LIMIT times.
    assert!(totals.iter().all(|&total| total == LIMIT), "{totals:?}");
    assert_eq!(store.stats().entries, usize::from(KEYS));
}

#[test]
fn threads_checking_and_refunding_one_key_never_exceed_the_limit_or_go_below_zero() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let limit = 100;
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::new(16).expect("valid")));
    let policy = Arc::new(
        FixedWindowPolicy::new(id(), scope(), limit, Duration::from_secs(3_600)).expect("valid"),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let credited = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..4u64)
        .map(|thread| {
            let (store, policy) = (Arc::clone(&store), Arc::clone(&policy));
            let (admitted, credited) = (Arc::clone(&admitted), Arc::clone(&credited));
            thread::spawn(move || {
                let check = Check::new(&*policy, SubjectKey::from_digest([11; 32]));
                for round in 0..5_000u64 {
                    let (decision, receipt) = store.admit(&check).expect("no error").into_parts();
                    let Some(receipt) = receipt else {
                        assert!(decision.is_denied());
                        continue;
                    };
                    admitted.fetch_add(1, Ordering::SeqCst);
                    // Refund two admissions in three, keep the third.
                    if (round + thread) % 3 != 0 {
                        let refunded = store.refund(&[check], receipt).expect("no error");
                        credited.fetch_add(refunded.credited() as u64, Ordering::SeqCst);
                    }
                    let in_use = admitted.load(Ordering::SeqCst) - credited.load(Ordering::SeqCst);
                    // Other threads may have admitted but not yet counted.
                    assert!(in_use <= limit + 4, "{in_use} in use");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("thread");
    }
    let in_use = admitted.load(Ordering::SeqCst) - credited.load(Ordering::SeqCst);
    assert!(in_use <= limit, "{in_use} units in use of {limit}");
    // The counter holds exactly what was admitted and not given back.
    let peeked = store
        .peek(&Check::new(&*policy, SubjectKey::from_digest([11; 32])))
        .expect("no error");
    assert_eq!(
        limit - peeked.remaining().unwrap_or(0),
        in_use,
        "{peeked:?}"
    );
}
