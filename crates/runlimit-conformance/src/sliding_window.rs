//! Admission cases for sliding windows.
//!
//! A backend counts units in eighths of the window, aligned to its clock, so
//! where in an eighth a case happens to run is outside the case's control. The
//! assertions therefore use what holds wherever it runs: a unit admitted at
//! `s` is released after `s + window` and no later than `s + window +
//! window / 8`; a reported `reset_after` or `retry_after` lies in that range,
//! less the time elapsed since `s`. Time is only advanced by whole eighths,
//! so a backend that shifts stored state stays exact.

use std::time::Duration;

use runlimit_core::{BatchDecision, Check, Limiter, MAX_LIMIT, MAX_WINDOW, SlidingWindowPolicy};

use crate::{
    TimeControl, assert_allowed, assert_between, assert_quota_denied, decide, decide_all,
    decides_at_once_as_awaited, sliding_window, subject, windows,
};

/// Runs every sliding-window case.
pub async fn sliding_window_suite<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy>,
    T: TimeControl,
{
    sliding_window_counts_every_window(limiter, time).await;
    sliding_window_releases_units_by_eighths(limiter, time).await;
    sliding_window_denials_consume_nothing(limiter, time).await;
    windows::weighted_costs(limiter).await;
    sliding_window_batches_are_atomic_and_ordered(limiter, time).await;
    windows::batch_caller_errors_consume_nothing(limiter).await;
    windows::shadow_mode(limiter).await;
    sliding_window_retry_after_rounding(limiter, time).await;
    windows::policies_are_independent(limiter).await;
    sliding_window_extremes_are_exact(limiter, time).await;
    sliding_window_decides_at_once_as_awaited(limiter).await;
}

/// The range a time reported `elapsed` after a unit's admission lies in:
/// after the window has passed since the admission, at most an eighth later.
fn release(window: Duration, elapsed: Duration) -> (Duration, Duration) {
    (
        window.saturating_sub(elapsed),
        (window + window / 8).saturating_sub(elapsed),
    )
}

/// No second quota within one window, wherever it starts: the burst a fixed
/// window allows across its boundary is refused until a whole window (and at
/// most an eighth more) has passed.
pub async fn sliding_window_counts_every_window<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy>,
    T: TimeControl,
{
    let case = "sliding window counting";
    let window = Duration::from_secs(80);
    let eighth = window / 8;
    let policy = sliding_window("count", 4, window);
    let check = Check::new(&policy, subject(1));
    for left in (0..4).rev() {
        let allowed = decide(limiter, &check, case).await;
        assert_allowed(case, &allowed, left);
        assert_between(
            case,
            "reset_after",
            allowed.reset_after(),
            release(window, Duration::ZERO),
            time.drift(),
        );
    }
    let denied = decide(limiter, &check, case).await;
    assert_quota_denied(case, &denied);
    assert_between(
        case,
        "retry_after",
        denied.retry_after(),
        release(window, Duration::ZERO),
        time.drift(),
    );

    // Seven eighths later a fixed window of 70 s would have renewed; this one
    // still counts every unit.
    time.advance(eighth * 7).await;
    let denied = decide(limiter, &check, case).await;
    assert_quota_denied(case, &denied);
    assert_between(
        case,
        "retry_after",
        denied.retry_after(),
        release(window, eighth * 7),
        time.drift(),
    );

    // Nine eighths after the admissions, all four have been released.
    time.advance(eighth * 2).await;
    assert_allowed(case, &decide(limiter, &check, case).await, 3);
}

/// Units admitted at different times are released separately, each about a
/// window after its own admission.
pub async fn sliding_window_releases_units_by_eighths<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy>,
    T: TimeControl,
{
    let case = "sliding window release";
    let window = Duration::from_secs(80);
    let eighth = window / 8;
    let policy = sliding_window("release", 3, window);
    let one = Check::new(&policy, subject(2));
    let two = Check::weighted(&policy, subject(2), 2).unwrap_or_else(|error| panic!("{error}"));
    let three = Check::weighted(&policy, subject(2), 3).unwrap_or_else(|error| panic!("{error}"));
    assert_allowed(case, &decide(limiter, &one, case).await, 2);
    time.advance(eighth * 4).await;
    assert_allowed(case, &decide(limiter, &two, case).await, 0);
    // One unit fits once the first is released, about half a window from now.
    let denied = decide(limiter, &one, case).await;
    assert_quota_denied(case, &denied);
    assert_between(
        case,
        "retry_after",
        denied.retry_after(),
        release(window, eighth * 4),
        time.drift(),
    );
    // All three only once the later two are released too.
    let denied = decide(limiter, &three, case).await;
    assert_quota_denied(case, &denied);
    assert_between(
        case,
        "retry_after",
        denied.retry_after(),
        release(window, Duration::ZERO),
        time.drift(),
    );
    time.advance(eighth * 5).await;
    assert_allowed(case, &decide(limiter, &one, case).await, 0);
    assert_quota_denied(case, &decide(limiter, &one, case).await);
}

/// Denied checks consume nothing and delay no release.
pub async fn sliding_window_denials_consume_nothing<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy>,
    T: TimeControl,
{
    let case = "sliding window denial";
    let window = Duration::from_secs(80);
    let policy = sliding_window("deny", 2, window);
    let check = Check::new(&policy, subject(3));
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    for _ in 0..3 {
        let denied = decide(limiter, &check, case).await;
        assert_quota_denied(case, &denied);
        assert!(
            !denied.permits_request(),
            "{case}: enforced denial permitted"
        );
    }
    time.advance(window / 8 * 9).await;
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
}

/// A batch is all-or-nothing and allowed decisions keep input order.
pub async fn sliding_window_batches_are_atomic_and_ordered<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy>,
    T: TimeControl,
{
    let case = "sliding window batch";
    let client = sliding_window("batch.client", 5, Duration::from_secs(64));
    let identity = sliding_window("batch.identity", 2, Duration::from_secs(32));
    let checks = [
        Check::new(&client, subject(4)),
        Check::new(&identity, subject(5)),
    ];
    let first = decide_all(limiter, &checks, case).await;
    let decisions = first
        .decisions()
        .unwrap_or_else(|| panic!("{case}: expected allowed, got {first:?}"));
    assert_eq!(decisions.len(), 2, "{case}: decision count");
    assert_allowed(case, &decisions[0], 4);
    assert_allowed(case, &decisions[1], 1);
    assert_eq!(decisions[0].limit(), Some(5), "{case}: order");
    assert!(
        decide_all(limiter, &checks, case).await.is_allowed(),
        "{case}: second batch"
    );
    match decide_all(limiter, &checks, case).await {
        BatchDecision::Denied { index, denial } => {
            assert_eq!(index, 1, "{case}: denied index");
            assert!(denial.is_quota_exceeded(), "{case}: denial kind");
            assert_between(
                case,
                "retry_after",
                denial.retry_after(),
                release(Duration::from_secs(32), Duration::ZERO),
                time.drift(),
            );
        }
        other => panic!("{case}: expected a denied batch, got {other:?}"),
    }
    // The denied batch consumed nothing from the client policy: 3 of 5 remain.
    assert_allowed(case, &decide(limiter, &checks[0], case).await, 2);
}

/// Retry-after durations are whole milliseconds, and rounding to seconds goes
/// up.
pub async fn sliding_window_retry_after_rounding<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy>,
    T: TimeControl,
{
    let case = "sliding window retry rounding";
    let window = Duration::from_millis(2_400);
    let policy = sliding_window("retry", 1, window);
    let check = Check::new(&policy, subject(9));
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    time.advance(window / 8 * 3).await;
    let denied = decide(limiter, &check, case).await;
    let retry_after = denied
        .retry_after()
        .unwrap_or_else(|| panic!("{case}: denied without retry_after"));
    assert_between(
        case,
        "retry_after",
        Some(retry_after),
        release(window, window / 8 * 3),
        time.drift(),
    );
    assert_eq!(
        retry_after.subsec_nanos() % 1_000_000,
        0,
        "{case}: whole milliseconds"
    );
    assert_eq!(
        denied.retry_after_seconds(),
        u64::try_from(retry_after.as_millis().div_ceil(1_000)).ok(),
        "{case}: rounded up"
    );
}

/// The largest limit and window are exact: no overflow, no rounding.
pub async fn sliding_window_extremes_are_exact<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = SlidingWindowPolicy>,
    T: TimeControl,
{
    let case = "sliding window extremes";
    let policy = sliding_window("extreme", MAX_LIMIT, MAX_WINDOW);
    let all =
        Check::weighted(&policy, subject(11), MAX_LIMIT).unwrap_or_else(|error| panic!("{error}"));
    let almost = Check::weighted(&policy, subject(12), MAX_LIMIT - 1)
        .unwrap_or_else(|error| panic!("{error}"));
    let one = Check::new(&policy, subject(12));
    let admitted = decide(limiter, &all, case).await;
    assert_allowed(case, &admitted, 0);
    assert_between(
        case,
        "reset_after",
        admitted.reset_after(),
        release(MAX_WINDOW, Duration::ZERO),
        time.drift(),
    );
    let denied = decide(limiter, &Check::new(&policy, subject(11)), case).await;
    assert_quota_denied(case, &denied);
    assert_between(
        case,
        "retry_after",
        denied.retry_after(),
        release(MAX_WINDOW, Duration::ZERO),
        time.drift(),
    );
    assert_allowed(case, &decide(limiter, &almost, case).await, 1);
    assert_allowed(case, &decide(limiter, &one, case).await, 0);
    assert_quota_denied(case, &decide(limiter, &one, case).await);
}

/// A check decided at once is the one the awaited check would give.
pub async fn sliding_window_decides_at_once_as_awaited<L>(limiter: &L)
where
    L: Limiter<Policy = SlidingWindowPolicy>,
{
    let case = "sliding window decided at once";
    let policy = sliding_window("at-once", 2, Duration::from_secs(60));
    decides_at_once_as_awaited(limiter, &policy, case).await;
}
