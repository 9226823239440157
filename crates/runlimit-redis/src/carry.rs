//! Carrying a subject's state into a counter that holds none (see
//! [`runlimit_core::carry`]): the carry section a carrying invocation hands
//! `carry.lua`, and stored states read as core's [`StateMicros`], which a
//! peek translates with core's own [`carry`](runlimit_core::carry::carry).

use runlimit_core::{
    Check, MAX_WINDOW, Policy, PolicyKind,
    carry::{CarrySource, CounterState, StateMicros},
    gcra::{ExactMicros, GcraMicros},
    sliding::{Buckets, COUNTED, SlidingMicros},
};

use crate::{
    config::RedisConfig,
    keys::{hash_slot, redis_key},
};

/// How far ahead of now a carried state reaches at most, in microseconds:
/// core's horizon, twice the longest window.
const HORIZON: u64 = 2 * MAX_WINDOW.as_secs() * 1_000_000;

/// The largest integer the scripts' doubles hold exactly.
const EXACT: u64 = 1 << 53;

/// A count or parameter for the scripts (all below 2<sup>53</sup>).
fn integer(value: u64) -> i64 {
    i64::try_from(value.min(EXACT)).unwrap_or(i64::MAX)
}

fn window_micros(millis: u64) -> u64 {
    millis.saturating_mul(1_000)
}

/// The scripts' name for `policy`'s algorithm: 1 fixed window, 2 sliding
/// window, 3 GCRA.
pub(crate) fn kind_code(policy: PolicyKind<'_>) -> i64 {
    match policy {
        PolicyKind::FixedWindow(_) => 1,
        PolicyKind::SlidingWindow(_) => 2,
        PolicyKind::Gcra(_) => 3,
    }
}

/// A counter's policy as the carry section describes it: its kind and four
/// parameters, the products among them computed here.
fn counter_parameters(policy: PolicyKind<'_>) -> [i64; 5] {
    match policy {
        PolicyKind::FixedWindow(policy) => {
            let window = window_micros(policy.window_millis());
            [1, policy.limit(), window, HORIZON / window, 0].map(integer)
        }
        PolicyKind::SlidingWindow(policy) => {
            let window = window_micros(policy.window_millis());
            [
                2,
                policy.limit(),
                SlidingMicros::new(policy).sub_window,
                HORIZON / window,
                window,
            ]
            .map(integer)
        }
        PolicyKind::Gcra(policy) => {
            let interval = GcraMicros::new(policy, 1).increment;
            let period = u128::from(window_micros(policy.period_millis()));
            // The fewest units whose emission intervals reach the horizon.
            let reaching = (u128::from(HORIZON) * u128::from(policy.quota())).div_ceil(period);
            [
                3,
                policy.quota(),
                interval.whole,
                interval.remainder,
                u64::try_from(reaching).unwrap_or(u64::MAX),
            ]
            .map(integer)
        }
    }
}

/// A source's policy as the carry section describes it for a counter of
/// `to`: its kind, whether the translation keeps the state as it is, and
/// five parameters.
fn source_parameters(from: PolicyKind<'_>, to: PolicyKind<'_>) -> [i64; 7] {
    match (from, to) {
        (PolicyKind::FixedWindow(from), to) => {
            let same = matches!(to, PolicyKind::FixedWindow(to)
                if to.window_millis() == from.window_millis());
            [1, u64::from(same), 0, 0, 0, 0, 0].map(integer)
        }
        (PolicyKind::SlidingWindow(from), to) => {
            let same = matches!(to, PolicyKind::SlidingWindow(to)
                if to.window_millis() == from.window_millis());
            let sub_window = SlidingMicros::new(from).sub_window;
            [2, u64::from(same), sub_window, 0, 0, 0, 0].map(integer)
        }
        (PolicyKind::Gcra(from), to) => {
            let interval = GcraMicros::new(from, 1).increment;
            // The same emission interval keeps the arrival time, its
            // remainder restated in the new quota: times a / b.
            let (same, a, b) = match to {
                PolicyKind::Gcra(to)
                    if u128::from(from.period_millis()) * u128::from(to.quota())
                        == u128::from(to.period_millis()) * u128::from(from.quota()) =>
                {
                    let divisor = gcd(to.quota(), from.quota());
                    (true, to.quota() / divisor, from.quota() / divisor)
                }
                _ => (false, 0, 1),
            };
            [
                3,
                u64::from(same),
                from.quota(),
                interval.whole,
                interval.remainder,
                a,
                b,
            ]
            .map(integer)
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// One of a check's carry sources, its key, and whether a carrying
/// invocation reads it itself (in the counters' slot) or is handed its
/// state.
#[derive(Debug)]
struct Source<'a> {
    /// Its place among the check's carry sources, from 1.
    ordinal: usize,
    source: CarrySource<'a>,
    key: String,
    local: bool,
}

/// The carry sources of a carrying invocation's checks.
#[derive(Debug)]
pub(crate) struct Sources<'a> {
    checks: Vec<(PolicyKind<'a>, Vec<Source<'a>>)>,
}

impl<'a> Sources<'a> {
    /// The sources of `checks`, whose counters are in `slot` on a cluster
    /// (`None` on one server, where a script reads every key).
    pub(crate) fn new<P: Policy>(
        checks: &[Check<'a, P>],
        config: &RedisConfig,
        slot: Option<u16>,
    ) -> Self {
        let checks = checks
            .iter()
            .map(|check| {
                let sources = check
                    .carry_sources()
                    .enumerate()
                    .map(|(index, source)| {
                        let key = redis_key(config, source.counter());
                        Source {
                            ordinal: index + 1,
                            local: slot.is_none_or(|slot| hash_slot(&key) == slot),
                            source,
                            key,
                        }
                    })
                    .collect();
                (check.policy().kind(), sources)
            })
            .collect();
        Self { checks }
    }

    /// The keys of sources in other slots, whose states a carrying
    /// invocation is handed (read first with `MGET`), in order.
    pub(crate) fn remote_keys(&self) -> Vec<&str> {
        self.sources()
            .filter(|source| !source.local)
            .map(|source| source.key.as_str())
            .collect()
    }

    /// The keys of sources in the counters' slot, in order.
    pub(crate) fn local_keys(&self) -> Vec<&str> {
        self.sources()
            .filter(|source| source.local)
            .map(|source| source.key.as_str())
            .collect()
    }

    fn sources(&self) -> impl Iterator<Item = &Source<'a>> {
        self.checks.iter().flat_map(|(_, sources)| sources)
    }

    /// Every source's policy and state, in order, given the states read at
    /// [`local_keys`](Self::local_keys) and at
    /// [`remote_keys`](Self::remote_keys).
    pub(crate) fn states(
        &self,
        local: Vec<Option<String>>,
        remote: Vec<Option<String>>,
    ) -> Vec<(PolicyKind<'a>, Option<String>)> {
        let (mut local, mut remote) = (local.into_iter(), remote.into_iter());
        self.sources()
            .map(|source| {
                let state = if source.local {
                    local.next()
                } else {
                    remote.next()
                };
                (source.source.policy(), state.flatten())
            })
            .collect()
    }

    /// The keys and arguments of a carrying invocation: `keys` and
    /// `arguments` (the invocation's own), then the keys of the sources it
    /// reads and the carry section (`carry.lua`), handed `remote`, the
    /// states at [`remote_keys`](Self::remote_keys) (a source without one
    /// is left out).
    pub(crate) fn invocation(
        &self,
        mut keys: Vec<String>,
        arguments: &[i64],
        remote: &[Option<String>],
    ) -> (Vec<String>, Vec<String>) {
        let counters = keys.len();
        let mut section: Vec<String> = Vec::new();
        let mut remote = remote.iter();
        for (policy, sources) in &self.checks {
            section.extend(counter_parameters(*policy).map(|value| value.to_string()));
            let count_at = section.len();
            section.push(String::new());
            let mut count = 0;
            for source in sources {
                let state = if source.local {
                    keys.push(source.key.clone());
                    None
                } else {
                    match remote.next() {
                        Some(Some(state)) => Some(state.clone()),
                        // Not stored: nothing to carry from it.
                        _ => continue,
                    }
                };
                count += 1;
                let index = if state.is_some() { 0 } else { keys.len() };
                section.push(source.ordinal.to_string());
                section.push(index.to_string());
                section.extend(state);
                section.extend(
                    source_parameters(source.source.policy(), *policy)
                        .map(|value| value.to_string()),
                );
            }
            section[count_at] = count.to_string();
        }
        let source_keys = keys.len() - counters;
        section.push(HORIZON.to_string());
        section.push(source_keys.to_string());
        section.push((section.len() + 1).to_string());
        let arguments = arguments
            .iter()
            .map(i64::to_string)
            .chain(section)
            .collect();
        (keys, arguments)
    }
}

/// `text`, a counter's stored state, as core's state of `policy`'s
/// algorithm; `None` for a state the scripts would read as none.
pub(crate) fn parse(policy: PolicyKind<'_>, text: &str) -> Option<StateMicros> {
    let mut fields = text.split(':').map(str::parse::<u64>);
    match policy {
        PolicyKind::FixedWindow(_) => {
            let used = fields.next()?.ok()?;
            let expires_at = fields.next()?.ok()?;
            Some(CounterState::FixedWindow { used, expires_at })
        }
        PolicyKind::SlidingWindow(policy) => {
            let expires = fields.next()?.ok()?;
            fields.next()?.ok()?;
            let mut counts = [0; COUNTED];
            let mut sent = 0;
            for field in fields {
                *counts.get_mut(sent)? = field.ok()?;
                sent += 1;
            }
            (sent > 0).then(|| {
                CounterState::SlidingWindow(Buckets {
                    latest_start: SlidingMicros::new(policy).latest_start_of(expires),
                    counts,
                })
            })
        }
        PolicyKind::Gcra(_) => {
            let whole = fields.next()?.ok()?;
            let remainder = fields.next()?.ok()?;
            Some(CounterState::Gcra {
                arrival: ExactMicros { whole, remainder },
            })
        }
    }
}

/// Whether `state`, of a counter of `policy`, is live at `now`: a check
/// finding it decides on it rather than carry.
pub(crate) fn is_live(policy: PolicyKind<'_>, state: &StateMicros, now: u64) -> bool {
    match (policy, state) {
        (_, CounterState::FixedWindow { expires_at, .. }) => *expires_at > now,
        (PolicyKind::SlidingWindow(policy), CounterState::SlidingWindow(buckets)) => {
            SlidingMicros::new(policy).expiry_of(buckets.latest_start) > now
        }
        (_, CounterState::SlidingWindow(_)) => false,
        (_, CounterState::Gcra { arrival }) => *arrival > ExactMicros::from_whole(now),
    }
}

/// `state`, of a counter of `policy`, as the scripts store it, with
/// `version` where the algorithm keeps one.
pub(crate) fn to_text(policy: PolicyKind<'_>, state: &StateMicros, version: u64) -> String {
    match (policy, state) {
        (PolicyKind::SlidingWindow(policy), CounterState::SlidingWindow(buckets)) => {
            let expires = SlidingMicros::new(policy).expiry_of(buckets.latest_start);
            let sent = buckets
                .counts
                .iter()
                .rposition(|&count| count > 0)
                .map_or(1, |last| last + 1);
            let mut text = format!("{expires}:{version}");
            for count in &buckets.counts[..sent] {
                text.push(':');
                text.push_str(&count.to_string());
            }
            text
        }
        (_, CounterState::FixedWindow { used, expires_at }) => format!("{used}:{expires_at}"),
        (_, CounterState::Gcra { arrival }) => {
            format!("{}:{}:{version}", arrival.whole, arrival.remainder)
        }
        // A sliding window's counts for another policy: none the scripts read.
        (_, CounterState::SlidingWindow(_)) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::{prelude::*, test_runner::TestRunner};
    use runlimit_core::{
        FixedWindowPolicy, GcraPolicy, PolicyId, ScopeId, SlidingWindowPolicy, carry::carry,
    };

    use super::*;
    use crate::testing::server;

    /// `carry.lua`'s translation alone, at a `now` the test chooses.
    const TRANSLATE: &str = concat!(
        include_str!("script.lua"),
        include_str!("common.lua"),
        include_str!("exact_division.lua"),
        include_str!("eighths.lua"),
        include_str!("carry.lua"),
        "
-- ARGV: now, the source's state, the source's kind, same and five
-- parameters, the counter's kind and four parameters, the horizon.
now = tonumber(ARGV[1])
local n = {}
for i = 3, #ARGV do
    n[i] = tonumber(ARGV[i])
end
local value, expires = translated(ARGV[2], n[3], n[4], n[5], n[6], n[7], n[8], n[9], n[10],
    n[11], n[12], n[13], n[14], n[15])
return {value or false, expires or false}
"
    );

    /// A policy of each algorithm: limits and quotas from 1 to 10^9 (each
    /// magnitude alike), windows and periods from a millisecond to a year.
    #[derive(Debug, Clone)]
    enum Drawn {
        Fixed(FixedWindowPolicy),
        Sliding(SlidingWindowPolicy),
        Gcra(GcraPolicy),
    }

    impl Drawn {
        fn kind(&self) -> PolicyKind<'_> {
            match self {
                Self::Fixed(policy) => PolicyKind::FixedWindow(policy),
                Self::Sliding(policy) => PolicyKind::SlidingWindow(policy),
                Self::Gcra(policy) => PolicyKind::Gcra(policy),
            }
        }
    }

    fn magnitude() -> impl Strategy<Value = u64> {
        (0..=9u32, 1..=9u64)
            .prop_map(|(power, digit)| (digit * 10u64.pow(power)).min(1_000_000_000))
    }

    /// Windows and periods, the longest (where the horizon holds two) and
    /// half of it among them.
    fn millis() -> impl Strategy<Value = u64> {
        let longest = MAX_WINDOW.as_secs() * 1_000;
        prop_oneof![
            1..=2_000u64,
            1..=86_400_000u64,
            1..=longest,
            Just(longest),
            Just(longest / 2),
        ]
    }

    /// A policy of any algorithm; one in four holds a few units for a
    /// third of a year or more, so that carried units reach the horizon.
    fn policy() -> impl Strategy<Value = Drawn> {
        let id = || PolicyId::new("carry").expect("valid");
        let scope = || ScopeId::new("client").expect("valid");
        let longest = MAX_WINDOW.as_secs() * 1_000;
        let long = || (1..=3u64, longest / 3..=longest);
        prop_oneof![
            long().prop_map(move |(limit, ms)| {
                Drawn::Fixed(
                    FixedWindowPolicy::new(id(), scope(), limit, Duration::from_millis(ms))
                        .expect("valid"),
                )
            }),
            long().prop_map(move |(limit, ms)| {
                Drawn::Sliding(
                    SlidingWindowPolicy::new(id(), scope(), limit, Duration::from_millis(ms))
                        .expect("valid"),
                )
            }),
            long().prop_map(move |(quota, ms)| {
                Drawn::Gcra(
                    GcraPolicy::new(id(), scope(), quota, Duration::from_millis(ms), 1)
                        .expect("valid"),
                )
            }),
            (magnitude(), millis()).prop_filter_map("a valid window", move |(limit, ms)| {
                FixedWindowPolicy::new(id(), scope(), limit, Duration::from_millis(ms))
                    .ok()
                    .map(Drawn::Fixed)
            }),
            (magnitude(), millis()).prop_filter_map("a valid window", move |(limit, ms)| {
                SlidingWindowPolicy::new(id(), scope(), limit, Duration::from_millis(ms))
                    .ok()
                    .map(Drawn::Sliding)
            }),
            (magnitude(), millis(), magnitude()).prop_filter_map(
                "a valid rate",
                move |(quota, ms, burst)| {
                    GcraPolicy::new(id(), scope(), quota, Duration::from_millis(ms), burst)
                        .ok()
                        .map(Drawn::Gcra)
                }
            ),
        ]
    }

    /// `to`, or sometimes a policy of `from`'s algorithm whose translation
    /// keeps the state (the same window, the same emission interval).
    fn successor(from: &Drawn, to: Drawn, keep: bool) -> Drawn {
        let (id, scope) = (
            PolicyId::new("carry").expect("valid"),
            ScopeId::new("client").expect("valid"),
        );
        let kept = match (from, &to) {
            (Drawn::Fixed(from), Drawn::Fixed(to)) => {
                FixedWindowPolicy::new(id, scope, to.limit(), from.window())
                    .ok()
                    .map(Drawn::Fixed)
            }
            (Drawn::Sliding(from), Drawn::Sliding(to)) => {
                SlidingWindowPolicy::new(id, scope, to.limit(), from.window())
                    .ok()
                    .map(Drawn::Sliding)
            }
            (Drawn::Gcra(from), Drawn::Gcra(to)) => {
                // The emission interval in lowest terms, times 1 to 7: the
                // remainder restated in the new quota may round up to it.
                let divisor = gcd(from.period_millis(), from.quota());
                let times = 1 + to.quota() % 7;
                GcraPolicy::new(
                    id,
                    scope,
                    from.quota() / divisor * times,
                    Duration::from_millis(from.period_millis() / divisor * times),
                    to.burst_capacity(),
                )
                .ok()
                .map(Drawn::Gcra)
            }
            _ => None,
        };
        match kept {
            Some(kept) if keep => kept,
            _ => to,
        }
    }

    /// A state of a counter of `policy` as the scripts could store it near
    /// `now`: live or just ended (at now, a microsecond either side, or
    /// further), holding a few units, its capacity or any number between.
    fn state(policy: &Drawn, now: u64, draw: [u64; 12]) -> StateMicros {
        let within = |value: u64, bound: u64| value % bound.max(1);
        let units = |value: u64, capacity: u64| match value % 3 {
            0 => within(value / 3, 4),
            1 => capacity,
            _ => within(value / 3, capacity + 1),
        };
        let near = |value: u64, span: u64| match value % 4 {
            0 => now,
            1 => now + 1,
            2 => now - 1,
            _ => (now + within(value / 4, 2 * span)).saturating_sub(span / 2),
        };
        match policy {
            Drawn::Fixed(policy) => CounterState::FixedWindow {
                used: units(draw[0], policy.limit()),
                expires_at: near(draw[1], window_micros(policy.window_millis())),
            },
            Drawn::Sliding(policy) => {
                let exact = SlidingMicros::new(policy);
                // The latest eighth from ten before now's to two after.
                let eighth = (exact.bucket(now) + within(draw[0], 13)).saturating_sub(10);
                let mut counts = [0; COUNTED];
                for (count, &value) in counts.iter_mut().zip(&draw[1..]) {
                    *count = if value % 4 == 0 {
                        0
                    } else {
                        units(value / 4, policy.limit())
                    };
                }
                counts[0] = counts[0].max(1);
                CounterState::SlidingWindow(Buckets {
                    latest_start: exact.start_of(eighth),
                    counts,
                })
            }
            Drawn::Gcra(policy) => {
                // A whole number of emission intervals ahead of now (what a
                // check at now leaves), or a nearby time.
                let interval = GcraMicros::new(policy, 1).increment;
                let ahead =
                    interval.times(units(draw[0], policy.burst_capacity() + 1), policy.quota());
                let arrival = match draw[1] % 3 {
                    0 => ExactMicros {
                        whole: now + ahead.whole,
                        remainder: ahead.remainder,
                    },
                    _ => ExactMicros {
                        whole: near(draw[2], ahead.whole + interval.whole + 1),
                        remainder: within(draw[3], policy.quota()),
                    },
                };
                CounterState::Gcra { arrival }
            }
        }
    }

    /// When a stored state stops being live: what the scripts expire it at.
    fn expiry(policy: PolicyKind<'_>, state: &StateMicros) -> u64 {
        match (policy, state) {
            (_, CounterState::FixedWindow { expires_at, .. }) => *expires_at,
            (PolicyKind::SlidingWindow(policy), CounterState::SlidingWindow(buckets)) => {
                SlidingMicros::new(policy).expiry_of(buckets.latest_start)
            }
            (_, CounterState::Gcra { arrival }) => arrival.whole + u64::from(arrival.remainder > 0),
            _ => unreachable!("a state of the policy's algorithm"),
        }
    }

    /// `carry.lua` translates every state of every algorithm into every
    /// algorithm's exactly as core's `carry` does, in microseconds: the
    /// same state (or none), expiring when the state does.
    #[test]
    fn the_scripts_translate_states_as_core_does() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let Some(url) = server(&runtime) else {
            return;
        };
        let connection = runtime.block_on(async {
            redis::Client::open(url.as_str())
                .expect("url")
                .get_multiplexed_async_connection()
                .await
                .expect("connect")
        });
        let script = redis::Script::new(TRANSLATE);
        let mut runner = TestRunner::new(ProptestConfig::with_cases(1_000));
        let cases = (
            policy(),
            policy(),
            any::<bool>(),
            1_600_000_000_000_000..1_900_000_000_000_000u64,
            any::<[u64; 12]>(),
        );
        runner
            .run(&cases, |(from, to, keep, now, draw)| {
                let to = successor(&from, to, keep);
                let (from_kind, to_kind) = (from.kind(), to.kind());
                let source_state = state(&from, now, draw);
                let text = to_text(from_kind, &source_state, now - 1);
                prop_assert_eq!(parse(from_kind, &text), Some(source_state));
                let mut invocation = script.prepare_invoke();
                invocation.arg(now).arg(&text);
                invocation.arg(&source_parameters(from_kind, to_kind)[..]);
                invocation.arg(&counter_parameters(to_kind)[..]);
                invocation.arg(HORIZON);
                let (translated, expires): (Option<String>, Option<u64>) = runtime
                    .block_on(invocation.invoke_async(&mut connection.clone()))
                    .expect("translate");
                let expected = carry(from_kind, &source_state, to_kind, now);
                prop_assert_eq!(
                    translated.as_deref().and_then(|text| parse(to_kind, text)),
                    expected,
                    "{:?} to {:?} from {}",
                    from,
                    to,
                    text
                );
                if let Some(expected) = expected {
                    prop_assert_eq!(expires, Some(expiry(to_kind, &expected)));
                    prop_assert!(is_live(to_kind, &expected, now));
                }
                Ok(())
            })
            .expect("translations agree");
    }
}
