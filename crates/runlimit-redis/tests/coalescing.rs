//! Coalescing: concurrent checks through one limiter share script
//! invocations, and every one of them keeps the decision it would get alone.
//! Counted on a `redis-server` of the test's own, so no other test's
//! commands interfere.

mod common;

use std::{sync::Arc, time::Duration};

use redis::aio::MultiplexedConnection;
use runlimit_core::{
    AnyPolicy, BatchDecision, Check, FixedWindowPolicy, Limiter, PolicyId, ScopeId,
    SlidingWindowPolicy, SubjectKey,
};
use runlimit_redis::{CheckError, RedisConfig, RedisLimiter};

fn window(id: &str, limit: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new(id).expect("valid"),
        ScopeId::new("client").expect("valid"),
        limit,
        Duration::from_secs(60),
    )
    .expect("valid")
}

fn key(n: u16) -> SubjectKey {
    let mut digest = [0x5E; 32];
    digest[..2].copy_from_slice(&n.to_le_bytes());
    SubjectKey::from_digest(digest)
}

/// Script and function invocations the server has run so far.
async fn scripts(admin: &mut MultiplexedConnection) -> u64 {
    let calls = common::calls(admin).await;
    ["evalsha", "eval", "fcall"]
        .iter()
        .filter_map(|name| calls.get(*name))
        .sum()
}

/// 32 tasks × 25 checks of one key (limit 100) and, beside them, batches
/// that are denied and batches that are caller errors: exactly 100 checks
/// are admitted, every denied batch consumes nothing, no caller error reaches
/// the server, and the checks share invocations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_checks_share_invocations_and_keep_their_own_decisions() {
    let Some((_server, url)) = common::private_server().await else {
        return;
    };
    let mut admin = common::admin(&url).await;
    let limiter = Arc::new(
        RedisLimiter::<_, FixedWindowPolicy>::connect(&url, RedisConfig::default())
            .await
            .expect("connect"),
    );
    let hot = Arc::new(window("coalesced.hot", 100));
    let spent = Arc::new(window("coalesced.spent", 1));
    // Spend `spent` for key 9: batches naming it are denied.
    assert!(
        limiter
            .check(&Check::new(&*spent, key(9)))
            .await
            .expect("ok")
            .is_allowed()
    );
    let before = scripts(&mut admin).await;
    let mut tasks = Vec::new();
    for task in 0..32u16 {
        let (limiter, hot, spent) = (Arc::clone(&limiter), Arc::clone(&hot), Arc::clone(&spent));
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for round in 0..25u16 {
                match round % 5 {
                    // A batch denied at its second check: its first (a fresh
                    // key of `hot`'s id under another policy) is untouched.
                    3 => {
                        let fresh = window("coalesced.fresh", 1);
                        let checks = [
                            Check::new(&fresh, key(1_000 + task * 100 + round)),
                            Check::new(&*spent, key(9)),
                        ];
                        match limiter.check_all(&checks).await.expect("decided") {
                            BatchDecision::Denied { index: 1, .. } => {}
                            other => panic!("expected a denial at 1, got {other:?}"),
                        }
                        // Nothing consumed: the fresh key is still whole.
                        let again = limiter.check(&checks[0]).await.expect("ok");
                        assert_eq!(again.remaining(), Some(0), "the denied batch consumed");
                    }
                    // A caller error, refused alone.
                    4 => {
                        let check = Check::new(&*hot, key(1));
                        assert!(matches!(
                            limiter.check_all(&[check, check]).await,
                            Err(CheckError::InvalidBatch(_))
                        ));
                    }
                    _ => {
                        if limiter
                            .check(&Check::new(&*hot, key(1)))
                            .await
                            .expect("decided")
                            .is_allowed()
                        {
                            admitted += 1;
                        }
                    }
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("task");
    }
    assert_eq!(admitted, 100, "exactly the limit");
    // 32 × (15 hot checks + 5 batches + 5 re-checks) reach the server;
    // caller errors send nothing. However the tasks interleave, no operation
    // costs more than one invocation (how many share one depends on timing;
    // the coalescer's own tests pin that down).
    let sent = 32 * 20;
    let invocations = scripts(&mut admin).await - before;
    println!("{sent} operations in {invocations} script invocations");
    assert!(
        invocations <= sent,
        "{invocations} invocations for {sent} operations"
    );
}

/// With coalescing off, every check is its own invocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalescing_can_be_turned_off() {
    let Some((_server, url)) = common::private_server().await else {
        return;
    };
    let mut admin = common::admin(&url).await;
    let config = RedisConfig::default().with_coalescing(1).expect("valid");
    let limiter = Arc::new(
        RedisLimiter::<_, FixedWindowPolicy>::connect(&url, config)
            .await
            .expect("connect"),
    );
    let policy = Arc::new(window("uncoalesced", 1_000));
    // Load the script first: the first use sends it twice.
    limiter
        .check(&Check::new(&*policy, key(2)))
        .await
        .expect("ok");
    let before = scripts(&mut admin).await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (limiter, policy) = (Arc::clone(&limiter), Arc::clone(&policy));
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                limiter
                    .check(&Check::new(&*policy, key(2)))
                    .await
                    .expect("ok");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(scripts(&mut admin).await - before, 160);
    assert!(RedisConfig::default().with_coalescing(0).is_err());
}

/// 32 tasks × 8 checks of one key (limit 100), each task's first check on a
/// key of its own: through coalesced invocations, sliding windows (alone
/// and as `AnyPolicy`, and fixed windows as `AnyPolicy`) admit exactly the
/// limit on the shared key, each admission reports its own remaining count
/// (100 admissions, 99 down to 0), and a fresh key reports one unit used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_lone_checks_of_every_window_admit_exactly_and_report_their_own_counts() {
    let Some((_server, url)) = common::private_server().await else {
        return;
    };
    let sliding = SlidingWindowPolicy::new(
        PolicyId::new("coalesced.sliding").expect("valid"),
        ScopeId::new("client").expect("valid"),
        100,
        Duration::from_secs(3_600),
    )
    .expect("valid");
    let typed = Arc::new(
        RedisLimiter::<_, SlidingWindowPolicy>::connect(&url, RedisConfig::default())
            .await
            .expect("connect"),
    );
    let mut remaining = Vec::new();
    let policy = Arc::new(sliding.clone());
    remaining.push(("sliding", hot_and_fresh(typed, policy).await));
    let any = Arc::new(
        RedisLimiter::<_, AnyPolicy>::connect(&url, RedisConfig::default())
            .await
            .expect("connect"),
    );
    let any_sliding = AnyPolicy::from(
        SlidingWindowPolicy::new(
            PolicyId::new("coalesced.any-sliding").expect("valid"),
            ScopeId::new("client").expect("valid"),
            100,
            Duration::from_secs(3_600),
        )
        .expect("valid"),
    );
    let any_fixed = AnyPolicy::from(window("coalesced.any-fixed", 100));
    for (name, policy) in [("any sliding", any_sliding), ("any fixed", any_fixed)] {
        remaining.push((
            name,
            hot_and_fresh(Arc::clone(&any), Arc::new(policy)).await,
        ));
    }
    for (name, mut reported) in remaining {
        reported.sort_unstable();
        assert_eq!(reported, (0..100).collect::<Vec<u64>>(), "{name}");
    }
}

/// Runs the checks of the test above with `policy`; returns the remaining
/// counts the shared key's admissions reported.
async fn hot_and_fresh<L, P>(limiter: Arc<L>, policy: Arc<P>) -> Vec<u64>
where
    L: Limiter<Policy = P> + Send + Sync + 'static,
    L::Error: std::fmt::Debug,
    P: runlimit_core::Policy + Send + Sync + 'static,
{
    let mut tasks = Vec::new();
    for task in 0..32u16 {
        let (limiter, policy) = (Arc::clone(&limiter), Arc::clone(&policy));
        tasks.push(tokio::spawn(async move {
            let fresh = limiter
                .check(&Check::new(&*policy, key(100 + task)))
                .await
                .expect("decided");
            assert_eq!(fresh.remaining(), Some(99), "a fresh key");
            let mut remaining = Vec::new();
            for _ in 0..8 {
                let decision = limiter
                    .check(&Check::new(&*policy, key(1)))
                    .await
                    .expect("decided");
                if decision.is_allowed() {
                    remaining.push(decision.remaining().expect("a limit"));
                }
            }
            remaining
        }));
    }
    let mut remaining = Vec::new();
    for task in tasks {
        remaining.extend(task.await.expect("task"));
    }
    remaining
}
