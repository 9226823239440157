//! Continuity across a change of policy or secret: lineages, rotating
//! hashers, carry sources and the translation of one state into another.

use std::time::Duration;

use runlimit_core::{
    AnyPolicy, CarriedFrom, Check, FixedWindowPolicy, GcraPolicy, KeyHasher, KeyHasherError,
    Policy, PolicyError, PolicyId, ScopeId, SlidingWindowPolicy, SubjectKey,
    carry::{CounterState, StateMicros, StateNanos, carry},
    gcra::Exact,
    sliding::{Buckets, COUNTED, SlidingNanos},
};

const MS: u64 = 1_000_000;

fn fixed(limit: u64, window_ms: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("auth.reset").expect("valid"),
        ScopeId::new("recipient").expect("valid"),
        limit,
        Duration::from_millis(window_ms),
    )
    .expect("valid")
}

fn sliding(limit: u64, window_ms: u64) -> SlidingWindowPolicy {
    SlidingWindowPolicy::new(
        PolicyId::new("auth.reset").expect("valid"),
        ScopeId::new("recipient").expect("valid"),
        limit,
        Duration::from_millis(window_ms),
    )
    .expect("valid")
}

fn gcra(quota: u64, period_ms: u64, burst: u64) -> GcraPolicy {
    GcraPolicy::new(
        PolicyId::new("auth.reset").expect("valid"),
        ScopeId::new("recipient").expect("valid"),
        quota,
        Duration::from_millis(period_ms),
        burst,
    )
    .expect("valid")
}

fn hasher(secret: &[u8]) -> KeyHasher {
    KeyHasher::new(secret).expect("long enough")
}

const OLD_SECRET: &[u8] = b"the secret used until the rotation, 32+ bytes";
const NEW_SECRET: &[u8] = b"the secret used from the rotation on, 32+ bytes";

#[test]
fn a_policy_continues_only_from_one_of_its_id_and_scope() {
    let old = fixed(5, 60_000);
    let renamed = FixedWindowPolicy::new(
        PolicyId::new("auth.other").expect("valid"),
        ScopeId::new("recipient").expect("valid"),
        5,
        Duration::from_secs(60),
    )
    .expect("valid");
    assert_eq!(
        fixed(10, 60_000).continuing(&renamed).map(|_| ()),
        Err(PolicyError::PredecessorIdentity)
    );
    let rescoped = GcraPolicy::new(
        PolicyId::new("auth.reset").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(1),
        1,
    )
    .expect("valid");
    assert_eq!(
        sliding(10, 60_000).continuing(&rescoped).map(|_| ()),
        Err(PolicyError::PredecessorIdentity)
    );
    let new = gcra(10, 60_000, 10)
        .continuing(&old)
        .expect("same id and scope");
    assert_eq!(
        new.predecessor(),
        Some(&AnyPolicy::FixedWindow(old.clone()))
    );
}

#[test]
fn a_lineage_changes_no_counter_and_keeps_one_step() {
    let v1 = fixed(5, 60_000);
    let v2 = fixed(10, 60_000).continuing(&v1).expect("valid");
    let v3 = sliding(10, 60_000).continuing(&v2).expect("valid");
    // The fingerprint, and so every counter, is the policy's own.
    assert_eq!(v2.fingerprint(), fixed(10, 60_000).fingerprint());
    // The predecessor's own predecessor is not kept.
    let kept = v3.predecessor().expect("continues");
    assert_eq!(kept.fingerprint(), v2.fingerprint());
    assert!(kept.predecessor().is_none());
    // A predecessor with the policy's own fingerprint carries nothing.
    let same = fixed(5, 60_000).continuing(&v1).expect("valid");
    assert!(same.predecessor().is_none());
    // Only the quota mode changed: the same counters.
    let shadow = v1.clone().with_quota_mode(runlimit_core::QuotaMode::Shadow);
    assert!(
        fixed(5, 60_000)
            .continuing(&shadow)
            .expect("valid")
            .predecessor()
            .is_none()
    );
}

#[test]
fn a_rotating_hasher_derives_the_previous_key_beside_the_new() {
    let policy = fixed(5, 60_000);
    let before = hasher(OLD_SECRET);
    let after = hasher(NEW_SECRET)
        .with_previous_secret(OLD_SECRET)
        .expect("distinct secrets");
    let key = after.hash_for(&policy, b"user@example.test");
    assert_eq!(
        key,
        hasher(NEW_SECRET).hash_for(&policy, b"user@example.test")
    );
    assert_eq!(
        key.previous(),
        Some(*before.hash_for(&policy, b"user@example.test").as_bytes())
    );
    // The prepared hasher derives the same pair, for short and long subjects.
    let prepared = after.prepared_for(&policy);
    for subject in [&b"user@example.test"[..], &[b'x'; 300][..]] {
        let derived = prepared.hash_for(&policy, subject);
        assert_eq!(derived, after.hash_for(&policy, subject));
        assert_eq!(
            derived.previous(),
            after.hash_for(&policy, subject).previous()
        );
        assert!(derived.previous().is_some());
    }
    // Without a rotation there is no previous key.
    assert_eq!(
        before.hash_for(&policy, b"user@example.test").previous(),
        None
    );
}

#[test]
fn the_previous_secret_is_validated_and_redacted() {
    assert_eq!(
        hasher(NEW_SECRET)
            .with_previous_secret(b"short")
            .map(|_| ()),
        Err(KeyHasherError::SecretTooShort {
            length: 5,
            minimum: 32
        })
    );
    assert_eq!(
        hasher(NEW_SECRET)
            .with_previous_secret(NEW_SECRET)
            .map(|_| ()),
        Err(KeyHasherError::PreviousIsCurrent)
    );
    let rotating = hasher(NEW_SECRET)
        .with_previous_secret(OLD_SECRET)
        .expect("valid");
    assert!(rotating.is_rotating());
    let printed = format!("{rotating:?}");
    assert_eq!(printed, "KeyHasher(<redacted>, previous: <redacted>)");
    let key = rotating.hash_for(&fixed(1, 1_000), b"subject");
    assert_eq!(format!("{key:?}"), "SubjectKey(<redacted>)");
}

#[test]
fn a_key_is_its_digest() {
    let plain = SubjectKey::from_digest([7; 32]);
    let rotating = plain.with_previous([9; 32]);
    assert_eq!(plain, rotating);
    let policy = fixed(1, 1_000);
    let counter = Check::new(&policy, rotating).counter_key();
    assert_eq!(counter, Check::new(&policy, plain).counter_key());
    assert_eq!(
        counter.subject().previous(),
        None,
        "counters hold the digest only"
    );
}

#[test]
fn carry_sources_come_in_order() {
    let v1 = fixed(5, 60_000);
    let v2 = sliding(10, 60_000).continuing(&v1).expect("valid");
    let plain = SubjectKey::from_digest([1; 32]);
    let rotating = plain.with_previous([2; 32]);

    assert!(!Check::new(&v1, plain).carries());
    assert_eq!(Check::new(&v1, plain).carry_sources().count(), 0);

    let check = Check::new(&v1, rotating);
    let sources: Vec<_> = check.carry_sources().collect();
    assert!(check.carries());
    assert_eq!(sources.len(), 1);
    assert_eq!(sources[0].from(), CarriedFrom::PreviousSecret);
    assert_eq!(sources[0].counter().fingerprint(), v1.fingerprint());
    assert_eq!(sources[0].counter().subject().as_bytes(), &[2; 32]);

    let check = Check::new(&v2, rotating);
    let sources: Vec<_> = check.carry_sources().collect();
    let described: Vec<_> = sources
        .iter()
        .map(|source| {
            (
                source.from(),
                *source.counter().fingerprint(),
                *source.counter().subject().as_bytes(),
            )
        })
        .collect();
    assert_eq!(
        described,
        [
            (CarriedFrom::PreviousSecret, *v2.fingerprint(), [2; 32]),
            (CarriedFrom::Predecessor, *v1.fingerprint(), [1; 32]),
            (
                CarriedFrom::PredecessorUnderPreviousSecret,
                *v1.fingerprint(),
                [2; 32]
            ),
        ]
    );
}

#[test]
fn a_fixed_window_of_the_same_length_keeps_its_anchor() {
    let old = fixed(5, 60_000);
    let state: StateNanos = CounterState::FixedWindow {
        used: 5,
        expires_at: 70_000 * MS,
    };
    // Raised: the difference at once, until the same window ends.
    let raised = carry(old.kind(), &state, fixed(8, 60_000).kind(), 20_000 * MS);
    assert_eq!(
        raised,
        Some(CounterState::FixedWindow {
            used: 5,
            expires_at: 70_000 * MS
        })
    );
    // Lowered: the count stays above the limit until the window ends.
    let lowered = carry(old.kind(), &state, fixed(2, 60_000).kind(), 20_000 * MS);
    assert_eq!(lowered, raised);
    // An ended window holds nothing.
    assert_eq!(
        carry(old.kind(), &state, fixed(8, 60_000).kind(), 70_000 * MS),
        None
    );
}

#[test]
fn units_over_a_shorter_windows_limit_fill_later_windows() {
    // 100 per hour, spent; now 10 per minute: ten windows' worth.
    let old = fixed(100, 3_600_000);
    let state: StateNanos = CounterState::FixedWindow {
        used: 100,
        expires_at: 3_600_000 * MS,
    };
    let now = 1_000 * MS;
    assert_eq!(
        carry(old.kind(), &state, fixed(10, 60_000).kind(), now),
        Some(CounterState::FixedWindow {
            used: 10,
            expires_at: now + 10 * 60_000 * MS
        })
    );
    // 95 units reach into the tenth window: a fixed window stays full
    // through it.
    let partial: StateNanos = CounterState::FixedWindow {
        used: 95,
        expires_at: 3_600_000 * MS,
    };
    assert_eq!(
        carry(old.kind(), &partial, fixed(10, 60_000).kind(), now),
        Some(CounterState::FixedWindow {
            used: 10,
            expires_at: now + 10 * 60_000 * MS
        })
    );
    // Five units within the limit: a window of five from now.
    let few: StateNanos = CounterState::FixedWindow {
        used: 5,
        expires_at: 3_600_000 * MS,
    };
    assert_eq!(
        carry(old.kind(), &few, fixed(10, 60_000).kind(), now),
        Some(CounterState::FixedWindow {
            used: 5,
            expires_at: now + 60_000 * MS
        })
    );
    // A sliding window is full for nine windows, then holds five for one.
    let to = sliding(10, 80_000);
    let exact = SlidingNanos::new(&to);
    let Some(CounterState::SlidingWindow(buckets)) = carry(old.kind(), &partial, to.kind(), now)
    else {
        panic!("carried into a sliding window");
    };
    let latest = exact.start_of(exact.bucket(now + 9 * 80_000 * MS));
    let mut counts = [0; COUNTED];
    counts[0] = 5;
    counts[COUNTED - 1] = 5;
    assert_eq!(
        buckets,
        Buckets {
            latest_start: latest,
            counts
        }
    );
    assert!(exact.peek(Some(buckets), 1, now).is_err());
    assert!(exact.peek(Some(buckets), 1, latest).is_err());
    let tenth = latest + exact.sub_window;
    assert_eq!(
        exact.peek(Some(buckets), 5, tenth).map(|d| d.remaining()),
        Ok(Some(5))
    );
    assert!(exact.peek(Some(buckets), 6, tenth).is_err());
    // Within the limit, the units count from now alone.
    let Some(CounterState::SlidingWindow(few)) = carry(old.kind(), &few, to.kind(), now) else {
        panic!("carried into a sliding window");
    };
    assert_eq!(few.total(), 5);
    assert_eq!(few.latest_start, exact.start_of(exact.bucket(now)));
}

#[test]
fn a_sliding_window_of_the_same_length_keeps_its_counts() {
    let old = sliding(5, 80_000);
    let exact = SlidingNanos::new(&old);
    let mut counts = [0; COUNTED];
    counts[0] = 2;
    counts[3] = 3;
    let buckets = Buckets {
        latest_start: 800_000 * MS,
        counts,
    };
    let state: StateNanos = CounterState::SlidingWindow(buckets);
    let now = 805_000 * MS;
    assert_eq!(state.held(old.kind(), now), 5);
    assert_eq!(
        carry(old.kind(), &state, sliding(9, 80_000).kind(), now),
        Some(CounterState::SlidingWindow(exact.at(Some(buckets), now)))
    );
    // Into a fixed window: five units from now.
    assert_eq!(
        carry(old.kind(), &state, fixed(9, 60_000).kind(), now),
        Some(CounterState::FixedWindow {
            used: 5,
            expires_at: now + 60_000 * MS
        })
    );
}

#[test]
fn gcra_of_the_same_emission_interval_keeps_its_arrival_time() {
    // 3 per ms and 6 per 2 ms: one unit every third of a millisecond.
    let old = gcra(3, 1, 3);
    let arrival = Exact {
        whole: 10 * MS + 333_333,
        remainder: 1,
    };
    let state: StateNanos = CounterState::Gcra { arrival };
    let Some(CounterState::Gcra { arrival: carried }) =
        carry(old.kind(), &state, gcra(6, 2, 12).kind(), 10 * MS)
    else {
        panic!("carried into GCRA");
    };
    // 1/3 ns is 2/6 ns.
    assert_eq!(
        carried,
        Exact {
            whole: 10 * MS + 333_333,
            remainder: 2
        }
    );
    // Units in flight: exactly one emission interval ahead is one unit, and
    // anything more is two.
    assert_eq!(state.held(old.kind(), 10 * MS), 1);
    assert_eq!(state.held(old.kind(), 10 * MS - 1), 2);
}

#[test]
fn gcra_units_in_flight_start_at_the_new_rate() {
    // 10 per second, 4 units in flight (400 ms ahead).
    let old = gcra(10, 1_000, 10);
    let state: StateMicros = CounterState::Gcra {
        arrival: Exact::from_whole(1_400_000),
    };
    assert_eq!(state.held(old.kind(), 1_000_000), 4);
    // At 2 per second they take two seconds.
    assert_eq!(
        carry(old.kind(), &state, gcra(2, 1_000, 5).kind(), 1_000_000),
        Some(CounterState::Gcra {
            arrival: Exact::from_whole(3_000_000)
        })
    );
    // From a window: its count, as GCRA units from now.
    let window: StateMicros = CounterState::FixedWindow {
        used: 3,
        expires_at: 5_000_000,
    };
    assert_eq!(
        carry(
            fixed(5, 60_000).kind(),
            &window,
            gcra(1, 1_000, 5).kind(),
            1_000_000
        ),
        Some(CounterState::Gcra {
            arrival: Exact::from_whole(4_000_000)
        })
    );
    // A drained arrival time holds nothing.
    assert_eq!(
        carry(old.kind(), &state, gcra(2, 1_000, 5).kind(), 1_400_000),
        None
    );
}

#[test]
fn an_unreadable_source_holds_its_whole_capacity() {
    let window: StateNanos = CounterState::FixedWindow {
        used: 1,
        expires_at: u64::MAX,
    };
    assert_eq!(window.held(gcra(1, 1_000, 7).kind(), 0), 7);
}

#[test]
fn carried_states_stay_within_every_backends_range() {
    use runlimit_core::{MAX_LIMIT, MAX_WINDOW};
    let window_ms = u64::try_from(MAX_WINDOW.as_millis()).expect("fits");
    let now = 1_800_000_000_000_000; // microseconds since the epoch
    let state: StateMicros = CounterState::FixedWindow {
        used: MAX_LIMIT,
        expires_at: now + 1,
    };
    // A source window of another length, so every target spreads the units.
    let from = fixed(MAX_LIMIT, window_ms - 1);
    for to in [
        AnyPolicy::from(fixed(1, window_ms)),
        sliding(1, window_ms).into(),
        gcra(1, window_ms, 1).into(),
    ] {
        let carried = carry(from.kind(), &state, to.kind(), now).expect("holds units");
        let furthest = match carried {
            CounterState::FixedWindow { expires_at, .. } => expires_at,
            CounterState::SlidingWindow(buckets) => buckets.latest_start,
            CounterState::Gcra { arrival } => arrival.whole,
        };
        assert!(furthest < 1 << 53, "{to:?}: exact in Lua's doubles");
        assert!(furthest > now + window_ms * 1_000, "{to:?}: still denies");
    }
}
