//! Admission cases for anchored fixed windows.

use std::time::Duration;

use runlimit_core::{BatchDecision, Check, FixedWindowPolicy, Limiter};

use crate::{
    TimeControl, assert_allowed, assert_close, assert_quota_denied, decide, decide_all,
    decides_at_once_as_awaited, fixed_window, subject, windows,
};

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
    fixed_window_decides_at_once_as_awaited(limiter).await;
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
    windows::weighted_costs(limiter).await;
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
    windows::batch_caller_errors_consume_nothing(limiter).await;
}

/// A shadow denial permits the request, reports it would deny, and consumes
/// nothing; promoting the policy to enforcement keeps its counter.
pub async fn fixed_window_shadow_mode<L>(limiter: &L)
where
    L: Limiter<Policy = FixedWindowPolicy>,
{
    windows::shadow_mode(limiter).await;
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
    windows::policies_are_independent(limiter).await;
}

/// A check decided at once is the one the awaited check would give.
pub async fn fixed_window_decides_at_once_as_awaited<L>(limiter: &L)
where
    L: Limiter<Policy = FixedWindowPolicy>,
{
    let case = "fixed window decided at once";
    let policy = fixed_window("at-once", 2, Duration::from_secs(60));
    decides_at_once_as_awaited(limiter, &policy, case).await;
}
