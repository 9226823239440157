//! The hello-world router the layer benchmarks measure, bare and behind each
//! layer, and the requests they send.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    time::Duration,
};

use axum::{Router, body::Body, extract::ConnectInfo, routing::get};
use runlimit_axum::{PeerConnection, PeerIp, RateLimitLayer};
use runlimit_core::{FixedWindowPolicy, KeyHasher, MAX_LIMIT, PolicyId, ScopeId};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};

use crate::{governed::governed, peer_key::unhashed_peer_key};

pub(crate) fn hello() -> Router {
    Router::new().route("/", get(|| async { "Hello, World!" }))
}

/// The address of one of 32 connections from the load generator, as
/// `scripts/bench-http.sh` opens 32 connections.
fn peer(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port % 32)
}

/// A request on one of 32 connections, with the peer's address as
/// `axum::serve` hands it over with `ConnectInfo<SocketAddr>`.
pub(crate) fn request(port: u16) -> http::Request<Body> {
    let mut request = http::Request::get("/").body(Body::empty()).expect("valid");
    request.extensions_mut().insert(ConnectInfo(peer(port)));
    request
}

/// The 32 connections' `PeerConnection`s, made once each as `axum::serve`
/// makes one per connection.
pub(crate) fn connections() -> Vec<PeerConnection> {
    (0..32)
        .map(|port| PeerConnection::new(peer(port)))
        .collect()
}

/// A request on connection `port % 32` of `connections`, as `axum::serve`
/// hands it over with `ConnectInfo<PeerConnection>`: the connection's value,
/// cloned.
pub(crate) fn connected_request(connections: &[PeerConnection], port: u16) -> http::Request<Body> {
    let mut request = http::Request::get("/").body(Body::empty()).expect("valid");
    request
        .extensions_mut()
        .insert(ConnectInfo(connections[usize::from(port % 32)].clone()));
    request
}

/// The benchmarks' one policy: a limit no run reaches.
pub(crate) fn policy() -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("bench").expect("valid"),
        ScopeId::new("client").expect("valid"),
        MAX_LIMIT,
        Duration::from_secs(3_600),
    )
    .expect("valid")
}

/// The application's key hasher.
pub(crate) fn hasher() -> KeyHasher {
    KeyHasher::new(b"benchmark secret of at least 32 bytes").expect("valid")
}

fn limiter() -> MemoryStore {
    MemoryStore::new(
        MemoryStoreConfig::new(100_000)
            .expect("valid")
            .with_shard_count(16)
            .expect("valid"),
    )
}

/// The hello-world router bare, behind `RateLimitLayer` on the memory
/// backend with its defaults (one check keyed on the peer's address by
/// `PeerIp`, draft fields, context), behind tower_governor without and with
/// its headers, and behind `RateLimitLayer` keyed on the unhashed peer. Each
/// is finalized once, as `axum::serve` does. The limited router serves
/// requests with either connect info (`request`, `connected_request`).
pub(crate) fn routers() -> [(&'static str, Router); 5] {
    let limited = hello()
        .layer(RateLimitLayer::new(limiter()).check(policy(), PeerIp::new(&hasher())))
        .with_state(());
    let unhashed = hello()
        .layer(RateLimitLayer::new(limiter()).check(policy(), unhashed_peer_key))
        .with_state(());
    [
        ("bare", hello().with_state(())),
        ("limited", limited),
        ("tower_governor", governed(hello(), false).with_state(())),
        (
            "tower_governor_headers",
            governed(hello(), true).with_state(()),
        ),
        ("limited_unhashed_key", unhashed),
    ]
}
