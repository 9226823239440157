//! Exactness across processes: four built servers on one Redis, on one
//! Redis Cluster (the descriptors of a request on different slots) and on
//! one PostgreSQL, each asked by sixteen concurrent clients, admit exactly a
//! descriptor's limit in total; and a request of two descriptors counts
//! both or neither.
//!
//! The Redis and PostgreSQL tests run a store of their own (see
//! `tests/faults.rs`), the cluster test uses
//! `RUNLIMIT_REDIS_CLUSTER_TEST_NODES`; each skips with a printed reason
//! when its service is missing, unless `RUNLIMIT_REQUIRE_SERVICES=1`.
#![cfg(unix)]

mod common;

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use common::{
    TempDir,
    binary::{BOUND, Serving, serve},
    descriptor, request,
    services::{PrivatePostgres, PrivateRedis, service},
};
use runlimit_server::proto::{
    RateLimitDescriptor, RateLimitServiceClient, rate_limit_response::Code,
};

const SERVERS: usize = 4;
const STREAMS: usize = 16;
/// Requests each stream sends: together more than any limit below.
const REQUESTS: usize = 6;

const ONE: u64 = 100;
const PAIR: u64 = 50;
const WIDE: u64 = 1_000;

const RULES: &str = "
domain: d
descriptors:
  - key: one
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: pair
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: wide
    rate_limit: {unit: hour, requests_per_unit: 1000}
";

/// Four servers of `backend` flags, with one secret.
async fn servers(name: &str, backend: &[&str]) -> (TempDir, Vec<Serving>) {
    let dir = TempDir::new(name);
    dir.write("rules.yaml", RULES);
    let secret = dir.path().join("secret");
    std::fs::write(
        &secret,
        "a secret of at least thirty-two bytes, for exactness",
    )
    .expect("write");
    let secret = secret.to_str().expect("UTF-8").to_owned();
    let mut flags = vec!["--secret-file", &secret, "--budget", "2s"];
    flags.extend(backend);
    let mut servers = Vec::new();
    for _ in 0..SERVERS {
        servers.push(serve(&dir, &flags).await);
    }
    (dir, servers)
}

/// Sends [`REQUESTS`] requests of `descriptors` on each of [`STREAMS`]
/// clients of every server at once; returns how many were admitted. Every
/// request must get a decision.
async fn admitted(servers: &[Serving], descriptors: &[RateLimitDescriptor]) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for server in servers {
        for _ in 0..STREAMS {
            let address = format!("http://{}", server.grpc);
            let descriptors = descriptors.to_vec();
            let admitted = Arc::clone(&admitted);
            tasks.push(tokio::spawn(async move {
                let mut client = RateLimitServiceClient::connect(address)
                    .await
                    .expect("connect");
                for _ in 0..REQUESTS {
                    let response = client
                        .should_rate_limit(request("d", descriptors.clone()))
                        .await
                        .expect("a decision")
                        .into_inner();
                    if response.overall_code() == Code::Ok {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    tokio::time::timeout(BOUND, async {
        for task in tasks {
            task.await.expect("not panicked");
        }
    })
    .await
    .expect("every request answered in time");
    admitted.load(Ordering::Relaxed)
}

/// What is left of `descriptor`'s limit, asked of `server` without
/// counting.
async fn remaining(server: &Serving, entries: &[(&str, &str)]) -> u32 {
    let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc))
        .await
        .expect("connect");
    let mut peek = descriptor(entries);
    peek.hits_addend = Some(0);
    client
        .should_rate_limit(request("d", vec![peek]))
        .await
        .expect("a decision")
        .into_inner()
        .statuses[0]
        .limit_remaining
}

async fn exact(servers: &[Serving]) {
    assert!(SERVERS * STREAMS * REQUESTS > usize::try_from(ONE).expect("small"));
    assert_eq!(admitted(servers, &[descriptor(&[("one", "v")])]).await, ONE);

    // Two descriptors: `pair` runs out, and `wide` counts exactly the
    // requests admitted, none of those denied.
    let both = [descriptor(&[("pair", "v")]), descriptor(&[("wide", "v")])];
    assert_eq!(admitted(servers, &both).await, PAIR);
    assert_eq!(
        u64::from(remaining(&servers[1], &[("wide", "v")]).await),
        WIDE - PAIR
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_servers_on_one_redis_admit_exactly_the_limit() {
    let Some(redis) = PrivateRedis::start(None) else {
        return;
    };
    let (_dir, servers) = servers(
        "exact-redis",
        &["--backend", "redis", "--redis-url", &redis.url],
    )
    .await;
    exact(&servers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_servers_on_one_redis_cluster_admit_exactly_the_limit() {
    // The shared test cluster (`scripts/redis-cluster.sh start`), under a
    // prefix of this run's own.
    let Some(nodes) = service("RUNLIMIT_REDIS_CLUSTER_TEST_NODES") else {
        return;
    };
    let prefix = format!(
        "rl-server-exact:{}:{}:",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos())
    );
    let (_dir, servers) = servers(
        "exact-cluster",
        &[
            "--backend",
            "redis-cluster",
            "--redis-cluster-nodes",
            &nodes,
            "--redis-prefix",
            &prefix,
        ],
    )
    .await;
    exact(&servers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_servers_on_one_postgres_admit_exactly_the_limit() {
    let Some(postgres) = PrivatePostgres::start("exact-postgres", None) else {
        return;
    };
    let (_dir, servers) = servers(
        "exact-postgres-servers",
        &[
            "--backend",
            "postgres",
            "--postgres-url",
            &postgres.url,
            "--postgres-max-connections",
            "8",
        ],
    )
    .await;
    // The schema is applied in the background once the database is
    // reached: wait until every server decides.
    for server in &servers {
        let deadline = tokio::time::Instant::now() + BOUND;
        let mut client = RateLimitServiceClient::connect(format!("http://{}", server.grpc))
            .await
            .expect("connect");
        loop {
            let mut peek = descriptor(&[("one", "warm-up")]);
            peek.hits_addend = Some(0);
            if client
                .should_rate_limit(request("d", vec![peek]))
                .await
                .is_ok()
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the server never reached PostgreSQL"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    exact(&servers).await;
}
