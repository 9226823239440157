//! The layer's own per-request cost, without sockets: the same hello-world
//! router called through `tower::ServiceExt::oneshot`, bare and behind
//! `RateLimitLayer` on the memory backend (its requests with the peer's
//! `SocketAddr`, which derives the key per request, and with a
//! `PeerConnection`, which keeps it per connection), and behind
//! tower_governor's `GovernorLayer` without and with its headers (the
//! configurations of `examples/bench_server.rs`).
//!
//! A second group, `body_keyed`, posts a 1 KiB form to a handler that reads
//! it, behind a layer keyed on the peer (the head) and behind one keyed on the
//! form's `email` field (which buffers the body first).
//!
//! Run with `cargo bench -p runlimit-axum --bench layer`; the end-to-end
//! comparison over HTTP is `scripts/bench-http.sh`.
#![allow(missing_docs)]

#[path = "../examples/support/governed.rs"]
mod governed;
#[path = "../examples/support/peer_key.rs"]
mod peer_key;
mod support;

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::ConnectInfo,
    routing::post,
};
use criterion::{Criterion, criterion_group, criterion_main};
use runlimit_axum::{MissingMetadata, PeerIp, RateLimitLayer, RequestBody};
use runlimit_core::{FixedWindowPolicy, KeyHasher, MAX_LIMIT, PolicyId, ScopeId};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};
use support::hello::{connected_request, connections, request, routers};
use tower::ServiceExt;

fn layer(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("hello_world");
    let mut port = 0u16;
    let routers = routers();
    for (name, router) in &routers {
        group.bench_function(*name, |b| {
            b.iter(|| {
                port = port.wrapping_add(1);
                let response = runtime
                    .block_on(router.clone().oneshot(request(port)))
                    .expect("infallible");
                assert!(response.status().is_success());
            });
        });
    }
    // The limited router again, its requests on 32 `PeerConnection`s that
    // keep their keys.
    let (connections, limited) = (connections(), &routers[1].1);
    group.bench_function("limited_keys_kept_per_connection", |b| {
        b.iter(|| {
            port = port.wrapping_add(1);
            let response = runtime
                .block_on(
                    limited
                        .clone()
                        .oneshot(connected_request(&connections, port)),
                )
                .expect("infallible");
            assert!(response.status().is_success());
        });
    });
    group.finish();
}

/// A 1 KiB login form: the account, a password and padding fields.
fn login_form() -> Bytes {
    let mut form = String::from("email=alice%40example.test&password=correct-horse-battery");
    let mut field = 0;
    while form.len() < 1_024 {
        form.push_str(&format!("&field{field}=value{field}"));
        field += 1;
    }
    form.truncate(1_024);
    Bytes::from(form)
}

fn body_keyed(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let policy = FixedWindowPolicy::new(
        PolicyId::new("bench").expect("valid"),
        ScopeId::new("identity").expect("valid"),
        MAX_LIMIT,
        Duration::from_secs(3_600),
    )
    .expect("valid");
    let hasher = KeyHasher::new(b"benchmark secret of at least 32 bytes").expect("valid");
    let limiter = || {
        MemoryStore::new(
            MemoryStoreConfig::new(100_000)
                .expect("valid")
                .with_shard_count(16)
                .expect("valid"),
        )
    };
    let login = || {
        Router::new().route(
            "/login",
            post(|body: Bytes| async move { body.len().to_string() }),
        )
    };
    let head_keyed = login()
        .layer(RateLimitLayer::new(limiter()).check(policy.clone(), PeerIp::new(&hasher)))
        .with_state(());
    let prepared = hasher.prepared_for(&policy);
    let email_key = move |parts: &http::request::Parts, policy: &FixedWindowPolicy| {
        let body = parts
            .extensions
            .get::<RequestBody>()
            .ok_or(MissingMetadata::new("request body"))?;
        let email = body
            .form_field("email")
            .ok_or(MissingMetadata::new("email"))?;
        Ok(prepared.hash_for(policy, email.as_bytes()))
    };
    let body_keyed = login()
        .layer(
            RateLimitLayer::new(limiter())
                .check(policy, email_key)
                .key_reads_body(4_096),
        )
        .with_state(());
    let form = login_form();
    let mut group = c.benchmark_group("body_keyed");
    let mut port = 0u16;
    for (name, router) in [("head_keyed", head_keyed), ("body_keyed", body_keyed)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                port = (port + 1) % 32;
                let mut request = http::Request::post("/login")
                    .header("content-type", "application/x-www-form-urlencoded")
                    .header("content-length", form.len())
                    .body(Body::from(form.clone()))
                    .expect("valid");
                request.extensions_mut().insert(ConnectInfo(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::LOCALHOST),
                    port,
                )));
                let response = runtime
                    .block_on(router.clone().oneshot(request))
                    .expect("infallible");
                assert!(response.status().is_success());
            });
        });
    }
    group.finish();
}

criterion_group!(benches, layer, body_keyed);
criterion_main!(benches);
