//! Refund, peek and reset cases, for backends implementing [`Lifecycle`].

use std::time::Duration;

use runlimit_core::{
    Check, Decision, FixedWindowPolicy, GcraPolicy, Lifecycle, Limiter, QuotaMode, Receipt,
    Refunded, SlidingWindowPolicy,
};

use crate::{
    TimeControl, assert_allowed, assert_between, assert_close, assert_quota_denied, decide,
    fixed_window, gcra, sliding_window, subject, windows,
};

pub(crate) async fn admit<L: Lifecycle>(
    limiter: &L,
    check: &Check<'_, L::Policy>,
    case: &str,
) -> Receipt {
    match limiter.admit(check).await {
        Ok(mut admission) => {
            assert!(
                admission.decision().is_allowed(),
                "{case}: expected an admission, got {:?}",
                admission.decision()
            );
            admission
                .take_receipt()
                .unwrap_or_else(|| panic!("{case}: an allowed check carries a receipt"))
        }
        Err(error) => panic!("{case}: backend error: {error}"),
    }
}

async fn refund<L: Lifecycle>(
    limiter: &L,
    checks: &[Check<'_, L::Policy>],
    receipt: Receipt,
    case: &str,
) -> Refunded {
    match limiter.refund(checks, receipt).await {
        Ok(refunded) => refunded,
        Err(error) => panic!("{case}: backend error on refund: {error:?}"),
    }
}

async fn peek<L: Lifecycle>(limiter: &L, check: &Check<'_, L::Policy>, case: &str) -> Decision {
    match limiter.peek(check).await {
        Ok(decision) => decision,
        Err(error) => panic!("{case}: backend error on peek: {error:?}"),
    }
}

async fn reset<L: Lifecycle>(limiter: &L, check: &Check<'_, L::Policy>, case: &str) -> bool {
    match limiter.reset(check.policy(), check.subject()).await {
        Ok(existed) => existed,
        Err(error) => panic!("{case}: backend error on reset: {error:?}"),
    }
}

/// Runs every fixed-window refund, peek and reset case.
pub async fn fixed_window_lifecycle_suite<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = FixedWindowPolicy> + Lifecycle,
    T: TimeControl,
{
    fixed_window_refund_restores_exactly(limiter).await;
    fixed_window_refund_of_a_lone_anchor_forgets_the_window(limiter, time).await;
    fixed_window_refund_after_renewal_credits_nothing(limiter, time).await;
    fixed_window_batch_refunds_credit_every_check(limiter).await;
    fixed_window_mismatched_refunds_change_nothing(limiter).await;
    fixed_window_peek_reads_without_consuming(limiter, time).await;
    fixed_window_reset_starts_afresh_and_voids_receipts(limiter, time).await;
}

/// A refund within the window gives back exactly what the check consumed.
pub async fn fixed_window_refund_restores_exactly<L>(limiter: &L)
where
    L: Limiter<Policy = FixedWindowPolicy> + Lifecycle,
{
    let case = "fixed window refund";
    let policy = fixed_window("refund", 3, Duration::from_secs(60));
    let check = Check::new(&policy, subject(30));
    assert_allowed(case, &decide(limiter, &check, case).await, 2);
    let receipt = admit(limiter, &check, case).await;
    let refunded = refund(limiter, &[check], receipt, case).await;
    assert_eq!(refunded.credited(), 1, "{case}: credited");
    // As if the refunded check had never been admitted: 2 remain before this one.
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    assert_quota_denied(case, &decide(limiter, &check, case).await);
}

/// Refunding the only check of a window forgets the window, so the next check
/// anchors a new one, as if the refunded check had never been admitted.
pub async fn fixed_window_refund_of_a_lone_anchor_forgets_the_window<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = FixedWindowPolicy> + Lifecycle,
    T: TimeControl,
{
    let case = "fixed window lone anchor";
    let window = Duration::from_secs(10);
    let policy = fixed_window("anchor.refund", 3, window);
    let check = Check::new(&policy, subject(31));
    let receipt = admit(limiter, &check, case).await;
    assert_eq!(refund(limiter, &[check], receipt, case).await.credited(), 1);
    time.advance(Duration::from_secs(4)).await;
    let next = decide(limiter, &check, case).await;
    assert_allowed(case, &next, 2);
    // A new window of its own, not the refunded check's (6 s left of it).
    assert_close(
        case,
        "reset_after",
        next.reset_after(),
        window,
        time.drift(),
    );
}

/// A refund never credits a window that has renewed since.
pub async fn fixed_window_refund_after_renewal_credits_nothing<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = FixedWindowPolicy> + Lifecycle,
    T: TimeControl,
{
    let case = "fixed window renewal";
    let window = Duration::from_secs(10);
    let policy = fixed_window("renewal", 2, window);
    let check = Check::new(&policy, subject(32));
    let receipt = admit(limiter, &check, case).await;
    time.advance(window).await;
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    let refunded = refund(limiter, &[check], receipt, case).await;
    assert_eq!(refunded.credited(), 0, "{case}: the window renewed");
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    assert_quota_denied(case, &decide(limiter, &check, case).await);
}

/// Refunding a batch credits every check of it, in one call.
pub async fn fixed_window_batch_refunds_credit_every_check<L>(limiter: &L)
where
    L: Limiter<Policy = FixedWindowPolicy> + Lifecycle,
{
    let case = "fixed window batch refund";
    let client = fixed_window("refund.client", 5, Duration::from_secs(60));
    let identity = fixed_window("refund.identity", 2, Duration::from_secs(60));
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

    // A denied batch consumed nothing, so it carries no receipt.
    let _ = decide(limiter, &checks[1], case).await;
    match limiter.admit_all(&checks).await {
        Ok(admission) => {
            assert!(!admission.decision().permits_request(), "{case}: denied");
            assert!(admission.into_parts().1.is_none(), "{case}: no receipt");
        }
        Err(error) => panic!("{case}: backend error: {error}"),
    }
}

/// A refund whose checks do not match its receipt is refused and changes
/// nothing.
pub async fn fixed_window_mismatched_refunds_change_nothing<L>(limiter: &L)
where
    L: Limiter<Policy = FixedWindowPolicy> + Lifecycle,
{
    windows::mismatched_refunds_change_nothing(limiter).await;
}

/// A peek reports what a check would get, consuming and storing nothing.
pub async fn fixed_window_peek_reads_without_consuming<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = FixedWindowPolicy> + Lifecycle,
    T: TimeControl,
{
    let case = "fixed window peek";
    let window = Duration::from_secs(30);
    let policy = fixed_window("peek", 3, window);
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
        assert_close(
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
    assert_close(
        case,
        "retry_after",
        denied.retry_after(),
        window,
        time.drift(),
    );
    // Nothing was consumed by the peeks.
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    assert_quota_denied(case, &peek(limiter, &check, case).await);

    let shadow = fixed_window("peek.shadow", 1, window).with_quota_mode(QuotaMode::Shadow);
    let shadow_check = Check::new(&shadow, subject(37));
    assert_allowed(case, &decide(limiter, &shadow_check, case).await, 0);
    let peeked = peek(limiter, &shadow_check, case).await;
    assert!(
        peeked.is_shadow_denied(),
        "{case}: shadow peek got {peeked:?}"
    );
}

/// A reset forgets the counter: the next check starts a fresh window, and
/// receipts issued before credit nothing.
pub async fn fixed_window_reset_starts_afresh_and_voids_receipts<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = FixedWindowPolicy> + Lifecycle,
    T: TimeControl,
{
    let case = "fixed window reset";
    let window = Duration::from_secs(20);
    let policy = fixed_window("reset", 2, window);
    let check = Check::new(&policy, subject(38));
    assert!(
        !reset(limiter, &check, case).await,
        "{case}: nothing to reset"
    );
    let receipt = admit(limiter, &check, case).await;
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    time.advance(Duration::from_secs(5)).await;
    assert!(reset(limiter, &check, case).await, "{case}: a live counter");
    assert!(
        !reset(limiter, &check, case).await,
        "{case}: already forgotten"
    );
    let fresh = decide(limiter, &check, case).await;
    assert_allowed(case, &fresh, 1);
    assert_close(
        case,
        "reset_after",
        fresh.reset_after(),
        window,
        time.drift(),
    );
    let refunded = refund(limiter, &[check], receipt, case).await;
    assert_eq!(
        refunded.credited(),
        0,
        "{case}: a receipt from before the reset"
    );
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
}

/// Runs every GCRA refund, peek and reset case.
pub async fn gcra_lifecycle_suite<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = GcraPolicy> + Lifecycle,
    T: TimeControl,
{
    gcra_immediate_refunds_restore_exactly(limiter).await;
    gcra_refund_after_replenishment_credits_nothing(limiter, time).await;
    gcra_peek_reads_without_consuming(limiter, time).await;
    gcra_reset_restores_the_burst_and_voids_receipts(limiter).await;
}

/// Refunding the latest admission at once gives back exactly its cost.
pub async fn gcra_immediate_refunds_restore_exactly<L>(limiter: &L)
where
    L: Limiter<Policy = GcraPolicy> + Lifecycle,
{
    let case = "gcra refund";
    // One unit per 10 s: no real clock replenishes one during the case.
    let policy = gcra("refund", 1, Duration::from_secs(10), 3);
    let check = Check::new(&policy, subject(40));
    assert_allowed(case, &decide(limiter, &check, case).await, 2);
    let receipt = admit(limiter, &check, case).await;
    assert_eq!(refund(limiter, &[check], receipt, case).await.credited(), 1);
    assert_allowed(case, &peek(limiter, &check, case).await, 2);
    let two = Check::weighted(&policy, subject(40), 2).unwrap_or_else(|error| panic!("{error}"));
    let receipt = admit(limiter, &two, case).await;
    assert_eq!(refund(limiter, &[two], receipt, case).await.credited(), 1);
    assert_allowed(case, &decide(limiter, &two, case).await, 0);
}

/// Once time has replenished what an admission consumed, refunding it gives
/// nothing more back.
pub async fn gcra_refund_after_replenishment_credits_nothing<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = GcraPolicy> + Lifecycle,
    T: TimeControl,
{
    let case = "gcra replenished refund";
    let policy = gcra("replenished", 1, Duration::from_millis(100), 2);
    let check = Check::new(&policy, subject(41));
    let receipt = admit(limiter, &check, case).await;
    time.elapse(Duration::from_millis(300)).await;
    let refunded = refund(limiter, &[check], receipt, case).await;
    assert_eq!(refunded.credited(), 0, "{case}: already replenished");
}

/// A GCRA peek reports the units available now and consumes nothing.
pub async fn gcra_peek_reads_without_consuming<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = GcraPolicy> + Lifecycle,
    T: TimeControl,
{
    let case = "gcra peek";
    let policy = gcra("peek", 1, Duration::from_secs(10), 2);
    let check = Check::new(&policy, subject(42));
    let fresh = peek(limiter, &check, case).await;
    assert_allowed(case, &fresh, 2);
    assert_eq!(fresh.reset_after(), Some(Duration::ZERO), "{case}: fresh");
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    let peeked = peek(limiter, &check, case).await;
    assert_allowed(case, &peeked, 1);
    assert_close(
        case,
        "reset_after",
        peeked.reset_after(),
        Duration::from_secs(10),
        time.drift(),
    );
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    let denied = peek(limiter, &check, case).await;
    assert_quota_denied(case, &denied);
    assert_close(
        case,
        "retry_after",
        denied.retry_after(),
        Duration::from_secs(10),
        time.drift(),
    );
    assert_quota_denied(case, &decide(limiter, &check, case).await);
}

/// A reset restores the full burst and voids earlier receipts.
pub async fn gcra_reset_restores_the_burst_and_voids_receipts<L>(limiter: &L)
where
    L: Limiter<Policy = GcraPolicy> + Lifecycle,
{
    let case = "gcra reset";
    let policy = gcra("reset", 1, Duration::from_secs(60), 2);
    let check = Check::new(&policy, subject(43));
    let receipt = admit(limiter, &check, case).await;
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    assert!(reset(limiter, &check, case).await, "{case}: a live counter");
    assert!(
        !reset(limiter, &check, case).await,
        "{case}: already forgotten"
    );
    assert_allowed(case, &peek(limiter, &check, case).await, 2);
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    let refunded = refund(limiter, &[check], receipt, case).await;
    assert_eq!(
        refunded.credited(),
        0,
        "{case}: a receipt from before the reset"
    );
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
}

/// Runs every sliding-window refund, peek and reset case.
pub async fn sliding_window_lifecycle_suite<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy> + Lifecycle,
    T: TimeControl,
{
    sliding_window_refund_restores_exactly(limiter).await;
    sliding_window_refund_after_release_credits_nothing(limiter, time).await;
    sliding_window_batch_refunds_credit_every_check(limiter).await;
    windows::mismatched_refunds_change_nothing(limiter).await;
    sliding_window_peek_reads_without_consuming(limiter, time).await;
    sliding_window_reset_starts_afresh_and_voids_receipts(limiter).await;
}

/// A refund gives back exactly what the check consumed, to the eighth it was
/// counted in.
pub async fn sliding_window_refund_restores_exactly<L>(limiter: &L)
where
    L: Limiter<Policy = SlidingWindowPolicy> + Lifecycle,
{
    let case = "sliding window refund";
    let policy = sliding_window("refund", 3, Duration::from_secs(80));
    let check = Check::new(&policy, subject(50));
    assert_allowed(case, &decide(limiter, &check, case).await, 2);
    let receipt = admit(limiter, &check, case).await;
    let refunded = refund(limiter, &[check], receipt, case).await;
    assert_eq!(refunded.credited(), 1, "{case}: credited");
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    assert_quota_denied(case, &decide(limiter, &check, case).await);
}

/// Once the units of an admission have been released, refunding it gives
/// nothing back.
pub async fn sliding_window_refund_after_release_credits_nothing<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy> + Lifecycle,
    T: TimeControl,
{
    let case = "sliding window released refund";
    let window = Duration::from_millis(400);
    let policy = sliding_window("released", 2, window);
    let check = Check::new(&policy, subject(51));
    let receipt = admit(limiter, &check, case).await;
    time.elapse(window / 8 * 10).await;
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    let refunded = refund(limiter, &[check], receipt, case).await;
    assert_eq!(refunded.credited(), 0, "{case}: already released");
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    assert_quota_denied(case, &decide(limiter, &check, case).await);
}

/// Refunding a batch credits every check of it, in one call.
pub async fn sliding_window_batch_refunds_credit_every_check<L>(limiter: &L)
where
    L: Limiter<Policy = SlidingWindowPolicy> + Lifecycle,
{
    let case = "sliding window batch refund";
    let client = sliding_window("refund.client", 5, Duration::from_secs(80));
    let identity = sliding_window("refund.identity", 2, Duration::from_secs(80));
    let checks = [
        Check::new(&client, subject(52)),
        Check::new(&identity, subject(53)),
    ];
    assert_allowed(case, &decide(limiter, &checks[0], case).await, 4);
    let receipt = match limiter.admit_all(&checks).await {
        Ok(admission) => admission
            .into_parts()
            .1
            .unwrap_or_else(|| panic!("{case}: an allowed batch carries a receipt")),
        Err(error) => panic!("{case}: backend error: {error}"),
    };
    let refunded = refund(limiter, &checks, receipt, case).await;
    assert_eq!((refunded.credited(), refunded.checks()), (2, 2));
    assert_allowed(case, &decide(limiter, &checks[0], case).await, 3);
    assert_allowed(case, &decide(limiter, &checks[1], case).await, 1);
}

/// A peek reports what a check would get, consuming and storing nothing.
pub async fn sliding_window_peek_reads_without_consuming<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy> + Lifecycle,
    T: TimeControl,
{
    let case = "sliding window peek";
    let window = Duration::from_secs(80);
    let within = (window, window + window / 8);
    let policy = sliding_window("peek", 3, window);
    let check = Check::new(&policy, subject(54));
    let fresh = peek(limiter, &check, case).await;
    assert_allowed(case, &fresh, 3);
    assert_eq!(fresh.reset_after(), Some(Duration::ZERO), "{case}: fresh");
    assert_allowed(case, &decide(limiter, &check, case).await, 2);
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    for _ in 0..2 {
        let peeked = peek(limiter, &check, case).await;
        assert_allowed(case, &peeked, 1);
        assert_between(
            case,
            "reset_after",
            peeked.reset_after(),
            within,
            time.drift(),
        );
    }
    let two = Check::weighted(&policy, subject(54), 2).unwrap_or_else(|error| panic!("{error}"));
    let denied = peek(limiter, &two, case).await;
    assert_quota_denied(case, &denied);
    assert_between(
        case,
        "retry_after",
        denied.retry_after(),
        within,
        time.drift(),
    );
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    assert_quota_denied(case, &peek(limiter, &check, case).await);

    let shadow = sliding_window("peek.shadow", 1, window).with_quota_mode(QuotaMode::Shadow);
    let shadow_check = Check::new(&shadow, subject(54));
    assert_allowed(case, &decide(limiter, &shadow_check, case).await, 0);
    let peeked = peek(limiter, &shadow_check, case).await;
    assert!(
        peeked.is_shadow_denied(),
        "{case}: shadow peek got {peeked:?}"
    );
}

/// A reset forgets the counter, and receipts issued before credit nothing,
/// even against units counted in the same eighth since.
pub async fn sliding_window_reset_starts_afresh_and_voids_receipts<L>(limiter: &L)
where
    L: Limiter<Policy = SlidingWindowPolicy> + Lifecycle,
{
    let case = "sliding window reset";
    let policy = sliding_window("reset", 2, Duration::from_secs(80));
    let check = Check::new(&policy, subject(55));
    assert!(
        !reset(limiter, &check, case).await,
        "{case}: nothing to reset"
    );
    let receipt = admit(limiter, &check, case).await;
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    assert!(reset(limiter, &check, case).await, "{case}: a live counter");
    assert!(
        !reset(limiter, &check, case).await,
        "{case}: already forgotten"
    );
    assert_allowed(case, &peek(limiter, &check, case).await, 2);
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    let refunded = refund(limiter, &[check], receipt, case).await;
    assert_eq!(
        refunded.credited(),
        0,
        "{case}: a receipt from before the reset"
    );
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
}
