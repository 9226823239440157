//! Serves the same hello-world handler twice, bare and behind `RateLimitLayer`
//! on the memory backend, for `scripts/bench-http.sh` to load with wrk.
//!
//! Prints `bare=ADDR limited=ADDR` and serves until killed.

use std::{net::SocketAddr, time::Duration};

#[path = "support/peer_key.rs"]
mod peer_key;

use axum::{Router, routing::get};
use peer_key::peer_key;
use runlimit_axum::RateLimitLayer;
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
        let limiter = MemoryStore::new(MemoryStoreConfig::new(100_000)?.with_shard_count(16)?);
        let layer = RateLimitLayer::new(limiter)
            .response_fields(std::env::var_os("BENCH_NO_FIELDS").is_none())
            .check(policy, peer_key(hasher));
        let bare = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let limited = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!(
            "bare={} limited={}",
            bare.local_addr()?,
            limited.local_addr()?
        );
        let bare_app = hello().into_make_service_with_connect_info::<SocketAddr>();
        let limited_app = hello()
            .layer(layer)
            .into_make_service_with_connect_info::<SocketAddr>();
        let (a, b) = tokio::join!(
            axum::serve(bare, bare_app),
            axum::serve(limited, limited_app)
        );
        a?;
        b?;
        Ok(())
    })
}
