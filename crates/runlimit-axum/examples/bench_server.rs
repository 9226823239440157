//! Serves the same hello-world handler for `scripts/bench-http.sh` to load
//! with wrk: bare, behind `RateLimitLayer` on the memory backend, and, for
//! comparison in the same run, behind tower_governor's `GovernorLayer` without
//! and with its headers, and behind `RateLimitLayer` keyed on the unhashed
//! peer (the layer apart from the HMAC key, which tower_governor does not
//! compute).
//!
//! Prints `bare=ADDR limited=ADDR governor=ADDR governor_headers=ADDR
//! unhashed=ADDR` and serves until killed.

use std::{net::SocketAddr, time::Duration};

#[path = "support/governed.rs"]
mod governed;
#[path = "support/peer_key.rs"]
mod peer_key;

use axum::{Router, routing::get};
use governed::governed;
use peer_key::{peer_key, unhashed_peer_key};
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
        let key = peer_key(hasher.prepared_for(&policy));
        let limiter = MemoryStore::new(MemoryStoreConfig::new(100_000)?.with_shard_count(16)?);
        let fields = std::env::var_os("BENCH_NO_FIELDS").is_none();
        let unhashed = RateLimitLayer::new(MemoryStore::new(
            MemoryStoreConfig::new(100_000)?.with_shard_count(16)?,
        ))
        .response_fields(fields)
        .check(policy.clone(), unhashed_peer_key);
        let layer = RateLimitLayer::new(limiter)
            .response_fields(fields)
            .check(policy, key);
        let listeners = [
            tokio::net::TcpListener::bind("127.0.0.1:0").await?,
            tokio::net::TcpListener::bind("127.0.0.1:0").await?,
            tokio::net::TcpListener::bind("127.0.0.1:0").await?,
            tokio::net::TcpListener::bind("127.0.0.1:0").await?,
            tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        ];
        println!(
            "bare={} limited={} governor={} governor_headers={} unhashed={}",
            listeners[0].local_addr()?,
            listeners[1].local_addr()?,
            listeners[2].local_addr()?,
            listeners[3].local_addr()?,
            listeners[4].local_addr()?,
        );
        let [bare, limited, plain, headers, unhashed_listener] = listeners;
        let serve = |listener, app: Router| async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
        };
        let (a, b, c, d, e) = tokio::join!(
            serve(bare, hello()),
            serve(limited, hello().layer(layer)),
            serve(plain, governed(hello(), false)),
            serve(headers, governed(hello(), true)),
            serve(unhashed_listener, hello().layer(unhashed)),
        );
        a?;
        b?;
        c?;
        d?;
        e?;
        Ok(())
    })
}
