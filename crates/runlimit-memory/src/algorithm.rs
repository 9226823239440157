//! The per-key arithmetic of each algorithm, independent of storage.
//!
//! Time is a `u64` count of nanoseconds since the store's clock origin. Fixed
//! windows report exact durations; GCRA keeps its theoretical arrival time as a
//! whole number of nanoseconds plus a remainder in units of `1 / quota`
//! nanoseconds, so replenishment is exact for any quota and period, and reports
//! durations rounded up to whole milliseconds as the policy documents.

use std::{fmt, time::Duration};

use runlimit_core::{
    Decision, Denial, FixedWindowPolicy, GcraPolicy,
    gcra::{ExactNanos, GcraNanos},
};

const NANOS_PER_MILLI: u64 = 1_000_000;

pub(crate) mod sealed {
    use runlimit_core::{Decision, Denial};

    /// What an algorithm decides for one key, before anything is stored.
    #[derive(Debug)]
    pub enum Evaluation<S> {
        /// Within quota: report `decision` and store `next`.
        Allowed { decision: Decision, next: S },
        /// Over quota: nothing changes.
        Denied(Denial),
    }

    /// A per-key state as the two words an entry stores. The second word stays
    /// below 2<sup>63</sup>: the entry keeps its lock bit there.
    pub trait Packed: Copy {
        /// The state as two words, the second below 2<sup>63</sup>.
        fn pack(self) -> [u64; 2];
        /// The state `pack` returned these words for.
        fn unpack(words: [u64; 2]) -> Self;
    }

    pub trait Engine: Send + Sync + 'static {
        /// Per-key state; constant size.
        type State: Packed + Send + Sync + std::fmt::Debug + 'static;
        type Policy: runlimit_core::Policy;

        /// Decides `cost` units at `now` for a key whose stored state is `state`
        /// (`None` for a key not stored). Never fails: costs are validated by
        /// `Check`, and policy bounds keep the arithmetic in range.
        fn evaluate(
            policy: &Self::Policy,
            state: Option<Self::State>,
            cost: u64,
            now: u64,
        ) -> Evaluation<Self::State>;

        /// When the entry expires: from then on it is equivalent to an absent key
        /// and may be removed. Never decreases while the key is stored.
        fn deadline(state: &Self::State) -> u64;
    }
}

use sealed::{Engine, Evaluation, Packed};

/// The algorithm a [`Store`](crate::Store) runs; implemented by [`FixedWindow`]
/// and [`Gcra`].
pub trait Algorithm: Engine + fmt::Debug {}

/// Anchored fixed windows for [`FixedWindowPolicy`]: see
/// [`MemoryStore`](crate::MemoryStore).
#[derive(Debug, Clone, Copy)]
pub struct FixedWindow;

/// The generic cell rate algorithm for [`GcraPolicy`]: see
/// [`GcraStore`](crate::GcraStore).
#[derive(Debug, Clone, Copy)]
pub struct Gcra;

impl Algorithm for FixedWindow {}
impl Algorithm for Gcra {}

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

/// The state of one anchored window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowState {
    expires_at: u64,
    used: u64,
}

impl Packed for WindowState {
    #[inline]
    fn pack(self) -> [u64; 2] {
        // `used` never exceeds the policy's limit, at most MAX_LIMIT < 2^63.
        [self.expires_at, self.used]
    }

    #[inline]
    fn unpack([expires_at, used]: [u64; 2]) -> Self {
        Self { expires_at, used }
    }
}

impl Engine for FixedWindow {
    type State = WindowState;
    type Policy = FixedWindowPolicy;

    #[inline]
    fn evaluate(
        policy: &FixedWindowPolicy,
        state: Option<WindowState>,
        cost: u64,
        now: u64,
    ) -> Evaluation<WindowState> {
        // An expired window is the same as no window: the next allowed check
        // anchors a new one.
        let current = state
            .filter(|window| window.expires_at > now)
            .unwrap_or(WindowState {
                expires_at: now.saturating_add(millis_to_nanos(policy.window_millis())),
                used: 0,
            });
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
            decision,
            next: WindowState {
                expires_at: current.expires_at,
                used,
            },
        }
    }

    fn deadline(state: &WindowState) -> u64 {
        state.expires_at
    }
}

/// The theoretical arrival time of one GCRA key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcraState {
    tat: ExactNanos,
}

impl Packed for GcraState {
    #[inline]
    fn pack(self) -> [u64; 2] {
        // The remainder is below the quota, at most MAX_LIMIT < 2^63.
        [self.tat.whole, self.tat.remainder]
    }

    #[inline]
    fn unpack([whole, remainder]: [u64; 2]) -> Self {
        Self {
            tat: ExactNanos { whole, remainder },
        }
    }
}

impl Engine for Gcra {
    type State = GcraState;
    type Policy = GcraPolicy;

    #[inline]
    fn evaluate(
        policy: &GcraPolicy,
        state: Option<GcraState>,
        cost: u64,
        now: u64,
    ) -> Evaluation<GcraState> {
        let check = GcraNanos::new(policy, cost);
        let now = ExactNanos::from_whole(now);
        let start = state.map_or(now, |state| state.tat.max(now));
        let tat = start.saturating_add(check.increment, check.quota);
        match check.outcome(tat.saturating_sub(now, check.quota)) {
            Err(retry_after) => {
                Evaluation::Denied(denial_for(policy.burst_capacity(), retry_after))
            }
            Ok((remaining, reset_after)) => Evaluation::Allowed {
                decision: Decision::allowed(policy.burst_capacity(), remaining, reset_after)
                    .unwrap_or_else(|_| unreachable!("remaining never exceeds the burst")),
                next: GcraState { tat },
            },
        }
    }

    fn deadline(state: &GcraState) -> u64 {
        state.tat.ceil_whole()
    }
}

#[cfg(test)]
mod tests {
    use runlimit_core::{PolicyId, ScopeId};

    use super::*;

    const MS: u64 = NANOS_PER_MILLI;

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

    fn run(policy: &GcraPolicy, state: &mut Option<GcraState>, cost: u64, now: u64) -> Decision {
        match Gcra::evaluate(policy, *state, cost, now) {
            Evaluation::Allowed { decision, next } => {
                *state = Some(next);
                decision
            }
            Evaluation::Denied(denial) => Decision::denied(denial),
        }
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
        };
        assert_eq!(GcraState::unpack(gcra.pack()), gcra);
        assert_eq!(gcra.pack()[1] >> 63, 0);
        let window = WindowState {
            expires_at: u64::MAX,
            used: MAX_LIMIT,
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
        let Evaluation::Allowed { next, decision } = eval(None, 5 * MS) else {
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
