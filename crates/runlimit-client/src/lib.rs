//! The client side of Runlimit: calling rate-limited APIs without being
//! refused.
//!
//! Runlimit's server side ([`runlimit-axum`], [`runlimit-http`]) tells clients
//! how much quota they have left. This crate is the other end of that wire,
//! for services that call rate-limited APIs (Runlimit's or anyone's): a Tower
//! layer, [`HoldLayer`], that reads the rate-limit fields of every response
//! (through [`runlimit_http::read`]) and, while the server said a partition's
//! quota is exhausted until a known time, holds the next request to that
//! partition instead of sending it into a refusal.
//!
//! A response holds its partition when it says:
//!
//! * `429 Too Many Requests` or `503 Service Unavailable` with `Retry-After`;
//! * a draft `RateLimit` member with `r=0` and `t`;
//! * `X-RateLimit-Remaining: 0` (or GitLab's `RateLimit-Remaining`) with a
//!   reset, in delta-seconds or Unix epoch seconds;
//! * gRPC `RESOURCE_EXHAUSTED` (`grpc-status: 8`) in the headers with
//!   `grpc-retry-pushback-ms`.
//!
//! The longest of these wins, measured against the response's `Date` when it
//! has one.
//!
//! The layer also counts. While nothing is known of a partition, its first
//! request goes alone and the others wait for its answer (at most two
//! seconds, so that a slow API is not serialized). An answer that reports
//! the units left and when they reset (`RateLimit`'s `r` with `t`,
//! `X-RateLimit-Remaining` with `-Reset`) lets at most that many more
//! requests go before the reset, less those still unanswered (the server may
//! count them in any order); the rest wait for the reset, and the next
//! request then learns the new window's quota alone. So many concurrent
//! callers are not sent into a refusal even before any response said the
//! quota is exhausted. A partition is, by default, the request's origin ([`ByOrigin`]);
//! any function of the request can name it instead (a per-token or
//! per-tenant quota), and partitions are kept as hashes, never as the values
//! they were derived from. The layer keeps at most a configured number of
//! partitions held at once, never dropping an active hold to make room.
//!
//! With [`HoldLayer::retry`], a request refused with 429 or 503 whose
//! response says how long to wait is sent again after that wait, when it can
//! be (an idempotent method and a body that can be sent twice, or a
//! [`Replay`] of the caller's) and a retry budget allows; otherwise the
//! refusal reaches the caller, and the requests after it wait. With
//! [`HoldLayer::pace`], each partition is also paced to the policy its
//! server advertises (`RateLimit-Policy`), with Runlimit's own GCRA, so that
//! many concurrent callers spread over the window instead of bursting into
//! a refusal when a hold ends.
//!
//! With the `reqwest` feature, `HoldMiddleware` does the same for a
//! `reqwest-middleware` client.
//!
//! ```
//! use std::convert::Infallible;
//!
//! use http::{Request, Response};
//! use runlimit_client::HoldLayer;
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // In a service this wraps hyper-util's client, a tonic channel, or any
//! // Tower service that sends `http::Request`s.
//! let send = service_fn(|_request: Request<()>| async {
//!     Ok::<_, Infallible>(Response::new(()))
//! });
//! let client = HoldLayer::new(10_000)?.layer(send);
//! let response = client
//!     .oneshot(Request::get("https://api.example.com/v1/items").body(())?)
//!     .await?;
//! assert!(response.status().is_success());
//! # Ok(())
//! # }
//! ```
//!
//! [`runlimit-axum`]: https://docs.rs/runlimit-axum
//! [`runlimit-http`]: runlimit_http

mod exhausted;
mod holds;
mod layer;
#[cfg(feature = "reqwest")]
mod middleware;
mod observe;
mod pace;
mod partition;
mod replay;

pub use exhausted::exhausted_for;
pub use layer::{Hold, HoldLayer, HoldLayerError, MAX_HOLD};
#[cfg(feature = "reqwest")]
pub use middleware::HoldMiddleware;
pub use observe::HoldObserver;
pub use partition::{ByOrigin, Partition, PartitionKey};
pub use replay::{IdempotentRequests, NoRetry, Replay};
