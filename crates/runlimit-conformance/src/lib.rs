//! The behaviour suite every Runlimit backend runs.
//!
//! Each backend's tests hand the suite a [`Limiter`] and a [`TimeControl`] for
//! its clock, then call the suites for the algorithms it supports:
//! [`fixed_window_suite`], [`sliding_window_suite`] and [`gcra_suite`]
//! (admission), and [`fixed_window_lifecycle_suite`],
//! [`sliding_window_lifecycle_suite`] and [`gcra_lifecycle_suite`] (refund,
//! peek and reset, for backends implementing [`Lifecycle`]). The same
//! assertions then prove the same semantics for the memory stores, PostgreSQL and
//! Redis: anchoring, expiry, sliding-window counting and release, denial
//! without consumption, batch atomicity and order, duplicate rejection, shadow
//! mode, weighted costs, GCRA burst and replenishment, extreme policies and
//! retry-after rounding.
//!
//! Every case uses fresh, uniquely named policies, so the suite can share a
//! backend (one database, one Redis) with other tests running in parallel.
//!
//! One module per capability: [`fixed_window`](mod@fixed_window),
//! [`sliding_window`](mod@sliding_window) and [`gcra`](mod@gcra) hold the
//! admission cases of each algorithm, [`lifecycle`] the refund, peek and
//! reset cases, [`settle`] the partial refunds, [`grant`](mod@grant) the
//! grants of as many units as fit and [`carry`](mod@carry) the continuity
//! across a change of policy or secret (every pair of algorithms, for
//! backends of [`AnyPolicy`](runlimit_core::AnyPolicy) checks);
//! [`sliding_log`] holds the exact reference that random sliding-window
//! traces are checked against, and [`leased`] the ledger that
//! `runlimit_memory::Leased` replicas in front of a backend that grants are
//! held to on random weighted traces.
//!
//! [`Lifecycle`]: runlimit_core::Lifecycle

pub mod carry;
pub mod fixed_window;
pub mod gcra;
pub mod grant;
pub mod leased;
pub mod lifecycle;
pub mod settle;
pub mod sliding_log;
pub mod sliding_window;
mod windows;

pub use carry::{
    any_policy_carry_suite, carry_drain_suite, fixed_window_carry_suite, gcra_carry_suite,
    sliding_window_carry_suite,
};
pub use fixed_window::fixed_window_suite;
pub use gcra::gcra_suite;
pub use grant::{fixed_window_grant_suite, gcra_grant_suite, sliding_window_grant_suite};
pub use leased::{LeasedPolicy, leased_trace, leased_weighted_suite, run_leased_trace};
pub use lifecycle::{
    fixed_window_lifecycle_suite, gcra_lifecycle_suite, sliding_window_lifecycle_suite,
};
pub use runlimit_core::Shared;
pub use settle::{fixed_window_settle_suite, gcra_settle_suite, sliding_window_settle_suite};
pub use sliding_window::sliding_window_suite;

use std::{
    future::Future,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use runlimit_core::{
    BatchDecision, Check, Decision, Denial, FixedWindowPolicy, GcraPolicy, Limiter, PolicyId,
    ScopeId, SlidingWindowPolicy, SubjectKey,
};

/// Lets the suite move a backend's notion of time.
pub trait TimeControl: Sync {
    /// Makes the backend behave as if `by` more time had passed for all state
    /// the suite created.
    fn advance(&self, by: Duration) -> impl Future<Output = ()> + Send;

    /// Lets `by` pass for stored state and receipts alike. An injected clock
    /// simply advances (the default); a backend on a real clock whose
    /// [`advance`](Self::advance) shifts stored state must really wait, since
    /// receipts carry the backend's own times. Cases use it only for short
    /// durations.
    fn elapse(&self, by: Duration) -> impl Future<Output = ()> + Send {
        self.advance(by)
    }

    /// Whether receipts issued before an [`advance`](Self::advance) still
    /// name the state it moved: true for an injected clock (the default),
    /// false for a backend whose `advance` shifts stored state, since receipts
    /// carry the backend's own times. Cases refund such receipts only after
    /// [`elapse`](Self::elapse).
    fn receipts_survive_advance(&self) -> bool {
        true
    }

    /// How far the backend's clock may move on its own between two operations of
    /// one case (zero for an injected clock). Durations are compared with this
    /// tolerance: a reported duration may be up to this much shorter.
    fn drift(&self) -> Duration {
        Duration::ZERO
    }
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// A policy id no other case, test or concurrently running process uses.
#[must_use]
pub fn unique_policy_id(case: &str) -> PolicyId {
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    let id = format!("c.{case}.{}.{nanos}.{sequence}", std::process::id());
    let id: String = id.chars().take(runlimit_core::MAX_ID_LEN).collect();
    PolicyId::new(id).unwrap_or_else(|error| panic!("generated an invalid policy id: {error}"))
}

/// A subject key distinct for each `n`.
#[must_use]
pub fn subject(n: u8) -> SubjectKey {
    let mut digest = [0xA5; 32];
    digest[0] = n;
    digest[31] = n.wrapping_mul(31);
    SubjectKey::from_digest(digest)
}

pub(crate) fn scope(name: &str) -> ScopeId {
    ScopeId::new(name).unwrap_or_else(|error| panic!("invalid scope: {error}"))
}

/// A fixed-window policy with a unique id.
///
/// # Panics
///
/// If the parameters are invalid.
#[must_use]
pub fn fixed_window(case: &str, limit: u64, window: Duration) -> FixedWindowPolicy {
    FixedWindowPolicy::new(unique_policy_id(case), scope("client"), limit, window)
        .unwrap_or_else(|error| panic!("invalid fixed-window policy: {error}"))
}

/// A sliding-window policy with a unique id.
///
/// # Panics
///
/// If the parameters are invalid.
#[must_use]
pub fn sliding_window(case: &str, limit: u64, window: Duration) -> SlidingWindowPolicy {
    SlidingWindowPolicy::new(unique_policy_id(case), scope("client"), limit, window)
        .unwrap_or_else(|error| panic!("invalid sliding-window policy: {error}"))
}

/// A GCRA policy with a unique id.
///
/// # Panics
///
/// If the parameters are invalid.
#[must_use]
pub fn gcra(case: &str, quota: u64, period: Duration, burst: u64) -> GcraPolicy {
    GcraPolicy::new(
        unique_policy_id(case),
        scope("client"),
        quota,
        period,
        burst,
    )
    .unwrap_or_else(|error| panic!("invalid GCRA policy: {error}"))
}

pub(crate) async fn decide<L: Limiter>(
    limiter: &L,
    check: &Check<'_, L::Policy>,
    case: &str,
) -> Decision {
    match limiter.check(check).await {
        Ok(decision) => decision,
        Err(error) => panic!("{case}: backend error: {error}"),
    }
}

/// A limit-2 `policy` checked three times on a fresh key, alternating
/// [`Limiter::check_now`] (falling back to the future when it declines) with
/// the awaited check: a limiter that decides at once gives exactly what its
/// future would, consuming the same; one that declines has consumed nothing.
pub(crate) async fn decides_at_once_as_awaited<L: Limiter>(
    limiter: &L,
    policy: &L::Policy,
    case: &str,
) {
    let check = Check::new(policy, subject(61));
    let mut decisions = Vec::new();
    for round in 0..3 {
        let at_once = if round % 2 == 0 {
            limiter.check_now(&check)
        } else {
            None
        };
        decisions.push(match at_once {
            Some(Ok(decision)) => decision,
            Some(Err(error)) => panic!("{case}: backend error: {error}"),
            None => decide(limiter, &check, case).await,
        });
    }
    assert_allowed(case, &decisions[0], 1);
    assert_allowed(case, &decisions[1], 0);
    assert_quota_denied(case, &decisions[2]);
}

pub(crate) async fn decide_all<L: Limiter>(
    limiter: &L,
    checks: &[Check<'_, L::Policy>],
    case: &str,
) -> BatchDecision {
    match limiter.check_all(checks).await {
        Ok(batch) => batch,
        Err(error) => panic!("{case}: backend error: {error}"),
    }
}

pub(crate) fn assert_close(
    case: &str,
    what: &str,
    actual: Option<Duration>,
    expected: Duration,
    drift: Duration,
) {
    let actual = actual.unwrap_or_else(|| panic!("{case}: {what} missing"));
    assert!(
        actual <= expected && actual + drift >= expected,
        "{case}: {what} was {actual:?}, expected {expected:?} (tolerance {drift:?})"
    );
}

/// Asserts `low < actual <= high`, `low` lowered by `drift`: the bounds a
/// sliding window's reported times obey wherever in its eighth the clock is.
pub(crate) fn assert_between(
    case: &str,
    what: &str,
    actual: Option<Duration>,
    (low, high): (Duration, Duration),
    drift: Duration,
) {
    let actual = actual.unwrap_or_else(|| panic!("{case}: {what} missing"));
    assert!(
        actual + drift > low && actual <= high,
        "{case}: {what} was {actual:?}, expected in ({low:?}, {high:?}] (tolerance {drift:?})"
    );
}

pub(crate) fn assert_allowed(case: &str, decision: &Decision, remaining: u64) {
    assert!(
        decision.is_allowed(),
        "{case}: expected allowed, got {decision:?}"
    );
    assert_eq!(decision.remaining(), Some(remaining), "{case}: remaining");
}

pub(crate) fn assert_quota_denied(case: &str, decision: &Decision) {
    assert!(
        decision.is_denied(),
        "{case}: expected denied, got {decision:?}"
    );
    assert!(
        decision.denial().is_some_and(Denial::is_quota_exceeded),
        "{case}: expected a quota denial, got {decision:?}"
    );
}
