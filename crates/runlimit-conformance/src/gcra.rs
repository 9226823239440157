//! Admission cases for GCRA.

use std::time::Duration;

use runlimit_core::{BatchDecision, Check, GcraPolicy, Limiter, QuotaMode};

use crate::{
    TimeControl, assert_allowed, assert_close, assert_quota_denied, decide, decide_all,
    decides_at_once_as_awaited, gcra, subject,
};

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
    gcra_decides_at_once_as_awaited(limiter).await;
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

/// A check decided at once is the one the awaited check would give.
pub async fn gcra_decides_at_once_as_awaited<L>(limiter: &L)
where
    L: Limiter<Policy = GcraPolicy>,
{
    let case = "gcra decided at once";
    let policy = gcra("at-once", 1, Duration::from_secs(60), 2);
    decides_at_once_as_awaited(limiter, &policy, case).await;
}
