//! One store for all three algorithms: [`AnyPolicy`] checks, batches that
//! mix algorithms, and carries from a policy of one algorithm to another.

use std::sync::atomic::AtomicU64;

use runlimit_core::{AnyPolicy, Decision, PolicyKind, carry::StateNanos, gcra::ExactNanos};

use crate::algorithm::{
    Algorithm, FixedWindow, Gcra, GcraState, SlidingState, SlidingWindow, WindowState,
    sealed::{Align64, Counting, Credit, Engine, Evaluation, Packed},
};

/// Every algorithm, chosen per check by its [`AnyPolicy`]: see
/// [`AnyStore`](crate::AnyStore).
#[derive(Debug, Clone, Copy)]
pub struct AnyAlgorithm;

impl Algorithm for AnyAlgorithm {}

/// The state of one key of an [`AnyStore`](crate::AnyStore): its policy's
/// algorithm's state, in a 64-byte entry whatever the algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyState {
    /// A fixed window's.
    FixedWindow(WindowState),
    /// A sliding window's.
    SlidingWindow(SlidingState),
    /// GCRA's.
    Gcra(GcraState),
}

/// The tag in the top bits of the second word, which no algorithm uses
/// (a sliding window packs two counts below 2<sup>60</sup> there; fixed
/// windows and GCRA use two other words).
const TAG_SHIFT: u32 = 60;
const GCRA: u64 = 1;
const SLIDING_WINDOW: u64 = 2;

impl Packed for AnyState {
    type Words = [u64; 6];
    type Atomic = [AtomicU64; 6];
    type Align = Align64;

    #[inline]
    fn pack(self) -> [u64; 6] {
        match self {
            // The second of two words, which keeps the lock bit, goes last.
            Self::FixedWindow(state) => {
                let [first, last] = state.pack();
                [first, 0, 0, 0, 0, last]
            }
            Self::Gcra(state) => {
                let [first, last] = state.pack();
                [first, GCRA << TAG_SHIFT, 0, 0, 0, last]
            }
            Self::SlidingWindow(state) => {
                let mut words = state.pack();
                words[1] |= SLIDING_WINDOW << TAG_SHIFT;
                words
            }
        }
    }

    #[inline]
    fn unpack(mut words: [u64; 6]) -> Self {
        match words[1] >> TAG_SHIFT {
            GCRA => Self::Gcra(GcraState::unpack([words[0], words[5]])),
            SLIDING_WINDOW => {
                words[1] &= (1 << TAG_SHIFT) - 1;
                Self::SlidingWindow(SlidingState::unpack(words))
            }
            // Zeroed words read as an expired fixed window.
            _ => Self::FixedWindow(WindowState::unpack([words[0], words[5]])),
        }
    }

    #[inline]
    fn version(&self) -> u32 {
        match self {
            Self::FixedWindow(state) => state.version(),
            Self::SlidingWindow(state) => state.version(),
            Self::Gcra(state) => state.version(),
        }
    }

    #[inline]
    fn with_version(self, version: u32) -> Self {
        match self {
            Self::FixedWindow(state) => Self::FixedWindow(state.with_version(version)),
            Self::SlidingWindow(state) => Self::SlidingWindow(state.with_version(version)),
            Self::Gcra(state) => Self::Gcra(state.with_version(version)),
        }
    }
}

/// What an allowed evaluation leaves, by algorithm.
#[derive(Debug, Clone, Copy)]
pub enum AnyAdmitted {
    /// A window's decision.
    Decided(Decision),
    /// GCRA's lead of the new arrival time over now.
    Gcra(ExactNanos),
}

/// The state of `algorithm` in `state`, if it holds one: a key's counter key
/// names its policy's algorithm, so another algorithm's state is never the
/// key's own (it reads as no state).
macro_rules! own {
    ($state:expr, $variant:ident) => {
        match $state {
            Some(AnyState::$variant(state)) => Some(state),
            _ => None,
        }
    };
}

fn wrap<S, A>(
    evaluation: Evaluation<S, A>,
    state: impl FnOnce(S) -> AnyState,
    admitted: impl FnOnce(A) -> AnyAdmitted,
) -> Evaluation<AnyState, AnyAdmitted> {
    match evaluation {
        Evaluation::Allowed {
            admitted: decided,
            next,
        } => Evaluation::Allowed {
            admitted: admitted(decided),
            next: state(next),
        },
        Evaluation::Denied(denial) => Evaluation::Denied(denial),
    }
}

fn credit<S>(credit: Credit<S>, state: impl FnOnce(S) -> AnyState) -> Credit<AnyState> {
    match credit {
        Credit::To(next) => Credit::To(state(next)),
        Credit::Nothing => Credit::Nothing,
    }
}

impl Engine for AnyAlgorithm {
    type State = AnyState;
    type Policy = AnyPolicy;
    const ISSUER: &'static str = "runlimit-memory/any";
    type Admitted = AnyAdmitted;

    #[inline]
    fn evaluate(
        policy: &AnyPolicy,
        state: Option<AnyState>,
        cost: u64,
        now: u64,
    ) -> Evaluation<AnyState, AnyAdmitted> {
        match policy {
            AnyPolicy::FixedWindow(policy) => wrap(
                FixedWindow::evaluate(policy, own!(state, FixedWindow), cost, now),
                AnyState::FixedWindow,
                AnyAdmitted::Decided,
            ),
            AnyPolicy::SlidingWindow(policy) => wrap(
                SlidingWindow::evaluate(policy, own!(state, SlidingWindow), cost, now),
                AnyState::SlidingWindow,
                AnyAdmitted::Decided,
            ),
            AnyPolicy::Gcra(policy) => wrap(
                Gcra::evaluate(policy, own!(state, Gcra), cost, now),
                AnyState::Gcra,
                AnyAdmitted::Gcra,
            ),
        }
    }

    #[inline]
    fn decision(policy: &AnyPolicy, admitted: AnyAdmitted) -> Decision {
        match (policy, admitted) {
            (AnyPolicy::Gcra(policy), AnyAdmitted::Gcra(ahead)) => Gcra::decision(policy, ahead),
            (_, AnyAdmitted::Decided(decision)) => decision,
            (_, AnyAdmitted::Gcra(_)) => unreachable!("GCRA admissions come from GCRA policies"),
        }
    }

    fn deadline(state: &AnyState) -> u64 {
        match state {
            AnyState::FixedWindow(state) => FixedWindow::deadline(state),
            AnyState::SlidingWindow(state) => SlidingWindow::deadline(state),
            AnyState::Gcra(state) => Gcra::deadline(state),
        }
    }

    fn peek(policy: &AnyPolicy, state: Option<AnyState>, cost: u64, now: u64) -> Decision {
        match policy {
            AnyPolicy::FixedWindow(policy) => {
                FixedWindow::peek(policy, own!(state, FixedWindow), cost, now)
            }
            AnyPolicy::SlidingWindow(policy) => {
                SlidingWindow::peek(policy, own!(state, SlidingWindow), cost, now)
            }
            AnyPolicy::Gcra(policy) => Gcra::peek(policy, own!(state, Gcra), cost, now),
        }
    }

    fn stamp(state: &AnyState) -> [u64; 3] {
        match state {
            AnyState::FixedWindow(state) => FixedWindow::stamp(state),
            AnyState::SlidingWindow(state) => SlidingWindow::stamp(state),
            AnyState::Gcra(state) => Gcra::stamp(state),
        }
    }

    fn refund(
        policy: &AnyPolicy,
        state: AnyState,
        stamp: [u64; 3],
        cost: u64,
        now: u64,
    ) -> Credit<AnyState> {
        match (policy, state) {
            (AnyPolicy::FixedWindow(policy), AnyState::FixedWindow(state)) => credit(
                FixedWindow::refund(policy, state, stamp, cost, now),
                AnyState::FixedWindow,
            ),
            (AnyPolicy::SlidingWindow(policy), AnyState::SlidingWindow(state)) => credit(
                SlidingWindow::refund(policy, state, stamp, cost, now),
                AnyState::SlidingWindow,
            ),
            (AnyPolicy::Gcra(policy), AnyState::Gcra(state)) => credit(
                Gcra::refund(policy, state, stamp, cost, now),
                AnyState::Gcra,
            ),
            _ => Credit::Nothing,
        }
    }

    fn forget(state: AnyState, now: u64) -> AnyState {
        match state {
            AnyState::FixedWindow(state) => AnyState::FixedWindow(FixedWindow::forget(state, now)),
            AnyState::SlidingWindow(state) => {
                AnyState::SlidingWindow(SlidingWindow::forget(state, now))
            }
            AnyState::Gcra(state) => AnyState::Gcra(Gcra::forget(state, now)),
        }
    }

    fn carry_source(policy: PolicyKind<'_>, state: &AnyState) -> Option<StateNanos> {
        match state {
            AnyState::FixedWindow(state) => FixedWindow::carry_source(policy, state),
            AnyState::SlidingWindow(state) => SlidingWindow::carry_source(policy, state),
            AnyState::Gcra(state) => Gcra::carry_source(policy, state),
        }
    }

    fn overflow_counting(policy: &AnyPolicy) -> Counting {
        match policy {
            AnyPolicy::FixedWindow(policy) => FixedWindow::overflow_counting(policy),
            AnyPolicy::SlidingWindow(policy) => SlidingWindow::overflow_counting(policy),
            AnyPolicy::Gcra(policy) => Gcra::overflow_counting(policy),
        }
    }

    fn from_arrival_time(tat: u64) -> Option<AnyState> {
        Some(AnyState::Gcra(GcraState::at(tat)))
    }

    fn arrival_time_bound(state: &AnyState) -> u64 {
        match state {
            AnyState::Gcra(state) => state.arrival_time_bound(),
            // Only GCRA policies are counted by arrival time.
            AnyState::FixedWindow(_) | AnyState::SlidingWindow(_) => u64::MAX,
        }
    }

    fn carried(policy: &AnyPolicy, state: StateNanos) -> Option<AnyState> {
        match policy {
            AnyPolicy::FixedWindow(policy) => {
                FixedWindow::carried(policy, state).map(AnyState::FixedWindow)
            }
            AnyPolicy::SlidingWindow(policy) => {
                SlidingWindow::carried(policy, state).map(AnyState::SlidingWindow)
            }
            AnyPolicy::Gcra(policy) => Gcra::carried(policy, state).map(AnyState::Gcra),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_through_its_words() {
        let states = [
            AnyState::FixedWindow(WindowState::unpack([77, (5 << 30) | 3])),
            AnyState::Gcra(GcraState::unpack([1_234_567, (9 << 30) | 999])),
            AnyState::SlidingWindow(SlidingState::unpack([
                800,
                (2 << 30) | 1,
                (4 << 30) | 3,
                6,
                0,
                (7 << 30) | 8,
            ])),
        ];
        for state in states {
            let words = state.pack();
            assert!(words[5] < 1 << 63, "the lock bit stays clear");
            assert_eq!(AnyState::unpack(words), state);
        }
        assert!(matches!(AnyState::unpack([0; 6]), AnyState::FixedWindow(_)));
    }
}
