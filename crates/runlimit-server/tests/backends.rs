//! The shared backends in process: requests over Redis Cluster slots stay
//! all or nothing, and leases on one Redis admit exactly the limit across
//! replicas.
//!
//! Needs `RUNLIMIT_REDIS_CLUSTER_TEST_NODES` (`scripts/redis-cluster.sh
//! start`) and `RUNLIMIT_REDIS_TEST_URL`; each test skips with a printed
//! reason when its service is not given, unless
//! `RUNLIMIT_REQUIRE_SERVICES=1`.

mod common;

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use common::{SECRET, config, descriptor, request};
use runlimit_core::{AnyPolicy, KeyHasher};
use runlimit_memory::LeaseConfig;
use runlimit_redis::{RedisConfig, RedisLimiter};
use runlimit_server::{
    backend::{LeaseRouted, SlotBatches},
    metrics::Metrics,
    proto::rate_limit_response::Code,
    reload::SharedConfig,
    service::Decider,
};

/// The service's address from `variable`, or `None` (with a printed reason)
/// when it is not given and services are optional.
fn service(variable: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            assert!(
                std::env::var("RUNLIMIT_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "{variable} is required (RUNLIMIT_REQUIRE_SERVICES=1)"
            );
            eprintln!("skipping: {variable} is not set");
            None
        }
    }
}

/// A key prefix no other test or run uses.
fn prefix(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    format!("rl-server-test:{test}:{}:{nanos}:", std::process::id())
}

fn redis_config(test: &str) -> RedisConfig {
    RedisConfig::default()
        .with_prefix(prefix(test))
        .expect("a valid prefix")
}

fn decider_on<L>(limiter: L, shared: &Arc<SharedConfig>) -> Decider<L>
where
    L: runlimit_core::Limiter<Policy = AnyPolicy> + runlimit_core::Lifecycle,
{
    Decider::new(
        limiter,
        Arc::clone(shared),
        KeyHasher::new(SECRET).expect("a long secret"),
        Metrics::new(),
    )
    .with_budget(std::time::Duration::from_secs(2))
}

const TWO_RULES: &str = "domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 100}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_cluster_slots_are_counted_all_or_nothing() {
    let Some(nodes) = service("RUNLIMIT_REDIS_CLUSTER_TEST_NODES") else {
        return;
    };
    let redis =
        RedisLimiter::<_, AnyPolicy>::connect_cluster(nodes.split(','), redis_config("slots"))
            .await
            .expect("the cluster answers");
    let shared = Arc::new(SharedConfig::new(config(TWO_RULES)));
    // No denial cache in front: every request reaches the slots.
    let decider = decider_on(SlotBatches::new(redis), &shared);

    // Four subjects of `a`, each with the one subject of `b`: their
    // counters hash to different slots (the chance that all five share
    // one is about 10^-17).
    for a in 0..4 {
        let a = a.to_string();
        let ask = || {
            request(
                "d",
                vec![descriptor(&[("a", &a)]), descriptor(&[("b", "s")])],
            )
        };
        for _ in 0..2 {
            let response = decider.should_rate_limit(&ask()).await.expect("decided");
            assert_eq!(response.overall_code(), Code::Ok);
        }
        let response = decider.should_rate_limit(&ask()).await.expect("decided");
        assert_eq!(response.overall_code(), Code::OverLimit);
        assert_eq!(response.statuses[0].code(), Code::OverLimit);
    }
    // `b` counted only the eight admitted requests: the four denied ones
    // were given back on its slot (or never counted there).
    let mut peek = request("d", vec![descriptor(&[("b", "s")])]);
    peek.descriptors[0].hits_addend = Some(0);
    let response = decider.should_rate_limit(&peek).await.expect("decided");
    assert_eq!(response.statuses[0].limit_remaining, 92);

    // Concurrently: 16 requests for each of four fresh `a` subjects with
    // one `b` subject, two of each admitted, and `b` counting exactly
    // those.
    let decider = Arc::new(decider);
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..64 {
        let decider = Arc::clone(&decider);
        let admitted = Arc::clone(&admitted);
        tasks.push(tokio::spawn(async move {
            let a = format!("c{}", task % 4);
            let ask = request(
                "d",
                vec![descriptor(&[("a", &a)]), descriptor(&[("b", "t")])],
            );
            let response = decider.should_rate_limit(&ask).await.expect("decided");
            if response.overall_code() == Code::Ok {
                admitted.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.expect("not panicked");
    }
    assert_eq!(admitted.load(Ordering::Relaxed), 8);
    let mut peek = request("d", vec![descriptor(&[("b", "t")])]);
    peek.descriptors[0].hits_addend = Some(0);
    let response = decider.should_rate_limit(&peek).await.expect("decided");
    assert_eq!(response.statuses[0].limit_remaining, 92);
}

const QUOTA_RULES: &str = "domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: q
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_by_quota_mode_gives_back_every_slot_of_its_batch() {
    let Some(nodes) = service("RUNLIMIT_REDIS_CLUSTER_TEST_NODES") else {
        return;
    };
    let redis = RedisLimiter::<_, AnyPolicy>::connect_cluster(
        nodes.split(','),
        redis_config("quota-slots"),
    )
    .await
    .expect("the cluster answers");
    let shared = Arc::new(SharedConfig::new(config(QUOTA_RULES)));
    let decider = decider_on(SlotBatches::new(redis), &shared);
    let ask = || {
        request(
            "d",
            vec![
                descriptor(&[("a", "x")]),
                descriptor(&[("b", "y")]),
                descriptor(&[("q", "z")]),
            ],
        )
    };
    // The first request takes the quota-mode descriptor's one unit.
    let response = decider.should_rate_limit(&ask()).await.expect("decided");
    assert_eq!(response.overall_code(), Code::Ok);
    // Every quota-mode descriptor is over now: the request is over, and the
    // enforced batch it counted on two slots is given back.
    let response = decider.should_rate_limit(&ask()).await.expect("decided");
    assert_eq!(response.overall_code(), Code::OverLimit);
    for key in ["a", "b"] {
        let value = if key == "a" { "x" } else { "y" };
        let mut peek = request("d", vec![descriptor(&[(key, value)])]);
        peek.descriptors[0].hits_addend = Some(0);
        let response = decider.should_rate_limit(&peek).await.expect("decided");
        assert_eq!(
            response.statuses[0].limit_remaining, 9,
            "{key} counted once"
        );
    }
}

const HOT_RULE: &str = "domain: d
descriptors:
  - key: hot
    rate_limit:
      unit: minute
      requests_per_unit: 50
      runlimit: {lease: true}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_over_several_replicas_admit_exactly_the_limit() {
    let Some(url) = service("RUNLIMIT_REDIS_TEST_URL") else {
        return;
    };
    let config = redis_config("leases");
    let shared = Arc::new(SharedConfig::new(common::config(HOT_RULE)));
    let leases = LeaseConfig::new(100)
        .and_then(|leases| leases.with_max_grant(8))
        .expect("valid");
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let redis = RedisLimiter::<_, AnyPolicy>::connect(&url, config.clone())
            .await
            .expect("Redis answers");
        let routed = LeaseRouted::new(redis, leases, Arc::clone(&shared));
        replicas.push(Arc::new(decider_on(routed, &shared)));
    }

    // Rounds of concurrent requests on every replica until they are all
    // denied, then every lease given back; the units leases held come back
    // to the shared quota and the next round spends them. The total stops
    // growing at the limit, never beyond.
    let admitted = Arc::new(AtomicU64::new(0));
    for _round in 0..20 {
        let before = admitted.load(Ordering::Relaxed);
        let mut tasks = Vec::new();
        for replica in &replicas {
            for _ in 0..8 {
                let replica = Arc::clone(replica);
                let admitted = Arc::clone(&admitted);
                tasks.push(tokio::spawn(async move {
                    let ask = request("d", vec![descriptor(&[("hot", "h")])]);
                    loop {
                        let response = replica.should_rate_limit(&ask).await.expect("decided");
                        if response.overall_code() != Code::Ok {
                            return;
                        }
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        for task in tasks {
            task.await.expect("not panicked");
        }
        for replica in &replicas {
            replica.limiter().flush().await.expect("leases given back");
        }
        if admitted.load(Ordering::Relaxed) == before {
            break;
        }
    }
    assert_eq!(admitted.load(Ordering::Relaxed), 50);
    let local: u64 = replicas
        .iter()
        .map(|replica| replica.limiter().stats().local_hits)
        .sum();
    assert!(local > 0, "some checks were admitted from leases");
}
