//! Typed HTTP response metadata for Runlimit decisions.
//!
//! `runlimit-http` turns caller-selected policies and decisions into HTTP field
//! values; it is framework-neutral (only the `http` crate's types) and is what
//! `runlimit-axum` uses for its default responses.
//!
//! * [`draft_11`]: the IETF `RateLimit-Policy` and `RateLimit` fields as RFC 9651
//!   Structured Field lists, versioned by draft so a later draft can sit beside it.
//! * [`legacy`]: `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`
//!   and `Retry-After`, for clients that expect the older de-facto shape.
//! * [`problem`]: RFC 9457 problem-details bodies, for quota denials and any
//!   other status.
//! * [`read`]: the client's side, reading those fields (the draft's earlier
//!   revisions' forms too) and gRPC's pushback from a response, for services
//!   that call rate-limited APIs.
//!
//! Nothing here chooses a status code or a body, or decides which policies an
//! application discloses; every value is validated when it is built, so encoding
//! itself cannot fail. Advertised windows must be whole seconds and quotas
//! within RFC 9651's integer range, or the policy's metadata is refused when it
//! is built; dynamic durations (`t`, `Retry-After`) round up, never down.

pub mod draft_11;
mod error;
pub mod legacy;
pub mod problem;
pub mod read;

pub use error::FieldError;
