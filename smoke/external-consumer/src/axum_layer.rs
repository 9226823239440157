//! README "The admission layer", as written.

use std::{sync::Arc, time::Duration};

use axum::{Router, routing::{get, post}};
use runlimit_axum::{BodyField, Challenge, FromHeader, PeerIp, PeerLimits, Provider, RateLimitLayer};
use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
use runlimit_memory::MemoryStore;

/// The README's router: a login limited per client and per account, an API
/// limited per key.
///
/// # Errors
///
/// Invalid policies or header names.
pub fn app(hasher: &KeyHasher, store: MemoryStore) -> Result<Router, Box<dyn std::error::Error>> {
    let login = PolicyId::new("auth.login")?;
    let per_client = FixedWindowPolicy::new(login.clone(), ScopeId::new("client")?, 40, Duration::from_secs(60))?;
    let per_site = FixedWindowPolicy::new(login.clone(), ScopeId::new("client.56")?, 200, Duration::from_secs(60))?;
    let per_network = FixedWindowPolicy::new(login.clone(), ScopeId::new("client.48")?, 1_000, Duration::from_secs(60))?;
    let per_account = FixedWindowPolicy::new(login, ScopeId::new("identity")?, 8, Duration::from_secs(60))?;
    let per_api_key = FixedWindowPolicy::new(PolicyId::new("api")?, ScopeId::new("key")?, 100, Duration::from_secs(60))?;
    let store = Arc::new(store);
    let peers = PeerLimits::new(per_client, PeerIp::new(hasher)) // the TCP peer: IPv4 /32, IPv6 /64
        .with_ipv6_network(56, per_site)? // and each IPv6 /56 and /48 in aggregate
        .with_ipv6_network(48, per_network)?;
    let login_limits = RateLimitLayer::from_shared(Arc::clone(&store))
        .check_peer(peers)
        // The account the login form names, as the application normalizes it.
        .check(per_account, BodyField::form(hasher, "account").normalize(|v| v.trim().to_lowercase()))
        // Never tell a caller how many attempts remain on someone's account.
        .withhold_fields()
        .key_reads_body(4_096); // the form is read, up to 4 KiB, before the checks
    let api_limits = RateLimitLayer::from_shared(store).check(
        per_api_key,
        FromHeader::new(hasher, "x-api-key")?
            .provided_by(Provider::CallerCredentials(Challenge::from_static("ApiKey"))),
    );
    Ok(Router::new()
        .route("/login", post(|| async { "welcome" }).route_layer(login_limits))
        .route("/orders", get(|| async { "[]" }).route_layer(api_limits)))
}
