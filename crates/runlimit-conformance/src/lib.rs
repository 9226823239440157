//! The behaviour suite every Runlimit backend runs.
//!
//! Each backend's tests hand the suite a [`Limiter`] and a [`TimeControl`] for
//! its clock, then call [`fixed_window_suite`] and/or [`gcra_suite`]. The same
//! assertions then prove the same semantics for the memory stores, PostgreSQL and
//! Redis: anchoring, expiry, denial without consumption, batch atomicity and
//! order, duplicate rejection, shadow mode, weighted costs, GCRA burst and
//! replenishment, and retry-after rounding.
//!
//! Every case uses fresh, uniquely named policies, so the suite can share a
//! backend (one database, one Redis) with other tests running in parallel.

use std::{
    future::Future,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use runlimit_core::{
    BatchDecision, Check, Decision, Denial, FixedWindowPolicy, GcraPolicy, Limiter, PolicyId,
    QuotaMode, ScopeId, SubjectKey,
};

/// Lets the suite move a backend's notion of time.
pub trait TimeControl: Sync {
    /// Makes the backend behave as if `by` more time had passed for all state
    /// the suite created.
    fn advance(&self, by: Duration) -> impl Future<Output = ()> + Send;

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

fn scope(name: &str) -> ScopeId {
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

async fn decide<L: Limiter>(limiter: &L, check: &Check<'_, L::Policy>, case: &str) -> Decision {
    match limiter.check(check).await {
        Ok(decision) => decision,
        Err(error) => panic!("{case}: backend error: {error}"),
    }
}

async fn decide_all<L: Limiter>(
    limiter: &L,
    checks: &[Check<'_, L::Policy>],
    case: &str,
) -> BatchDecision {
    match limiter.check_all(checks).await {
        Ok(batch) => batch,
        Err(error) => panic!("{case}: backend error: {error}"),
    }
}

fn assert_close(
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

fn assert_allowed(case: &str, decision: &Decision, remaining: u64) {
    assert!(
        decision.is_allowed(),
        "{case}: expected allowed, got {decision:?}"
    );
    assert_eq!(decision.remaining(), Some(remaining), "{case}: remaining");
}

fn assert_quota_denied(case: &str, decision: &Decision) {
    assert!(
        decision.is_denied(),
        "{case}: expected denied, got {decision:?}"
    );
    assert!(
        decision.denial().is_some_and(Denial::is_quota_exceeded),
        "{case}: expected a quota denial, got {decision:?}"
    );
}

/// Runs every fixed-window case.
pub async fn fixed_window_suite<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = FixedWindowPolicy>,
    T: TimeControl,
{
    fixed_window_anchors_on_first_allowed_check(limiter, time).await;
    fixed_window_denials_consume_nothing(limiter, time).await;
    fixed_window_weighted_costs(limiter).await;
    fixed_window_batches_are_atomic_and_ordered(limiter, time).await;
    fixed_window_batch_caller_errors_consume_nothing(limiter).await;
    fixed_window_shadow_mode(limiter).await;
    fixed_window_retry_after_rounding(limiter, time).await;
    fixed_window_policies_are_independent(limiter).await;
}

/// The first allowed check anchors the window; it renews only after the whole
/// window elapses.
pub async fn fixed_window_anchors_on_first_allowed_check<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = FixedWindowPolicy>,
    T: TimeControl,
{
    let case = "fixed window anchoring";
    let window = Duration::from_secs(10);
    let policy = fixed_window("anchor", 3, window);
    let check = Check::new(&policy, subject(1));
    let first = decide(limiter, &check, case).await;
    assert_allowed(case, &first, 2);
    assert_close(
        case,
        "reset_after",
        first.reset_after(),
        window,
        time.drift(),
    );

    time.advance(Duration::from_secs(4)).await;
    let second = decide(limiter, &check, case).await;
    assert_allowed(case, &second, 1);
    assert_close(
        case,
        "reset_after",
        second.reset_after(),
        Duration::from_secs(6),
        time.drift(),
    );

    time.advance(Duration::from_secs(6)).await;
    let renewed = decide(limiter, &check, case).await;
    assert_allowed(case, &renewed, 2);
    assert_close(
        case,
        "reset_after",
        renewed.reset_after(),
        window,
        time.drift(),
    );
}

/// Denied checks consume nothing and do not move the window.
pub async fn fixed_window_denials_consume_nothing<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = FixedWindowPolicy>,
    T: TimeControl,
{
    let case = "fixed window denial";
    let window = Duration::from_secs(60);
    let policy = fixed_window("deny", 2, window);
    let check = Check::new(&policy, subject(2));
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    for _ in 0..3 {
        let denied = decide(limiter, &check, case).await;
        assert_quota_denied(case, &denied);
        assert!(
            !denied.permits_request(),
            "{case}: enforced denial permitted"
        );
        assert_close(
            case,
            "retry_after",
            denied.retry_after(),
            window,
            time.drift(),
        );
    }
    time.advance(window).await;
    // The window expired at its anchored deadline despite the denials, and the
    // whole limit is available again.
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
}

/// Weighted checks consume their cost; one that does not fit consumes nothing.
pub async fn fixed_window_weighted_costs<L>(limiter: &L)
where
    L: Limiter<Policy = FixedWindowPolicy>,
{
    let case = "fixed window weighted";
    let policy = fixed_window("weighted", 5, Duration::from_secs(60));
    let weighted = |cost| {
        Check::weighted(&policy, subject(3), cost).unwrap_or_else(|error| panic!("{case}: {error}"))
    };
    assert_allowed(case, &decide(limiter, &weighted(3), case).await, 2);
    assert_quota_denied(case, &decide(limiter, &weighted(3), case).await);
    assert_allowed(case, &decide(limiter, &weighted(2), case).await, 0);
    assert_quota_denied(case, &decide(limiter, &weighted(1), case).await);
}

/// A batch is all-or-nothing and allowed decisions keep input order.
pub async fn fixed_window_batches_are_atomic_and_ordered<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = FixedWindowPolicy>,
    T: TimeControl,
{
    let case = "fixed window batch";
    let client = fixed_window("batch.client", 5, Duration::from_secs(60));
    let identity = fixed_window("batch.identity", 2, Duration::from_secs(30));
    let checks = [
        Check::new(&client, subject(4)),
        Check::new(&identity, subject(5)),
    ];

    let first = decide_all(limiter, &checks, case).await;
    let decisions = first
        .decisions()
        .unwrap_or_else(|| panic!("{case}: expected allowed, got {first:?}"));
    assert_eq!(decisions.len(), 2, "{case}: decision count");
    assert_eq!(decisions[0].limit(), Some(5), "{case}: order");
    assert_eq!(decisions[1].limit(), Some(2), "{case}: order");
    assert_allowed(case, &decisions[0], 4);
    assert_allowed(case, &decisions[1], 1);

    assert!(
        decide_all(limiter, &checks, case).await.is_allowed(),
        "{case}: second batch"
    );
    let denied = decide_all(limiter, &checks, case).await;
    match denied {
        BatchDecision::Denied { index, denial } => {
            assert_eq!(index, 1, "{case}: denied index");
            assert!(denial.is_quota_exceeded(), "{case}: denial kind");
            assert_close(
                case,
                "retry_after",
                denial.retry_after(),
                Duration::from_secs(30),
                time.drift(),
            );
        }
        other => panic!("{case}: expected a denied batch, got {other:?}"),
    }
    // The denied batch consumed nothing from the client policy: 3 of 5 remain.
    assert_allowed(case, &decide(limiter, &checks[0], case).await, 2);
}

/// Duplicate keys, mixed quota modes and empty batches are caller errors that
/// consume nothing.
pub async fn fixed_window_batch_caller_errors_consume_nothing<L>(limiter: &L)
where
    L: Limiter<Policy = FixedWindowPolicy>,
{
    let case = "fixed window caller errors";
    let policy = fixed_window("dupes", 2, Duration::from_secs(60));
    let shadow =
        fixed_window("dupes.shadow", 2, Duration::from_secs(60)).with_quota_mode(QuotaMode::Shadow);
    let check = Check::new(&policy, subject(6));
    assert!(
        limiter.check_all(&[check, check]).await.is_err(),
        "{case}: duplicate accepted"
    );
    assert!(
        limiter
            .check_all(&[check, Check::new(&shadow, subject(6))])
            .await
            .is_err(),
        "{case}: mixed modes accepted"
    );
    assert!(
        limiter.check_all(&[]).await.is_err(),
        "{case}: empty batch accepted"
    );
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
}

/// A shadow denial permits the request, reports it would deny, and consumes
/// nothing; promoting the policy to enforcement keeps its counter.
pub async fn fixed_window_shadow_mode<L>(limiter: &L)
where
    L: Limiter<Policy = FixedWindowPolicy>,
{
    let case = "fixed window shadow";
    let shadow =
        fixed_window("shadow", 1, Duration::from_secs(60)).with_quota_mode(QuotaMode::Shadow);
    let check = Check::new(&shadow, subject(7));
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    let decision = decide(limiter, &check, case).await;
    assert!(decision.is_shadow_denied(), "{case}: got {decision:?}");
    assert!(
        decision.permits_request() && decision.would_deny(),
        "{case}: predicates"
    );
    let other =
        fixed_window("shadow.other", 5, Duration::from_secs(60)).with_quota_mode(QuotaMode::Shadow);
    let batch = [Check::new(&other, subject(8)), check];
    match decide_all(limiter, &batch, case).await {
        BatchDecision::ShadowDenied { index: 1, .. } => {}
        other => panic!("{case}: expected a shadow-denied batch, got {other:?}"),
    }
    // Nothing was consumed from the other policy by the shadow-denied batch.
    assert_allowed(case, &decide(limiter, &batch[0], case).await, 4);

    let enforced = shadow.clone().with_quota_mode(QuotaMode::Enforce);
    assert_quota_denied(
        case,
        &decide(limiter, &Check::new(&enforced, subject(7)), case).await,
    );
}

/// Retry-after durations are exact, and rounding to seconds goes up.
pub async fn fixed_window_retry_after_rounding<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = FixedWindowPolicy>,
    T: TimeControl,
{
    let case = "fixed window retry rounding";
    let policy = fixed_window("retry", 1, Duration::from_millis(2_500));
    let check = Check::new(&policy, subject(9));
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    time.advance(Duration::from_millis(1_000)).await;
    let denied = decide(limiter, &check, case).await;
    assert_close(
        case,
        "retry_after",
        denied.retry_after(),
        Duration::from_millis(1_500),
        time.drift(),
    );
    assert_eq!(denied.retry_after_seconds(), Some(2), "{case}: rounded up");
}

/// Changing a fingerprinted parameter starts an independent counter.
pub async fn fixed_window_policies_are_independent<L>(limiter: &L)
where
    L: Limiter<Policy = FixedWindowPolicy>,
{
    let case = "fixed window independence";
    let id = unique_policy_id("independent");
    let small = FixedWindowPolicy::new(id.clone(), scope("client"), 1, Duration::from_secs(60))
        .unwrap_or_else(|error| panic!("{error}"));
    let larger = FixedWindowPolicy::new(id, scope("client"), 2, Duration::from_secs(60))
        .unwrap_or_else(|error| panic!("{error}"));
    assert_allowed(
        case,
        &decide(limiter, &Check::new(&small, subject(10)), case).await,
        0,
    );
    assert_allowed(
        case,
        &decide(limiter, &Check::new(&larger, subject(10)), case).await,
        1,
    );
}

/// Runs every GCRA case.
pub async fn gcra_suite<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = GcraPolicy>,
    T: TimeControl,
{
    gcra_burst_then_replenishment(limiter, time).await;
    gcra_full_replenishment_restores_the_burst(limiter, time).await;
    gcra_weighted_costs_and_denials_consume_nothing(limiter, time).await;
    gcra_retry_after_rounds_up_to_milliseconds(limiter, time).await;
    gcra_batches_are_atomic(limiter).await;
    gcra_shadow_mode(limiter).await;
}

/// A fresh key may spend its whole burst at once; then one unit replenishes every
/// `period / quota`.
pub async fn gcra_burst_then_replenishment<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = GcraPolicy>,
    T: TimeControl,
{
    let case = "gcra burst";
    // One per second, burst 5. The interval is longer than any backend's
    // drift, so a real clock cannot replenish a unit during the burst.
    let policy = gcra("burst", 1, Duration::from_secs(1), 5);
    let check = Check::new(&policy, subject(20));
    for remaining in (0..5).rev() {
        assert_allowed(case, &decide(limiter, &check, case).await, remaining);
    }
    let denied = decide(limiter, &check, case).await;
    assert_quota_denied(case, &denied);
    assert_close(
        case,
        "retry_after",
        denied.retry_after(),
        Duration::from_secs(1),
        time.drift(),
    );
    time.advance(Duration::from_secs(1)).await;
    let allowed = decide(limiter, &check, case).await;
    assert_allowed(case, &allowed, 0);
    assert_close(
        case,
        "reset_after",
        allowed.reset_after(),
        Duration::from_secs(5),
        time.drift(),
    );
    assert_quota_denied(case, &decide(limiter, &check, case).await);
}

/// After the full-replenishment time the whole burst is available again.
pub async fn gcra_full_replenishment_restores_the_burst<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = GcraPolicy>,
    T: TimeControl,
{
    let case = "gcra full replenishment";
    let policy = gcra("full", 4, Duration::from_secs(2), 4);
    let check = Check::new(&policy, subject(21));
    let spent = Check::weighted(&policy, subject(21), 4).unwrap_or_else(|error| panic!("{error}"));
    assert_allowed(case, &decide(limiter, &spent, case).await, 0);
    time.advance(policy.full_replenishment()).await;
    assert_allowed(case, &decide(limiter, &check, case).await, 3);
}

/// Weighted costs take several units; a denied weighted check consumes nothing.
pub async fn gcra_weighted_costs_and_denials_consume_nothing<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = GcraPolicy>,
    T: TimeControl,
{
    let case = "gcra weighted";
    let policy = gcra("weighted", 1, Duration::from_secs(1), 10);
    let weighted = |cost| {
        Check::weighted(&policy, subject(22), cost).unwrap_or_else(|error| panic!("{error}"))
    };
    assert_allowed(case, &decide(limiter, &weighted(7), case).await, 3);
    let denied = decide(limiter, &weighted(5), case).await;
    assert_quota_denied(case, &denied);
    // Two more units replenish in two seconds.
    assert_close(
        case,
        "retry_after",
        denied.retry_after(),
        Duration::from_secs(2),
        time.drift(),
    );
    assert_allowed(case, &decide(limiter, &weighted(3), case).await, 0);
}

/// Fractional emission intervals are exact; reported durations round up to whole
/// milliseconds.
pub async fn gcra_retry_after_rounds_up_to_milliseconds<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = GcraPolicy>,
    T: TimeControl,
{
    let case = "gcra rounding";
    // Three units per 10 s: each replenishes after 3.333… s. Seconds rather than
    // milliseconds keep the case meaningful for backends whose clock runs.
    let policy = gcra("rounding", 3, Duration::from_secs(10), 1);
    let check = Check::new(&policy, subject(23));
    let allowed = decide(limiter, &check, case).await;
    assert_allowed(case, &allowed, 0);
    assert_close(
        case,
        "reset_after",
        allowed.reset_after(),
        Duration::from_millis(3_334),
        time.drift(),
    );
    let denied = decide(limiter, &check, case).await;
    assert_close(
        case,
        "retry_after",
        denied.retry_after(),
        Duration::from_millis(3_334),
        time.drift(),
    );
    assert_eq!(
        denied.retry_after_seconds(),
        Some(4),
        "{case}: seconds round up"
    );
    if time.drift().is_zero() {
        // With a frozen clock the unit is exactly 3333⅓ ms away: not sooner.
        time.advance(Duration::from_millis(3_333)).await;
        assert_quota_denied(case, &decide(limiter, &check, case).await);
        time.advance(Duration::from_millis(1)).await;
    } else {
        time.advance(Duration::from_millis(3_334)).await;
    }
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
}

/// A GCRA batch is all-or-nothing and keeps input order.
pub async fn gcra_batches_are_atomic<L>(limiter: &L)
where
    L: Limiter<Policy = GcraPolicy>,
{
    let case = "gcra batch";
    let wide = gcra("batch.wide", 1, Duration::from_secs(60), 3);
    let narrow = gcra("batch.narrow", 1, Duration::from_secs(60), 1);
    let checks = [
        Check::new(&wide, subject(24)),
        Check::new(&narrow, subject(25)),
    ];
    let first = decide_all(limiter, &checks, case).await;
    let decisions = first
        .decisions()
        .unwrap_or_else(|| panic!("{case}: expected allowed, got {first:?}"));
    assert_eq!(decisions[0].limit(), Some(3), "{case}: order");
    assert_eq!(decisions[1].limit(), Some(1), "{case}: order");
    match decide_all(limiter, &checks, case).await {
        BatchDecision::Denied { index: 1, .. } => {}
        other => panic!("{case}: expected denial at 1, got {other:?}"),
    }
    assert_allowed(case, &decide(limiter, &checks[0], case).await, 1);
    assert!(
        limiter.check_all(&[checks[0], checks[0]]).await.is_err(),
        "{case}: duplicate accepted"
    );
}

/// A GCRA shadow denial permits the request and consumes nothing.
pub async fn gcra_shadow_mode<L>(limiter: &L)
where
    L: Limiter<Policy = GcraPolicy>,
{
    let case = "gcra shadow";
    let policy = gcra("shadow", 1, Duration::from_secs(60), 1).with_quota_mode(QuotaMode::Shadow);
    let check = Check::new(&policy, subject(26));
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    for _ in 0..2 {
        let decision = decide(limiter, &check, case).await;
        assert!(decision.is_shadow_denied(), "{case}: got {decision:?}");
        assert!(
            decision.permits_request(),
            "{case}: shadow denial must permit"
        );
    }
    let enforced = policy.clone().with_quota_mode(QuotaMode::Enforce);
    assert_quota_denied(
        case,
        &decide(limiter, &Check::new(&enforced, subject(26)), case).await,
    );
}
