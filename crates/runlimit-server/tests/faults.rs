//! The built server on a store that stops: with its Redis or PostgreSQL
//! stopped by SIGSTOP, every call answers `UNAVAILABLE` and none hangs;
//! resumed, it admits again. Started while its store is down, it serves
//! `UNAVAILABLE` and admits once the store comes up.
//!
//! Each test runs a store of its own (`redis-server`; a PostgreSQL cluster
//! made with `initdb` and run by `pg_ctl`, as the `postgres` user when the
//! tests run as root), never the shared services; it skips with a printed
//! reason when the programs are missing, unless
//! `RUNLIMIT_REQUIRE_SERVICES=1`.
#![cfg(unix)]

mod common;

use std::time::Duration;

use common::{
    TempDir,
    binary::{Serving, serve},
    descriptor, request,
    services::{PrivatePostgres, PrivateRedis, free_port, signal},
};
use runlimit_server::proto::{RateLimitServiceClient, rate_limit_response::Code};
use tonic::{Code as GrpcCode, transport::Channel};

const RULES: &str = "
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000}
";

/// Longer than any answer may take: a call still pending after it hangs.
const HANG: Duration = Duration::from_secs(5);

/// How long a resumed store has to be used again.
const RECOVERY: Duration = Duration::from_secs(20);

/// A server directory with the rules and a secret; the flags naming it.
fn setup(name: &str) -> (TempDir, String) {
    let dir = TempDir::new(name);
    dir.write("rules.yaml", RULES);
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "a secret of at least thirty-two bytes, for faults").expect("write");
    let secret = secret.to_str().expect("UTF-8").to_owned();
    (dir, secret)
}

async fn client(server: &Serving) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{}", server.grpc))
        .await
        .expect("connect")
}

/// One call, which must answer before [`HANG`]: its overall code, or the
/// gRPC status code of its error.
async fn call(client: &mut RateLimitServiceClient<Channel>, value: &str) -> Result<Code, GrpcCode> {
    let ask = request("d", vec![descriptor(&[("k", value)])]);
    match tokio::time::timeout(HANG, client.should_rate_limit(ask)).await {
        Ok(Ok(response)) => Ok(response.into_inner().overall_code()),
        Ok(Err(status)) => Err(status.code()),
        Err(_) => panic!("a call did not answer within {HANG:?}: it hangs"),
    }
}

/// Calls until one is admitted, within [`RECOVERY`].
async fn admits_again(client: &mut RateLimitServiceClient<Channel>) {
    let deadline = tokio::time::Instant::now() + RECOVERY;
    let mut attempt = 0;
    loop {
        attempt += 1;
        if call(client, &format!("recovering-{attempt}")).await == Ok(Code::Ok) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not admitting {RECOVERY:?} after the store came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Calls while the store is stopped: every one `UNAVAILABLE`.
async fn unavailable(client: &mut RateLimitServiceClient<Channel>, calls: usize) {
    for index in 0..calls {
        assert_eq!(
            call(client, &format!("stopped-{index}")).await,
            Err(GrpcCode::Unavailable),
            "call {index} with the store stopped"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_answers_unavailable_and_a_resumed_one_admits() {
    let Some(redis) = PrivateRedis::start(None) else {
        return;
    };
    let (dir, secret) = setup("faults-redis");
    let server = serve(
        &dir,
        &[
            "--secret-file",
            &secret,
            "--backend",
            "redis",
            "--redis-url",
            &redis.url,
            "--budget",
            "100ms",
        ],
    )
    .await;
    let mut client = client(&server).await;
    assert_eq!(call(&mut client, "before").await, Ok(Code::Ok));

    signal("STOP", &[redis.pid()]);
    unavailable(&mut client, 20).await;
    signal("CONT", &[redis.pid()]);
    admits_again(&mut client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_without_its_redis_serves_unavailable_then_admits_when_it_comes_up() {
    let port = free_port();
    let (dir, secret) = setup("faults-redis-late");
    let url = format!("redis://127.0.0.1:{port}/");
    let server = serve(
        &dir,
        &[
            "--secret-file",
            &secret,
            "--backend",
            "redis",
            "--redis-url",
            &url,
            "--budget",
            "100ms",
        ],
    )
    .await;
    let mut client = client(&server).await;
    unavailable(&mut client, 5).await;
    let Some(_redis) = PrivateRedis::start(Some(port)) else {
        return;
    };
    admits_again(&mut client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_postgres_answers_unavailable_and_a_resumed_one_admits() {
    let Some(postgres) = PrivatePostgres::start("faults-postgres", None) else {
        return;
    };
    let (dir, secret) = setup("faults-postgres-server");
    let server = serve(
        &dir,
        &[
            "--secret-file",
            &secret,
            "--backend",
            "postgres",
            "--postgres-url",
            &postgres.url,
            "--postgres-max-connections",
            "4",
            "--budget",
            "500ms",
        ],
    )
    .await;
    let mut client = client(&server).await;
    // The schema is applied once the database is reached, in the
    // background: the first admission may take a moment.
    admits_again(&mut client).await;

    let stopped = postgres.pids();
    signal("STOP", &stopped);
    unavailable(&mut client, 10).await;
    signal("CONT", &stopped);
    admits_again(&mut client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_without_its_postgres_serves_unavailable_then_admits_when_it_comes_up() {
    let port = free_port();
    let (dir, secret) = setup("faults-postgres-late");
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let server = serve(
        &dir,
        &[
            "--secret-file",
            &secret,
            "--backend",
            "postgres",
            "--postgres-url",
            &url,
            "--postgres-max-connections",
            "4",
            "--budget",
            "500ms",
        ],
    )
    .await;
    let mut client = client(&server).await;
    unavailable(&mut client, 5).await;
    let Some(_postgres) = PrivatePostgres::start("faults-postgres-late-db", Some(port)) else {
        return;
    };
    admits_again(&mut client).await;
}
