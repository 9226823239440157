//! README "The admission layer".

use std::time::Duration;

use axum::{Router, routing::post};
use runlimit_axum::{FromExtension, PeerIp, RateLimitLayer};
use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};

/// The account a login names, lower-cased by an earlier layer of the application.
#[derive(Clone)]
pub struct LoginAccount(pub String);

impl AsRef<[u8]> for LoginAccount {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The README's login router.
///
/// # Errors
///
/// Invalid policies or store configuration.
pub fn app(hasher: &KeyHasher) -> Result<Router, Box<dyn std::error::Error>> {
    let login = PolicyId::new("auth.login")?;
    let per_client = FixedWindowPolicy::new(login.clone(), ScopeId::new("client")?, 40, Duration::from_secs(60))?;
    let per_account = FixedWindowPolicy::new(login, ScopeId::new("identity")?, 8, Duration::from_secs(60))?;
    let layer = RateLimitLayer::new(MemoryStore::new(MemoryStoreConfig::new(50_000)?))
        .check(per_client, PeerIp::new(hasher)) // the TCP peer: IPv4 /32, IPv6 /64
        .check(per_account, FromExtension::<LoginAccount>::new(hasher))
        // Never tell a caller how many attempts remain on someone's account.
        .withhold_fields();
    Ok(Router::new().route("/login", post(|| async { "welcome" })).layer(layer))
}
