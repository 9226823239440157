//! Key extractors written as closures over the request head: the pattern for
//! keys that the ready-made `PeerIp`, `FromExtension`, `FromHeader` and
//! `BodyField` do not derive.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{Router, extract::ConnectInfo, routing::post};
use http::request::Parts;
use runlimit_axum::{FailureMode, MissingMetadata, RateLimitLayer};
use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId, SubjectKey};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};

/// The normalized account a login names, inserted by an earlier application layer.
#[derive(Clone)]
pub struct LoginAccount(pub String);

pub fn app(hasher: KeyHasher) -> Result<Router, Box<dyn std::error::Error>> {
    let client_policy = FixedWindowPolicy::new(
        PolicyId::new("auth.login")?,
        ScopeId::new("client")?,
        40,
        Duration::from_secs(60),
    )?;
    let identity_policy = FixedWindowPolicy::new(
        PolicyId::new("auth.login")?,
        ScopeId::new("identity")?,
        8,
        Duration::from_secs(60),
    )?;
    let hasher = Arc::new(hasher);
    let client_hasher = Arc::clone(&hasher);
    // Reached directly, the TCP peer is the client; behind a proxy, key on the
    // address your trusted-proxy layer established instead.
    let client_key = move |parts: &Parts, policy: &FixedWindowPolicy| -> Result<SubjectKey, MissingMetadata> {
        let ConnectInfo(peer) = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .ok_or(MissingMetadata::new("peer address"))?;
        Ok(client_hasher.hash_for(policy, peer.ip().to_string().as_bytes()))
    };
    let identity_key = move |parts: &Parts, policy: &FixedWindowPolicy| -> Result<SubjectKey, MissingMetadata> {
        let LoginAccount(account) = parts
            .extensions
            .get::<LoginAccount>()
            .ok_or(MissingMetadata::new("login account"))?;
        Ok(hasher.hash_for(policy, account.as_bytes()))
    };

    let limiter = MemoryStore::new(MemoryStoreConfig::new(50_000)?);
    let layer = RateLimitLayer::new(limiter)
        .check(client_policy, client_key)
        .check(identity_policy, identity_key)
        // Never tell a caller how many attempts remain on someone's account.
        .withhold_fields()
        .skip(|parts| parts.uri.path() == "/health")
        .failure_mode(FailureMode::fail_closed());
    Ok(Router::new()
        .route("/login", post(|| async { "welcome" }))
        .route_layer(layer))
}
