//! Continuity across a change of policy or secret (see
//! [`runlimit_core::carry`]): a subject's state under the policy a policy
//! continues from, or under its key of the previous secret, carried into the
//! new counter the first time it is checked.
//!
//! Every case spends four units of an old policy's capacity, then checks a
//! policy continuing from it whose capacity is six (the subject gets the
//! difference, two, at once) or two (denied). Windows and periods are long,
//! so a backend's own clock moves nothing during a case.

use std::time::Duration;

use runlimit_core::{
    AnyPolicy, BatchDecision, Check, FixedWindowPolicy, GcraPolicy, Lifecycle, Limiter, Policy,
    PolicyId, SlidingWindowPolicy, SubjectKey,
};

use crate::{
    TimeControl, assert_allowed, assert_close, assert_quota_denied, decide, decide_all,
    lifecycle::{admit, peek, refund},
    scope, subject, unique_policy_id,
};

const HOUR: Duration = Duration::from_secs(3_600);

fn fixed(id: &PolicyId, limit: u64, window: Duration) -> FixedWindowPolicy {
    FixedWindowPolicy::new(id.clone(), scope("client"), limit, window)
        .unwrap_or_else(|error| panic!("invalid fixed-window policy: {error}"))
}

fn sliding(id: &PolicyId, limit: u64, window: Duration) -> SlidingWindowPolicy {
    SlidingWindowPolicy::new(id.clone(), scope("client"), limit, window)
        .unwrap_or_else(|error| panic!("invalid sliding-window policy: {error}"))
}

fn gcra(id: &PolicyId, quota: u64, period: Duration, burst: u64) -> GcraPolicy {
    GcraPolicy::new(id.clone(), scope("client"), quota, period, burst)
        .unwrap_or_else(|error| panic!("invalid GCRA policy: {error}"))
}

/// `subject(n)`'s key under a new secret, carrying `subject(n)` as its key
/// under the previous one.
fn rotated(n: u8) -> SubjectKey {
    let mut digest = *subject(n).as_bytes();
    digest[15] ^= 0xFF;
    SubjectKey::from_digest(digest).with_previous(*subject(n).as_bytes())
}

/// The three policies of a case: a capacity of four, and policies of six
/// and two continuing from it.
struct Change<P> {
    old: P,
    raised: P,
    lowered: P,
}

fn change<P: Policy>(
    case: &str,
    old: impl Fn(&PolicyId) -> P,
    raised: impl Fn(&PolicyId) -> P,
    lowered: impl Fn(&PolicyId) -> P,
    continuing: impl Fn(P, &P) -> P,
) -> Change<P> {
    let id = unique_policy_id(&case.replace(' ', "-"));
    let old = old(&id);
    assert_eq!(old.capacity(), 4, "{case}: the old policy holds four");
    let raised = continuing(raised(&id), &old);
    let lowered = continuing(lowered(&id), &old);
    Change {
        old,
        raised,
        lowered,
    }
}

/// Spends all four units of `key` under `policy`.
async fn spend_four<L: Limiter>(limiter: &L, policy: &L::Policy, key: SubjectKey, case: &str) {
    for left in (0..4).rev() {
        let decision = decide(limiter, &Check::new(policy, key), case).await;
        assert!(
            decision.is_allowed() && decision.remaining() <= Some(left),
            "{case}: spending the old policy, got {decision:?}"
        );
    }
    assert_quota_denied(case, &decide(limiter, &Check::new(policy, key), case).await);
}

/// Every carry case for one change.
async fn carries<L>(limiter: &L, change: &Change<L::Policy>, case: &str)
where
    L: Limiter + Lifecycle,
{
    let Change {
        old,
        raised,
        lowered,
    } = change;

    // Raised: the difference at once, and no more; a peek first shows it.
    spend_four(limiter, old, subject(1), case).await;
    let check = Check::new(raised, subject(1));
    assert_allowed(
        &format!("{case}: peek"),
        &peek(limiter, &check, case).await,
        2,
    );
    assert_allowed(case, &decide(limiter, &check, case).await, 1);
    assert_allowed(case, &decide(limiter, &check, case).await, 0);
    assert_quota_denied(case, &decide(limiter, &check, case).await);

    // Lowered: denied while the carried usage exceeds the new limit.
    spend_four(limiter, old, subject(2), case).await;
    assert_quota_denied(
        &format!("{case}: lowered"),
        &decide(limiter, &Check::new(lowered, subject(2)), case).await,
    );

    // A subject the old policy never saw starts fresh.
    assert_allowed(
        &format!("{case}: fresh"),
        &decide(limiter, &Check::new(raised, subject(3)), case).await,
        5,
    );

    // A reset forgets the old counter too: nothing is carried again.
    match limiter.reset(raised, &subject(1)).await {
        Ok(existed) => assert!(existed, "{case}: the carried counter existed"),
        Err(error) => panic!("{case}: backend error on reset: {error:?}"),
    }
    assert_allowed(
        &format!("{case}: after a reset"),
        &decide(limiter, &Check::new(raised, subject(1)), case).await,
        5,
    );

    // A refund after the carry credits the new counter.
    spend_four(limiter, old, subject(4), case).await;
    let check = Check::new(raised, subject(4));
    let receipt = admit(limiter, &check, case).await;
    assert_allowed(case, &peek(limiter, &check, case).await, 1);
    let refunded = refund(limiter, &[check], receipt, case).await;
    assert_eq!(refunded.credited(), 1, "{case}: the refund credits");
    assert_allowed(
        &format!("{case}: refunded"),
        &peek(limiter, &check, case).await,
        2,
    );

    // A batch is all-or-nothing across carried counters: three units do not
    // fit the two carried for subject 5, so subject 6 is not charged either.
    spend_four(limiter, old, subject(5), case).await;
    let batch = [
        Check::weighted(raised, subject(5), 3).unwrap_or_else(|error| panic!("{case}: {error}")),
        Check::new(raised, subject(6)),
    ];
    assert!(
        matches!(
            decide_all(limiter, &batch, case).await,
            BatchDecision::Denied { index: 0, .. }
        ),
        "{case}: the batch is denied by its carried member"
    );
    assert_allowed(
        &format!("{case}: after the denied batch"),
        &peek(limiter, &Check::new(raised, subject(6)), case).await,
        6,
    );
    assert_allowed(
        &format!("{case}: after the denied batch"),
        &peek(limiter, &Check::new(raised, subject(5)), case).await,
        2,
    );

    // A rotated secret: the previous key's state is carried too, and into a
    // changed policy.
    spend_four(limiter, old, subject(7), case).await;
    assert_quota_denied(
        &format!("{case}: rotated"),
        &decide(limiter, &Check::new(old, rotated(7)), case).await,
    );
    spend_four(limiter, old, subject(8), case).await;
    assert_allowed(
        &format!("{case}: rotated and raised"),
        &decide(limiter, &Check::new(raised, rotated(8)), case).await,
        1,
    );
    assert_allowed(
        &format!("{case}: rotated, fresh"),
        &decide(limiter, &Check::new(old, rotated(9)), case).await,
        3,
    );
}

/// Every fixed-window carry: a raised or lowered limit with the same window
/// (the anchor kept) and with another (the units from now), a reset, a
/// refund, a batch and a rotated secret.
pub async fn fixed_window_carry_suite<L>(limiter: &L)
where
    L: Limiter<Policy = FixedWindowPolicy> + Lifecycle,
{
    let continuing = |new: FixedWindowPolicy, old: &FixedWindowPolicy| {
        new.continuing(old)
            .unwrap_or_else(|error| panic!("a valid lineage: {error}"))
    };
    for (case, window) in [("fixed carry", HOUR), ("fixed carry rewindowed", 2 * HOUR)] {
        let change = change(
            case,
            |id| fixed(id, 4, HOUR),
            |id| fixed(id, 6, window),
            |id| fixed(id, 2, window),
            continuing,
        );
        carries(limiter, &change, case).await;
    }
}

/// Every sliding-window carry, as [`fixed_window_carry_suite`].
pub async fn sliding_window_carry_suite<L>(limiter: &L)
where
    L: Limiter<Policy = SlidingWindowPolicy> + Lifecycle,
{
    let continuing = |new: SlidingWindowPolicy, old: &SlidingWindowPolicy| {
        new.continuing(old)
            .unwrap_or_else(|error| panic!("a valid lineage: {error}"))
    };
    for (case, window) in [
        ("sliding carry", HOUR),
        ("sliding carry rewindowed", 2 * HOUR),
    ] {
        let change = change(
            case,
            |id| sliding(id, 4, HOUR),
            |id| sliding(id, 6, window),
            |id| sliding(id, 2, window),
            continuing,
        );
        carries(limiter, &change, case).await;
    }
}

/// Every GCRA carry: a burst changed at the same emission interval (the
/// arrival time kept) and at another (the units in flight from now), and
/// the rest as [`fixed_window_carry_suite`].
pub async fn gcra_carry_suite<L>(limiter: &L)
where
    L: Limiter<Policy = GcraPolicy> + Lifecycle,
{
    let continuing = |new: GcraPolicy, old: &GcraPolicy| {
        new.continuing(old)
            .unwrap_or_else(|error| panic!("a valid lineage: {error}"))
    };
    for (case, quota) in [("gcra carry", 1), ("gcra carry repaced", 2)] {
        let change = change(
            case,
            |id| gcra(id, 1, HOUR, 4),
            |id| gcra(id, quota, HOUR, 6),
            |id| gcra(id, quota, HOUR, 2),
            continuing,
        );
        carries(limiter, &change, case).await;
    }
}

/// An algorithm's name, its old policy of four and its new policy of a
/// given capacity.
type Algorithm = (
    &'static str,
    fn(&PolicyId, u64) -> AnyPolicy,
    fn(&PolicyId, u64) -> AnyPolicy,
);

/// Every carry between every pair of algorithms, for a limiter of
/// [`AnyPolicy`] checks, and a batch that mixes algorithms.
pub async fn any_policy_carry_suite<L>(limiter: &L)
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle,
{
    let algorithms: [Algorithm; 3] = [
        (
            "fixed",
            |id, _| fixed(id, 4, HOUR).into(),
            |id, limit| fixed(id, limit, 2 * HOUR).into(),
        ),
        (
            "sliding",
            |id, _| sliding(id, 4, HOUR).into(),
            |id, limit| sliding(id, limit, 2 * HOUR).into(),
        ),
        (
            "gcra",
            |id, _| gcra(id, 1, HOUR, 4).into(),
            |id, burst| gcra(id, 2, HOUR, burst).into(),
        ),
    ];
    let continuing = |new: AnyPolicy, old: &AnyPolicy| {
        new.continuing(old)
            .unwrap_or_else(|error| panic!("a valid lineage: {error}"))
    };
    for (from, old, _) in &algorithms {
        for (to, _, new) in &algorithms {
            let case = format!("carry from {from} to {to}");
            let change = change(
                &case,
                |id| old(id, 4),
                |id| new(id, 6),
                |id| new(id, 2),
                continuing,
            );
            carries(limiter, &change, &case).await;
        }
    }
    mixed_batches_are_all_or_nothing(limiter, &algorithms).await;
}

/// A batch of one check of each algorithm: denied by its last member, it
/// consumes nothing of the others; allowed, it consumes all.
async fn mixed_batches_are_all_or_nothing<L>(limiter: &L, algorithms: &[Algorithm; 3])
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle,
{
    let case = "mixed batch";
    let policies: Vec<AnyPolicy> = algorithms
        .iter()
        .map(|(_, _, build)| build(&unique_policy_id("mixed-batch"), 2))
        .collect();
    let last = policies.len() - 1;
    let checks: Vec<_> = policies
        .iter()
        .enumerate()
        .map(|(n, policy)| {
            let cost = if n == last { 2 } else { 1 };
            Check::weighted(policy, subject(20), cost)
                .unwrap_or_else(|error| panic!("{case}: {error}"))
        })
        .collect();
    assert_allowed(
        case,
        &decide(limiter, &Check::new(&policies[last], subject(20)), case).await,
        1,
    );
    assert!(
        matches!(
            decide_all(limiter, &checks, case).await,
            BatchDecision::Denied { index, .. } if index == last
        ),
        "{case}: denied by its last member"
    );
    for policy in &policies[..last] {
        assert_allowed(
            case,
            &peek(limiter, &Check::new(policy, subject(20)), case).await,
            2,
        );
    }
    let checks: Vec<_> = policies
        .iter()
        .map(|policy| Check::new(policy, subject(21)))
        .collect();
    match decide_all(limiter, &checks, case).await {
        BatchDecision::Allowed(decisions) => {
            for decision in &decisions {
                assert_allowed(case, decision, 1);
            }
        }
        denied => panic!("{case}: expected the batch allowed, got {denied:?}"),
    }
}

/// A carried state is kept from a subject's first check under the new
/// policy, denied or not, and drains at the new policy's rate from then on:
/// a denied subject's retry time shortens as time passes, rather than being
/// carried afresh (and standing still) at every check. Four GCRA units in
/// flight at one a minute, carried into two a minute with a burst of two:
/// four units take two minutes, so the first check is denied for 90 s.
pub async fn carry_drain_suite<L, T>(limiter: &L, time: &T)
where
    L: Limiter<Policy = GcraPolicy> + Lifecycle,
    T: TimeControl,
{
    let case = "a carried state drains";
    let id = unique_policy_id("carry-drains");
    let old = gcra(&id, 1, Duration::from_secs(60), 4);
    spend_four(limiter, &old, subject(30), case).await;
    let new = gcra(&id, 2, Duration::from_secs(60), 2)
        .continuing(&old)
        .unwrap_or_else(|error| panic!("a valid lineage: {error}"));
    let check = Check::new(&new, subject(30));
    let first = decide(limiter, &check, case).await;
    assert_quota_denied(case, &first);
    assert_close(
        case,
        "the first retry",
        first.retry_after(),
        Duration::from_secs(90),
        time.drift() + Duration::from_secs(1),
    );
    time.advance(Duration::from_secs(30)).await;
    let later = decide(limiter, &check, case).await;
    assert_quota_denied(case, &later);
    assert_close(
        case,
        "the retry 30 s later",
        later.retry_after(),
        Duration::from_secs(60),
        time.drift() + Duration::from_secs(1),
    );
    time.advance(Duration::from_secs(60)).await;
    assert!(
        decide(limiter, &check, case).await.is_allowed(),
        "{case}: admitted once the carried units drained"
    );
}
