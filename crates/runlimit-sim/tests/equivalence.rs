//! Replaying a generated log through the simulator decides exactly what
//! calling the stores directly, on a `ManualClock` set to each line's time,
//! decides: with a change of policies too, where the direct calls run the
//! old policy and then the new one continuing from it in one store, and the
//! new one from the change in another.
//!
//! The direct calls read the log on their own (a split and the `time`
//! crate) and group addresses on their own. They use the simulator's subject
//! key for each line, after checking that keys and their own networks
//! correspond one to one: a full store's cleanup depends on key bytes, so
//! identical decisions need identical keys.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv6Addr},
    time::Duration,
};

use proptest::prelude::*;
use runlimit_core::{
    AnyPolicy, Check, FixedWindowPolicy, GcraPolicy, KeyHasher, PolicyId, ScopeId,
    SlidingWindowPolicy,
};
use runlimit_memory::{
    AnyStore, GcraStore, ManualClock, MemoryStore, MemoryStoreConfig, SlidingWindowStore,
};
use runlimit_sim::{
    Candidate, ChangeAt, Format, GenerateOptions, InputSpec, PolicyChange, PolicySet, Reader,
    Replay, ReplayOptions, SubjectSpec,
};

/// Seconds since the Unix epoch of a CLF date, read independently of the
/// simulator's reader.
fn clf_seconds(date: &str) -> i64 {
    let format = time::macros::format_description!(
        "[day]/[month repr:short]/[year]:[hour]:[minute]:[second] [offset_hour sign:mandatory][offset_minute]"
    );
    time::OffsetDateTime::parse(date, &format)
        .expect("generated dates parse")
        .unix_timestamp()
}

/// The network the direct calls count a host under: IPv6 grouped by /64.
fn network(host: &str) -> IpAddr {
    match host.parse().expect("generated hosts are addresses") {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        v4 => v4,
    }
}

fn id(text: &str) -> PolicyId {
    PolicyId::new(text).expect("a valid id")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn replay_decides_what_the_stores_decide(
        seed in any::<u64>(),
        users in 5u32..40,
        limit in 1u64..30,
        window in 1u64..120,
        burst in 1u64..10,
        max_keys in 20usize..200,
    ) {
        let options = GenerateOptions { minutes: 6, users, seed, ..GenerateOptions::default() };
        let mut log = Vec::new();
        runlimit_sim::generate(&mut log, &options).expect("writing to a Vec");

        let scope = ScopeId::new("ip").expect("a valid scope");
        let window = Duration::from_secs(window);
        let fixed = FixedWindowPolicy::new(id("f"), scope.clone(), limit, window).expect("valid");
        let sliding = SlidingWindowPolicy::new(id("s"), scope.clone(), limit, window).expect("valid");
        let gcra = GcraPolicy::new(id("g"), scope, limit, window, burst).expect("valid");
        let set = PolicySet::new(
            vec![
                runlimit_sim::Candidate::FixedWindow(fixed.clone()),
                runlimit_sim::Candidate::SlidingWindow(sliding.clone()),
                runlimit_sim::Candidate::Gcra(gcra.clone()),
            ],
            max_keys,
        ).expect("a valid set");

        let hasher = KeyHasher::new(b"equivalence secret of 32 bytes or more").expect("long");
        let mut replay = Replay::new(&set, ReplayOptions::new(hasher)).expect("valid");
        let spec = InputSpec::new(Format::Clf, SubjectSpec::client_address());
        let mut reader = Reader::new(&log[..], &spec).expect("CLF needs no header");
        let mut simulated = Vec::new();
        let mut keys = Vec::new();
        while let Some((_, request)) = reader.next_request().expect("reading a slice") {
            let request = request.expect("generated lines are well formed");
            keys.push(replay.subject_key(request));
            let verdicts = replay.record(request).expect("works");
            simulated.push(verdicts.iter().map(|v| v.is_admitted()).collect::<Vec<_>>());
        }

        // The same log, read with a split and the `time` crate, straight
        // into the stores (the small `max_keys` makes capacity matter too).
        let clock = ManualClock::new();
        let config = MemoryStoreConfig::new(max_keys).expect("valid");
        let fixed_store = MemoryStore::new(config).with_clock(clock.clone());
        let sliding_store = SlidingWindowStore::new(config).with_clock(clock.clone());
        let gcra_store = GcraStore::new(config).with_clock(clock.clone());
        let mut key_of = HashMap::new();
        let mut network_of = HashMap::new();
        let mut origin = None;
        let mut direct = Vec::new();
        let lines = std::str::from_utf8(&log).expect("generated logs are UTF-8").lines();
        for (line, &key) in lines.zip(&keys) {
            let host = line.split(' ').next().expect("a host");
            let date = &line[line.find('[').expect("a date") + 1..line.find(']').expect("a date")];
            let at = clf_seconds(date);
            let origin = *origin.get_or_insert(at);
            clock.set(Duration::from_secs(u64::try_from(at - origin).expect("in order")));
            let network = network(host);
            prop_assert_eq!(*key_of.entry(network).or_insert(key), key);
            prop_assert_eq!(*network_of.entry(key).or_insert(network), network);
            direct.push(vec![
                fixed_store.check(&Check::new(&fixed, key)).expect("works").is_allowed(),
                sliding_store.check(&Check::new(&sliding, key)).expect("works").is_allowed(),
                gcra_store.check(&Check::new(&gcra, key)).expect("works").is_allowed(),
            ]);
        }
        prop_assert_eq!(simulated.len(), direct.len());
        prop_assert_eq!(direct.len(), keys.len());
        for (line, (simulated, direct)) in simulated.iter().zip(&direct).enumerate() {
            prop_assert_eq!(simulated, direct, "line {}", line + 1);
        }
    }
}

/// A policy of `algorithm` (0: fixed window, 1: sliding window, 2: GCRA)
/// with id `login.ip`, as a candidate and as the policy the stores check.
fn policy(algorithm: u8, limit: u64, window: u64, burst: u64) -> (Candidate, AnyPolicy) {
    let (id, scope) = (id("login.ip"), ScopeId::new("ip").expect("a valid scope"));
    let window = Duration::from_secs(window);
    match algorithm {
        0 => {
            let policy = FixedWindowPolicy::new(id, scope, limit, window).expect("valid");
            (Candidate::FixedWindow(policy.clone()), policy.into())
        }
        1 => {
            let policy = SlidingWindowPolicy::new(id, scope, limit, window).expect("valid");
            (Candidate::SlidingWindow(policy.clone()), policy.into())
        }
        _ => {
            let policy = GcraPolicy::new(id, scope, limit, window, burst).expect("valid");
            (Candidate::Gcra(policy.clone()), policy.into())
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn a_change_replays_what_the_stores_decide_across_it(
        seed in any::<u64>(),
        users in 5u32..40,
        old in (0u8..3, 1u64..30, 1u64..120, 1u64..10),
        new in (0u8..3, 1u64..30, 1u64..120, 1u64..10),
        change_second in 0u64..360,
        max_keys in 20usize..200,
    ) {
        let options = GenerateOptions { minutes: 6, users, seed, ..GenerateOptions::default() };
        let mut log = Vec::new();
        runlimit_sim::generate(&mut log, &options).expect("writing to a Vec");
        let (old_candidate, old_policy) = policy(old.0, old.1, old.2, old.3);
        let (new_candidate, new_policy) = policy(new.0, new.1, new.2, new.3);
        let change = PolicyChange::new(
            PolicySet::new(vec![old_candidate], max_keys).expect("a valid set"),
            ChangeAt::AfterFirstRequest(Duration::from_secs(change_second)),
            PolicySet::new(vec![new_candidate], max_keys).expect("a valid set"),
        ).expect("the same id and scope");

        let hasher = KeyHasher::new(b"equivalence secret of 32 bytes or more").expect("long");
        let mut replay = Replay::with_change(&change, ReplayOptions::new(hasher)).expect("valid");
        let spec = InputSpec::new(Format::Clf, SubjectSpec::client_address());
        let mut reader = Reader::new(&log[..], &spec).expect("CLF needs no header");
        let mut simulated = Vec::new();
        let mut keys = Vec::new();
        while let Some((_, request)) = reader.next_request().expect("reading a slice") {
            let request = request.expect("generated lines are well formed");
            keys.push(replay.subject_key(request));
            let continuing = replay.record(request).expect("works")[0].is_admitted();
            simulated.push((continuing, replay.fresh_start_verdicts()[0].is_admitted()));
        }

        let clock = ManualClock::new();
        let config = MemoryStoreConfig::new(max_keys).expect("valid");
        let continuing_store = AnyStore::new(config).with_clock(clock.clone());
        let fresh_store = AnyStore::new(config).with_clock(clock.clone());
        let continuing_policy = new_policy.clone().continuing(&old_policy).expect("same id");
        let mut origin = None;
        let mut direct = Vec::new();
        let mut after_change = 0;
        let lines = std::str::from_utf8(&log).expect("generated logs are UTF-8").lines();
        for (line, &key) in lines.zip(&keys) {
            let date = &line[line.find('[').expect("a date") + 1..line.find(']').expect("a date")];
            let at = clf_seconds(date);
            let origin = *origin.get_or_insert(at);
            let since = u64::try_from(at - origin).expect("in order");
            clock.set(Duration::from_secs(since));
            after_change += usize::from(since >= change_second);
            let check = |store: &AnyStore, policy: &AnyPolicy| {
                store.check(&Check::new(policy, key)).expect("works").is_allowed()
            };
            direct.push(if since < change_second {
                let admitted = check(&continuing_store, &old_policy);
                (admitted, admitted)
            } else {
                (
                    check(&continuing_store, &continuing_policy),
                    check(&fresh_store, &new_policy),
                )
            });
        }
        prop_assert_eq!(simulated.len(), direct.len());
        for (line, (simulated, direct)) in simulated.iter().zip(&direct).enumerate() {
            prop_assert_eq!(simulated, direct, "line {}", line + 1);
        }

        // The report counts those decisions: the lines before the change
        // (the clock counts whole seconds from the first line) and after.
        let report = replay.report();
        let row = &report.change.as_ref().expect("a change report").rows[0];
        let before = direct.len() - after_change;
        prop_assert_eq!(
            row.before_change.admitted + row.before_change.denied,
            before as u64
        );
        let changed = &direct[before..];
        let count = |pick: fn(&(bool, bool)) -> bool| {
            changed.iter().filter(|decided| pick(decided)).count() as u64
        };
        prop_assert_eq!(row.continuing.after_change.admitted, count(|d| d.0));
        prop_assert_eq!(row.fresh_start.after_change.admitted, count(|d| d.1));
        prop_assert_eq!(row.given_away.requests, count(|d| d.1 && !d.0));
        prop_assert_eq!(row.held_back.requests, count(|d| d.0 && !d.1));
    }
}
