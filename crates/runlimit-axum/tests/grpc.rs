//! The layer in front of a real tonic gRPC service, over loopback.
#![cfg(feature = "tonic")]

use std::{sync::Arc, time::Duration};

use runlimit_axum::{MissingMetadata, RateLimitLayer, grpc::GrpcRejection};
use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
use runlimit_memory::{ManualClock, MemoryStore, MemoryStoreConfig};
use tonic::{Code, transport::server::TcpIncoming};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

#[tokio::test]
async fn exhausted_grpc_clients_get_resource_exhausted_with_retry_metadata() {
    let policy = FixedWindowPolicy::new(
        PolicyId::new("grpc.health").expect("valid"),
        ScopeId::new("client").expect("valid"),
        2,
        Duration::from_secs(30),
    )
    .expect("valid");
    let hasher = Arc::new(KeyHasher::new(b"grpc test secret of at least 32 bytes").expect("valid"));
    let clock = ManualClock::new();
    let store =
        MemoryStore::new(MemoryStoreConfig::new(100).expect("valid")).with_clock(clock.clone());
    // In a real service the client identity would come from mTLS or an
    // authenticated extension; a test header stands in for it here.
    let layer = RateLimitLayer::new(store)
        .check(
            policy,
            move |parts: &http::request::Parts, policy: &FixedWindowPolicy| {
                let client = parts
                    .headers
                    .get("x-test-client")
                    .ok_or(MissingMetadata::new("client identity"))?;
                Ok(hasher.hash_for(policy, client.as_bytes()))
            },
        )
        .rejection_mapper(GrpcRejection);

    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<tonic_health::pb::health_server::HealthServer<tonic_health::server::HealthService>>().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );

    let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut client = HealthClient::new(channel);
    let request = || {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        request
            .metadata_mut()
            .insert("x-test-client", "tenant-7".parse().expect("ascii"));
        request
    };
    for _ in 0..2 {
        client.check(request()).await.expect("admitted");
    }
    // 2.4 ms later the window has 29,997.6 ms left: the pushback rounds the
    // fraction up, never telling a client to come back early.
    clock.advance(Duration::from_micros(2_400));
    let status = client
        .check(request())
        .await
        .expect_err("third call is limited");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        status
            .metadata()
            .get("grpc-retry-pushback-ms")
            .map(|v| v.to_str().expect("ascii")),
        Some("29998")
    );
    assert_eq!(
        status
            .metadata()
            .get("retry-after")
            .map(|v| v.to_str().expect("ascii")),
        Some("30")
    );

    let anonymous = client
        .check(tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        }))
        .await
        .expect_err("unattributable calls are refused");
    assert_eq!(anonymous.code(), Code::Internal);
    server.abort();
}

#[test]
fn grpc_clients_learn_whether_they_or_the_service_left_the_key_out() {
    use runlimit_axum::{Challenge, Provider, Rejection, RejectionMapper};

    let code = |missing: MissingMetadata| {
        let response: http::Response<tonic::body::Body> =
            GrpcRejection.respond(&Rejection::MissingMetadata {
                policy: None,
                missing,
            });
        let status = tonic::Status::from_header_map(response.headers()).expect("a gRPC status");
        (status.code(), status.message().to_owned())
    };
    assert_eq!(
        code(MissingMetadata::from_caller("x-tenant")),
        (
            Code::InvalidArgument,
            "missing or unusable: x-tenant".to_owned()
        )
    );
    assert_eq!(
        code(
            MissingMetadata::from_caller("x-api-key").with_provider(Provider::CallerCredentials(
                Challenge::from_static("ApiKey")
            ))
        )
        .0,
        Code::Unauthenticated
    );
    let (internal, message) = code(MissingMetadata::new("mTLS peer identity"));
    assert_eq!(internal, Code::Internal);
    assert!(!message.contains("mTLS"), "{message}");
}
