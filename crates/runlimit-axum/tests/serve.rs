//! The layer in a real `axum::serve` on loopback, driven over TCP: a
//! password-reset form keyed on the TCP peer and, from the capped body, on
//! the recipient it names. And the peer as tests give it without a server,
//! through axum's `MockConnectInfo`.

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

/// Sends one keep-alive HTTP/1.1 GET on `stream` and returns the response's
/// status line.
async fn get_on(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .expect("request");
    let mut response = Vec::new();
    let mut byte = [0u8; 1];
    // The head, byte by byte, up to the blank line.
    while !response.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).await.expect("head");
        response.push(byte[0]);
    }
    let head = String::from_utf8(response).expect("ascii head");
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .expect("content-length")
        .parse()
        .expect("a length");
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.expect("body");
    head.lines().next().expect("status line").to_owned()
}

#[tokio::test]
async fn keys_kept_per_connection_still_count_every_connection_of_a_peer_together() {
    let hasher = KeyHasher::new(b"serve test secret of at least 32 bytes").expect("valid");
    let limiter = MemoryStore::new(MemoryStoreConfig::new(100).expect("valid"));
    let layer = RateLimitLayer::new(limiter).check(policy("client", 3), PeerIp::new(&hasher));
    let app = Router::new()
        .route("/", axum::routing::get(|| async { "ok" }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<runlimit_axum::PeerConnection>(),
        )
        .await
    });

    // Two requests on one connection, then two on another from the same
    // address: the peer's quota of three is one, whichever connection asks.
    let mut first = TcpStream::connect(address).await.expect("connect");
    assert_eq!(get_on(&mut first).await, "HTTP/1.1 200 OK");
    assert_eq!(get_on(&mut first).await, "HTTP/1.1 200 OK");
    let mut second = TcpStream::connect(address).await.expect("connect");
    assert_eq!(get_on(&mut second).await, "HTTP/1.1 200 OK");
    assert_eq!(get_on(&mut second).await, "HTTP/1.1 429 Too Many Requests");
    assert_eq!(get_on(&mut first).await, "HTTP/1.1 429 Too Many Requests");
    server.abort();
}

/// Sends a GET through `app` without a socket and returns its status.
async fn status_of(app: &Router) -> http::StatusCode {
    use tower::ServiceExt;
    let request = http::Request::get("/")
        .body(axum::body::Body::empty())
        .expect("request");
    app.clone()
        .oneshot(request)
        .await
        .expect("infallible")
        .status()
}

#[tokio::test]
async fn a_router_under_mock_connect_info_is_keyed_on_the_mocked_peer() {
    use axum::extract::connect_info::MockConnectInfo;
    use runlimit_axum::PeerConnection;

    // The test tip `PeerConnection::new` documents: no server, the peer
    // given by axum's `MockConnectInfo`, as its `ConnectInfo` extractor
    // would find it.
    let hasher = KeyHasher::new(b"serve test secret of at least 32 bytes").expect("valid");
    let limiter = Arc::new(MemoryStore::new(
        MemoryStoreConfig::new(100).expect("valid"),
    ));
    let peer = |last: u8| SocketAddr::from(([192, 0, 2, last], 40_000));
    let limited = || {
        Router::new()
            .route("/", axum::routing::get(|| async { "ok" }))
            .layer(
                RateLimitLayer::from_shared(Arc::clone(&limiter))
                    .check(policy("client", 2), PeerIp::new(&hasher)),
            )
    };
    let first = limited().layer(MockConnectInfo(PeerConnection::new(peer(1))));
    assert_eq!(status_of(&first).await, http::StatusCode::OK);
    assert_eq!(status_of(&first).await, http::StatusCode::OK);
    assert_eq!(status_of(&first).await, http::StatusCode::TOO_MANY_REQUESTS);
    // A mocked bare `SocketAddr` works too, and another peer has its own
    // quota; the same peer mocked either way shares one.
    let second = limited().layer(MockConnectInfo(peer(2)));
    assert_eq!(status_of(&second).await, http::StatusCode::OK);
    let first_again = limited().layer(MockConnectInfo(peer(1)));
    assert_eq!(
        status_of(&first_again).await,
        http::StatusCode::TOO_MANY_REQUESTS
    );
    // Without connect info of either kind the peer is missing metadata,
    // answered as a server error and never admitted unkeyed.
    assert_eq!(
        status_of(&limited()).await,
        http::StatusCode::INTERNAL_SERVER_ERROR
    );
}
