//! Settlement cases, for backends implementing [`Settle`]: a reservation
//! settled to what it used gives back the rest, under a refund's rules.

use std::time::Duration;

use runlimit_core::{Check, FixedWindowPolicy, GcraPolicy, Refunded, Settle, SlidingWindowPolicy};

use crate::{
    TimeControl, assert_allowed, assert_close, assert_quota_denied, decide, gcra,
    lifecycle::{admit, peek},
    subject,
    windows::WindowPolicy,
};

async fn settle<L: Settle>(
    limiter: &L,
    checks: &[Check<'_, L::Policy>],
    receipt: runlimit_core::Receipt,
    used: &[u64],
    case: &str,
) -> Refunded {
    match limiter.settle(checks, receipt, used).await {
        Ok(refunded) => refunded,
        Err(error) => panic!("{case}: backend error on settle: {error:?}"),
    }
}

fn weighted<P: runlimit_core::Policy>(policy: &P, n: u8, cost: u64) -> Check<'_, P> {
    Check::weighted(policy, subject(n), cost).unwrap_or_else(|error| panic!("{error}"))
}

/// Runs every fixed-window settlement case.
pub async fn fixed_window_settle_suite<L, T>(limiter: &L, time: &T)
where
    L: Settle<Policy = FixedWindowPolicy>,
    T: TimeControl,
{
    settle_gives_back_the_unused_part(limiter).await;
    settle_keeping_everything_changes_nothing(limiter).await;
    settle_of_a_batch_credits_each_check(limiter).await;
    invalid_settlements_change_nothing(limiter).await;
    fixed_window_settle_of_a_lone_anchor_keeps_its_window(limiter, time).await;
    fixed_window_settle_after_renewal_credits_nothing(limiter, time).await;
}

/// Runs every sliding-window settlement case.
pub async fn sliding_window_settle_suite<L, T>(limiter: &L, time: &T)
where
    L: Settle<Policy = SlidingWindowPolicy>,
    T: TimeControl,
{
    settle_gives_back_the_unused_part(limiter).await;
    settle_keeping_everything_changes_nothing(limiter).await;
    settle_of_a_batch_credits_each_check(limiter).await;
    invalid_settlements_change_nothing(limiter).await;
    sliding_window_settle_after_release_credits_nothing(limiter, time).await;
}

/// Runs every GCRA settlement case.
pub async fn gcra_settle_suite<L, T>(limiter: &L, time: &T)
where
    L: Settle<Policy = GcraPolicy>,
    T: TimeControl,
{
    gcra_settle_leaves_what_the_used_part_would(limiter).await;
    gcra_settle_after_replenishment_credits_nothing(limiter, time).await;
    gcra_invalid_settlements_change_nothing(limiter).await;
}

/// Settling a reservation of 6 to 2 used leaves the quota as if 2 had been
/// admitted.
pub(crate) async fn settle_gives_back_the_unused_part<L>(limiter: &L)
where
    L: Settle<Policy: WindowPolicy>,
{
    let case = format!("{} settle", L::Policy::NAME);
    let case = case.as_str();
    let policy = L::Policy::unique("settle", 10, Duration::from_secs(80));
    let reservation = weighted(&policy, 60, 6);
    let receipt = admit(limiter, &reservation, case).await;
    let refunded = settle(limiter, &[reservation], receipt, &[2], case).await;
    assert_eq!(refunded.credited(), 1, "{case}: credited");
    let one = Check::new(&policy, subject(60));
    assert_allowed(case, &decide(limiter, &one, case).await, 7);
    let rest = weighted(&policy, 60, 7);
    assert_allowed(case, &decide(limiter, &rest, case).await, 0);
    assert_quota_denied(case, &decide(limiter, &one, case).await);
}

/// Settling to the whole cost keeps the charge and credits nothing.
pub(crate) async fn settle_keeping_everything_changes_nothing<L>(limiter: &L)
where
    L: Settle<Policy: WindowPolicy>,
{
    let case = format!("{} settle to the whole cost", L::Policy::NAME);
    let case = case.as_str();
    let policy = L::Policy::unique("settle.whole", 5, Duration::from_secs(80));
    let reservation = weighted(&policy, 61, 3);
    let receipt = admit(limiter, &reservation, case).await;
    let refunded = settle(limiter, &[reservation], receipt, &[3], case).await;
    assert_eq!(refunded.credited(), 0, "{case}: nothing to give back");
    assert_eq!(refunded.checks(), 1, "{case}: one check");
    assert_allowed(
        case,
        &peek(limiter, &Check::new(&policy, subject(61)), case).await,
        2,
    );
}

/// A batch's settlement gives each check back its own unused part.
pub(crate) async fn settle_of_a_batch_credits_each_check<L>(limiter: &L)
where
    L: Settle<Policy: WindowPolicy>,
{
    let case = format!("{} batch settle", L::Policy::NAME);
    let case = case.as_str();
    let client = L::Policy::unique("settle.client", 10, Duration::from_secs(80));
    let identity = L::Policy::unique("settle.identity", 4, Duration::from_secs(80));
    let checks = [weighted(&client, 62, 5), weighted(&identity, 63, 4)];
    let mut admission = limiter
        .admit_all(&checks)
        .await
        .unwrap_or_else(|error| panic!("{case}: backend error: {error}"));
    let receipt = admission
        .take_receipt()
        .unwrap_or_else(|| panic!("{case}: an allowed batch carries a receipt"));
    let refunded = settle(limiter, &checks, receipt, &[1, 0], case).await;
    assert_eq!(refunded.credited(), 2, "{case}: both credited");
    assert_allowed(
        case,
        &peek(limiter, &Check::new(&client, subject(62)), case).await,
        9,
    );
    assert_allowed(
        case,
        &peek(limiter, &Check::new(&identity, subject(63)), case).await,
        4,
    );
}

/// A settlement that uses more than a check consumed, or names a number of
/// used amounts other than the number of checks, is refused and changes
/// nothing.
pub(crate) async fn invalid_settlements_change_nothing<L>(limiter: &L)
where
    L: Settle<Policy: WindowPolicy>,
{
    let case = format!("{} invalid settle", L::Policy::NAME);
    let case = case.as_str();
    let policy = L::Policy::unique("settle.invalid", 9, Duration::from_secs(80));
    let reservation = weighted(&policy, 64, 3);
    let receipt = admit(limiter, &reservation, case).await;
    assert!(
        limiter.settle(&[reservation], receipt, &[4]).await.is_err(),
        "{case}: more used than consumed"
    );
    let receipt = admit(limiter, &reservation, case).await;
    assert!(
        limiter.settle(&[reservation], receipt, &[]).await.is_err(),
        "{case}: no used amount"
    );
    let receipt = admit(limiter, &reservation, case).await;
    let other = weighted(&policy, 65, 3);
    assert!(
        limiter.settle(&[other], receipt, &[0]).await.is_err(),
        "{case}: a receipt for another subject"
    );
    // Three reservations of 3, none given back.
    assert_quota_denied(case, &decide(limiter, &reservation, case).await);
    assert_allowed(case, &decide(limiter, &other, case).await, 6);
}

/// Settling the only check of a window keeps the window it anchored (a check
/// of the used cost would have anchored the same one).
pub async fn fixed_window_settle_of_a_lone_anchor_keeps_its_window<L, T>(limiter: &L, time: &T)
where
    L: Settle<Policy = FixedWindowPolicy>,
    T: TimeControl,
{
    let case = "fixed window settle of a lone anchor";
    let window = Duration::from_secs(10);
    let policy = FixedWindowPolicy::unique("settle.anchor", 5, window);
    let reservation = weighted(&policy, 66, 4);
    let receipt = admit(limiter, &reservation, case).await;
    let refunded = settle(limiter, &[reservation], receipt, &[1], case).await;
    assert_eq!(refunded.credited(), 1, "{case}: credited");
    time.advance(Duration::from_secs(4)).await;
    let next = decide(limiter, &Check::new(&policy, subject(66)), case).await;
    assert_allowed(case, &next, 3);
    // The settled check's window: 6 s of it left.
    assert_close(
        case,
        "reset_after",
        next.reset_after(),
        Duration::from_secs(6),
        time.drift(),
    );
}

/// A settlement never credits a window that has renewed since.
pub async fn fixed_window_settle_after_renewal_credits_nothing<L, T>(limiter: &L, time: &T)
where
    L: Settle<Policy = FixedWindowPolicy>,
    T: TimeControl,
{
    let case = "fixed window settle after renewal";
    let window = Duration::from_secs(10);
    let policy = FixedWindowPolicy::unique("settle.renewal", 4, window);
    let reservation = weighted(&policy, 67, 3);
    let receipt = admit(limiter, &reservation, case).await;
    time.advance(window).await;
    assert_allowed(case, &decide(limiter, &reservation, case).await, 1);
    let refunded = settle(limiter, &[reservation], receipt, &[1], case).await;
    assert_eq!(refunded.credited(), 0, "{case}: the window renewed");
    assert_allowed(
        case,
        &decide(limiter, &Check::new(&policy, subject(67)), case).await,
        0,
    );
}

/// Once the units of a reservation have been released, settling it gives
/// nothing back.
pub async fn sliding_window_settle_after_release_credits_nothing<L, T>(limiter: &L, time: &T)
where
    L: Settle<Policy = SlidingWindowPolicy>,
    T: TimeControl,
{
    let case = "sliding window settle after release";
    // As in the refund case: a window of many times the clock's drift.
    let window = Duration::from_millis(400).max(time.drift() * 8);
    let policy = SlidingWindowPolicy::unique("settle.released", 3, window);
    let reservation = weighted(&policy, 68, 3);
    let receipt = admit(limiter, &reservation, case).await;
    time.elapse(window / 8 * 10).await;
    assert_allowed(case, &decide(limiter, &reservation, case).await, 0);
    let refunded = settle(limiter, &[reservation], receipt, &[1], case).await;
    assert_eq!(refunded.credited(), 0, "{case}: already released");
    assert_quota_denied(
        case,
        &decide(limiter, &Check::new(&policy, subject(68)), case).await,
    );
}

/// Settling a GCRA reservation at once leaves the burst as if only the used
/// part had been admitted.
pub async fn gcra_settle_leaves_what_the_used_part_would<L>(limiter: &L)
where
    L: Settle<Policy = GcraPolicy>,
{
    let case = "gcra settle";
    // One unit per 10 s: no real clock replenishes one during the case.
    let policy = gcra("settle", 1, Duration::from_secs(10), 10);
    let reservation = weighted(&policy, 70, 6);
    let receipt = admit(limiter, &reservation, case).await;
    let refunded = settle(limiter, &[reservation], receipt, &[2], case).await;
    assert_eq!(refunded.credited(), 1, "{case}: credited");
    let one = Check::new(&policy, subject(70));
    assert_allowed(case, &peek(limiter, &one, case).await, 8);
    let rest = weighted(&policy, 70, 8);
    assert_allowed(case, &decide(limiter, &rest, case).await, 0);
    assert_quota_denied(case, &decide(limiter, &one, case).await);
}

/// Once time has replenished a reservation, settling it gives nothing back.
pub async fn gcra_settle_after_replenishment_credits_nothing<L, T>(limiter: &L, time: &T)
where
    L: Settle<Policy = GcraPolicy>,
    T: TimeControl,
{
    let case = "gcra settle after replenishment";
    let policy = gcra("settle.replenished", 1, Duration::from_millis(100), 3);
    let reservation = weighted(&policy, 71, 3);
    let receipt = admit(limiter, &reservation, case).await;
    time.elapse(Duration::from_millis(500)).await;
    let refunded = settle(limiter, &[reservation], receipt, &[1], case).await;
    assert_eq!(refunded.credited(), 0, "{case}: already replenished");
}

/// A GCRA settlement that uses more than the check consumed is refused and
/// changes nothing.
pub async fn gcra_invalid_settlements_change_nothing<L>(limiter: &L)
where
    L: Settle<Policy = GcraPolicy>,
{
    let case = "gcra invalid settle";
    let policy = gcra("settle.invalid", 1, Duration::from_secs(10), 4);
    let reservation = weighted(&policy, 72, 2);
    let receipt = admit(limiter, &reservation, case).await;
    assert!(
        limiter.settle(&[reservation], receipt, &[3]).await.is_err(),
        "{case}: more used than consumed"
    );
    assert_allowed(
        case,
        &peek(limiter, &Check::new(&policy, subject(72)), case).await,
        2,
    );
}
