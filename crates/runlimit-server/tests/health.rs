//! `grpc.health.v1` and `/healthcheck`: serving with a configuration,
//! not serving without a domain, and `NOT_SERVING` first on shutdown.

mod common;

use std::{sync::Arc, time::Duration};

use common::{config, http, serve, store};
use runlimit_core::KeyHasher;
use runlimit_memory::ManualClock;
use runlimit_server::{
    config::Config, health::HEALTH_SERVICES, metrics::Metrics, reload::SharedConfig,
    service::Decider,
};
use tokio::time::timeout;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

/// The longest a test waits for an event that should come at once.
const BOUND: Duration = Duration::from_secs(10);

const RULES: &str = "
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
";

async fn status(
    client: &mut HealthClient<tonic::transport::Channel>,
    service: &str,
) -> ServingStatus {
    client
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .expect("a status")
        .into_inner()
        .status()
}

#[tokio::test]
async fn the_server_reports_not_serving_before_it_stops() {
    let clock = ManualClock::new();
    let mut server = common::start(RULES, &clock).await;
    let mut client = health_client(server.grpc).await;
    for service in HEALTH_SERVICES {
        assert_eq!(status(&mut client, service).await, ServingStatus::Serving);
    }
    let mut watch = client
        .watch(HealthCheckRequest {
            service: "ratelimit".to_owned(),
        })
        .await
        .expect("a stream")
        .into_inner();
    let first = timeout(BOUND, next(&mut watch)).await.expect("in time");
    assert_eq!(
        first.map(|status| status.status()),
        Some(ServingStatus::Serving)
    );

    server.signal_shutdown();
    let last = timeout(BOUND, next(&mut watch)).await.expect("in time");
    assert_eq!(
        last.map(|status| status.status()),
        Some(ServingStatus::NotServing)
    );
    server.stop().await;
}

#[tokio::test]
async fn without_a_domain_the_server_is_not_serving_until_one_loads() {
    let clock = ManualClock::new();
    let shared = Arc::new(SharedConfig::new(Config::default()));
    let decider = Decider::new(
        store(&clock),
        Arc::clone(&shared),
        KeyHasher::new(common::SECRET).expect("long"),
        Metrics::new(),
    );
    let server = serve(decider).await;
    let mut client = health_client(server.grpc).await;
    assert_eq!(
        status(&mut client, "ratelimit").await,
        ServingStatus::NotServing
    );
    let health = http(server.http, "GET", "/healthcheck", "").await;
    assert_eq!((health.status, health.body.as_str()), (500, ""));

    let mut watch = client
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("a stream")
        .into_inner();
    let first = timeout(BOUND, next(&mut watch)).await.expect("in time");
    assert_eq!(
        first.map(|status| status.status()),
        Some(ServingStatus::NotServing)
    );
    shared.replace(config(RULES));
    let next_status = timeout(BOUND, next(&mut watch)).await.expect("in time");
    assert_eq!(
        next_status.map(|status| status.status()),
        Some(ServingStatus::Serving)
    );
    let health = http(server.http, "GET", "/healthcheck", "").await;
    assert_eq!((health.status, health.body.as_str()), (200, "OK"));
    server.stop().await;
}

async fn health_client(address: std::net::SocketAddr) -> HealthClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .expect("an address")
        .connect()
        .await
        .expect("connect");
    HealthClient::new(channel)
}

/// The next message of a stream; `None` once it ends.
async fn next<T>(stream: &mut tonic::Streaming<T>) -> Option<T> {
    stream.message().await.ok().flatten()
}
