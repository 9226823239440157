//! Grant cases, for backends implementing [`Grant`]: between a check's cost
//! and a bound, as many units as fit, or nothing.

use std::time::Duration;

use runlimit_core::{
    Check, FixedWindowPolicy, GcraPolicy, Grant, Granted, Policy, SlidingWindowPolicy,
};

use crate::{
    assert_allowed, assert_quota_denied, decide, gcra, lifecycle::peek, subject,
    windows::WindowPolicy,
};

async fn grant<L: Grant>(
    limiter: &L,
    check: &Check<'_, L::Policy>,
    up_to: u64,
    case: &str,
) -> Granted {
    match limiter.grant(check, up_to).await {
        Ok(granted) => granted,
        Err(error) => panic!("{case}: backend error on grant: {error:?}"),
    }
}

fn weighted<P: Policy>(policy: &P, n: u8, cost: u64) -> Check<'_, P> {
    Check::weighted(policy, subject(n), cost).unwrap_or_else(|error| panic!("{error}"))
}

/// Runs every fixed-window grant case.
pub async fn fixed_window_grant_suite<L>(limiter: &L)
where
    L: Grant<Policy = FixedWindowPolicy>,
{
    grants_cover_every_window_case(limiter).await;
}

/// Runs every sliding-window grant case.
pub async fn sliding_window_grant_suite<L>(limiter: &L)
where
    L: Grant<Policy = SlidingWindowPolicy>,
{
    grants_cover_every_window_case(limiter).await;
}

async fn grants_cover_every_window_case<L>(limiter: &L)
where
    L: Grant<Policy: WindowPolicy>,
{
    a_grant_takes_up_to_its_bound(limiter).await;
    a_grant_takes_what_fits_when_less_than_its_bound(limiter).await;
    a_grant_where_not_even_the_cost_fits_consumes_nothing(limiter).await;
    a_grant_is_settled_like_a_check_of_its_units(limiter).await;
}

/// A fresh counter grants the whole bound, raised to the cost and lowered
/// to the capacity.
pub(crate) async fn a_grant_takes_up_to_its_bound<L>(limiter: &L)
where
    L: Grant<Policy: WindowPolicy>,
{
    let case = format!("{} grant", L::Policy::NAME);
    let case = case.as_str();
    let policy = L::Policy::unique("grant", 10, Duration::from_secs(80));
    let check = Check::new(&policy, subject(80));
    let mut granted = grant(limiter, &check, 4, case).await;
    assert_eq!(granted.units(), 4, "{case}: the bound");
    assert_allowed(case, granted.decision(), 6);
    assert!(granted.take_receipt().is_some(), "{case}: a receipt");
    assert_allowed(case, &peek(limiter, &check, case).await, 6);

    let three = weighted(&policy, 81, 3);
    let granted = grant(limiter, &three, 1, case).await;
    assert_eq!(granted.units(), 3, "{case}: raised to the cost");

    let granted = grant(limiter, &check, u64::MAX, case).await;
    assert_eq!(granted.units(), 6, "{case}: what is left of the window");
    let fresh = Check::new(&policy, subject(82));
    let granted = grant(limiter, &fresh, u64::MAX, case).await;
    assert_eq!(granted.units(), 10, "{case}: lowered to the capacity");
    assert_allowed(case, granted.decision(), 0);
}

/// A grant takes exactly what is left when that is less than its bound.
pub(crate) async fn a_grant_takes_what_fits_when_less_than_its_bound<L>(limiter: &L)
where
    L: Grant<Policy: WindowPolicy>,
{
    let case = format!("{} grant of what fits", L::Policy::NAME);
    let case = case.as_str();
    let policy = L::Policy::unique("grant.fits", 10, Duration::from_secs(80));
    let check = Check::new(&policy, subject(83));
    assert_allowed(
        case,
        &decide(limiter, &weighted(&policy, 83, 3), case).await,
        7,
    );
    let granted = grant(limiter, &check, 100, case).await;
    assert_eq!(granted.units(), 7, "{case}: the rest");
    assert_allowed(case, granted.decision(), 0);
    assert_quota_denied(case, &decide(limiter, &check, case).await);
}

/// Where not even the check's cost fits, a grant denies as the check would
/// and consumes nothing.
pub(crate) async fn a_grant_where_not_even_the_cost_fits_consumes_nothing<L>(limiter: &L)
where
    L: Grant<Policy: WindowPolicy>,
{
    let case = format!("{} denied grant", L::Policy::NAME);
    let case = case.as_str();
    let policy = L::Policy::unique("grant.denied", 4, Duration::from_secs(80));
    assert_allowed(
        case,
        &decide(limiter, &weighted(&policy, 84, 3), case).await,
        1,
    );
    let mut granted = grant(limiter, &weighted(&policy, 84, 2), 4, case).await;
    assert_eq!(granted.units(), 0, "{case}: nothing granted");
    assert_quota_denied(case, granted.decision());
    assert!(granted.take_receipt().is_none(), "{case}: no receipt");
    assert_allowed(
        case,
        &peek(limiter, &Check::new(&policy, subject(84)), case).await,
        1,
    );
}

/// A grant's receipt is a check of its units: a settlement gives back what
/// was not spent.
pub(crate) async fn a_grant_is_settled_like_a_check_of_its_units<L>(limiter: &L)
where
    L: Grant<Policy: WindowPolicy>,
{
    let case = format!("{} settled grant", L::Policy::NAME);
    let case = case.as_str();
    let policy = L::Policy::unique("grant.settled", 10, Duration::from_secs(80));
    let check = Check::new(&policy, subject(85));
    let mut granted = grant(limiter, &check, 6, case).await;
    let receipt = granted
        .take_receipt()
        .unwrap_or_else(|| panic!("{case}: a receipt"));
    let as_admitted = weighted(&policy, 85, granted.units());
    let refunded = limiter
        .settle(&[as_admitted], receipt, &[2])
        .await
        .unwrap_or_else(|error| panic!("{case}: backend error on settle: {error:?}"));
    assert_eq!(refunded.credited(), 1, "{case}: credited");
    assert_allowed(case, &peek(limiter, &check, case).await, 8);
}

/// Runs every GCRA grant case.
pub async fn gcra_grant_suite<L>(limiter: &L)
where
    L: Grant<Policy = GcraPolicy>,
{
    let case = "gcra grant";
    // One unit per 10 s: no real clock replenishes one during the case.
    let policy = gcra("grant", 1, Duration::from_secs(10), 10);
    let check = Check::new(&policy, subject(90));
    let granted = grant(limiter, &check, 4, case).await;
    assert_eq!(granted.units(), 4, "{case}: the bound");
    assert_allowed(case, granted.decision(), 6);
    let granted = grant(limiter, &check, 100, case).await;
    assert_eq!(granted.units(), 6, "{case}: what is left of the burst");
    assert_allowed(case, granted.decision(), 0);
    let mut denied = grant(limiter, &check, 100, case).await;
    assert_eq!(denied.units(), 0, "{case}: nothing left");
    assert_quota_denied(case, denied.decision());
    assert!(denied.take_receipt().is_none(), "{case}: no receipt");

    let case = "gcra grant of a fractional increment";
    // 3 units per 1 s (an increment of 333 333 µs and a third), a burst of 7.
    let policy = gcra("grant.fraction", 3, Duration::from_secs(1), 7);
    let two = weighted(&policy, 91, 2);
    assert_allowed(case, &decide(limiter, &two, case).await, 5);
    let mut granted = grant(limiter, &two, 50, case).await;
    assert_eq!(granted.units(), 5, "{case}: what is left of the burst");
    let receipt = granted
        .take_receipt()
        .unwrap_or_else(|| panic!("{case}: a receipt"));
    let as_admitted = weighted(&policy, 91, 5);
    limiter
        .settle(&[as_admitted], receipt, &[1])
        .await
        .unwrap_or_else(|error| panic!("{case}: backend error on settle: {error:?}"));
    // 2 + 1 kept of 7; a real clock may have replenished a fraction, not a unit.
    assert_allowed(
        case,
        &peek(limiter, &Check::new(&policy, subject(91)), case).await,
        4,
    );
}
