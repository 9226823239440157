//! The layer in a real `axum::serve` on loopback, driven over TCP: a
//! password-reset form keyed on the TCP peer and, from the capped body, on
//! the recipient it names.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{Router, body::Bytes, routing::post};
use runlimit_axum::{PeerIp, RateLimitLayer, RequestBody};
use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

fn policy(scope: &str, limit: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("auth.reset").expect("valid"),
        ScopeId::new(scope).expect("valid"),
        limit,
        Duration::from_secs(900),
    )
    .expect("valid")
}

/// Sends one HTTP/1.1 request and returns the whole response as text.
async fn send(address: SocketAddr, head: &str, body: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(body).await.expect("body");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("response");
    String::from_utf8(response).expect("utf-8")
}

fn post_head(body: &[u8]) -> String {
    format!(
        "POST /reset HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\
         content-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
}

#[tokio::test]
async fn a_served_form_is_keyed_on_the_peer_and_the_recipient_it_names() {
    let hasher =
        Arc::new(KeyHasher::new(b"serve test secret of at least 32 bytes").expect("valid"));
    let recipient_hasher = Arc::clone(&hasher);
    let limiter = Arc::new(MemoryStore::new(
        MemoryStoreConfig::new(100).expect("valid"),
    ));
    let layer = RateLimitLayer::from_shared(limiter)
        .check(policy("client", 20), PeerIp::new(&hasher))
        .check(
            policy("recipient", 2),
            move |parts: &http::request::Parts, policy: &FixedWindowPolicy| {
                let email = parts
                    .extensions
                    .get::<RequestBody>()
                    .and_then(|body| body.form_field("email").map(|email| email.to_lowercase()))
                    .ok_or(runlimit_axum::MissingMetadata::new("email"))?;
                Ok(recipient_hasher.hash_for(policy, email.as_bytes()))
            },
        )
        .withhold_fields()
        .key_reads_body(256);
    // The handler echoes the body it received.
    let app = Router::new()
        .route("/reset", post(|body: Bytes| async move { body }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });

    let form = b"email=Mia%40Example.test&note=hello";
    for _ in 0..2 {
        let response = send(address, &post_head(form), form).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(
            response.ends_with("email=Mia%40Example.test&note=hello"),
            "{response}"
        );
        assert!(
            response.contains(r#"ratelimit: "auth.reset/client""#),
            "{response}"
        );
        assert!(!response.contains("recipient"), "{response}");
    }
    let response = send(address, &post_head(form), form).await;
    assert!(response.starts_with("HTTP/1.1 429"), "{response}");
    assert!(!response.contains("recipient"), "{response}");

    // Padding past the cap, declared or chunked, is refused, never admitted.
    let padded = [&b"email=nia%40example.test&pad="[..], &[b'x'; 300]].concat();
    let response = send(address, &post_head(&padded), &padded).await;
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    let chunked = "POST /reset HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\
                   transfer-encoding: chunked\r\n\r\n";
    let body = format!(
        "{:x}\r\n{}\r\n0\r\n\r\n",
        padded.len(),
        String::from_utf8(padded.clone()).expect("ascii")
    );
    let response = send(address, chunked, body.as_bytes()).await;
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    // The refused requests consumed nothing: Nia's first reset is admitted.
    let nia = b"email=nia%40example.test";
    let response = send(address, &post_head(nia), nia).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    server.abort();
}
