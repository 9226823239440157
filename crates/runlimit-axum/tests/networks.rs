//! Peer limits with IPv6 network levels: a network spread over many /64s is
//! held to its aggregate, IPv4 peers and other networks are untouched, and
//! mistakes in the levels are refused when they are built.

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use axum::{Router, body::Body, extract::ConnectInfo, routing::get};
use http::{Request, StatusCode};
use runlimit_axum::{
    NetworkLimitError, PeerConnection, PeerIp, PeerLimits, RateLimitContext, RateLimitLayer,
};
use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
use runlimit_memory::{ManualClock, MemoryStore, MemoryStoreConfig};
use tower::ServiceExt;

fn policy(scope: &str, limit: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("login").expect("valid"),
        ScopeId::new(scope).expect("valid"),
        limit,
        Duration::from_secs(60),
    )
    .expect("valid")
}

fn hasher() -> KeyHasher {
    KeyHasher::new(b"test secret that is at least 32 bytes").expect("valid")
}

/// Per peer 2, per /56 3, per /48 5, on `store`; the handler answers how many
/// policies the request was checked against.
fn app(store: Arc<MemoryStore>) -> Router {
    let hasher = hasher();
    let peers = PeerLimits::new(policy("client", 2), PeerIp::new(&hasher))
        .with_ipv6_network(56, policy("client.56", 3))
        .expect("wider")
        .with_ipv6_network(48, policy("client.48", 5))
        .expect("wider");
    let layer = RateLimitLayer::from_shared(store).check_peer(peers);
    Router::new().route(
        "/",
        get(|context: axum::Extension<RateLimitContext>| async move {
            context.0.policies().len().to_string()
        })
        .route_layer(layer),
    )
}

async fn send(app: &Router, peer: &str) -> (StatusCode, String) {
    let ip: IpAddr = peer.parse().expect("address");
    let mut request = Request::get("/").body(Body::empty()).expect("request");
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(ip, 40_000)));
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1_024)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn store() -> Arc<MemoryStore> {
    let config = MemoryStoreConfig::new(1_000).expect("valid");
    Arc::new(MemoryStore::new(config).with_clock(ManualClock::new()))
}

/// The requests a network sends before its levels apply: the peer
/// policy's capacity.
const ESCALATES_AFTER: u64 = 2;

#[tokio::test]
async fn a_network_spread_over_many_64s_is_held_to_its_aggregate() {
    let app = app(store());
    // Twenty /64s of one /48, each in a /56 of its own, one request each:
    // the /48 admits what it sent before escalating and its limit, 5.
    let mut admitted = 0;
    for site in 0..20 {
        let (status, _) = send(&app, &format!("2001:db8:7:{site:x}00::1")).await;
        if status == StatusCode::OK {
            admitted += 1;
        } else {
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        }
    }
    assert_eq!(admitted, ESCALATES_AFTER + 5);
    // Another /48 has a quota of its own.
    assert_eq!(send(&app, "2001:db8:8::1").await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_56_is_held_to_its_own_level_before_the_48() {
    let app = app(store());
    // Ten /64s of one /56: two before it escalates, then its limit of three.
    let mut statuses = Vec::new();
    for subnet in 0..10 {
        statuses.push(send(&app, &format!("2001:db8:7:1{subnet:02x}::1")).await.0);
    }
    let admitted = statuses
        .iter()
        .filter(|status| **status == StatusCode::OK)
        .count();
    assert_eq!(admitted, 5, "{statuses:?}");
    assert!(
        statuses[5..]
            .iter()
            .all(|status| *status == StatusCode::TOO_MANY_REQUESTS)
    );
    // The /48 has counted three of its five: another /56 of it is served.
    assert_eq!(send(&app, "2001:db8:7:200::1").await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_refused_request_consumes_no_level() {
    let store = store();
    let app = app(Arc::clone(&store));
    for site in 0..7 {
        assert_eq!(
            send(&app, &format!("2001:db8:7:{site}00::1")).await.0,
            StatusCode::OK
        );
    }
    let before = store.stats().entries;
    // Refused by the /48: the new /64 and /56 keys are not stored.
    assert_eq!(
        send(&app, "2001:db8:7:900::1").await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(store.stats().entries, before);
}

#[tokio::test]
async fn ipv4_peers_are_checked_at_their_own_level_only() {
    let store = store();
    let app = app(Arc::clone(&store));
    let (status, policies) = send(&app, "192.0.2.1").await;
    assert_eq!((status, policies.as_str()), (StatusCode::OK, "1"));
    let (status, policies) = send(&app, "::ffff:192.0.2.2").await;
    assert_eq!((status, policies.as_str()), (StatusCode::OK, "1"));
    assert_eq!(store.stats().entries, 2, "one key per IPv4 peer");
    // Many IPv4 peers of one /24 share no aggregate.
    for host in 3..20 {
        assert_eq!(
            send(&app, &format!("192.0.2.{host}")).await.0,
            StatusCode::OK
        );
    }
}

#[tokio::test]
async fn an_ipv6_network_is_checked_at_its_levels_once_it_escalates() {
    let store = store();
    let app = app(Arc::clone(&store));
    // A network's first requests: its peer's check alone, one key each.
    let (status, policies) = send(&app, "2001:db8:9:1::1").await;
    assert_eq!((status, policies.as_str()), (StatusCode::OK, "1"));
    let (status, policies) = send(&app, "2001:db8:9:2::1").await;
    assert_eq!((status, policies.as_str()), (StatusCode::OK, "1"));
    assert_eq!(store.stats().entries, 2);
    // More than a peer's limit from one /56: every level from now on.
    let (status, policies) = send(&app, "2001:db8:9:3::1").await;
    assert_eq!((status, policies.as_str()), (StatusCode::OK, "3"));
    // Another /56 of the same /48: the /48 level only.
    let (status, policies) = send(&app, "2001:db8:9:100::1").await;
    assert_eq!((status, policies.as_str()), (StatusCode::OK, "2"));
}

#[tokio::test]
async fn served_per_connection_the_levels_key_the_same() {
    let app = app(store());
    let peer = SocketAddr::new("2001:db8:7::1".parse().expect("address"), 40_000);
    let connection = PeerConnection::new(peer);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let mut request = Request::get("/").body(Body::empty()).expect("request");
        request
            .extensions_mut()
            .insert(ConnectInfo(connection.clone()));
        statuses.push(
            app.clone()
                .oneshot(request)
                .await
                .expect("infallible")
                .status(),
        );
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

#[tokio::test]
async fn a_request_without_a_peer_is_refused_never_admitted_unchecked() {
    let app = app(store());
    let request = Request::get("/").body(Body::empty()).expect("request");
    let status = app.oneshot(request).await.expect("infallible").status();
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
}

#[test]
fn mistaken_levels_are_refused_when_built() {
    let hasher = hasher();
    let peers = || PeerLimits::new(policy("client", 10), PeerIp::new(&hasher));
    assert_eq!(
        peers().with_ipv6_network(64, policy("n", 100)).err(),
        Some(NetworkLimitError::NotWider {
            bits: 64,
            narrowest: 64
        })
    );
    assert_eq!(
        peers()
            .with_ipv6_network(48, policy("n48", 100))
            .and_then(|peers| peers.with_ipv6_network(56, policy("n56", 100)))
            .err(),
        Some(NetworkLimitError::NotWider {
            bits: 56,
            narrowest: 48
        })
    );
    assert_eq!(
        peers().with_ipv6_network(0, policy("n", 100)).err(),
        Some(NetworkLimitError::Empty)
    );
    assert_eq!(
        peers().with_ipv6_network(48, policy("n", 5)).err(),
        Some(NetworkLimitError::SmallerThanNarrower {
            capacity: 5,
            narrower: 10
        })
    );
    assert_eq!(
        peers().with_ipv6_network(48, policy("client", 10)).err(),
        Some(NetworkLimitError::SamePolicy)
    );
    // A peer limit the escalation sketch cannot count up to.
    let too_large = runlimit_axum::MAX_ESCALATING_PEER_LIMIT + 1;
    assert_eq!(
        PeerLimits::new(policy("client", too_large), PeerIp::new(&hasher))
            .with_ipv6_network(48, policy("n", too_large))
            .err(),
        Some(NetworkLimitError::PeerLimitTooLarge {
            capacity: too_large
        })
    );
    // A peer keyed on its /56 takes network levels wider than that only.
    let per_56 = PeerLimits::new(
        policy("client", 10),
        PeerIp::new(&hasher).with_ipv6_prefix(56).expect("valid"),
    );
    assert!(matches!(
        per_56.with_ipv6_network(60, policy("n", 100)),
        Err(NetworkLimitError::NotWider { .. })
    ));
}
