//! Contention, exactness at the bounds, cluster slots, script flushes and
//! restarts against real Redis servers.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use redis::aio::ConnectionManager;
use runlimit_core::{
    Check, FixedWindowPolicy, GcraPolicy, Lifecycle, Limiter, MAX_LIMIT, MAX_WINDOW, Maintain,
    PolicyId, ScopeId, SubjectKey,
};
use runlimit_redis::{CheckError, KeyRouting, RedisLimiter};

fn fixed(name: &str, limit: u64, window: Duration) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new(name).expect("valid"),
        ScopeId::new("client").expect("valid"),
        limit,
        window,
    )
    .expect("valid")
}

fn key(n: u8) -> SubjectKey {
    SubjectKey::from_digest([n; 32])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_connections_admit_exactly_the_limit() {
    let Some(_) = common::connect("contention").await else {
        return;
    };
    let config = common::config("contention");
    let policy = Arc::new(fixed("contended", 100, Duration::from_secs(3_600)));
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = redis::Client::open(common::url()).expect("url");
        let connection = ConnectionManager::new(client).await.expect("connect");
        let limiter = Arc::new(RedisLimiter::<_, FixedWindowPolicy>::new(
            connection,
            config.clone(),
        ));
        for _ in 0..4 {
            let (limiter, policy, admitted) = (
                Arc::clone(&limiter),
                Arc::clone(&policy),
                Arc::clone(&admitted),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    if limiter
                        .check(&Check::new(&*policy, key(1)))
                        .await
                        .expect("no error")
                        .is_allowed()
                    {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 100);
}

/// The same contention with a lease per connection: every task checks until
/// it is denied, so every lease is spent, and exactly the limit is admitted
/// across the eight replicas, most of it without a round trip.
/// Redis needs no cleanup (its keys expire), so a round in front of it is
/// the lease's own: idle leases give their unspent units back.
#[tokio::test]
async fn a_maintenance_round_gives_idle_leases_back_to_redis() {
    let Some(connection) = common::connect("leased-maintenance").await else {
        return;
    };
    let shared = RedisLimiter::new(connection, common::config("leased-maintenance"));
    assert_eq!(shared.maintain().await.removed(), 0);
    let clock = runlimit_memory::ManualClock::new();
    let leases = runlimit_memory::LeaseConfig::new(64)
        .and_then(|config| config.with_max_grant(16))
        .expect("valid")
        .with_idle_after(Duration::from_secs(30));
    let leased = runlimit_memory::Leased::new(shared, leases).with_clock(clock.clone());
    let policy = fixed("maintained", 1_000, Duration::from_secs(3_600));
    let check = Check::new(&policy, key(3));
    for _ in 0..20 {
        assert!(leased.check(&check).await.expect("decided").is_allowed());
    }
    let held = leased.stats().units_held;
    assert!(held > 0, "a lease holds units");
    clock.advance(Duration::from_secs(60));
    let report = leased.maintain().await;
    assert_eq!(report.failures().len(), 0, "{report:?}");
    assert_eq!(leased.stats().units_returned, held);
    let remaining = leased
        .shared()
        .peek(&check)
        .await
        .expect("peek")
        .remaining();
    assert_eq!(remaining, Some(1_000 - 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_leased_connections_admit_exactly_the_limit() {
    let Some(_) = common::connect("leased-contention").await else {
        return;
    };
    let config = common::config("leased-contention");
    let policy = Arc::new(fixed("leased", 100, Duration::from_secs(3_600)));
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut replicas = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = redis::Client::open(common::url()).expect("url");
        let connection = ConnectionManager::new(client).await.expect("connect");
        let shared = RedisLimiter::<_, FixedWindowPolicy>::new(connection, config.clone());
        let leases = runlimit_memory::LeaseConfig::new(64)
            .and_then(|config| config.with_max_grant(16))
            .and_then(|config| config.with_remaining_share(100))
            .expect("valid");
        let limiter = Arc::new(runlimit_memory::Leased::new(shared, leases));
        replicas.push(Arc::clone(&limiter));
        for _ in 0..4 {
            let (limiter, policy, admitted) = (
                Arc::clone(&limiter),
                Arc::clone(&policy),
                Arc::clone(&admitted),
            );
            tasks.push(tokio::spawn(async move {
                while limiter
                    .check(&Check::new(&*policy, key(2)))
                    .await
                    .expect("no error")
                    .is_allowed()
                {
                    admitted.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 100);
    let grants: u64 = replicas.iter().map(|replica| replica.stats().grants).sum();
    assert!(grants < 100, "{grants} grants for 100 admissions");
    for replica in &replicas {
        assert_eq!(replica.stats().units_held, 0);
    }
}

#[tokio::test]
async fn the_largest_policies_are_computed_exactly() {
    let Some(connection) = common::connect("extremes").await else {
        return;
    };
    let config = common::config("extremes");
    let fixed_limiter =
        RedisLimiter::<_, FixedWindowPolicy>::new(connection.clone(), config.clone());
    let widest = fixed("widest", MAX_LIMIT, MAX_WINDOW);
    let all = Check::weighted(&widest, key(2), MAX_LIMIT).expect("valid");
    let decision = fixed_limiter.check(&all).await.expect("check");
    assert_eq!(decision.remaining(), Some(0));
    let reset = decision.reset_after().expect("allowed");
    assert!(
        reset <= MAX_WINDOW && reset + Duration::from_secs(1) > MAX_WINDOW,
        "{reset:?}"
    );
    let denied = fixed_limiter
        .check(&Check::new(&widest, key(2)))
        .await
        .expect("check");
    assert!(denied.is_denied());
    let partial = Check::weighted(&widest, key(3), MAX_LIMIT - 1).expect("valid");
    assert_eq!(
        fixed_limiter
            .check(&partial)
            .await
            .expect("check")
            .remaining(),
        Some(1)
    );
    assert_eq!(
        fixed_limiter
            .check(&Check::new(&widest, key(3)))
            .await
            .expect("check")
            .remaining(),
        Some(0)
    );

    let gcra_limiter = RedisLimiter::<_, GcraPolicy>::new(connection, config);
    let gcra = GcraPolicy::new(
        PolicyId::new("extreme").expect("valid"),
        ScopeId::new("client").expect("valid"),
        MAX_LIMIT,
        MAX_WINDOW,
        MAX_LIMIT,
    )
    .expect("valid");
    let burst = Check::weighted(&gcra, key(4), MAX_LIMIT).expect("valid");
    let decision = gcra_limiter.check(&burst).await.expect("check");
    assert_eq!(decision.remaining(), Some(0));
    assert_eq!(decision.reset_after(), Some(MAX_WINDOW));
    // One unit replenishes after 366 days / 1e9 = 31.6224 ms, reported as 32 ms.
    let denied = gcra_limiter
        .check(&Check::new(&gcra, key(4)))
        .await
        .expect("check");
    let retry = denied.retry_after().expect("denied");
    assert!(
        retry <= Duration::from_millis(32)
            && retry + Duration::from_millis(250) >= Duration::from_millis(32),
        "{retry:?}"
    );
}

#[tokio::test]
async fn cross_slot_batches_are_refused_before_anything_is_consumed() {
    let Some(connection) = common::connect("cross-slot").await else {
        return;
    };
    let config = common::config("cross-slot");
    let client = fixed("client", 5, Duration::from_secs(60));
    let identity = fixed("identity", 5, Duration::from_secs(60));
    let batch = [Check::new(&client, key(5)), Check::new(&identity, key(6))];

    let spread = RedisLimiter::<_, FixedWindowPolicy>::cluster(connection.clone(), config.clone());
    let error = spread.check_all(&batch).await.expect_err("different slots");
    assert!(
        matches!(error, CheckError::CrossSlot { slots: 2 }),
        "{error:?}"
    );
    assert!(!error.may_have_consumed_quota());
    // Nothing was consumed: each counter still has its whole limit.
    assert_eq!(
        spread.check(&batch[0]).await.expect("single").remaining(),
        Some(4)
    );
    assert_eq!(
        spread.check(&batch[1]).await.expect("single").remaining(),
        Some(4)
    );

    let colocated = RedisLimiter::<_, FixedWindowPolicy>::cluster(
        connection,
        config
            .with_routing(KeyRouting::SingleSlot("login".to_owned()))
            .expect("valid tag"),
    );
    assert!(
        colocated
            .check_all(&batch)
            .await
            .expect("one slot")
            .is_allowed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_and_function_flushes_during_load_are_survived() {
    let Some(connection) = common::connect("flush").await else {
        return;
    };
    let config = common::config("flush");
    let limiter = Arc::new(RedisLimiter::<_, GcraPolicy>::new(
        connection.clone(),
        config,
    ));
    let policy = Arc::new(
        GcraPolicy::new(
            PolicyId::new("flushed").expect("valid"),
            ScopeId::new("client").expect("valid"),
            1,
            Duration::from_secs(3_600),
            60,
        )
        .expect("valid"),
    );
    let admitted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (limiter, policy, admitted) = (
            Arc::clone(&limiter),
            Arc::clone(&policy),
            Arc::clone(&admitted),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let decision = limiter
                    .check(&Check::new(&*policy, key(7)))
                    .await
                    .expect("reloaded after a flush");
                if decision.is_allowed() {
                    admitted.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    let mut flusher = connection.clone();
    for _ in 0..5 {
        for loaded in ["SCRIPT", "FUNCTION"] {
            redis::cmd(loaded)
                .arg("FLUSH")
                .query_async::<()>(&mut flusher)
                .await
                .expect("flush");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 60);
}

/// The expiry in milliseconds of the one key under `prefix`.
async fn only_expiry(connection: &ConnectionManager, prefix: &str) -> i64 {
    let mut connection = connection.clone();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut connection)
        .await
        .expect("keys");
    assert_eq!(keys.len(), 1, "one counter under {prefix}");
    redis::cmd("PTTL")
        .arg(&keys[0])
        .query_async(&mut connection)
        .await
        .expect("pttl")
}

#[tokio::test]
async fn counters_expire_by_themselves_once_worthless() {
    let Some(connection) = common::connect("expiry").await else {
        return;
    };
    let config = common::config("expiry");
    let fixed_limiter =
        RedisLimiter::<_, FixedWindowPolicy>::new(connection.clone(), config.clone());
    let policy = fixed("expiring", 2, Duration::from_secs(10));
    // The allowed check writes a counter that lives as long as its window (plus
    // at most one millisecond); the denied one leaves it alone.
    let whole_limit = Check::weighted(&policy, key(5), 2).expect("valid");
    let decisions = [
        fixed_limiter.check(&whole_limit).await.expect("check"),
        fixed_limiter
            .check(&Check::new(&policy, key(5)))
            .await
            .expect("check"),
    ];
    assert!(decisions[0].is_allowed() && decisions[1].is_denied());
    let ttl = only_expiry(&connection, config.prefix()).await;
    assert!((9_000..=10_001).contains(&ttl), "{ttl}");

    // A GCRA entry is worthless once its burst has replenished: after one unit
    // of 10 per 10 s, that is one emission interval.
    let gcra_config = common::config("expiry-gcra");
    let gcra_limiter = RedisLimiter::<_, GcraPolicy>::new(connection.clone(), gcra_config.clone());
    let gcra = GcraPolicy::new(
        PolicyId::new("expiring").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        Duration::from_secs(10),
        10,
    )
    .expect("valid");
    let decision = gcra_limiter
        .check(&Check::new(&gcra, key(6)))
        .await
        .expect("check");
    assert!(decision.is_allowed());
    let ttl = only_expiry(&connection, gcra_config.prefix()).await;
    assert!((500..=1_001).contains(&ttl), "{ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_connections_checking_and_refunding_one_key_never_exceed_the_limit() {
    use runlimit_core::Lifecycle;
    use std::sync::atomic::AtomicU64;
    let Some(mut admin) = common::connect("refund-race").await else {
        return;
    };
    let config = common::config("refund-race");
    let limit = 40;
    let policy = Arc::new(fixed("refund-race", limit, Duration::from_secs(3_600)));
    let admitted = Arc::new(AtomicU64::new(0));
    let credited = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for connection in 0..8u64 {
        let limiter = Arc::new(
            RedisLimiter::<_, FixedWindowPolicy>::connect(&common::url(), config.clone())
                .await
                .expect("connect"),
        );
        for task in 0..4u64 {
            let (limiter, policy) = (Arc::clone(&limiter), Arc::clone(&policy));
            let (admitted, credited) = (Arc::clone(&admitted), Arc::clone(&credited));
            tasks.push(tokio::spawn(async move {
                let check = Check::new(&*policy, key(3));
                for round in 0..15u64 {
                    let admission = limiter.admit(&check).await.expect("no error");
                    let (_, Some(receipt)) = admission.into_parts() else {
                        continue;
                    };
                    admitted.fetch_add(1, Ordering::SeqCst);
                    // Refund two admissions in three, keep the third.
                    if (round + task + connection) % 3 != 0 {
                        let refunded = limiter.refund(&[check], receipt).await.expect("no error");
                        credited.fetch_add(refunded.credited() as u64, Ordering::SeqCst);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    let in_use = admitted.load(Ordering::SeqCst) - credited.load(Ordering::SeqCst);
    assert!(in_use <= limit, "{in_use} units in use of {limit}");
    let key = common::redis_key(&config, &Check::new(&*policy, key(3)).counter_key());
    let state: Option<String> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut admin)
        .await
        .expect("get");
    let used = state
        .and_then(|state| state.split(':').next().map(str::to_owned))
        .map_or(0, |used| used.parse::<u64>().expect("never below zero"));
    assert_eq!(used, in_use);
}
