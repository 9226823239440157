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
//! * `429 Too Many Requests` or `503 Service Unavailable` with `Retry-After`
//!   (delay-seconds, or an HTTP-date read against the response's `Date`);
//! * a draft `RateLimit` member with `r=0` and `t`, or revision 7's
//!   `RateLimit: remaining=0, reset=…`;
//! * `X-RateLimit-Remaining: 0` (or `RateLimit-Remaining`, GitLab's and the
//!   draft's revision 6) with a reset: `X-RateLimit-Reset-After` (fractional
//!   seconds), or `-Reset` in delta-seconds or Unix epoch seconds;
//! * gRPC `RESOURCE_EXHAUSTED` (`grpc-status: 8`) in the headers with
//!   `grpc-retry-pushback-ms`.
//!
//! The longest of these wins, measured against the response's `Date` when it
//! has one. A 429 (or `RESOURCE_EXHAUSTED`) that names no wait, or a wait of
//! zero whole seconds, holds a second.
//!
//! The layer also counts. While nothing is known of a partition, its first
//! request goes alone and the others wait for its answer (at most two
//! seconds, so that a slow API is not serialized). An answer that reports
//! the units left (`RateLimit`'s `r`, revision 7's `remaining`,
//! `X-RateLimit-Remaining`) lets at most that many more requests go before
//! its reset, less those still unanswered (the server may count them in any
//! order); of several quotas (a second's and a minute's member, say), the
//! one with the fewest units left governs. The rest wait for the reset, and
//! the next request then learns the new window's quota alone. Where the
//! window may end before the cautious reading of its reset, one request
//! probes at the earliest moment it can have, once every request sent is
//! answered, and only that one is refused if it has not: an epoch reset read
//! against a `Date` truncated to the second (two seconds or more away, a
//! second early, until one such probe finds its window not ended: that
//! server's resets are exact, not rounded up, and are waited for from then
//! on), or a count with no reset at all (at once). A server that refuses
//! without reporting any count teaches one: after its first refusal, two
//! windows go one request at a time, then what both admitted goes at once
//! and the rest one at a time.
//!
//! A partition is, by default, the request's origin ([`ByOrigin`]); any
//! function of the request can name it instead (a per-token or per-tenant
//! quota), and partitions are kept as hashes, never as the values they were
//! derived from. The layer keeps at most a configured number of partitions
//! held at once, never dropping an active hold to make room.
//!
//! With [`HoldLayer::retry`], a request refused with 429 or 503 whose
//! response says how long to wait is sent again after that wait, when it can
//! be (an idempotent method and a body that can be sent twice, or a
//! [`Replay`] of the caller's) and a retry budget allows; otherwise the
//! refusal reaches the caller, and the requests after it wait. With
//! [`HoldLayer::pace`], each partition is also paced to the policy its
//! server advertises (`RateLimit-Policy`, the one with the shortest window),
//! each request reserving the next slot at that rate, so that many
//! concurrent callers spread over the window instead of bursting into a
//! refusal when a hold ends. Pacing only ever adds waits to what the fields
//! alone let go: a partition whose server advertises no policy is counted
//! and probed as it is unpaced.
//!
//! # What a client reaches with each server's fields
//!
//! Fifty callers against a server allowing 20 requests per one-second fixed
//! window for ten seconds, over loopback TCP, each through hyper-util's
//! client behind [`HoldLayer`] and through reqwest behind `HoldMiddleware`,
//! on the fields alone and paced (the `field_shapes` bench; the crate's
//! tests run the same servers, in process on a paused clock and over TCP,
//! and hold every row to at most one refusal per window after the first and
//! 90% of what the server allowed):
//!
//! | the server sends | the layer reads | refused per window after the first | admitted of 200 |
//! |---|---|---|---|
//! | draft-11 `RateLimit: "p";r=19;t=1` (or revision 8's `"p"; r=19; t=1`), `RateLimit-Policy` | units left `r`, reset `t`; the policy to pace to | 0 | 200 (paced 196–199) |
//! | revision 7's `RateLimit: limit=20, remaining=19, reset=1`, `RateLimit-Policy: 20;w=1` | `remaining`, `reset`; the policy | 0 | 200 (paced 199) |
//! | revision 6's `RateLimit-Remaining`, `RateLimit-Reset: 1`, `RateLimit-Policy: 20;w=1` | the same | 0 | 200 (paced 199) |
//! | `X-RateLimit-Remaining` (or GitLab's `RateLimit-Remaining`) with an epoch `-Reset`, and `Date` | units left; the reset against `Date` | 0 | 200 |
//! | `X-RateLimit-Reset-After` in fractional seconds (Discord) | units left; the reset to the millisecond | 0 | 200 |
//! | `X-RateLimit-Reset` in delta-seconds | units left; the reset | 0 | 200 |
//! | `X-RateLimit-Remaining` without a reset; 429 with `Retry-After` (rounded down) | units left; a refusal's wait | 1 | 200 |
//! | `Retry-After` alone, in seconds or as a date | a refusal's wait | 1 | 200 |
//! | gRPC `grpc-retry-pushback-ms` on `RESOURCE_EXHAUSTED` | a refusal's wait | 1 | 200 |
//!
//! A server that reports what is left is not refused after its first
//! window; one that only says when to retry (or never says when its window
//! ends) is refused once a window, by the request that finds it spent.
//! Behind a per-second and a per-minute quota (a `RateLimitLayer` with
//! both), the 50 the minute allows are admitted and neither refuses; with a
//! quota per token and the layer partitioned by token, each token gets its
//! own 200. Rows are the same for both clients, and both modes but where a
//! paced figure is given.
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
