//! Caller-controlled admission middleware for Axum, tonic and any Tower service.
//!
//! `runlimit-axum` puts a Runlimit [`Limiter`](runlimit_core::Limiter) in front
//! of a service: [`RateLimitLayer`] admits each request before the handler runs
//! and before any request-body extractor reads the body. The application keeps
//! every decision that depends on trust or presentation:
//!
//! * [`KeyExtractor`]s turn the request head into opaque
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
//!   derived once per connection) and [`FromExtension`] (a value a trusted
//!   layer normalized);
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
mod rejection;
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
pub use rejection::{DefaultRejection, Rejection, RejectionMapper};
pub use service::RateLimitService;
