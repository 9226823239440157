//! Caller-controlled admission middleware for Axum, tonic and any Tower service.
//!
//! `runlimit-axum` puts a Runlimit [`Limiter`](runlimit_core::Limiter) in front
//! of a service: [`RateLimitLayer`] admits each request before the handler runs
//! and before any request-body extractor reads the body. The application keeps
//! every decision that depends on trust or presentation:
//!
//! * [`KeyExtractor`]s turn the request head (and a capped, buffered body, for
//!   a layer that keys on it) into opaque
//!   [`SubjectKey`](runlimit_core::SubjectKey)s; the layer never reads forwarding
//!   headers, `ConnectInfo`, cookies or identities itself;
//! * a [`RejectionMapper`] owns status, headers and body for missing keys,
//!   enforced quota denials, capacity denials and backend failures
//!   ([`DefaultRejection`] answers with RFC 9457 problem details: 429 with
//!   `Retry-After` and draft `RateLimit` fields, 400 or 401 for a value the
//!   caller must send, 500 for metadata the service failed to provide, 503
//!   when the backend cannot decide);
//! * a [`FailureMode`] decides backend errors: fail closed unless the
//!   application explicitly fails open with an observing hook.
//!
//! Allowed and shadow-denied decisions reach handlers as a
//! [`RateLimitContext`] request extension that nested layers append to.
//!
//! Around that core:
//!
//! * ready-made extractors: [`PeerIp`] (the TCP peer, IPv6 aggregated by
//!   prefix; with [`PeerConnection`] as the server's connect info, its key is
//!   derived once per connection), [`FromExtension`] (a value a trusted
//!   layer normalized), [`FromHeader`] (a header the caller sends) and
//!   [`BodyField`] (a form or JSON field the caller sends), the last two
//!   with the application's normalizing step;
//! * [`RateLimitLayer::check_peer`] with [`PeerLimits`]: the peer's limit
//!   and, for IPv6, limits on the wider networks it belongs to (a /56, a
//!   /48), so a network spread over many /64s is held to one aggregate;
//! * [`RateLimitLayer::key_reads_body`]: keys from a capped, buffered body
//!   ([`RequestBody`]), for per-recipient limits on forms;
//! * [`RateLimitLayer::only_when`]: checks that apply to some requests only;
//! * shadow checks beside enforced ones, evaluated after the enforced batch
//!   allowed the request;
//! * [`RateLimitLayer::withhold_fields`] and [`ResponseFields`]: which policies
//!   and which fields (draft-11, legacy `X-RateLimit-*`) clients see;
//! * [`RateLimitLayer::count_when`]: count only some outcomes (failed logins),
//!   refunding the rest;
//! * [`RateLimitLayer::reserve`]: reserve the largest cost a request may use
//!   and settle it to the [`Used`] units its handler reports;
//! * [`RateLimitLayer::require_shared`]: refuse a process-local backend for a
//!   quota that must hold across replicas.
// The gRPC mapper exists only with its feature; without it, name it unlinked.
#![cfg_attr(
    feature = "tonic",
    doc = "With the `tonic` feature, [`grpc::GrpcRejection`] answers gRPC clients"
)]
#![cfg_attr(
    not(feature = "tonic"),
    doc = "With the `tonic` feature, `grpc::GrpcRejection` answers gRPC clients"
)]
//! with `RESOURCE_EXHAUSTED` and retry metadata.
//!
//! # Response fields
//!
//! Responses carry `RateLimit-Policy` and `RateLimit` for the disclosed
//! policies (or, with [`ResponseFields`], legacy `X-RateLimit-*`, or both),
//! the two draft fields always listing the same policies in the same order.
//! Policies are disclosed by default, since the fields tell a client about its
//! own quota; withhold those keyed on something a caller names (the account a
//! login tries) with [`RateLimitLayer::withhold_fields`]. Enforced quota and
//! capacity denials answer before the inner service is called.
//!
//! # Routes, not the router
//!
//! Apply the layer with `Router::route_layer` (or to one route's
//! `MethodRouter`), not `Router::layer`: `Router::layer` also wraps the
//! router's fallback, so a request for a path the router does not have would
//! be checked too, and a check keyed on something only the limited routes
//! carry (the account a login form names) would refuse `/robots.txt` instead
//! of letting it be answered 404.
//!
//! # Missing keys: the caller's omission or the service's
//!
//! A request a check cannot key is never admitted. Who should have provided
//! the value decides the answer ([`Provider`], chosen when the extractor is
//! built): a header or field the caller must send is the caller's omission
//! (`400 Bad Request`, or `401 Unauthorized` with a challenge for
//! credentials), while an extension an earlier layer of the service should
//! have inserted, or the connect info, is the service's own failure (`500`).
//!
//! ```
//! use std::time::Duration;
//!
//! use axum::{Router, body::Body, routing::post};
//! use http::{Request, StatusCode};
//! use runlimit_axum::{FromHeader, RateLimitLayer};
//! use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
//! use runlimit_memory::{MemoryStore, MemoryStoreConfig};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let hasher = KeyHasher::new(b"load a 32+ byte secret from secret storage")?;
//! let per_tenant = FixedWindowPolicy::new(PolicyId::new("api")?, ScopeId::new("tenant")?, 1, Duration::from_secs(60))?;
//! let layer = RateLimitLayer::new(MemoryStore::new(MemoryStoreConfig::new(10_000)?))
//!     .check(per_tenant, FromHeader::new(&hasher, "x-tenant")?.normalize(|v| v.to_ascii_lowercase()));
//! let app = Router::new().route("/orders", post(|| async { "created" })).route_layer(layer);
//!
//! let send = |path: &str, tenant: Option<&str>| {
//!     let mut request = Request::post(path);
//!     if let Some(tenant) = tenant {
//!         request = request.header("x-tenant", tenant);
//!     }
//!     app.clone().oneshot(request.body(Body::empty()).expect("a valid request"))
//! };
//! assert_eq!(send("/orders", Some("Acme")).await?.status(), StatusCode::OK);
//! assert_eq!(send("/orders", Some("acme")).await?.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(send("/orders", None).await?.status(), StatusCode::BAD_REQUEST);
//! assert_eq!(send("/robots.txt", None).await?.status(), StatusCode::NOT_FOUND);
//! # Ok(())
//! # }
//! ```
//!
//! # Trusted proxies
//!
//! Behind a reverse proxy the TCP peer is the proxy. Only the application knows
//! which peers may set `X-Forwarded-For`; resolve the client address in a layer
//! that knows the trusted proxies, store it in an extension, and key on that;
//! normalize identities (case, IPv6 prefixes) the same way. The
//! `runlimit-demo` crate's `resolve_client` middleware shows the pattern. Keying
//! on a raw forwarding header lets every caller pick their own bucket.

mod body;
mod charge;
mod connection;
mod context;
mod extract;
mod extractors;
mod failure;
mod fields;
mod future;
#[cfg(feature = "tonic")]
pub mod grpc;
mod kept;
mod layer;
mod networks;
mod rejection;
mod sent;
mod service;

pub use body::{BodyKeyed, BodyMode, HeadKeyed, RequestBody};
pub use charge::Used;
pub use connection::PeerConnection;
pub use context::{AppliedPolicy, RateLimitContext};
pub use extract::{Challenge, KeyExtractor, MissingMetadata, Provider};
pub use extractors::{FromExtension, PeerIp, PrefixError};
pub use failure::FailureMode;
pub use fields::ResponseFields;
pub use future::ResponseFuture;
pub use layer::{ProcessLocalStorage, RateLimitLayer, ReserveError};
pub use networks::{MAX_ESCALATING_PEER_LIMIT, NetworkLimitError, PeerLimits};
pub use rejection::{DefaultRejection, Rejection, RejectionMapper};
pub use sent::{BodyField, FromHeader};
pub use service::RateLimitService;
