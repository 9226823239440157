//! An API limited by Runlimit's own `RateLimitLayer`, served on loopback
//! TCP, for the tests that call it through real clients.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{Router, routing::get};
use runlimit_axum::{MissingMetadata, RateLimitLayer};
use runlimit_core::{FixedWindowPolicy, PolicyId, ScopeId, SubjectKey};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};

/// Serves `GET /items`, allowing `limit` requests per `window` to all
/// callers together, and answering as our layer does: the draft fields on
/// every response, 429 with `Retry-After` beyond the quota.
pub(crate) async fn serve(limit: u64, window: Duration) -> SocketAddr {
    let policy = FixedWindowPolicy::new(
        PolicyId::new("api").expect("valid"),
        ScopeId::new("everyone").expect("valid"),
        limit,
        window,
    )
    .expect("valid");
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::new(16).expect("valid")));
    let everyone =
        |_: &http::request::Parts, _: &FixedWindowPolicy| -> Result<SubjectKey, MissingMetadata> {
            Ok(SubjectKey::from_digest([1; 32]))
        };
    let app = Router::new()
        .route("/items", get(|| async { "ok" }))
        .layer(RateLimitLayer::from_shared(store).check(policy, everyone));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}
