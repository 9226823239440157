//! Cases whose assertions are the same for fixed and sliding windows: both
//! are "at most `limit` units per `window`", so weighted costs, batch caller
//! errors, shadow mode, fingerprints, refunds and peeks behave alike whenever
//! no time passes (and where a case reads how long until units come back,
//! each policy says what it expects).

use std::time::Duration;

use runlimit_core::{
    BatchDecision, Check, FixedWindowPolicy, Lifecycle, Limiter, Policy, PolicyId, QuotaMode,
    SlidingWindowPolicy,
};

use crate::{
    TimeControl, assert_allowed, assert_between, assert_close, assert_quota_denied, decide,
    decide_all,
    lifecycle::{admit as admit_receipt, peek, refund},
    scope, subject, unique_policy_id,
};

/// A policy of at most `limit` units per `window`.
pub(crate) trait WindowPolicy: Policy + Clone + Sized + 'static {
    /// Its name in case descriptions.
    const NAME: &'static str;

    fn with_id(id: PolicyId, limit: u64, window: Duration) -> Self;

    fn in_mode(self, mode: QuotaMode) -> Self;

    /// Asserts that `actual` is how long units admitted now stay counted:
    /// the window for a fixed window anchored now, up to an eighth more for a
    /// sliding window.
    fn assert_counted_for(
        case: &str,
        what: &str,
        actual: Option<Duration>,
        window: Duration,
        drift: Duration,
    );

    fn unique(case: &str, limit: u64, window: Duration) -> Self {
        Self::with_id(unique_policy_id(case), limit, window)
    }
}

impl WindowPolicy for FixedWindowPolicy {
    const NAME: &'static str = "fixed window";

    fn with_id(id: PolicyId, limit: u64, window: Duration) -> Self {
        Self::new(id, scope("client"), limit, window).unwrap_or_else(|error| panic!("{error}"))
    }

    fn in_mode(self, mode: QuotaMode) -> Self {
        self.with_quota_mode(mode)
    }

    fn assert_counted_for(
        case: &str,
        what: &str,
        actual: Option<Duration>,
        window: Duration,
        drift: Duration,
    ) {
        assert_close(case, what, actual, window, drift);
    }
}

impl WindowPolicy for SlidingWindowPolicy {
    const NAME: &'static str = "sliding window";

    fn with_id(id: PolicyId, limit: u64, window: Duration) -> Self {
        Self::new(id, scope("client"), limit, window).unwrap_or_else(|error| panic!("{error}"))
    }

    fn in_mode(self, mode: QuotaMode) -> Self {
        self.with_quota_mode(mode)
    }

    fn assert_counted_for(
        case: &str,
        what: &str,
        actual: Option<Duration>,
        window: Duration,
        drift: Duration,
    ) {
        assert_between(case, what, actual, (window, window + window / 8), drift);
    }
}

/// Weighted checks consume their cost; one that does not fit consumes nothing.
pub(crate) async fn weighted_costs<L>(limiter: &L)
where
    L: Limiter<Policy: WindowPolicy>,
{
    let case = format!("{} weighted", L::Policy::NAME);
    let case = case.as_str();
    let policy = L::Policy::unique("weighted", 5, Duration::from_secs(60));
    let weighted = |cost| {
        Check::weighted(&policy, subject(3), cost).unwrap_or_else(|error| panic!("{case}: {error}"))
    };
    assert_allowed(case, &decide(limiter, &weighted(3), case).await, 2);
    assert_quota_denied(case, &decide(limiter, &weighted(3), case).await);
    assert_allowed(case, &decide(limiter, &weighted(2), case).await, 0);
    assert_quota_denied(case, &decide(limiter, &weighted(1), case).await);
}

/// Duplicate keys, mixed quota modes and empty batches are caller errors that
/// consume nothing.
pub(crate) async fn batch_caller_errors_consume_nothing<L>(limiter: &L)
where
    L: Limiter<Policy: WindowPolicy>,
{
    let case = format!("{} caller errors", L::Policy::NAME);
    let case = case.as_str();
    let policy = L::Policy::unique("dupes", 2, Duration::from_secs(60));
    let shadow =
        L::Policy::unique("dupes.shadow", 2, Duration::from_secs(60)).in_mode(QuotaMode::Shadow);
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
pub(crate) async fn shadow_mode<L>(limiter: &L)
where
    L: Limiter<Policy: WindowPolicy>,
{
    let case = format!("{} shadow", L::Policy::NAME);
    let case = case.as_str();
    let shadow = L::Policy::unique("shadow", 1, Duration::from_secs(60)).in_mode(QuotaMode::Shadow);
    let check = Check::new(&shadow, subject(7));
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    let decision = decide(limiter, &check, case).await;
    assert!(decision.is_shadow_denied(), "{case}: got {decision:?}");
    assert!(
        decision.permits_request() && decision.would_deny(),
        "{case}: predicates"
    );
    let other =
        L::Policy::unique("shadow.other", 5, Duration::from_secs(60)).in_mode(QuotaMode::Shadow);
    let batch = [Check::new(&other, subject(8)), check];
    match decide_all(limiter, &batch, case).await {
        BatchDecision::ShadowDenied { index: 1, .. } => {}
        other => panic!("{case}: expected a shadow-denied batch, got {other:?}"),
    }
    // Nothing was consumed from the other policy by the shadow-denied batch.
    assert_allowed(case, &decide(limiter, &batch[0], case).await, 4);

    let enforced = shadow.clone().in_mode(QuotaMode::Enforce);
    assert_quota_denied(
        case,
        &decide(limiter, &Check::new(&enforced, subject(7)), case).await,
    );
}

/// Changing a fingerprinted parameter starts an independent counter.
pub(crate) async fn policies_are_independent<L>(limiter: &L)
where
    L: Limiter<Policy: WindowPolicy>,
{
    let case = format!("{} independence", L::Policy::NAME);
    let case = case.as_str();
    let id = unique_policy_id("independent");
    let small = L::Policy::with_id(id.clone(), 1, Duration::from_secs(60));
    let larger = L::Policy::with_id(id.clone(), 2, Duration::from_secs(60));
    let longer = L::Policy::with_id(id, 1, Duration::from_secs(61));
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
    assert_allowed(
        case,
        &decide(limiter, &Check::new(&longer, subject(10)), case).await,
        0,
    );
}

/// A refund whose checks do not match its receipt is refused and changes
/// nothing.
pub(crate) async fn mismatched_refunds_change_nothing<L>(limiter: &L)
where
    L: Limiter<Policy: WindowPolicy> + Lifecycle,
{
    let case = format!("{} mismatched refund", L::Policy::NAME);
    let case = case.as_str();
    let policy = L::Policy::unique("mismatch", 3, Duration::from_secs(60));
    let check = Check::new(&policy, subject(35));
    let other = Check::new(&policy, subject(36));
    assert_allowed(case, &decide(limiter, &other, case).await, 2);
    let receipt = admit_receipt(limiter, &check, case).await;
    assert!(
        limiter.refund(&[other], receipt).await.is_err(),
        "{case}: a receipt for another subject"
    );
    let receipt = admit_receipt(limiter, &check, case).await;
    assert!(
        limiter.refund(&[check, other], receipt).await.is_err(),
        "{case}: more checks than the receipt holds"
    );
    let weighted =
        Check::weighted(&policy, subject(35), 2).unwrap_or_else(|error| panic!("{error}"));
    let receipt = admit_receipt(limiter, &check, case).await;
    assert!(
        limiter.refund(&[weighted], receipt).await.is_err(),
        "{case}: another cost"
    );
    // Three admissions of `check`, none refunded; `other` untouched.
    assert_quota_denied(case, &decide(limiter, &check, case).await);
    assert_allowed(case, &decide(limiter, &other, case).await, 1);
}

/// A refund within the window gives back exactly what the check consumed.
pub(crate) async fn refund_restores_exactly<L>(limiter: &L)
where
    L: Limiter<Policy: WindowPolicy> + Lifecycle,
{
    let case = format!("{} refund", L::Policy::NAME);
    let case = case.as_str();
    let policy = L::Policy::unique("refund", 3, Duration::from_secs(80));
    let check = Check::new(&policy, subject(30));
    assert_allowed(case, &decide(limiter, &check, case).await, 2);
    let receipt = admit_receipt(limiter, &check, case).await;
    let refunded = refund(limiter, &[check], receipt, case).await;
    assert_eq!(refunded.credited(), 1, "{case}: credited");
    // As if the refunded check had never been admitted: 2 remain before this one.
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    assert_quota_denied(case, &decide(limiter, &check, case).await);
}

/// Refunding a batch credits every check of it, in one call; a denied batch
/// consumed nothing, so it carries no receipt.
pub(crate) async fn batch_refunds_credit_every_check<L>(limiter: &L)
where
    L: Limiter<Policy: WindowPolicy> + Lifecycle,
{
    let case = format!("{} batch refund", L::Policy::NAME);
    let case = case.as_str();
    let client = L::Policy::unique("refund.client", 5, Duration::from_secs(80));
    let identity = L::Policy::unique("refund.identity", 2, Duration::from_secs(80));
    let checks = [
        Check::new(&client, subject(33)),
        Check::new(&identity, subject(34)),
    ];
    assert_allowed(case, &decide(limiter, &checks[0], case).await, 4);
    let mut admission = match limiter.admit_all(&checks).await {
        Ok(admission) => admission,
        Err(error) => panic!("{case}: backend error: {error}"),
    };
    assert!(admission.decision().is_allowed(), "{case}: batch allowed");
    let receipt = admission
        .take_receipt()
        .unwrap_or_else(|| panic!("{case}: an allowed batch carries a receipt"));
    assert!(
        admission.take_receipt().is_none(),
        "{case}: one receipt only"
    );
    let refunded = refund(limiter, &checks, receipt, case).await;
    assert_eq!((refunded.credited(), refunded.checks()), (2, 2));
    assert_allowed(case, &decide(limiter, &checks[0], case).await, 3);
    assert_allowed(case, &decide(limiter, &checks[1], case).await, 1);

    let _ = decide(limiter, &checks[1], case).await;
    match limiter.admit_all(&checks).await {
        Ok(admission) => {
            assert!(!admission.decision().permits_request(), "{case}: denied");
            assert!(admission.into_parts().1.is_none(), "{case}: no receipt");
        }
        Err(error) => panic!("{case}: backend error: {error}"),
    }
}

/// A peek reports what a check would get, consuming and storing nothing.
pub(crate) async fn peek_reads_without_consuming<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy: WindowPolicy> + Lifecycle,
    T: TimeControl,
{
    let case = format!("{} peek", L::Policy::NAME);
    let case = case.as_str();
    let window = Duration::from_secs(80);
    let policy = L::Policy::unique("peek", 3, window);
    let check = Check::new(&policy, subject(37));
    // A key never seen reads as a full quota, with nothing to reset.
    let fresh = peek(limiter, &check, case).await;
    assert_allowed(case, &fresh, 3);
    assert_eq!(fresh.reset_after(), Some(Duration::ZERO), "{case}: fresh");
    assert_allowed(case, &decide(limiter, &check, case).await, 2);
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    for _ in 0..2 {
        let peeked = peek(limiter, &check, case).await;
        assert_allowed(case, &peeked, 1);
        L::Policy::assert_counted_for(
            case,
            "reset_after",
            peeked.reset_after(),
            window,
            time.drift(),
        );
    }
    let two = Check::weighted(&policy, subject(37), 2).unwrap_or_else(|error| panic!("{error}"));
    let denied = peek(limiter, &two, case).await;
    assert_quota_denied(case, &denied);
    L::Policy::assert_counted_for(
        case,
        "retry_after",
        denied.retry_after(),
        window,
        time.drift(),
    );
    // Nothing was consumed by the peeks.
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    assert_quota_denied(case, &peek(limiter, &check, case).await);

    let shadow = L::Policy::unique("peek.shadow", 1, window).in_mode(QuotaMode::Shadow);
    let shadow_check = Check::new(&shadow, subject(37));
    assert_allowed(case, &decide(limiter, &shadow_check, case).await, 0);
    let peeked = peek(limiter, &shadow_check, case).await;
    assert!(
        peeked.is_shadow_denied(),
        "{case}: shadow peek got {peeked:?}"
    );
}
