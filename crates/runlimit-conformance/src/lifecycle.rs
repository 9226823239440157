//! Refund, peek and reset cases, for backends implementing [`Lifecycle`].

use std::time::Duration;

use runlimit_core::{
    Check, Decision, FixedWindowPolicy, GcraPolicy, Lifecycle, Limiter, Receipt, Refunded,
    SlidingWindowPolicy,
};

use crate::{
    TimeControl, assert_allowed, assert_close, assert_quota_denied, decide, fixed_window, gcra,
    sliding_window, subject, windows,
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

pub(crate) async fn refund<L: Lifecycle>(
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

pub(crate) async fn peek<L: Lifecycle>(
    limiter: &L,
    check: &Check<'_, L::Policy>,
    case: &str,
) -> Decision {
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
    windows::refund_restores_exactly(limiter).await;
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
    windows::batch_refunds_credit_every_check(limiter).await;
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
    windows::peek_reads_without_consuming(limiter, time).await;
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
    gcra_refund_of_an_admission_queued_behind_credits_nothing(limiter).await;
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

/// Only the latest admission is credited: refunding one that a later
/// admission queued behind credits nothing (crediting it would move the later
/// one's increment earlier), and the later one's refund still credits.
pub async fn gcra_refund_of_an_admission_queued_behind_credits_nothing<L>(limiter: &L)
where
    L: Limiter<Policy = GcraPolicy> + Lifecycle,
{
    let case = "gcra refund of an earlier admission";
    // One unit per 10 s: no real clock replenishes one during the case.
    let policy = gcra("earlier", 1, Duration::from_secs(10), 3);
    let check = Check::new(&policy, subject(44));
    let first = admit(limiter, &check, case).await;
    let second = admit(limiter, &check, case).await;
    let refunded = refund(limiter, &[check], first, case).await;
    assert_eq!(
        refunded.credited(),
        0,
        "{case}: a later admission queued behind"
    );
    assert_allowed(case, &peek(limiter, &check, case).await, 1);
    let refunded = refund(limiter, &[check], second, case).await;
    assert_eq!(refunded.credited(), 1, "{case}: the latest admission");
    assert_allowed(case, &peek(limiter, &check, case).await, 2);
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
    windows::refund_restores_exactly(limiter).await;
}

/// Once the units of an admission have been released, refunding it gives
/// nothing back.
pub async fn sliding_window_refund_after_release_credits_nothing<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy> + Lifecycle,
    T: TimeControl,
{
    let case = "sliding window released refund";
    // The three checks after the wait must fall in one window: on a backend
    // whose clock runs on its own, a window of many times its drift keeps a
    // stalled machine (a full CI run on two cores stalled one for 400 ms)
    // from rolling them out between two of them.
    let window = Duration::from_millis(400).max(time.drift() * 8);
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
    windows::batch_refunds_credit_every_check(limiter).await;
}

/// A peek reports what a check would get, consuming and storing nothing.
pub async fn sliding_window_peek_reads_without_consuming<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy> + Lifecycle,
    T: TimeControl,
{
    windows::peek_reads_without_consuming(limiter, time).await;
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
