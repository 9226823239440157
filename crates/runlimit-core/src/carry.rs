//! Carrying a subject's state across a change of policy or secret, so that a
//! deploy or a rotation hands no one a fresh quota.
//!
//! A counter is keyed by its policy's fingerprint and its subject key, so a
//! changed limit (a new fingerprint) or a rotated secret (new subject keys)
//! would start every counter from zero: a subject at the limit of "5 password
//! resets per 15 minutes" would get 5 more the moment the change rolls out.
//! Both are opt-in continuities:
//!
//! * a policy built with [`continuing`](crate::FixedWindowPolicy::continuing)
//!   names the policy it replaces (of any algorithm, with its id and scope);
//! * a [`KeyHasher`](crate::KeyHasher) built
//!   [`with_previous_secret`](crate::KeyHasher::with_previous_secret) derives
//!   each subject key under the previous secret too.
//!
//! # When a counter carries
//!
//! A check whose counter holds no live state, and whose policy or subject
//! key has [`sources`](crate::Check::carry_sources), starts its counter from
//! the first source that holds live state, translated by [`carry`] on the
//! backend's clock; when none does, the counter starts fresh. The sources, in
//! order:
//!
//! 1. this policy's counter under the previous secret's subject key;
//! 2. the predecessor's counter under the current subject key;
//! 3. the predecessor's counter under the previous subject key.
//!
//! One change at a time needs one of them; the order also finds the latest
//! state when a rotation and a policy change overlap. Carrying is not
//! consuming: a denied check or batch may still carry its counters (the
//! state is what the first check would have carried), and a denial consumes
//! nothing. Sources are read, never changed: replicas still running the
//! previous policy or secret keep counting there during a rolling deploy,
//! and a subject whose new counter expires while a source still holds its
//! state carries again, so carried usage is released no earlier than the
//! source would release it. [`reset`](crate::Lifecycle::reset) forgets the
//! sources too. Once the predecessor's longest window (GCRA: its full
//! replenishment) has passed, every source is empty: drop the lineage and
//! the previous secret; counters stay.
//!
//! # Translation
//!
//! [`CounterState::held`] measures the units a source still holds against its
//! subject: a live fixed window's count, a sliding window's nine counts, or
//! GCRA's units in flight (the arrival time's lead over now, in emission
//! intervals, rounded up). The new counter holds those units as if admitted
//! at the moment of the carry, at the new policy's rate: where they exceed
//! its limit, the new policy's windows (or emission intervals) they fill are
//! spent before it admits again (a fixed window, whose one count cannot
//! split a window, stays full through the last window they reach into). Where two policies share what releases
//! units, it is kept: a fixed window of the same length keeps its anchor, a
//! sliding window of the same length its counts, GCRA of the same emission
//! interval its arrival time. So raising a limit gives a subject the
//! difference at once, and lowering it denies until the carried usage falls
//! under the new limit.
//!
//! # The bound
//!
//! Let `c` be the carry and `cap(d)` the most a policy admits in any
//! interval of length `d` from a fresh start: a fixed window of `limit` per
//! `window`, `limit × (⌈d / window⌉ + 1)` (anchored windows admit up to twice
//! their limit across a boundary); a sliding window, `limit × ⌈d / window⌉`;
//! GCRA, `burst + ⌈d / emission interval⌉ − 1`. In every interval of the
//! length of either policy's window (GCRA: its full replenishment) that
//! contains `c`, a subject is admitted at most the larger of the two
//! policies' `cap`, plus what the old policy admitted in that interval
//! beyond the units its state still held at `c`. That last term is what no
//! state keeps: a fixed window forgets a window once it ends (as its own
//! boundary burst shows), a sliding window what precedes its nine eighths,
//! GCRA the units it has replenished, and a new policy that counts units
//! longer than the old one did cannot count what the old state no longer
//! holds. It is zero for an interval that begins after the old state's
//! oldest counted admission. Intervals after `c` are bounded by the new
//! policy's `cap` alone. The memory crate's property tests hold every pair
//! of algorithms to this bound against an exact record of admissions, with
//! refunds, peeks, resets and batches interleaved.

use crate::{
    check::Check,
    gcra::Exact,
    key::{CounterKey, SubjectKey},
    lineage::PolicyKind,
    observation::CarriedFrom,
    policy::{MAX_WINDOW, Policy},
    sliding::{Buckets, COUNTED, SlidingExact},
};

/// A counter's state, in a backend's clock units (`1 / UNITS_PER_MILLI` of a
/// millisecond): what [`carry`] reads from a source and writes for the new
/// counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterState<const UNITS_PER_MILLI: u64> {
    /// A fixed window: the units it counts, and when it ends.
    FixedWindow {
        /// Units admitted in the window.
        used: u64,
        /// When the window ends.
        expires_at: u64,
    },
    /// A sliding window's counts.
    SlidingWindow(Buckets),
    /// GCRA's theoretical arrival time, its remainder in units of
    /// `1 / quota` of a clock unit of its policy.
    Gcra {
        /// The arrival time.
        arrival: Exact<UNITS_PER_MILLI>,
    },
}

/// Counter states in nanoseconds (the memory store).
pub type StateNanos = CounterState<1_000_000>;

/// Counter states in microseconds (PostgreSQL and Redis).
pub type StateMicros = CounterState<1_000>;

impl<const UNITS_PER_MILLI: u64> CounterState<UNITS_PER_MILLI> {
    /// The units this state, of a counter of `policy`, still holds against its
    /// subject at `now`, rounded up. A state of another algorithm than
    /// `policy`'s cannot be read, and holds the policy's whole capacity.
    #[must_use]
    pub fn held(&self, policy: PolicyKind<'_>, now: u64) -> u64 {
        match (self, policy) {
            (Self::FixedWindow { used, expires_at }, PolicyKind::FixedWindow(_)) => {
                if *expires_at > now { *used } else { 0 }
            }
            (Self::SlidingWindow(buckets), PolicyKind::SlidingWindow(policy)) => {
                SlidingExact::<UNITS_PER_MILLI>::new(policy)
                    .at(Some(*buckets), now)
                    .total()
            }
            (Self::Gcra { arrival }, PolicyKind::Gcra(policy)) => {
                let now = Exact::from_whole(now);
                if *arrival <= now {
                    return 0;
                }
                let ahead = arrival.saturating_sub(now, policy.quota());
                // ahead / (period / quota), rounded up.
                let scaled = u128::from(ahead.whole) * u128::from(policy.quota())
                    + u128::from(ahead.remainder);
                let period = u128::from(units(policy.period_millis(), UNITS_PER_MILLI));
                u64::try_from(scaled.div_ceil(period)).unwrap_or(u64::MAX)
            }
            (_, policy) => capacity(policy),
        }
    }
}

/// The state a counter of `to` starts from at `now`, carrying `state`, the
/// live state of a counter of `from` (see the [module documentation](self)):
/// `None` when the state holds nothing, and the counter starts fresh.
///
/// A backend gives the new state the version or creation time it gives a
/// new counter.
#[must_use]
pub fn carry<const UNITS_PER_MILLI: u64>(
    from: PolicyKind<'_>,
    state: &CounterState<UNITS_PER_MILLI>,
    to: PolicyKind<'_>,
    now: u64,
) -> Option<CounterState<UNITS_PER_MILLI>> {
    let held = state.held(from, now);
    if held == 0 {
        return None;
    }
    // The longest a carried state reaches ahead: twice the longest window,
    // which keeps every time a backend stores exact (below 2^53 microseconds)
    // and denies for far longer than any policy holds a unit.
    let horizon = units(2 * MAX_WINDOW_MILLIS, UNITS_PER_MILLI);
    Some(match to {
        PolicyKind::FixedWindow(policy) => {
            let window = units(policy.window_millis(), UNITS_PER_MILLI);
            match (from, state) {
                (PolicyKind::FixedWindow(old), CounterState::FixedWindow { used, expires_at })
                    if old.window_millis() == policy.window_millis() =>
                {
                    CounterState::FixedWindow {
                        used: *used,
                        expires_at: *expires_at,
                    }
                }
                _ => {
                    // Units beyond the limit fill later windows: a window
                    // holds them, full, until every window they reach into
                    // has passed (the last one too, which a window's one
                    // count cannot split).
                    let (windows, last) = spread(held, policy.limit());
                    let used = if windows == 1 { last } else { policy.limit() };
                    match windows.checked_mul(window).filter(|span| *span <= horizon) {
                        Some(span) => CounterState::FixedWindow {
                            used,
                            expires_at: now.saturating_add(span),
                        },
                        None => CounterState::FixedWindow {
                            used: policy.limit(),
                            expires_at: now.saturating_add(horizon),
                        },
                    }
                }
            }
        }
        PolicyKind::SlidingWindow(policy) => {
            let exact = SlidingExact::<UNITS_PER_MILLI>::new(policy);
            match (from, state) {
                (PolicyKind::SlidingWindow(old), CounterState::SlidingWindow(buckets))
                    if old.window_millis() == policy.window_millis() =>
                {
                    CounterState::SlidingWindow(exact.at(Some(*buckets), now))
                }
                _ => {
                    // Units beyond the limit fill later windows. Counted in
                    // an eighth ahead of now, the counts hold as a clock that
                    // stepped back leaves them: the limit's worth until that
                    // eighth has begun (its oldest eighth, the rest of the
                    // full windows, then drops out), and the last window's
                    // units for a window after.
                    let window = units(policy.window_millis(), UNITS_PER_MILLI);
                    let (windows, last) = spread(held, policy.limit());
                    let mut counts = [0; COUNTED];
                    let ahead = match (windows - 1)
                        .checked_mul(window)
                        .filter(|ahead| *ahead <= horizon)
                    {
                        Some(ahead) => {
                            counts[0] = last;
                            if windows > 1 {
                                counts[COUNTED - 1] = policy.limit() - last;
                            }
                            ahead
                        }
                        None => {
                            counts[0] = policy.limit();
                            horizon
                        }
                    };
                    CounterState::SlidingWindow(Buckets {
                        latest_start: exact.start_of(exact.bucket(now.saturating_add(ahead))),
                        counts,
                    })
                }
            }
        }
        PolicyKind::Gcra(policy) => {
            let period = units(policy.period_millis(), UNITS_PER_MILLI);
            match (from, state) {
                (PolicyKind::Gcra(old), CounterState::Gcra { arrival })
                    if u128::from(old.period_millis()) * u128::from(policy.quota())
                        == u128::from(policy.period_millis()) * u128::from(old.quota()) =>
                {
                    // The same emission interval: the arrival time, its
                    // remainder restated in the new quota's units, rounded up.
                    let remainder = (u128::from(arrival.remainder) * u128::from(policy.quota()))
                        .div_ceil(u128::from(old.quota()));
                    let remainder = u64::try_from(remainder).unwrap_or(u64::MAX);
                    CounterState::Gcra {
                        arrival: if remainder >= policy.quota() {
                            Exact::from_whole(arrival.whole.saturating_add(1))
                        } else {
                            Exact {
                                whole: arrival.whole,
                                remainder,
                            }
                        },
                    }
                }
                _ => {
                    // `held` units at the new emission interval, from now.
                    let ahead = Exact::<UNITS_PER_MILLI>::ratio(held, period, policy.quota());
                    let ahead = if ahead.whole >= horizon {
                        Exact::from_whole(horizon)
                    } else {
                        ahead
                    };
                    CounterState::Gcra {
                        arrival: Exact::from_whole(now).saturating_add(ahead, policy.quota()),
                    }
                }
            }
        }
    })
}

const MAX_WINDOW_MILLIS: u64 = MAX_WINDOW.as_secs() * 1_000;

/// `millis` in clock units.
fn units(millis: u64, units_per_milli: u64) -> u64 {
    millis.saturating_mul(units_per_milli)
}

fn capacity(policy: PolicyKind<'_>) -> u64 {
    match policy {
        PolicyKind::FixedWindow(policy) => policy.capacity(),
        PolicyKind::SlidingWindow(policy) => policy.capacity(),
        PolicyKind::Gcra(policy) => policy.capacity(),
    }
}

/// `held` units at `limit` per window: how many windows they fill (at least
/// one) and the units in the last of them.
fn spread(held: u64, limit: u64) -> (u64, u64) {
    let windows = held.div_ceil(limit).max(1);
    (windows, held - (windows - 1) * limit)
}

/// A counter a check may carry its state from: the counter's key and the
/// policy whose state it holds.
#[derive(Debug, Clone, Copy)]
pub struct CarrySource<'a> {
    counter: CounterKey,
    policy: PolicyKind<'a>,
    from: CarriedFrom,
}

impl<'a> CarrySource<'a> {
    /// The source counter's key.
    #[must_use]
    pub fn counter(&self) -> &CounterKey {
        &self.counter
    }

    /// The policy whose state the source counter holds.
    #[must_use]
    pub fn policy(&self) -> PolicyKind<'a> {
        self.policy
    }

    /// Which kind of source it is, for [`CarryObservation`](crate::CarryObservation)s.
    #[must_use]
    pub fn from(&self) -> CarriedFrom {
        self.from
    }
}

/// The [`CarrySource`]s of a check, in the order a backend reads them; see
/// [`Check::carry_sources`].
#[derive(Debug, Clone)]
pub struct CarrySources<'a> {
    sources: [Option<CarrySource<'a>>; 3],
    next: usize,
}

impl<'a> Iterator for CarrySources<'a> {
    type Item = CarrySource<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.next < self.sources.len() {
            let source = self.sources[self.next];
            self.next += 1;
            if source.is_some() {
                return source;
            }
        }
        None
    }
}

impl<'a, P: Policy + ?Sized> Check<'a, P> {
    /// Whether this check's counter may carry another's state: its policy
    /// continues from a predecessor, or its subject key was derived under a
    /// previous secret too.
    #[inline]
    #[must_use]
    pub fn carries(&self) -> bool {
        self.subject().previous().is_some() || self.policy().predecessor().is_some()
    }

    /// The counters this check's counter carries its state from when it holds
    /// none, in the order a backend reads them (see the [module
    /// documentation](self)).
    #[must_use]
    pub fn carry_sources(&self) -> CarrySources<'a> {
        let policy = self.policy();
        let subject = self.subject();
        let previous = subject.previous();
        let predecessor = policy.predecessor();
        let source = |from, policy: PolicyKind<'a>, fingerprint, digest| CarrySource {
            counter: CounterKey::new(fingerprint, SubjectKey::from_digest(digest)),
            policy,
            from,
        };
        CarrySources {
            sources: [
                previous.map(|digest| {
                    source(
                        CarriedFrom::PreviousSecret,
                        policy.kind(),
                        *policy.fingerprint(),
                        digest,
                    )
                }),
                predecessor.map(|old| {
                    source(
                        CarriedFrom::Predecessor,
                        old.kind(),
                        *old.fingerprint(),
                        *subject.as_bytes(),
                    )
                }),
                predecessor.zip(previous).map(|(old, digest)| {
                    source(
                        CarriedFrom::PredecessorUnderPreviousSecret,
                        old.kind(),
                        *old.fingerprint(),
                        digest,
                    )
                }),
            ],
            next: 0,
        }
    }
}
