//! Carrying a subject's state across a change of policy on Redis, beyond
//! the conformance suite: concurrent first checks, grants sized from a
//! carried state, and `AnyPolicy` receipts, grants and batches.

mod common;

use std::{sync::Arc, time::Duration};

use runlimit_core::{
    AnyPolicy, BatchDecision, CarriedFrom, Check, FixedWindowPolicy, GcraPolicy, Grant, Lifecycle,
    Limiter, PolicyId, ScopeId, Settle, SlidingWindowPolicy, SubjectKey,
};
use runlimit_redis::RedisLimiter;

const HOUR: Duration = Duration::from_secs(3_600);

fn id(name: &str) -> PolicyId {
    PolicyId::new(name).expect("valid")
}

fn scope() -> ScopeId {
    ScopeId::new("client").expect("valid")
}

fn key(n: u8) -> SubjectKey {
    SubjectKey::from_digest([n; 32])
}

/// A policy of capacity four of each algorithm, and a successor of
/// capacity six continuing from it (of another window or rate, so its
/// counter is translated, not copied).
fn changes(name: &str) -> Vec<(AnyPolicy, AnyPolicy)> {
    let fixed = |limit, window| FixedWindowPolicy::new(id(name), scope(), limit, window);
    let sliding = |limit, window| SlidingWindowPolicy::new(id(name), scope(), limit, window);
    let gcra = |quota, burst| GcraPolicy::new(id(name), scope(), quota, HOUR, burst);
    let olds: [AnyPolicy; 3] = [
        fixed(4, HOUR).expect("valid").into(),
        sliding(4, HOUR).expect("valid").into(),
        gcra(1, 4).expect("valid").into(),
    ];
    let news: [AnyPolicy; 3] = [
        fixed(6, 2 * HOUR).expect("valid").into(),
        sliding(6, 2 * HOUR).expect("valid").into(),
        gcra(2, 6).expect("valid").into(),
    ];
    olds.iter()
        .flat_map(|old| {
            news.iter().map(move |new| {
                let new = new.clone().continuing(old).expect("one id and scope");
                (old.clone(), new)
            })
        })
        .collect()
}

/// 32 tasks check a subject under a policy continuing from one it spent at
/// once, each for the first time: the counter carries once, and exactly the
/// two units the new policy adds are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_checks_carry_once_and_never_over_admit() {
    let Some(connection) = common::connect("carry-concurrent").await else {
        return;
    };
    for (n, (old, new)) in changes("carry.concurrent").into_iter().enumerate() {
        let carries = common::Carries::default();
        let limiter = Arc::new(
            RedisLimiter::<_, AnyPolicy>::new(connection.clone(), common::config("carry-race"))
                .with_observer(carries.clone()),
        );
        let subject = key(u8::try_from(n).expect("small"));
        for _ in 0..4 {
            let check = Check::new(&old, subject);
            assert!(limiter.check(&check).await.expect("check").is_allowed());
        }
        let new = Arc::new(new);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..32 {
            let (limiter, new) = (Arc::clone(&limiter), Arc::clone(&new));
            tasks.spawn(async move {
                let check = Check::new(&*new, subject);
                limiter.check(&check).await.expect("check").is_allowed()
            });
        }
        let mut admitted = 0;
        while let Some(allowed) = tasks.join_next().await {
            admitted += usize::from(allowed.expect("task"));
        }
        assert_eq!(admitted, 2, "{old:?} to {new:?}");
        assert_eq!(
            carries.take(),
            [CarriedFrom::Predecessor],
            "{old:?} to {new:?}"
        );
    }
}

/// A grant under a policy continuing from one the subject spent part of is
/// sized from the carried state: the room the new policy leaves, no more.
#[tokio::test]
async fn a_grant_is_sized_from_the_carried_state() {
    let Some(connection) = common::connect("carry-grant").await else {
        return;
    };
    let limiter = RedisLimiter::<_, AnyPolicy>::new(connection, common::config("carry-grant"));
    for (n, (old, new)) in changes("carry.grant").into_iter().enumerate() {
        let subject = key(u8::try_from(n).expect("small"));
        for _ in 0..3 {
            limiter
                .check(&Check::new(&old, subject))
                .await
                .expect("check");
        }
        // Three of four held: three of six carried, so three are left.
        let granted = limiter
            .grant(&Check::new(&new, subject), 5)
            .await
            .expect("grant");
        assert_eq!(granted.units(), 3, "{old:?} to {new:?}");
        assert!(
            !limiter
                .check(&Check::new(&new, subject))
                .await
                .expect("check")
                .is_allowed(),
            "{old:?} to {new:?}"
        );
    }
}

/// `AnyPolicy` receipts of a batch that mixes algorithms are refunded in one
/// script, grants and settlements work for each algorithm, and a mixed batch
/// through concurrent (coalesced) invocations stays all-or-nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_policy_receipts_grants_and_batches_mix_algorithms() {
    let Some(connection) = common::connect("any-policy").await else {
        return;
    };
    let limiter = Arc::new(RedisLimiter::<_, AnyPolicy>::new(
        connection,
        common::config("any-policy"),
    ));
    let policies: Arc<[AnyPolicy; 3]> = Arc::new([
        FixedWindowPolicy::new(id("any.fixed"), scope(), 3, HOUR)
            .expect("valid")
            .into(),
        SlidingWindowPolicy::new(id("any.sliding"), scope(), 3, HOUR)
            .expect("valid")
            .into(),
        GcraPolicy::new(id("any.gcra"), scope(), 1, HOUR, 3)
            .expect("valid")
            .into(),
    ]);
    let batch = |subject| -> Vec<Check<'_, AnyPolicy>> {
        policies
            .iter()
            .map(|policy| Check::new(policy, subject))
            .collect()
    };
    // A mixed batch's receipt gives every unit back.
    let checks = batch(key(1));
    let (decision, receipt) = limiter
        .admit_all(&checks)
        .await
        .expect("admit")
        .into_parts();
    assert!(decision.is_allowed());
    let refunded = limiter
        .refund(&checks, receipt.expect("allowed"))
        .await
        .expect("refund");
    assert_eq!(refunded.credited(), 3);
    for check in &checks {
        let peeked = limiter.peek(check).await.expect("peek");
        assert_eq!(peeked.remaining(), Some(3), "{:?}", check.policy());
    }
    // A grant and its settlement, for each algorithm.
    for policy in policies.iter() {
        let mut granted = limiter
            .grant(&Check::new(policy, key(2)), 2)
            .await
            .expect("grant");
        assert_eq!(granted.units(), 2, "{policy:?}");
        let receipt = granted.take_receipt().expect("granted");
        let as_admitted = Check::weighted(policy, key(2), 2).expect("valid");
        let settled = limiter
            .settle(&[as_admitted], receipt, &[1])
            .await
            .expect("settle");
        assert_eq!(settled.credited(), 1, "{policy:?}");
        let peeked = limiter
            .peek(&Check::new(policy, key(2)))
            .await
            .expect("peek");
        assert_eq!(peeked.remaining(), Some(2), "{policy:?}");
    }
    // 16 tasks each send the mixed batch for one subject four times: three
    // are admitted in all, and a denied batch consumes nothing of the others.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (limiter, policies) = (Arc::clone(&limiter), Arc::clone(&policies));
        tasks.spawn(async move {
            let checks: Vec<_> = policies
                .iter()
                .map(|policy| Check::new(policy, key(3)))
                .collect();
            let mut admitted = 0;
            for _ in 0..4 {
                match limiter.check_all(&checks).await.expect("batch") {
                    BatchDecision::Allowed(_) => admitted += 1,
                    BatchDecision::Denied { .. } => {}
                    shadow => panic!("no shadow policy: {shadow:?}"),
                }
            }
            admitted
        });
    }
    let mut admitted = 0;
    while let Some(count) = tasks.join_next().await {
        admitted += count.expect("task");
    }
    assert_eq!(admitted, 3);
    for check in batch(key(3)) {
        let peeked = limiter.peek(&check).await.expect("peek");
        assert!(!peeked.is_allowed(), "{:?} spent", check.policy());
    }
}

/// Observers hear of each carried counter once, with what it carried from:
/// the previous secret's key, or the predecessor's counter.
#[tokio::test]
async fn observers_hear_each_carry_once() {
    let Some(connection) = common::connect("carry-observed").await else {
        return;
    };
    let carries = common::Carries::default();
    let limiter =
        RedisLimiter::<_, FixedWindowPolicy>::new(connection, common::config("carry-observed"))
            .with_observer(carries.clone());
    let old = FixedWindowPolicy::new(id("observed"), scope(), 4, HOUR).expect("valid");
    let new = FixedWindowPolicy::new(id("observed"), scope(), 6, HOUR)
        .expect("valid")
        .continuing(&old)
        .expect("valid");
    let rotated = SubjectKey::from_digest([9; 32]).with_previous(*key(1).as_bytes());
    limiter
        .check(&Check::new(&old, key(1)))
        .await
        .expect("check");
    limiter
        .check(&Check::new(&old, key(2)))
        .await
        .expect("check");
    for _ in 0..3 {
        limiter
            .check(&Check::new(&new, key(2)))
            .await
            .expect("check");
        limiter
            .check(&Check::new(&old, rotated))
            .await
            .expect("check");
    }
    // A subject neither policy nor key has seen carries nothing.
    limiter
        .check(&Check::new(&new, key(3)))
        .await
        .expect("check");
    assert_eq!(
        carries.take(),
        [CarriedFrom::Predecessor, CarriedFrom::PreviousSecret]
    );
}
