//! Serves the same hello-world handler for `scripts/bench-http.sh` to load
//! with wrk: bare, behind `RateLimitLayer` on the memory backend keyed by
//! `PeerIp` (served with `PeerConnection`, so each connection derives its key
//! once), and, for comparison in the same run, behind tower_governor's
//! `GovernorLayer` (its default peer-IP key) without and with its headers,
//! behind `RateLimitLayer` keyed on the unhashed peer (the layer apart from
//! the HMAC key, which tower_governor does not compute), and the first layer
//! served with `SocketAddr` (the key derived per request).
//!
//! Prints `bare=ADDR limited=ADDR governor=ADDR governor_headers=ADDR
//! unhashed=ADDR per_request=ADDR` and serves until killed.

use std::{net::SocketAddr, time::Duration};

#[path = "support/governed.rs"]
mod governed;
#[path = "support/peer_key.rs"]
mod peer_key;

use axum::{Router, routing::get};
use governed::governed;
use peer_key::unhashed_peer_key;
use runlimit_axum::{PeerConnection, PeerIp, RateLimitLayer};
use runlimit_core::{FixedWindowPolicy, KeyHasher, MAX_LIMIT, PolicyId, ScopeId};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let hello = || Router::new().route("/", get(|| async { "Hello, World!" }));
        // A limit no benchmark reaches: every request is admitted, so the
        // comparison measures the layer's cost, not denials.
        let policy = FixedWindowPolicy::new(
            PolicyId::new("bench")?,
            ScopeId::new("client")?,
            MAX_LIMIT,
            Duration::from_secs(3_600),
        )?;
        let hasher = KeyHasher::new(b"benchmark secret of at least 32 bytes")?;
        let limiter = || {
            Ok::<_, runlimit_memory::ConfigError>(MemoryStore::new(
                MemoryStoreConfig::new(100_000)?.with_shard_count(16)?,
            ))
        };
        let fields = std::env::var_os("BENCH_NO_FIELDS").is_none();
        let unhashed = RateLimitLayer::new(limiter()?)
            .response_fields(fields)
            .check(policy.clone(), unhashed_peer_key);
        let per_request = RateLimitLayer::new(limiter()?)
            .response_fields(fields)
            .check(policy.clone(), PeerIp::new(&hasher));
        let layer = RateLimitLayer::new(limiter()?)
            .response_fields(fields)
            .check(policy, PeerIp::new(&hasher));
        let mut listeners = Vec::new();
        for _ in 0..6 {
            listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await?);
        }
        println!(
            "bare={} limited={} governor={} governor_headers={} unhashed={} per_request={}",
            listeners[0].local_addr()?,
            listeners[1].local_addr()?,
            listeners[2].local_addr()?,
            listeners[3].local_addr()?,
            listeners[4].local_addr()?,
            listeners[5].local_addr()?,
        );
        let mut listeners = listeners.into_iter();
        let mut next = || listeners.next().expect("six listeners");
        let serve = |listener, app: Router| async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
        };
        let (bare, limited, plain, headers, unhashed_listener, per_request_listener) =
            (next(), next(), next(), next(), next(), next());
        let (a, b, c, d, e, f) = tokio::join!(
            serve(bare, hello()),
            async move {
                axum::serve(
                    limited,
                    hello()
                        .route_layer(layer)
                        .into_make_service_with_connect_info::<PeerConnection>(),
                )
                .await
            },
            serve(plain, governed(hello(), false)),
            serve(headers, governed(hello(), true)),
            serve(unhashed_listener, hello().route_layer(unhashed)),
            serve(per_request_listener, hello().route_layer(per_request)),
        );
        a?;
        b?;
        c?;
        d?;
        e?;
        f?;
        Ok(())
    })
}
