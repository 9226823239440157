//! The conformance suite and slot rules on a real 3-master Redis Cluster
//! (started by `scripts/redis-cluster.sh`; node URLs in
//! `RUNLIMIT_REDIS_CLUSTER_TEST_NODES`).

mod common;

use std::time::Duration;

use common::Layout;
use redis::cluster_async::ClusterConnection;
use runlimit_conformance::{
    TimeControl, any_policy_carry_suite, carry_drain_suite, fixed_window_carry_suite,
    fixed_window_grant_suite, fixed_window_lifecycle_suite, fixed_window_settle_suite,
    fixed_window_suite, gcra_carry_suite, gcra_grant_suite, gcra_lifecycle_suite,
    gcra_settle_suite, gcra_suite, sliding_window_carry_suite, sliding_window_grant_suite,
    sliding_window_lifecycle_suite, sliding_window_settle_suite, sliding_window_suite,
};
use runlimit_core::{
    AnyPolicy, CarriedFrom, Check, FixedWindowPolicy, GcraPolicy, Lifecycle, Limiter, PolicyId,
    ScopeId, SlidingWindowPolicy, SubjectKey,
};
use runlimit_redis::{CheckError, KeyRouting, RedisConfig, RedisLimiter};

fn nodes() -> Option<Vec<String>> {
    match std::env::var("RUNLIMIT_REDIS_CLUSTER_TEST_NODES") {
        Ok(nodes) if !nodes.trim().is_empty() => {
            Some(nodes.split(',').map(str::to_owned).collect())
        }
        _ => {
            if std::env::var("RUNLIMIT_REQUIRE_SERVICES").as_deref() == Ok("1") {
                panic!(
                    "a Redis Cluster is required (RUNLIMIT_REQUIRE_SERVICES=1): set RUNLIMIT_REDIS_CLUSTER_TEST_NODES (scripts/redis-cluster.sh starts one)"
                );
            }
            eprintln!("skipping: RUNLIMIT_REDIS_CLUSTER_TEST_NODES is not set");
            None
        }
    }
}

async fn connect(nodes: &[String]) -> ClusterConnection {
    redis::cluster::ClusterClient::new(nodes.to_vec())
        .expect("cluster client")
        .get_async_connection()
        .await
        .expect("cluster connection")
}

/// Shifts state on every node: each node scans and rewrites only its own keys.
struct ShiftCluster {
    nodes: Vec<String>,
    prefix: String,
    layout: Layout,
}

impl TimeControl for ShiftCluster {
    async fn advance(&self, by: Duration) {
        // Each node shifts only the keys it holds.
        for node in &self.nodes {
            let client = redis::Client::open(node.as_str()).expect("node url");
            let mut connection = client
                .get_multiplexed_async_connection()
                .await
                .expect("node");
            common::shift(&mut connection, &self.prefix, by, self.layout).await;
        }
    }

    async fn elapse(&self, by: Duration) {
        // Receipts carry Redis's own times, which no shift can move.
        tokio::time::sleep(by).await;
    }

    fn receipts_survive_advance(&self) -> bool {
        false
    }

    fn drift(&self) -> Duration {
        Duration::from_millis(250)
    }
}

fn single_slot(config: RedisConfig) -> RedisConfig {
    config
        .with_routing(KeyRouting::SingleSlot("conformance".to_owned()))
        .expect("valid tag")
}

#[tokio::test]
async fn the_conformance_suite_passes_on_a_cluster() {
    let Some(nodes) = nodes() else { return };
    let connection = connect(&nodes).await;
    // The suite batches different policies, so it runs with one hash slot; the
    // single checks below exercise keys spread over the cluster.
    let config = single_slot(common::config("cluster-fixed"));
    let time = ShiftCluster {
        nodes: nodes.clone(),
        prefix: config.prefix().to_owned(),
        layout: Layout::FixedWindow,
    };
    let limiter = RedisLimiter::<_, FixedWindowPolicy>::cluster(connection.clone(), config);
    fixed_window_suite(&limiter, &time).await;
    fixed_window_lifecycle_suite(&limiter, &time).await;
    fixed_window_settle_suite(&limiter, &time).await;
    fixed_window_grant_suite(&limiter).await;
    let config = single_slot(common::config("cluster-gcra"));
    let time = ShiftCluster {
        nodes: nodes.clone(),
        prefix: config.prefix().to_owned(),
        layout: Layout::Gcra,
    };
    let limiter = RedisLimiter::<_, GcraPolicy>::cluster(connection.clone(), config);
    gcra_suite(&limiter, &time).await;
    gcra_lifecycle_suite(&limiter, &time).await;
    gcra_settle_suite(&limiter, &time).await;
    gcra_grant_suite(&limiter).await;
    carry_drain_suite(&limiter, &time).await;
    let config = single_slot(common::config("cluster-sliding"));
    let time = ShiftCluster {
        nodes,
        prefix: config.prefix().to_owned(),
        layout: Layout::SlidingWindow,
    };
    let limiter = RedisLimiter::<_, SlidingWindowPolicy>::cluster(connection, config);
    sliding_window_suite(&limiter, &time).await;
    sliding_window_lifecycle_suite(&limiter, &time).await;
    sliding_window_settle_suite(&limiter, &time).await;
    sliding_window_grant_suite(&limiter).await;
}

/// A subject's state carries across a change of policy or secret on a
/// cluster, for each algorithm and between every two (`AnyPolicy`). The
/// suites batch subjects, so they run with one hash slot; the test below
/// carries across slots.
#[tokio::test]
async fn state_carries_on_a_cluster() {
    let Some(nodes) = nodes() else { return };
    let connection = connect(&nodes).await;
    let config = single_slot(common::config("cluster-carry"));
    fixed_window_carry_suite(&RedisLimiter::<_, FixedWindowPolicy>::cluster(
        connection.clone(),
        config.clone(),
    ))
    .await;
    sliding_window_carry_suite(&RedisLimiter::<_, SlidingWindowPolicy>::cluster(
        connection.clone(),
        config.clone(),
    ))
    .await;
    gcra_carry_suite(&RedisLimiter::<_, GcraPolicy>::cluster(
        connection.clone(),
        config.clone(),
    ))
    .await;
    any_policy_carry_suite(&RedisLimiter::<_, AnyPolicy>::cluster(connection, config)).await;
}

/// With the default routing a counter's key is tagged by its subject key,
/// so a policy's successor finds its predecessor's counter in its own slot
/// (one more invocation, once), while a rotated secret's previous key hashes
/// elsewhere: its state is read with one `MGET` beside the check (the same
/// round trip), then carried (one more round trip, once); a peek reads it
/// after the counter. Each carry is heard once; a reset deletes the sources
/// in every slot.
#[tokio::test]
async fn a_rotated_secret_carries_from_another_slot() {
    let Some(nodes) = nodes() else { return };
    let mut admin = connect(&nodes).await;
    let connection = common::Counting::new(admin.clone());
    let carries = common::Carries::default();
    let config = common::config("cluster-rotation");
    let limiter = RedisLimiter::<_, FixedWindowPolicy>::cluster(connection.clone(), config.clone())
        .with_observer(carries.clone());
    let policy = |limit| {
        FixedWindowPolicy::new(
            PolicyId::new("rotation").expect("valid"),
            ScopeId::new("client").expect("valid"),
            limit,
            Duration::from_secs(3_600),
        )
        .expect("valid")
    };
    let (old, new) = (policy(3), policy(5));
    let new = new.continuing(&old).expect("one id and scope");
    let subject = |n: u8| SubjectKey::from_digest([n; 32]);
    let rotated = |n: u8| subject(n + 1).with_previous(*subject(n).as_bytes());
    let mut slot = async |policy: &FixedWindowPolicy, subject: SubjectKey| -> u16 {
        let key = common::redis_key(&config, &Check::new(policy, subject).counter_key());
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut admin)
            .await
            .expect("keyslot")
    };
    assert_ne!(
        slot(&old, subject(0x50)).await,
        slot(&old, rotated(0x50)).await
    );
    assert_eq!(
        slot(&old, subject(0x52)).await,
        slot(&new, subject(0x52)).await
    );
    // Load the libraries a carry and a peek use.
    limiter
        .check(&Check::new(&old, rotated(0x40)))
        .await
        .expect("check");
    limiter
        .peek(&Check::new(&old, rotated(0x42)))
        .await
        .expect("peek");
    for n in [0x50, 0x52] {
        for _ in 0..3 {
            let check = Check::new(&old, subject(n));
            assert!(limiter.check(&check).await.expect("check").is_allowed());
        }
    }
    connection.take();
    carries.take();

    // A peek reads the counter, then the previous key's state, and carries
    // nothing.
    let check = Check::new(&old, rotated(0x50));
    assert!(!limiter.peek(&check).await.expect("peek").is_allowed());
    assert_eq!(connection.take(), ["FCALL", "MGET"], "a peek");
    assert!(!limiter.check(&check).await.expect("check").is_allowed());
    // The marked check and the read of the previous key go out together;
    // the carrying check is the one more round trip.
    assert_eq!(connection.take(), ["FCALL", "MGET", "FCALL"], "a rotation");
    assert_eq!(carries.take(), [CarriedFrom::PreviousSecret]);
    assert!(!limiter.check(&check).await.expect("check").is_allowed());
    assert_eq!(
        connection.take(),
        ["FCALL", "MGET"],
        "carried, the previous key still read beside the check"
    );

    let check = Check::new(&new, subject(0x52));
    assert_eq!(
        limiter.check(&check).await.expect("check").remaining(),
        Some(1)
    );
    assert_eq!(connection.take(), ["FCALL", "FCALL"], "a policy change");
    assert_eq!(carries.take(), [CarriedFrom::Predecessor]);

    // The reset deletes the previous key in its slot too: the subject
    // starts afresh rather than carry again.
    assert!(limiter.reset(&old, &rotated(0x50)).await.expect("reset"));
    assert_eq!(connection.take(), ["DEL"], "a reset");
    let check = Check::new(&old, rotated(0x50));
    assert_eq!(
        limiter.check(&check).await.expect("check").remaining(),
        Some(2)
    );
    assert_eq!(carries.take(), []);
}

/// Leased replicas in front of a cluster, checking weighted costs, held to
/// the ledger of `runlimit_conformance::leased` for every algorithm (the
/// weighted case and random traces).
#[test]
fn weighted_leased_traces_strand_no_units_on_a_cluster() {
    let Some(nodes) = nodes() else { return };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let connection = runtime.block_on(connect(&nodes));
    let config = common::config("cluster-leased");
    common::leased_suites(&runtime, connection, config, true);
}

#[tokio::test]
async fn single_checks_work_for_keys_on_every_node_and_cross_slot_batches_are_refused() {
    let Some(nodes) = nodes() else { return };
    // The crate's own cluster constructor, as the README recommends.
    let limiter = RedisLimiter::<_, GcraPolicy>::connect_cluster(
        nodes.iter().map(String::as_str),
        common::config("cluster-spread"),
    )
    .await
    .expect("cluster connection");
    let policy = GcraPolicy::new(
        PolicyId::new("spread").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(60),
        2,
    )
    .expect("valid");
    // Sixty-four keys land on every master; refunds, peeks and resets work
    // for each of them too.
    for n in 0..64u8 {
        let check = Check::new(&policy, SubjectKey::from_digest([n; 32]));
        let decision = limiter.check(&check).await.expect("single check");
        assert_eq!(decision.remaining(), Some(1));
        let receipt = limiter.admit(&check).await.expect("admit").into_parts().1;
        let refunded = limiter
            .refund(&[check], receipt.expect("allowed"))
            .await
            .expect("refund");
        assert_eq!(refunded.credited(), 1);
        assert_eq!(
            limiter.peek(&check).await.expect("peek").remaining(),
            Some(1)
        );
        if n % 2 == 0 {
            assert!(
                limiter
                    .reset(&policy, check.subject())
                    .await
                    .expect("reset")
            );
            assert_eq!(
                limiter.peek(&check).await.expect("peek").remaining(),
                Some(2)
            );
            limiter.check(&check).await.expect("single check");
        }
    }
    let batch = [
        Check::new(&policy, SubjectKey::from_digest([100; 32])),
        Check::new(&policy, SubjectKey::from_digest([101; 32])),
    ];
    let error = limiter
        .check_all(&batch)
        .await
        .expect_err("keys in two slots");
    assert!(matches!(error, CheckError::CrossSlot { .. }), "{error:?}");
    assert!(!error.may_have_consumed_quota());
    assert_eq!(
        limiter
            .check(&batch[0])
            .await
            .expect("untouched")
            .remaining(),
        Some(1)
    );
}

/// `connect_cluster` takes the policy type from the checks, with no
/// annotation, and `for_policy` gives another policy type the cluster
/// connection.
#[tokio::test]
async fn connect_cluster_takes_the_policy_type_from_the_checks() {
    let Some(nodes) = nodes() else { return };
    let windows = RedisLimiter::connect_cluster(
        nodes.iter().map(String::as_str),
        common::config("cluster-inferred"),
    )
    .await
    .expect("cluster connection");
    let id = || PolicyId::new("inferred").expect("valid");
    let scope = || ScopeId::new("client").expect("valid");
    let minute = Duration::from_secs(60);
    let window = FixedWindowPolicy::new(id(), scope(), 1, minute).expect("valid");
    let check = Check::new(&window, SubjectKey::from_digest([3; 32]));
    assert!(windows.check(&check).await.expect("decided").is_allowed());
    assert!(!windows.check(&check).await.expect("decided").is_allowed());
    let rates = windows.for_policy();
    let rate = GcraPolicy::new(id(), scope(), 1, minute, 1).expect("valid");
    let check = Check::new(&rate, SubjectKey::from_digest([3; 32]));
    assert!(rates.check(&check).await.expect("decided").is_allowed());
    assert!(!rates.check(&check).await.expect("decided").is_allowed());
}

/// Concurrent checks on a cluster share invocations, which call the function
/// library the limiter loads on every primary once a server lacks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_checks_on_a_cluster_load_the_function_library_on_every_primary() {
    let Some(nodes) = nodes() else { return };
    for node in &nodes {
        let mut connection = common::admin(node).await;
        let _: () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query_async(&mut connection)
            .await
            .expect("flush");
    }
    let limiter = RedisLimiter::<_, FixedWindowPolicy>::connect_cluster(
        nodes.iter().map(String::as_str),
        single_slot(common::config("cluster-functions")),
    )
    .await
    .expect("cluster connection");
    let policy = FixedWindowPolicy::new(
        PolicyId::new("functions").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(60),
    )
    .expect("valid");
    // Sixty-four subjects checked at once, twice: every first check allowed,
    // every second denied.
    for allowed in [true, false] {
        let mut checks = tokio::task::JoinSet::new();
        for n in 0..64u8 {
            let (limiter, policy) = (limiter.clone(), policy.clone());
            checks.spawn(async move {
                let check = Check::new(&policy, SubjectKey::from_digest([n; 32]));
                limiter.check(&check).await.expect("check").is_allowed()
            });
        }
        while let Some(decided) = checks.join_next().await {
            assert_eq!(decided.expect("task"), allowed);
        }
    }
    for node in &nodes {
        let mut connection = common::admin(node).await;
        let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg("runlimit_*")
            .query_async(&mut connection)
            .await
            .expect("list");
        assert!(!libraries.is_empty(), "no library on {node}");
    }
}
