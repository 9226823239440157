//! The per-key arithmetic of each algorithm, independent of storage.
//!
//! Time is a `u64` count of nanoseconds since the store's clock origin. Fixed
//! windows report exact durations; GCRA keeps its theoretical arrival time as a
//! whole number of nanoseconds plus a remainder in units of `1 / quota`
//! nanoseconds, so replenishment is exact for any quota and period, and reports
//! durations rounded up to whole milliseconds as the policy documents.

use std::{fmt, time::Duration};

use runlimit_core::{
    Decision, Denial, FixedWindowPolicy, GcraPolicy, PolicyKind, SlidingWindowPolicy,
    carry::{CounterState, StateNanos},
    gcra::{ExactNanos, GcraNanos},
    sliding::{Buckets, COUNTED, SlidingNanos, SlidingOutcome},
};

const NANOS_PER_MILLI: u64 = 1_000_000;

pub(crate) mod sealed {
    use runlimit_core::{Decision, Denial};

    /// What an algorithm decides for one key, before anything is stored.
    #[derive(Debug, PartialEq, Eq)]
    pub enum Evaluation<S, A> {
        /// Within quota: store `next`, and report the decision `admitted`
        /// makes ([`Engine::decision`]) once it is stored.
        Allowed { admitted: A, next: S },
        /// Over quota: nothing changes.
        Denied(Denial),
    }

    use std::sync::atomic::AtomicU64;

    /// A per-key state as the words an entry stores (two, or six for sliding
    /// windows). The last word stays below 2<sup>63</sup>: the entry keeps its
    /// lock bit there.
    ///
    /// Every state carries a 32-bit version, which refunds compare with the
    /// version a receipt recorded: it is drawn afresh when the table stores a
    /// new key, and changes whenever a reset or refund invalidates the
    /// receipts issued before it.
    pub trait Packed: Copy + Send + Sync + 'static {
        /// The words, `[u64; N]`.
        type Words: Copy + Default + AsRef<[u64]> + AsMut<[u64]>;
        /// The words as an entry holds them, `[AtomicU64; N]`.
        type Atomic: AtomicWords<Words = Self::Words>;
        /// An empty type aligned to the entry's size (32 or 64 bytes).
        type Align: Send + Sync + 'static;
        /// The state as words, the last below 2<sup>63</sup>.
        fn pack(self) -> Self::Words;
        /// The state `pack` returned these words for.
        fn unpack(words: Self::Words) -> Self;
        /// The state's version.
        fn version(&self) -> u32;
        /// The state with another version.
        #[must_use]
        fn with_version(self, version: u32) -> Self;
    }

    /// `[AtomicU64; N]` for the `[u64; N]` a state packs into.
    pub trait AtomicWords: Send + Sync + 'static {
        type Words;
        fn new(words: Self::Words) -> Self;
        fn words(&self) -> &[AtomicU64];
        /// Stores `words`, for a holder of the shard's exclusive lock.
        fn set(&mut self, words: Self::Words);
    }

    impl<const N: usize> AtomicWords for [AtomicU64; N] {
        type Words = [u64; N];

        fn new(words: [u64; N]) -> Self {
            words.map(AtomicU64::new)
        }

        fn words(&self) -> &[AtomicU64] {
            self
        }

        fn set(&mut self, words: [u64; N]) {
            // Held exclusively, so plain writes suffice.
            for (atomic, word) in self.iter_mut().zip(words) {
                *atomic.get_mut() = word;
            }
        }
    }

    /// Aligns a 32-byte entry (two state words).
    #[derive(Debug)]
    #[repr(align(32))]
    pub struct Align32;

    /// Aligns a 64-byte entry (six state words).
    #[derive(Debug)]
    #[repr(align(64))]
    pub struct Align64;

    /// How an algorithm's key is counted in the overflow tier.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Counting {
        /// Units per window of `window` nanoseconds, at most `limit` of them.
        Window { limit: u64, window: u64 },
        /// An upper bound of the theoretical arrival time (GCRA).
        ArrivalTime,
    }

    /// What a refund does to a stored state.
    #[derive(Debug)]
    pub enum Credit<S> {
        /// Nothing to give back: the state stays as it is.
        Nothing,
        /// Store this state.
        To(S),
    }

    pub trait Engine: Send + Sync + 'static {
        /// Per-key state; constant size.
        type State: Packed + Send + Sync + std::fmt::Debug + 'static;
        type Policy: runlimit_core::Policy;

        /// The issuer name on this store's receipts.
        const ISSUER: &'static str;

        /// Whether [`deny_from_words`](Self::deny_from_words) can decide
        /// anything: false for states of more than two words, which then skip
        /// the lock-free read.
        const DENIES_WITHOUT_LOCK: bool = false;

        /// What an allowed evaluation leaves to compute its decision from.
        /// A check stores the next state before it computes the decision, so
        /// the entry's lock is held for the state's arithmetic only.
        type Admitted: Copy;

        /// Decides `cost` units at `now` for a key whose stored state is `state`
        /// (`None` for a key not stored). Never fails: costs are validated by
        /// `Check`, and policy bounds keep the arithmetic in range.
        fn evaluate(
            policy: &Self::Policy,
            state: Option<Self::State>,
            cost: u64,
            now: u64,
        ) -> Evaluation<Self::State, Self::Admitted>;

        /// The decision of an allowed evaluation.
        fn decision(policy: &Self::Policy, admitted: Self::Admitted) -> Decision;

        /// A denial decided from the packed words of a two-word state read
        /// without the entry's lock (the first and last word may come from
        /// different commits; see `Entry::words_for_denial`). `Some` only when
        /// the locked path would give the same denial against a state
        /// committed while the words were read. `None` sends the check to the
        /// locked path. Only called when
        /// [`DENIES_WITHOUT_LOCK`](Self::DENIES_WITHOUT_LOCK) is set.
        #[inline(always)]
        fn deny_from_words(
            _policy: &Self::Policy,
            _words: (u64, u64),
            _cost: u64,
            _now: u64,
        ) -> Option<Denial> {
            None
        }

        /// When the entry expires: from then on it is equivalent to an absent key
        /// and may be removed. Admissions never move it earlier; a reset or a
        /// refund may, and the table then reclaims the entry when its recorded
        /// bound passes.
        fn deadline(state: &Self::State) -> u64;

        /// What `check` would get at `now` against `state` (`None` for a key
        /// not stored), changing nothing: allowed with the units available now
        /// and the time until the quota is full again, or denied (following
        /// the quota mode) with the time until `cost` would fit.
        fn peek(policy: &Self::Policy, state: Option<Self::State>, cost: u64, now: u64)
        -> Decision;

        /// What a receipt records about the state an admission left.
        fn stamp(state: &Self::State) -> [u64; 3];

        /// Credits `cost` units (the admission's whole cost, or the part a
        /// settlement gives back) of an admission that left `stamp`, from the
        /// current `state` at `now`.
        fn refund(
            policy: &Self::Policy,
            state: Self::State,
            stamp: [u64; 3],
            cost: u64,
            now: u64,
        ) -> Credit<Self::State>;

        /// The state that forgets the counter at `now`: equivalent to an absent
        /// key, with a version no earlier receipt carries.
        fn forget(state: Self::State, now: u64) -> Self::State;

        /// `state`, of a counter of `policy`, as a carry reads it; `None`
        /// when `policy` is not one this store keeps state for, or `state`
        /// is not of its algorithm.
        fn carry_source(
            policy: runlimit_core::PolicyKind<'_>,
            state: &Self::State,
        ) -> Option<runlimit_core::carry::StateNanos>;

        /// The state a new counter of `policy` starts from, carrying `state`;
        /// `None` when `state` is not of `policy`'s algorithm.
        fn carried(
            policy: &Self::Policy,
            state: runlimit_core::carry::StateNanos,
        ) -> Option<Self::State>;

        /// How the overflow tier counts a key of `policy`.
        fn overflow_counting(policy: &Self::Policy) -> Counting;

        /// The state of a key whose theoretical arrival time is at most
        /// `tat` (whole nanoseconds), for a policy counted by
        /// [`Counting::ArrivalTime`](Counting).
        fn from_arrival_time(_tat: u64) -> Option<Self::State> {
            None
        }

        /// An upper bound of `state`'s theoretical arrival time in whole
        /// nanoseconds, for a policy counted by
        /// [`Counting::ArrivalTime`](Counting).
        fn arrival_time_bound(_state: &Self::State) -> u64 {
            u64::MAX
        }
    }

    /// The next version after `version`, for a state whose receipts become
    /// void.
    pub(crate) fn next_version(version: u32) -> u32 {
        version.wrapping_add(1)
    }
}

use sealed::{Align32, Align64, Counting, Credit, Engine, Evaluation, Packed, next_version};

use std::sync::atomic::AtomicU64;

/// The low 30 bits of an entry's second word hold a count or a GCRA
/// remainder (both at most `MAX_LIMIT`, below 2<sup>30</sup>); the next 32
/// hold the version; bit 63 is the entry's lock.
const LOW_BITS: u32 = 30;
const LOW_MASK: u64 = (1 << LOW_BITS) - 1;

pub(crate) fn pack_low(low: u64, version: u32) -> u64 {
    (low & LOW_MASK) | (u64::from(version) << LOW_BITS)
}

pub(crate) fn unpack_low(word: u64) -> (u64, u32) {
    // Masked to 32 bits, so the conversion cannot fail.
    let version = u32::try_from((word >> LOW_BITS) & u64::from(u32::MAX)).unwrap_or(0);
    (word & LOW_MASK, version)
}

/// The algorithm a [`Store`](crate::Store) runs; implemented by [`FixedWindow`],
/// [`SlidingWindow`] and [`Gcra`].
pub trait Algorithm: Engine + fmt::Debug {}

/// Anchored fixed windows for [`FixedWindowPolicy`]: see
/// [`MemoryStore`](crate::MemoryStore).
#[derive(Debug, Clone, Copy)]
pub struct FixedWindow;

/// The generic cell rate algorithm for [`GcraPolicy`]: see
/// [`GcraStore`](crate::GcraStore).
#[derive(Debug, Clone, Copy)]
pub struct Gcra;

/// Sliding windows for [`SlidingWindowPolicy`]: see
/// [`SlidingWindowStore`](crate::SlidingWindowStore).
#[derive(Debug, Clone, Copy)]
pub struct SlidingWindow;

impl Algorithm for FixedWindow {}
impl Algorithm for Gcra {}
impl Algorithm for SlidingWindow {}

fn millis_to_nanos(millis: u64) -> u64 {
    // Policies bound windows to MAX_WINDOW (3.2e10 ms), far below u64::MAX / 1e6.
    millis.saturating_mul(NANOS_PER_MILLI)
}

fn denial_for(capacity: u64, retry_after: Duration) -> Denial {
    Denial::QuotaExceeded {
        capacity,
        retry_after,
    }
}

/// Whether `past + (quota - 1) / quota` ns rounds up to the same whole
/// millisecond as `past`, computed without a second rounding: rounded up to
/// whole nanoseconds, the later distance is one more than `past`'s when
/// `past`'s remainder is zero (and the quota above one) or above one, and the
/// same when it is one; and one more nanosecond reaches another millisecond
/// only from a whole one.
#[inline(always)]
fn latest_rounds_alike(past: ExactNanos, quota: u64) -> bool {
    let one_more = match past.remainder {
        0 => quota > 1,
        1 => false,
        _ => true,
    };
    !one_more || !past.ceil_whole().is_multiple_of(NANOS_PER_MILLI)
}

/// The state of one anchored window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowState {
    expires_at: u64,
    used: u64,
    version: u32,
}

impl Packed for WindowState {
    type Words = [u64; 2];
    type Atomic = [AtomicU64; 2];
    type Align = Align32;

    #[inline]
    fn pack(self) -> [u64; 2] {
        // `used` never exceeds the policy's limit, at most MAX_LIMIT < 2^30.
        [self.expires_at, pack_low(self.used, self.version)]
    }

    #[inline]
    fn unpack([expires_at, second]: [u64; 2]) -> Self {
        let (used, version) = unpack_low(second);
        Self {
            expires_at,
            used,
            version,
        }
    }

    #[inline]
    fn version(&self) -> u32 {
        self.version
    }

    #[inline]
    fn with_version(self, version: u32) -> Self {
        Self { version, ..self }
    }
}

impl Engine for FixedWindow {
    type State = WindowState;
    type Policy = FixedWindowPolicy;
    const ISSUER: &'static str = "runlimit-memory/fixed_window";
    const DENIES_WITHOUT_LOCK: bool = true;
    type Admitted = Decision;

    #[inline(always)]
    fn evaluate(
        policy: &FixedWindowPolicy,
        state: Option<WindowState>,
        cost: u64,
        now: u64,
    ) -> Evaluation<WindowState, Decision> {
        // An expired window is the same as no window: the next allowed check
        // anchors a new one (keeping the entry's version).
        let current = match state {
            Some(window) if window.expires_at > now => window,
            _ => WindowState {
                expires_at: now.saturating_add(millis_to_nanos(policy.window_millis())),
                used: 0,
                version: state.map_or(0, |window| window.version),
            },
        };
        let limit = policy.limit();
        let remaining_before = limit.saturating_sub(current.used);
        let left = Duration::from_nanos(current.expires_at - now);
        if cost > remaining_before {
            return Evaluation::Denied(denial_for(limit, left));
        }
        let used = current.used + cost;
        // remaining <= limit by construction.
        let decision = Decision::allowed(limit, limit - used, left)
            .unwrap_or_else(|_| unreachable!("remaining never exceeds a valid limit"));
        Evaluation::Allowed {
            admitted: decision,
            next: WindowState { used, ..current },
        }
    }

    #[inline(always)]
    fn decision(_policy: &FixedWindowPolicy, decision: Decision) -> Decision {
        decision
    }

    /// Why a mixed pair still gives the locked path's denial. The last word
    /// (count and version) is that of a state D committed while the words
    /// were read; the expiry read before it was stored by D or an earlier
    /// commit C, the expiry read after it by D or a later commit D', and the
    /// two agree. A denial needs a live window and a count of at least one
    /// (costs above the limit go to the locked path). Expiries never shrink
    /// from one commit to the next except at a reset, and a count of at least
    /// one after a reset means a window anchored since, which ends no earlier
    /// than C's (shard time never goes back, and the key's window length is
    /// its policy's): so D's expiry is at least C's. Between D and D' no reset
    /// ran (the version read twice held), so D's expiry is at most D'’s. Both
    /// equal the expiry read: the pair is D's state, and the retry time is its
    /// window's end, as the locked path reports it.
    #[inline(always)]
    fn deny_from_words(
        policy: &FixedWindowPolicy,
        words: (u64, u64),
        cost: u64,
        now: u64,
    ) -> Option<Denial> {
        let window = WindowState::unpack([words.0, words.1]);
        let limit = policy.limit();
        (cost <= limit && window.expires_at > now && window.used + cost > limit)
            .then(|| denial_for(limit, Duration::from_nanos(window.expires_at - now)))
    }

    fn deadline(state: &WindowState) -> u64 {
        state.expires_at
    }

    fn peek(
        policy: &FixedWindowPolicy,
        state: Option<WindowState>,
        cost: u64,
        now: u64,
    ) -> Decision {
        let (used, left) = match state {
            Some(window) if window.expires_at > now && window.used > 0 => {
                (window.used, Duration::from_nanos(window.expires_at - now))
            }
            // No live window: the whole quota is free now.
            _ => (0, Duration::ZERO),
        };
        policy.peek_decision(used, left, cost)
    }

    fn stamp(state: &WindowState) -> [u64; 3] {
        [state.expires_at, state.used, u64::from(state.version)]
    }

    /// Gives `cost` back to the window the admission was counted in, if that
    /// window is still the live one and no reset or re-anchoring has voided
    /// the receipt:
    ///
    /// * if nothing else remains in the window, the window is forgotten, so
    ///   the next check anchors a new one exactly as if the refunded check had
    ///   never been admitted;
    /// * if the refunded check started the window and later checks remain in
    ///   it, the window those later checks would have started is unknown (it
    ///   began at the first of them, some time before now), so the window is
    ///   moved to end one window after now, never earlier than it would have,
    ///   and the version changes, voiding the other receipts of the window,
    ///   which credit nothing afterwards;
    /// * otherwise `cost` is subtracted and the window keeps its anchor: the
    ///   state is exactly what it would have been without the refunded check.
    fn refund(
        policy: &FixedWindowPolicy,
        state: WindowState,
        [expires_at, used_after, version]: [u64; 3],
        cost: u64,
        now: u64,
    ) -> Credit<WindowState> {
        if u64::from(state.version) != version
            || state.expires_at != expires_at
            || state.expires_at <= now
            || state.used == 0
        {
            return Credit::Nothing;
        }
        if state.used <= cost {
            return Credit::To(Self::forget(state, now));
        }
        if used_after == cost {
            return Credit::To(WindowState {
                expires_at: now
                    .saturating_add(millis_to_nanos(policy.window_millis()))
                    .max(state.expires_at),
                used: state.used - cost,
                version: next_version(state.version),
            });
        }
        Credit::To(WindowState {
            used: state.used - cost,
            ..state
        })
    }

    fn forget(state: WindowState, now: u64) -> WindowState {
        WindowState {
            expires_at: now.min(state.expires_at),
            used: 0,
            version: next_version(state.version),
        }
    }
    fn carry_source(policy: PolicyKind<'_>, state: &WindowState) -> Option<StateNanos> {
        matches!(policy, PolicyKind::FixedWindow(_)).then_some(CounterState::FixedWindow {
            used: state.used,
            expires_at: state.expires_at,
        })
    }

    fn overflow_counting(policy: &FixedWindowPolicy) -> Counting {
        Counting::Window {
            limit: policy.limit(),
            window: millis_to_nanos(policy.window_millis()),
        }
    }

    fn carried(_policy: &FixedWindowPolicy, state: StateNanos) -> Option<WindowState> {
        match state {
            CounterState::FixedWindow { used, expires_at } => Some(WindowState {
                expires_at,
                used,
                version: 0,
            }),
            _ => None,
        }
    }
}

/// Whether a check certainly fits the tolerance when the arrival time's whole
/// part is `whole` (any remainder): even with a whole nanosecond for the
/// remainders, the new arrival time lies no further ahead of `now` than the
/// tolerance's whole part. Whole nanoseconds only, so a handful of
/// instructions where the exact comparison takes several dozen.
#[inline(always)]
fn clearly_within_tolerance(whole: u64, now: u64, check: &GcraNanos) -> bool {
    whole
        .saturating_sub(now)
        .saturating_add(check.increment.whole)
        .saturating_add(1)
        <= check.tolerance.whole
}

/// [`Gcra::evaluate`] for any policy: the arrival time and every quantity
/// compared with it in whole nanoseconds plus a remainder in units of
/// `1 / quota` of a nanosecond, so no policy rounds.
#[inline(always)]
fn evaluate_exact(
    policy: &GcraPolicy,
    check: &GcraNanos,
    state: Option<GcraState>,
    now: u64,
) -> Evaluation<GcraState, ExactNanos> {
    let now = ExactNanos::from_whole(now);
    let start = state.map_or(now, |state| state.tat.max(now));
    let tat = start.saturating_add(check.increment, check.quota);
    let ahead = tat.saturating_sub(now, check.quota);
    if ahead > check.tolerance {
        let past_tolerance = ahead.saturating_sub(check.tolerance, check.quota);
        return Evaluation::Denied(denial_for(
            policy.burst_capacity(),
            past_tolerance.ceil_millis(),
        ));
    }
    Evaluation::Allowed {
        admitted: ahead,
        next: GcraState {
            tat,
            version: state.map_or(0, |state| state.version),
        },
    }
}

/// [`Gcra::evaluate`] in whole nanoseconds, when every quantity it adds and
/// compares is whole: the policy's period divided by its quota is a whole
/// number of nanoseconds (a hundred a minute, ten a second: most policies),
/// so the increment, the tolerance and every stored arrival time have no
/// remainder.
/// The same answers as the exact arithmetic (property-tested), in a fraction
/// of its instructions; `None` for any remainder.
#[inline(always)]
fn evaluate_whole(
    policy: &GcraPolicy,
    check: &GcraNanos,
    state: Option<GcraState>,
    now: u64,
) -> Option<Evaluation<GcraState, ExactNanos>> {
    let stored_remainder = state.map_or(0, |state| state.tat.remainder);
    if check.increment.remainder | check.tolerance.remainder | stored_remainder != 0 {
        return None;
    }
    let start = state.map_or(now, |state| state.tat.whole.max(now));
    let tat = start.saturating_add(check.increment.whole);
    // `start` is never before now.
    let ahead = tat - now;
    if ahead > check.tolerance.whole {
        return Some(Evaluation::Denied(denial_for(
            policy.burst_capacity(),
            ExactNanos::from_whole(ahead - check.tolerance.whole).ceil_millis(),
        )));
    }
    Some(Evaluation::Allowed {
        admitted: ExactNanos::from_whole(ahead),
        next: GcraState {
            tat: ExactNanos::from_whole(tat),
            version: state.map_or(0, |state| state.version),
        },
    })
}

/// How far past the tolerance a check lands when the arrival time is `whole`
/// nanoseconds exactly; `None` within it.
#[inline(always)]
fn past_tolerance_exact(whole: u64, now: u64, check: &GcraNanos) -> Option<ExactNanos> {
    let now = ExactNanos::from_whole(now);
    let tat = ExactNanos::from_whole(whole)
        .max(now)
        .saturating_add(check.increment, check.quota);
    let ahead = tat.saturating_sub(now, check.quota);
    (ahead > check.tolerance).then(|| ahead.saturating_sub(check.tolerance, check.quota))
}

/// [`past_tolerance_exact`] in whole nanoseconds, for a check whose
/// increment and tolerance are whole (see [`evaluate_whole`]): the same
/// answer (property-tested) without carries and borrows.
#[inline(always)]
fn past_tolerance_whole(whole: u64, now: u64, check: &GcraNanos) -> Option<ExactNanos> {
    let ahead = whole.max(now).saturating_add(check.increment.whole) - now;
    (ahead > check.tolerance.whole).then(|| ExactNanos::from_whole(ahead - check.tolerance.whole))
}

/// [`Gcra::deny_from_words`] for any check, once the allowed shortcut has
/// passed it on: the denial of the earliest arrival time with this whole
/// part, when the latest rounds to the same millisecond.
#[inline(always)]
fn deny_exact(policy: &GcraPolicy, whole: u64, now: u64, check: &GcraNanos) -> Option<Denial> {
    let past_tolerance = past_tolerance_exact(whole, now, check)?;
    // The latest lies (quota - 1) / quota of a nanosecond later, and so
    // does its distance past the tolerance, unless now is later than both.
    if whole >= now && !latest_rounds_alike(past_tolerance, check.quota) {
        return None;
    }
    Some(denial_for(
        policy.burst_capacity(),
        past_tolerance.ceil_millis(),
    ))
}

/// [`deny_exact`] for a check whose increment and tolerance are whole (see
/// [`evaluate_whole`]): the same answer (property-tested) with one division
/// into whole milliseconds where the general path rounds twice.
#[inline(always)]
fn deny_whole(policy: &GcraPolicy, whole: u64, now: u64, check: &GcraNanos) -> Option<Denial> {
    let past = past_tolerance_whole(whole, now, check)?.whole;
    let (millis, below_a_milli) = (past / NANOS_PER_MILLI, past % NANOS_PER_MILLI);
    // The latest arrival time with this whole part lies up to
    // (quota - 1) / quota of a nanosecond later: past another whole
    // millisecond only when this one lands on one (see `latest_rounds_alike`).
    if whole >= now && check.quota > 1 && below_a_milli == 0 {
        return None;
    }
    Some(denial_for(
        policy.burst_capacity(),
        Duration::from_millis(millis + u64::from(below_a_milli != 0)),
    ))
}

/// The theoretical arrival time of one GCRA key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcraState {
    tat: ExactNanos,
    version: u32,
}

impl GcraState {
    /// A key whose theoretical arrival time is `tat` whole nanoseconds.
    pub(crate) fn at(tat: u64) -> Self {
        Self {
            tat: ExactNanos::from_whole(tat),
            version: 0,
        }
    }

    /// An upper bound of the theoretical arrival time, in whole nanoseconds.
    pub(crate) fn arrival_time_bound(&self) -> u64 {
        self.tat.ceil_whole()
    }
}

impl Packed for GcraState {
    type Words = [u64; 2];
    type Atomic = [AtomicU64; 2];
    type Align = Align32;

    #[inline]
    fn pack(self) -> [u64; 2] {
        // The remainder is below the quota, at most MAX_LIMIT < 2^30.
        [self.tat.whole, pack_low(self.tat.remainder, self.version)]
    }

    #[inline]
    fn unpack([whole, second]: [u64; 2]) -> Self {
        let (remainder, version) = unpack_low(second);
        Self {
            tat: ExactNanos { whole, remainder },
            version,
        }
    }

    #[inline]
    fn version(&self) -> u32 {
        self.version
    }

    #[inline]
    fn with_version(self, version: u32) -> Self {
        Self { version, ..self }
    }
}

impl Engine for Gcra {
    type State = GcraState;
    type Policy = GcraPolicy;
    const ISSUER: &'static str = "runlimit-memory/gcra";
    const DENIES_WITHOUT_LOCK: bool = true;
    /// How far the new arrival time lies ahead of now, within the tolerance.
    type Admitted = ExactNanos;

    #[inline(always)]
    fn evaluate(
        policy: &GcraPolicy,
        state: Option<GcraState>,
        cost: u64,
        now: u64,
    ) -> Evaluation<GcraState, ExactNanos> {
        let check = GcraNanos::new(policy, cost);
        evaluate_whole(policy, &check, state, now)
            .unwrap_or_else(|| evaluate_exact(policy, &check, state, now))
    }

    /// The units left and the time to full replenishment: the division the
    /// units need runs after the state is stored.
    #[inline(always)]
    fn decision(policy: &GcraPolicy, ahead: ExactNanos) -> Decision {
        // The outcome's quantities do not depend on the cost.
        match GcraNanos::new(policy, 1).outcome(ahead) {
            Ok((remaining, reset_after)) => {
                Decision::allowed(policy.burst_capacity(), remaining, reset_after)
                    .unwrap_or_else(|_| unreachable!("remaining never exceeds the burst"))
            }
            Err(_) => unreachable!("an allowed check lies within the tolerance"),
        }
    }

    /// Decided from the first word alone, the arrival time's whole
    /// nanoseconds, stored by a commit that ran while the words were read;
    /// the remainder (below a nanosecond) may be another commit's, so it is
    /// not used. A later arrival time never denies less, so if the earliest
    /// arrival time with this whole part denies, that commit's state did; its
    /// retry time is taken only when the earliest and the latest arrival
    /// times with this whole part round to the same millisecond.
    #[inline(always)]
    fn deny_from_words(
        policy: &GcraPolicy,
        (whole, _): (u64, u64),
        cost: u64,
        now: u64,
    ) -> Option<Denial> {
        let check = GcraNanos::new(policy, cost);
        // The common allowed check stops here, before the exact arithmetic
        // its locked evaluation repeats.
        if clearly_within_tolerance(whole, now, &check) {
            return None;
        }
        // The earliest arrival time with this whole part, decided as
        // `GcraExact::outcome` decides a denial (without the units an allowed
        // check would report).
        if check.increment.remainder | check.tolerance.remainder == 0 {
            deny_whole(policy, whole, now, &check)
        } else {
            deny_exact(policy, whole, now, &check)
        }
    }

    fn deadline(state: &GcraState) -> u64 {
        state.tat.ceil_whole()
    }

    fn peek(policy: &GcraPolicy, state: Option<GcraState>, cost: u64, now: u64) -> Decision {
        let check = GcraNanos::new(policy, cost);
        let now = ExactNanos::from_whole(now);
        let ahead = state
            .map_or(now, |state| state.tat.max(now))
            .saturating_sub(now, check.quota);
        check.peek_decision(policy, ahead)
    }

    fn stamp(state: &GcraState) -> [u64; 3] {
        [
            state.tat.whole,
            state.tat.remainder,
            u64::from(state.version),
        ]
    }

    /// Gives back what is left of the admission's own replenishment, while it
    /// is still the latest admission (the arrival time is the receipt's): its
    /// increment lies at the end of the arrival time, and time since has
    /// replenished the earliest part first, so `min(increment, tat - now)` is
    /// credited (nothing once the arrival time has passed). An admission that
    /// later ones queued behind credits nothing: crediting it would move
    /// their increments earlier, and a unit a lease holds for one of those
    /// increments could then be admitted after its increment began. The
    /// credit never exceeds what a replay without the refunded admission
    /// would leave.
    fn refund(
        policy: &GcraPolicy,
        state: GcraState,
        [whole, remainder, version]: [u64; 3],
        cost: u64,
        now: u64,
    ) -> Credit<GcraState> {
        let admitted = ExactNanos { whole, remainder };
        if u64::from(state.version) != version || state.tat != admitted {
            return Credit::Nothing;
        }
        let check = GcraNanos::new(policy, cost);
        let credit = admitted
            .saturating_sub(ExactNanos::from_whole(now), check.quota)
            .min(check.increment);
        if credit == ExactNanos::from_whole(0) {
            return Credit::Nothing;
        }
        Credit::To(GcraState {
            tat: state.tat.saturating_sub(credit, check.quota),
            version: state.version,
        })
    }

    fn forget(state: GcraState, _now: u64) -> GcraState {
        GcraState {
            tat: ExactNanos::from_whole(0),
            version: next_version(state.version),
        }
    }
    fn carry_source(policy: PolicyKind<'_>, state: &GcraState) -> Option<StateNanos> {
        matches!(policy, PolicyKind::Gcra(_)).then_some(CounterState::Gcra { arrival: state.tat })
    }

    fn overflow_counting(_policy: &GcraPolicy) -> Counting {
        Counting::ArrivalTime
    }

    fn from_arrival_time(tat: u64) -> Option<GcraState> {
        Some(GcraState::at(tat))
    }

    fn arrival_time_bound(state: &GcraState) -> u64 {
        state.arrival_time_bound()
    }

    fn carried(_policy: &GcraPolicy, state: StateNanos) -> Option<GcraState> {
        match state {
            CounterState::Gcra { arrival } => Some(GcraState {
                tat: arrival,
                version: 0,
            }),
            _ => None,
        }
    }
}

/// The counts of one sliding-window key: units admitted in each of the nine
/// eighths of a window ending with the eighth of its latest admission, and
/// when they all stop counting (a multiple of the policy's eighth, from which
/// that eighth's number follows). Six words: a 64-byte entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingState {
    expires_at: u64,
    counts: [u64; COUNTED],
    version: u32,
}

impl SlidingState {
    fn buckets(&self, exact: &SlidingNanos) -> Buckets {
        Buckets {
            latest_start: exact.latest_start_of(self.expires_at),
            counts: self.counts,
        }
    }

    fn from_buckets(exact: &SlidingNanos, buckets: Buckets, version: u32) -> Self {
        Self {
            expires_at: exact.expiry_of(buckets.latest_start),
            counts: buckets.counts,
            version,
        }
    }
}

impl Packed for SlidingState {
    type Words = [u64; 6];
    type Atomic = [AtomicU64; 6];
    type Align = Align64;

    #[inline]
    fn pack(self) -> [u64; 6] {
        // Every count is at most the limit, at most MAX_LIMIT < 2^30.
        let pair = |index: usize| self.counts[index] | (self.counts[index + 1] << LOW_BITS);
        [
            self.expires_at,
            pair(0),
            pair(2),
            pair(4),
            pair(6),
            pack_low(self.counts[8], self.version),
        ]
    }

    #[inline]
    fn unpack(words: [u64; 6]) -> Self {
        let mut counts = [0; COUNTED];
        for pair in 0..4 {
            counts[2 * pair] = words[pair + 1] & LOW_MASK;
            counts[2 * pair + 1] = (words[pair + 1] >> LOW_BITS) & LOW_MASK;
        }
        let (last, version) = unpack_low(words[5]);
        counts[8] = last;
        Self {
            expires_at: words[0],
            counts,
            version,
        }
    }

    #[inline]
    fn version(&self) -> u32 {
        self.version
    }

    #[inline]
    fn with_version(self, version: u32) -> Self {
        Self { version, ..self }
    }
}

impl Engine for SlidingWindow {
    type State = SlidingState;
    type Policy = SlidingWindowPolicy;
    const ISSUER: &'static str = "runlimit-memory/sliding_window";

    type Admitted = Decision;

    #[inline(always)]
    fn evaluate(
        policy: &SlidingWindowPolicy,
        state: Option<SlidingState>,
        cost: u64,
        now: u64,
    ) -> Evaluation<SlidingState, Decision> {
        let exact = SlidingNanos::new(policy);
        // The common case in place, without copying the counts around.
        if let Some(mut state) = state
            && let Some(decision) = exact.admit_in_latest(
                exact.latest_start_of(state.expires_at),
                &state.counts,
                cost,
                now,
            )
        {
            state.counts[0] += cost;
            return Evaluation::Allowed {
                admitted: decision,
                next: state,
            };
        }
        let version = state.map_or(0, |state| state.version);
        match exact.admit(state.map(|state| state.buckets(&exact)), cost, now) {
            SlidingOutcome::Denied(denial) => Evaluation::Denied(denial),
            SlidingOutcome::Allowed { decision, next } => Evaluation::Allowed {
                admitted: decision,
                next: SlidingState::from_buckets(&exact, next, version),
            },
        }
    }

    #[inline(always)]
    fn decision(_policy: &SlidingWindowPolicy, decision: Decision) -> Decision {
        decision
    }

    fn deadline(state: &SlidingState) -> u64 {
        state.expires_at
    }

    fn peek(
        policy: &SlidingWindowPolicy,
        state: Option<SlidingState>,
        cost: u64,
        now: u64,
    ) -> Decision {
        let exact = SlidingNanos::new(policy);
        exact.peek_decision(policy, state.map(|state| state.buckets(&exact)), cost, now)
    }

    fn stamp(state: &SlidingState) -> [u64; 3] {
        // The eighth the admission counted in: the state's latest.
        [state.expires_at, u64::from(state.version), 0]
    }

    /// Gives `cost` back to the eighth the admission was counted in, while that
    /// eighth still counts: the counts are then exactly those without the
    /// refunded check, so no version changes.
    fn refund(
        policy: &SlidingWindowPolicy,
        state: SlidingState,
        [expires_at, version, _]: [u64; 3],
        cost: u64,
        now: u64,
    ) -> Credit<SlidingState> {
        if u64::from(state.version) != version {
            return Credit::Nothing;
        }
        let exact = SlidingNanos::new(policy);
        match exact.refund(
            state.buckets(&exact),
            exact.latest_start_of(expires_at),
            cost,
            now,
        ) {
            Some(next) => Credit::To(SlidingState::from_buckets(&exact, next, state.version)),
            None => Credit::Nothing,
        }
    }

    fn forget(state: SlidingState, _now: u64) -> SlidingState {
        SlidingState {
            expires_at: 0,
            counts: [0; COUNTED],
            version: next_version(state.version),
        }
    }
    fn carry_source(policy: PolicyKind<'_>, state: &SlidingState) -> Option<StateNanos> {
        match policy {
            PolicyKind::SlidingWindow(policy) => Some(CounterState::SlidingWindow(
                state.buckets(&SlidingNanos::new(policy)),
            )),
            _ => None,
        }
    }

    fn overflow_counting(policy: &SlidingWindowPolicy) -> Counting {
        Counting::Window {
            limit: policy.limit(),
            window: millis_to_nanos(policy.window_millis()),
        }
    }

    fn carried(policy: &SlidingWindowPolicy, state: StateNanos) -> Option<SlidingState> {
        match state {
            CounterState::SlidingWindow(buckets) => Some(SlidingState::from_buckets(
                &SlidingNanos::new(policy),
                buckets,
                0,
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use runlimit_core::{PolicyId, ScopeId};

    use super::*;

    const MS: u64 = NANOS_PER_MILLI;
    #[allow(clippy::cast_possible_wrap)]
    const MS_SIGNED: i64 = NANOS_PER_MILLI as i64;

    fn gcra(quota: u64, period_ms: u64, burst: u64) -> GcraPolicy {
        GcraPolicy::new(
            PolicyId::new("p").expect("valid"),
            ScopeId::new("s").expect("valid"),
            quota,
            Duration::from_millis(period_ms),
            burst,
        )
        .expect("valid")
    }

    /// A GCRA policy and a check of it, whose increment is a whole number of
    /// nanoseconds in many cases and has a fraction in many others.
    fn policy_and_check() -> impl proptest::strategy::Strategy<Value = (GcraPolicy, GcraNanos)> {
        use proptest::strategy::Strategy;
        (
            proptest::prop_oneof![1u64..4, 1u64..=1_000, 1u64..=runlimit_core::MAX_LIMIT],
            proptest::prop_oneof![1u64..10, 1u64..100_000],
            1u64..1_000,
            1u64..10,
        )
            .prop_map(|(quota, period_ms, burst, cost)| {
                let policy = gcra(quota, period_ms, burst);
                let check = GcraNanos::new(&policy, cost.min(burst));
                (policy, check)
            })
    }

    /// Where an arrival time lies for [`arrival_time`]: a boundary offset
    /// (two nanoseconds either way), or a distance from now.
    fn arrival_offsets() -> impl proptest::strategy::Strategy<Value = (Option<i64>, i64)> {
        (
            proptest::option::of(-2i64..=2),
            -3_000_000_000i64..3_000_000_000,
        )
    }

    /// An arrival time for `check` at `now`: with a boundary offset, one
    /// that puts the check within that many nanoseconds of the tolerance;
    /// otherwise `ahead_ns` from now.
    fn arrival_time(
        now: u64,
        check: &GcraNanos,
        boundary_offset: Option<i64>,
        ahead_ns: i64,
    ) -> u64 {
        match boundary_offset {
            Some(offset) => (now + check.tolerance.whole)
                .saturating_sub(check.increment.whole)
                .saturating_add_signed(offset),
            None => now.saturating_add_signed(ahead_ns),
        }
    }

    fn run(policy: &GcraPolicy, state: &mut Option<GcraState>, cost: u64, now: u64) -> Decision {
        match Gcra::evaluate(policy, *state, cost, now) {
            Evaluation::Allowed { admitted, next } => {
                *state = Some(next);
                Gcra::decision(policy, admitted)
            }
            Evaluation::Denied(denial) => Decision::denied(denial),
        }
    }

    proptest::proptest! {
        /// A denial read from the first word alone is the denial the locked
        /// path gives against the whole state, arrival times behind now
        /// included.
        #[test]
        fn lock_free_gcra_denials_are_the_states_denials(
            quota in 1u64..1_000,
            period_ms in 1u64..100_000,
            burst in 1u64..1_000,
            tat_ahead_ms in -2_000i64..200_000,
            tat_ahead_ns in -3i64..=3,
            remainder_seed in proptest::prelude::any::<u64>(),
            now_ms in 0u64..1_000,
            cost in 1u64..10,
            whole_burst in proptest::prelude::any::<bool>(),
        ) {
            let policy = gcra(quota, period_ms, burst);
            // A check of the whole burst waits exactly as long as the arrival
            // time is ahead: with whole milliseconds ahead, the remainders
            // straddle a millisecond of retry time.
            let cost = if whole_burst { burst } else { cost.min(burst) };
            let now = now_ms * MS;
            let whole = now.saturating_add_signed(tat_ahead_ms * MS_SIGNED + tat_ahead_ns);
            let state = GcraState {
                tat: ExactNanos { whole, remainder: remainder_seed % quota },
                version: 7,
            };
            let fast = Gcra::deny_from_words(&policy, (state.pack()[0], state.pack()[1]), cost, now);
            if let Some(denial) = fast {
                match Gcra::evaluate(&policy, Some(state), cost, now) {
                    Evaluation::Denied(locked) => proptest::prop_assert_eq!(denial, locked),
                    Evaluation::Allowed { .. } => proptest::prop_assert!(false, "allowed"),
                }
            }
        }
    }

    proptest::proptest! {
        /// The whole-nanosecond evaluation answers exactly as the exact
        /// arithmetic does wherever it answers, and answers for every state
        /// of a policy whose increment and tolerance are whole nanoseconds.
        #[test]
        fn whole_nanosecond_evaluation_is_the_exact_evaluation(
            (policy, check) in policy_and_check(),
            (offset, tat_ahead_ns) in arrival_offsets(),
            stored in proptest::prelude::any::<bool>(),
            remainder_seed in proptest::prelude::any::<u64>(),
            whole_remainder in proptest::prelude::any::<bool>(),
            now_ms in 0u64..1_000,
        ) {
            let now = now_ms * MS;
            let whole = arrival_time(now, &check, offset, tat_ahead_ns);
            let state = stored.then(|| GcraState {
                tat: ExactNanos {
                    whole,
                    remainder: if whole_remainder { 0 } else { remainder_seed % check.quota },
                },
                version: 3,
            });
            let exact = evaluate_exact(&policy, &check, state, now);
            match evaluate_whole(&policy, &check, state, now) {
                Some(whole) => proptest::prop_assert_eq!(whole, exact),
                None => proptest::prop_assert!(
                    check.increment.remainder != 0
                        || check.tolerance.remainder != 0
                        || state.is_some_and(|state| state.tat.remainder != 0)
                ),
            }
        }

        /// The whole-nanosecond distance past the tolerance is the exact one
        /// for every check whose increment and tolerance are whole.
        #[test]
        fn whole_nanosecond_denial_distance_is_the_exact_one(
            (_policy, check) in policy_and_check(),
            (offset, tat_ahead_ns) in arrival_offsets(),
            now_ms in 0u64..1_000,
        ) {
            proptest::prop_assume!(check.increment.remainder | check.tolerance.remainder == 0);
            let now = now_ms * MS;
            let whole = arrival_time(now, &check, offset, tat_ahead_ns);
            proptest::prop_assert_eq!(
                past_tolerance_whole(whole, now, &check),
                past_tolerance_exact(whole, now, &check)
            );
        }

        /// The whole-nanosecond lock-free denial is the general one: the
        /// exact distance past the tolerance, withheld when the latest
        /// arrival time with this whole part would round to another
        /// millisecond. Arrival times on whole milliseconds past the
        /// tolerance included, where the two differ if either is wrong.
        #[test]
        fn whole_nanosecond_lock_free_denial_is_the_general_one(
            (policy, check) in policy_and_check(),
            (offset, tat_ahead_ns) in arrival_offsets(),
            past_whole_ms in 0u64..5,
            on_a_milli in proptest::prelude::any::<bool>(),
            now_ms in 0u64..1_000,
        ) {
            proptest::prop_assume!(check.increment.remainder | check.tolerance.remainder == 0);
            let now = now_ms * MS;
            let whole = if on_a_milli {
                // Lands exactly `past_whole_ms` whole milliseconds past the tolerance.
                (now + check.tolerance.whole + past_whole_ms * MS)
                    .saturating_sub(check.increment.whole)
            } else {
                arrival_time(now, &check, offset, tat_ahead_ns)
            };
            proptest::prop_assert_eq!(
                deny_whole(&policy, whole, now, &check),
                deny_exact(&policy, whole, now, &check)
            );
        }

        /// What the lock-free denial's shortcut for allowed checks passes,
        /// the exact arithmetic allows for the earliest arrival time with
        /// that whole part, so the shortcut never changes the lock-free
        /// answer; arrival times at and around its boundary included.
        #[test]
        fn the_allowed_shortcut_passes_only_allowed_checks(
            (policy, check) in policy_and_check(),
            below_boundary in 0u64..4,
            now_ms in 0u64..1_000,
        ) {
            let now = now_ms * MS;
            // The arrival time whose distance ahead, plus the increment,
            // lands `below_boundary` nanoseconds under the tolerance.
            let Some(whole) = (now + check.tolerance.whole)
                .checked_sub(check.increment.whole + below_boundary)
            else {
                return Ok(());
            };
            if clearly_within_tolerance(whole, now, &check) {
                let earliest = GcraState { tat: ExactNanos::from_whole(whole), version: 0 };
                let allowed = matches!(
                    evaluate_exact(&policy, &check, Some(earliest), now),
                    Evaluation::Allowed { .. }
                );
                proptest::prop_assert!(allowed, "the shortcut passed a denied check");
            }
        }

        /// The shortcut that tells whether the latest arrival time with a
        /// whole part rounds like the earliest is the rounding itself.
        #[test]
        fn latest_rounding_shortcut_is_exact(
            quota in proptest::prop_oneof![1u64..4, 1u64..=runlimit_core::MAX_LIMIT],
            millis in 0u64..1_000_000,
            offset in -3i64..=3,
            // The remainders the shortcut tells apart, then any.
            remainder_pick in 0u8..5,
            remainder_seed in proptest::prelude::any::<u64>(),
        ) {
            let remainder = match remainder_pick {
                0 => 0,
                1 => 1,
                2 => 2,
                3 => quota - 1,
                _ => remainder_seed,
            } % quota;
            let past = ExactNanos {
                whole: (millis * MS).saturating_add_signed(offset),
                remainder,
            };
            let latest = past.saturating_add(ExactNanos { whole: 0, remainder: quota - 1 }, quota);
            proptest::prop_assert_eq!(
                latest_rounds_alike(past, quota),
                latest.ceil_millis() == past.ceil_millis()
            );
        }
    }

    proptest::proptest! {
        /// A fixed-window denial read without the lock is the locked path's.
        #[test]
        fn lock_free_window_denials_are_the_states_denials(
            limit in 1u64..100,
            window_ms in 1u64..100_000,
            used_seed in proptest::prelude::any::<u64>(),
            expires_at in 0u64..200_000 * MS,
            now in 0u64..200_000 * MS,
            cost in 1u64..200,
        ) {
            let policy = FixedWindowPolicy::new(
                PolicyId::new("p").expect("valid"),
                ScopeId::new("s").expect("valid"),
                limit,
                Duration::from_millis(window_ms),
            )
            .expect("valid");
            let state = WindowState { expires_at, used: used_seed % (limit + 1), version: 3 };
            let [first, last] = state.pack();
            if let Some(denial) = FixedWindow::deny_from_words(&policy, (first, last), cost, now) {
                match FixedWindow::evaluate(&policy, Some(state), cost, now) {
                    Evaluation::Denied(locked) => proptest::prop_assert_eq!(denial, locked),
                    Evaluation::Allowed { .. } => proptest::prop_assert!(false, "allowed"),
                }
            }
        }
    }

    #[test]
    fn a_gcra_denial_without_the_lock_needs_every_remainder_to_agree() {
        // 3 per second, burst 1: the increment and the tolerance are a third
        // of a second, so a check waits as long as the arrival time is ahead.
        let policy = gcra(3, 1_000, 1);
        let third = 1_000 * MS / 3;
        // Two thirds of a second ahead (less a fraction): 667 ms whatever the
        // remainder.
        assert_eq!(
            Gcra::deny_from_words(&policy, (2 * third, 0), 1, 0),
            Some(denial_for(1, Duration::from_millis(667)))
        );
        // Exactly at now: allowed, so the locked path decides.
        assert_eq!(Gcra::deny_from_words(&policy, (0, 0), 1, 0), None);
        // A whole part whose remainders straddle a millisecond boundary: the
        // retry time depends on the remainder, so the locked path decides.
        let straddling = 1_002 * MS;
        assert_eq!(
            Gcra::deny_from_words(&policy, (straddling, 0), 1, 0),
            None,
            "the earliest and latest arrival times round to different milliseconds"
        );
    }

    #[test]
    fn gcra_burst_then_spacing() {
        // 10 per second, burst 20: 20 immediately, then one every 100 ms.
        let policy = gcra(10, 1_000, 20);
        let mut state = None;
        for expected_remaining in (0..20).rev() {
            let decision = run(&policy, &mut state, 1, 0);
            assert_eq!(decision.remaining(), Some(expected_remaining));
        }
        let denied = run(&policy, &mut state, 1, 0);
        assert_eq!(denied.retry_after(), Some(Duration::from_millis(100)));
        let denied = run(&policy, &mut state, 1, 99 * MS);
        assert_eq!(denied.retry_after(), Some(Duration::from_millis(1)));
        let allowed = run(&policy, &mut state, 1, 100 * MS);
        assert_eq!(allowed.remaining(), Some(0));
        assert_eq!(allowed.reset_after(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn gcra_thirds_of_a_millisecond_stay_exact() {
        // 3 per 1 ms: each unit costs 333_333.33… ns.
        let policy = gcra(3, 1, 1);
        let mut state = None;
        assert!(run(&policy, &mut state, 1, 0).is_allowed());
        let denied = run(&policy, &mut state, 1, 333_333);
        // 1/3 ns short; rounded up to one whole millisecond.
        assert_eq!(denied.retry_after(), Some(Duration::from_millis(1)));
        assert!(run(&policy, &mut state, 1, 333_334).is_allowed());

        // Three units of 333_333⅓ ns add up to exactly 1 ms: no drift.
        let policy = gcra(3, 1, 3);
        let mut state = None;
        for _ in 0..3 {
            assert!(run(&policy, &mut state, 1, 0).is_allowed());
        }
        assert_eq!(state.map(|s| s.tat), Some(ExactNanos::from_whole(MS)));
    }

    #[test]
    fn gcra_extreme_policy_stays_in_range() {
        use runlimit_core::{MAX_LIMIT, MAX_WINDOW};
        let period_ms = u64::try_from(MAX_WINDOW.as_millis()).expect("fits");
        let policy = gcra(MAX_LIMIT, period_ms, MAX_LIMIT);
        let mut state = None;
        let decision = run(&policy, &mut state, MAX_LIMIT, u64::MAX / 4);
        assert_eq!(decision.remaining(), Some(0));
        assert_eq!(decision.reset_after(), Some(MAX_WINDOW));
        let denied = run(&policy, &mut state, 1, u64::MAX / 4);
        assert!(denied.is_denied());
    }

    #[test]
    fn packed_states_round_trip_and_leave_the_lock_bit_clear() {
        use runlimit_core::MAX_LIMIT;
        let gcra = GcraState {
            tat: ExactNanos {
                whole: u64::MAX,
                remainder: MAX_LIMIT - 1,
            },
            version: u32::MAX,
        };
        assert_eq!(GcraState::unpack(gcra.pack()), gcra);
        assert_eq!(gcra.pack()[1] >> 63, 0);
        let window = WindowState {
            expires_at: u64::MAX,
            used: MAX_LIMIT,
            version: u32::MAX,
        };
        assert_eq!(WindowState::unpack(window.pack()), window);
        assert_eq!(window.pack()[1] >> 63, 0);
    }

    #[test]
    fn fixed_window_anchors_and_renews() {
        let policy = FixedWindowPolicy::new(
            PolicyId::new("p").expect("valid"),
            ScopeId::new("s").expect("valid"),
            2,
            Duration::from_millis(10),
        )
        .expect("valid");
        let eval = |state, now| FixedWindow::evaluate(&policy, state, 1, now);
        let Evaluation::Allowed {
            next,
            admitted: decision,
        } = eval(None, 5 * MS)
        else {
            panic!("fresh key is allowed");
        };
        assert_eq!(decision.reset_after(), Some(Duration::from_millis(10)));
        assert_eq!(next.expires_at, 15 * MS);
        let Evaluation::Allowed { next, .. } = eval(Some(next), 7 * MS) else {
            panic!("second unit fits");
        };
        let Evaluation::Denied(denial) = eval(Some(next), 14 * MS) else {
            panic!("third unit is denied");
        };
        assert_eq!(denial.retry_after(), Some(Duration::from_millis(1)));
        let Evaluation::Allowed { next, .. } = eval(Some(next), 15 * MS) else {
            panic!("a new window starts at the deadline");
        };
        assert_eq!((next.expires_at, next.used), (25 * MS, 1));
    }
}
