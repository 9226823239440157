//! The hello-world router the layer benchmarks measure, bare and behind each
//! layer, and the requests they send.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    time::Duration,
};

use axum::{Router, body::Body, extract::ConnectInfo, routing::get};
use runlimit_axum::RateLimitLayer;
use runlimit_core::{
    FixedWindowPolicy, KeyHasher, MAX_LIMIT, PolicyId, PreparedKeyHasher, ScopeId,
};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};

use crate::{
    governed::governed,
    peer_key::{peer_key, unhashed_peer_key},
};

pub(crate) fn hello() -> Router {
    Router::new().route("/", get(|| async { "Hello, World!" }))
}

/// A request from one of 32 peers, as `scripts/bench-http.sh` opens 32
/// connections.
pub(crate) fn request(port: u16) -> http::Request<Body> {
    let mut request = http::Request::get("/").body(Body::empty()).expect("valid");
    request.extensions_mut().insert(ConnectInfo(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        port % 32,
    )));
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

/// The application's key derivation, prepared for `policy()`.
pub(crate) fn prepared() -> PreparedKeyHasher {
    KeyHasher::new(b"benchmark secret of at least 32 bytes")
        .expect("valid")
        .prepared_for(&policy())
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
/// backend with its defaults (one check keyed on the peer, draft fields,
/// context), behind tower_governor without and with its headers, and behind
/// `RateLimitLayer` keyed on the unhashed peer. Each is finalized once, as
/// `axum::serve` does.
pub(crate) fn routers() -> [(&'static str, Router); 5] {
    let limited = hello()
        .layer(RateLimitLayer::new(limiter()).check(policy(), peer_key(prepared())))
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
