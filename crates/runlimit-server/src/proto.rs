//! Envoy's rate-limit protocol: the messages of
//! `envoy.service.ratelimit.v3` and the types it imports, and the gRPC
//! service `envoy.service.ratelimit.v3.RateLimitService` with its one method,
//! `ShouldRateLimit`.
//!
//! The messages are written by hand with `prost`'s derives, field for field
//! as Envoy's data-plane API defines them (package names, field numbers and
//! wire types exactly; the `not-implemented-hide` quota fields, which Envoy
//! ignores, are left out, and decoders skip them). Nothing is generated at
//! build time, so no `protoc` is needed. Their layout follows what
//! `prost-build` would generate: a message's nested types live in a module
//! named after it in snake case ([`rate_limit_response::Code`]), enum fields
//! hold an `i32` with typed getters and setters (`status.code()`,
//! `status.set_code(…)`), `google.protobuf.UInt64Value` is an `Option<u64>`,
//! and `Duration` and `Struct` are [`prost_types`]'.
//!
//! Requests carry the values that identify clients (addresses, API keys):
//! the [`Debug`](std::fmt::Debug) output of [`RateLimitRequest`],
//! [`RateLimitDescriptor`] and [`rate_limit_descriptor::Entry`] shows keys
//! only, and that of [`RateLimitResponse`] leaves out the dynamic metadata.
//!
//! # Serving and calling
//!
//! [`RateLimitServiceServer`] serves any [`RateLimitService`] on a
//! [`tonic`] server; [`RateLimitServiceClient`] calls one.
//!
//! ```no_run
//! use runlimit_server::proto::{
//!     RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient,
//!     rate_limit_descriptor::Entry, rate_limit_response::Code,
//! };
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let mut client = RateLimitServiceClient::connect("http://127.0.0.1:8081").await?;
//! let response = client
//!     .should_rate_limit(RateLimitRequest {
//!         domain: "edge".into(),
//!         descriptors: vec![RateLimitDescriptor::new([Entry::new("remote_address", "203.0.113.7")])],
//!         hits_addend: 0,
//!     })
//!     .await?
//!     .into_inner();
//! println!("{:?}", response.overall_code() == Code::OverLimit);
//! # Ok(())
//! # }
//! ```

mod grpc;
mod messages;

pub use grpc::{
    METHOD_PATH, RateLimitService, RateLimitServiceClient, RateLimitServiceServer, SERVICE_NAME,
};
pub use messages::{
    HeaderValue, RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitUnit,
    rate_limit_descriptor, rate_limit_response,
};
