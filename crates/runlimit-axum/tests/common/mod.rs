//! Shared helpers for the layer tests: policies, a memory store on a manual
//! clock, request extensions a trusted earlier layer would have set, key
//! extractors on them, and a handler that records what it saw.
#![allow(dead_code, unreachable_pub)]

use std::{
    convert::Infallible,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::body::Body;
use http::{HeaderMap, Request, Response, request::Parts};
use http_body_util::BodyExt;
use runlimit_axum::{MissingMetadata, RateLimitContext};
use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId, SubjectKey};
use runlimit_memory::{ManualClock, MemoryStore, MemoryStoreConfig};
use tower::{Service, service_fn};

pub fn policy(scope: &str, limit: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("auth.login").expect("valid"),
        ScopeId::new(scope).expect("valid"),
        limit,
        Duration::from_secs(60),
    )
    .expect("valid")
}

pub fn hasher() -> Arc<KeyHasher> {
    Arc::new(KeyHasher::new(b"test secret that is at least 32 bytes").expect("valid"))
}

pub fn store() -> Arc<MemoryStore> {
    Arc::new(
        MemoryStore::new(MemoryStoreConfig::new(1_000).expect("valid"))
            .with_clock(ManualClock::new()),
    )
}

/// The client network, as a trusted earlier layer would have established it.
#[derive(Clone)]
pub struct Client(pub &'static str);

/// The normalized account a login names, as the application would parse it.
#[derive(Clone)]
pub struct Identity(pub &'static str);

/// An extractor that keys on the string a trusted earlier layer stored in the
/// request extension `E`, refusing requests without it.
pub fn extension_key<E: Send + Sync + 'static>(
    hasher: Arc<KeyHasher>,
    what: &'static str,
    subject: fn(&E) -> &'static str,
) -> impl Fn(&Parts, &FixedWindowPolicy) -> Result<SubjectKey, MissingMetadata> + Send + Sync + 'static
{
    move |parts, policy| {
        let value = parts
            .extensions
            .get::<E>()
            .ok_or(MissingMetadata::new(what))?;
        Ok(hasher.hash_for(policy, subject(value).as_bytes()))
    }
}

pub fn client_key(
    hasher: Arc<KeyHasher>,
) -> impl Fn(&Parts, &FixedWindowPolicy) -> Result<SubjectKey, MissingMetadata> + Send + Sync + 'static
{
    extension_key(hasher, "client network", |Client(network)| network)
}

pub fn identity_key(
    hasher: Arc<KeyHasher>,
) -> impl Fn(&Parts, &FixedWindowPolicy) -> Result<SubjectKey, MissingMetadata> + Send + Sync + 'static
{
    extension_key(hasher, "identity", |Identity(account)| account)
}

/// Wraps `extract`, counting its calls in `calls`.
pub fn counted(
    calls: &Arc<AtomicUsize>,
    extract: impl Fn(&Parts, &FixedWindowPolicy) -> Result<SubjectKey, MissingMetadata>
    + Send
    + Sync
    + 'static,
) -> impl Fn(&Parts, &FixedWindowPolicy) -> Result<SubjectKey, MissingMetadata> + Send + Sync + 'static
{
    let calls = Arc::clone(calls);
    move |parts, policy| {
        calls.fetch_add(1, Ordering::SeqCst);
        extract(parts, policy)
    }
}

pub fn request(client: &'static str, identity: &'static str) -> Request<Body> {
    let mut request = Request::new(Body::empty());
    request.extensions_mut().insert(Client(client));
    request.extensions_mut().insert(Identity(identity));
    request
}

/// A handler that records the context it saw and counts calls.
pub fn handler(
    calls: Arc<AtomicUsize>,
    seen: Arc<Mutex<Option<RateLimitContext>>>,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    service_fn(move |request: Request<Body>| {
        calls.fetch_add(1, Ordering::SeqCst);
        *seen.lock().expect("lock") = request.extensions().get::<RateLimitContext>().cloned();
        async { Ok::<_, Infallible>(Response::new(Body::from("ok"))) }
    })
}

pub async fn body_text(response: Response<Body>) -> String {
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    String::from_utf8(bytes.to_vec()).expect("utf-8")
}

pub fn values(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .map(|value| value.to_str().expect("ascii").to_owned())
        .collect()
}
