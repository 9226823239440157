//! A rate-limit service for Envoy's rate-limit protocol, on Runlimit's stores.
//!
//! Envoy, and the meshes and gateways that configure it (Istio, Envoy
//! Gateway, Contour, Emissary), ask a rate-limit service whether a request is
//! within its limits through one gRPC method, `ShouldRateLimit`.
//! `runlimit-server` is such a service: its decisions are Runlimit's
//! (policies from `runlimit-core`, counters in Runlimit's stores), and its
//! rules come from YAML files in the format of Envoy's reference rate-limit
//! service, which load unchanged.
//!
//! # Running it
//!
//! ```sh
//! runlimit-server serve --config-dir crates/runlimit-server/examples/config
//! runlimit-server check --domain edge remote_address=203.0.113.7
//! ```
//!
//! `serve` answers gRPC on `0.0.0.0:8081` (`ShouldRateLimit` and
//! `grpc.health.v1`) and HTTP on `0.0.0.0:8080` (`POST /json`,
//! `GET /healthcheck`, `GET /metrics`), reloads the directory when its files
//! change, and stops gracefully on SIGTERM or Ctrl-C. `check` asks a server
//! about one descriptor and prints the answer. Every flag, and its
//! environment variable, is in [`cli`].
//!
//! # Its place in the workspace
//!
//! The service is a front end: `runlimit-core` gives it policies, subject
//! keys ([`KeyHasher`](runlimit_core::KeyHasher)) and the
//! [`Limiter`](runlimit_core::Limiter) and
//! [`Lifecycle`](runlimit_core::Lifecycle) traits it decides through;
//! `runlimit-memory` the in-process store (and the denial cache a shared
//! store goes behind); `runlimit-http` the draft `RateLimit` header fields.
//! Every backend that implements those traits for
//! [`AnyPolicy`](runlimit_core::AnyPolicy) plugs into
//! [`Decider`](service::Decider) unchanged, and into the binary as one arm
//! of [`backend::with_backend`].
//!
//! | module | holds |
//! |---|---|
//! | [`config`] | the rule files: loading, validation with the reference's messages, matching |
//! | [`proto`] | the protocol's messages (hand-written, exact field numbers) and its gRPC service and client |
//! | [`service`] | `ShouldRateLimit`: validation, matching, batches, statuses, the failure budget |
//! | [`http`] | `/json`, `/healthcheck`, `/metrics` |
//! | [`metrics`] | the reference's counters per rule, with bounded labels |
//! | [`reload`] | the configuration in use, swapped whole, and the directory watcher |
//! | [`health`] | whether the server is serving |
//! | [`server`] | gRPC and HTTP on bound listeners, graceful shutdown |
//! | [`backend`], [`cli`] | choosing the limiter; the command line |
//!
//! # Embedding
//!
//! The library holds the logic, so that tests and applications can embed it:
//!
//! ```
//! use std::sync::Arc;
//!
//! use runlimit_core::KeyHasher;
//! use runlimit_memory::{AnyStore, MemoryStoreConfig};
//! use runlimit_server::{
//!     config::Config,
//!     metrics::Metrics,
//!     proto::{RateLimitDescriptor, RateLimitRequest, rate_limit_descriptor::Entry, rate_limit_response::Code},
//!     reload::SharedConfig,
//!     service::Decider,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::from_sources([(
//!     "edge.yaml",
//!     "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
//! )])?;
//! let decider = Decider::new(
//!     AnyStore::new(MemoryStoreConfig::new(100_000)?),
//!     Arc::new(SharedConfig::new(config)),
//!     KeyHasher::new(b"load the secret from secret storage: 32+ bytes")?,
//!     Metrics::new(),
//! );
//! let request = RateLimitRequest {
//!     domain: "edge".into(),
//!     descriptors: vec![RateLimitDescriptor::new([Entry::new("remote_address", "203.0.113.7")])],
//!     hits_addend: 0,
//! };
//! assert_eq!(decider.should_rate_limit(&request).await?.overall_code(), Code::Ok);
//! assert_eq!(decider.should_rate_limit(&request).await?.overall_code(), Code::OverLimit);
//! // To serve it: `Server::new(decider).serve(grpc_listener, http_listener, shutdown)`.
//! # Ok(())
//! # }
//! ```
//!
//! # Semantics
//!
//! Runlimit's, in the protocol's terms ([`service`] states them in full): a
//! request's enforced descriptors are one atomic batch, all counted or none;
//! a request answered `OVER_LIMIT` consumes nothing; `hits_addend` is a cost,
//! and 0 checks without counting; `replaces`, `shadow_mode` and `quota_mode`
//! act as in the reference; `unlimited` and `requests_per_unit: 0` rules
//! never reach the store; counters are keyed by an HMAC of the entries, so no
//! value reaches the store, logs, metrics or errors; a backend that fails or
//! misses the budget is answered `UNAVAILABLE`, never `OK`.
//!
//! # Backends
//!
//! `--backend memory` (the default) counts in the process; `redis`,
//! `redis-cluster` and `postgres` share counters between replicas, behind
//! a denial cache, with leases for rules that ask for them
//! (`runlimit: {lease: true}`: exact, a hot descriptor at local speed),
//! every store operation within the budget, and the server serving (and
//! answering `UNAVAILABLE`) while its store is down. On Redis Cluster a
//! request costs one round trip per hash slot, in parallel; it is atomic
//! within a slot and counted whole or not at all across slots, erring only
//! toward denying ([`backend::SlotBatches`]). [`backend`] states each in
//! full; [`cli`] lists the flags.
//!
//! # Differences from the reference service
//!
//! Where the service behaves otherwise than Envoy's reference rate-limit
//! service; those of the configuration files are in
//! [`config`](config#differences-from-the-reference-service).
//!
//! | topic | the reference service | Runlimit |
//! |---|---|---|
//! | a request's descriptors | each counted on its own; hits over the limit are counted too | one atomic batch: all counted or none; a request answered `OVER_LIMIT` consumes nothing |
//! | windows | fixed, aligned to the Unix epoch, on the server's clock | a subject's fixed window starts at its first counted request, on the store's clock; sliding windows and GCRA per rule |
//! | `duration_until_reset` | the time to the window's end | the time until the quota is whole again, or, when over, until the cost fits; rounded up to whole seconds |
//! | shadow rules | counted past their limit | counted only within their limit and when the request is admitted, as one batch |
//! | `hits_addend: 0` | `OK` unless already past the limit | `OVER_LIMIT` when not one more unit fits |
//! | a cost above the limit | counted, and over | over, and not counted |
//! | one counter in several descriptors | counted once per descriptor | counted once, at the sum of their costs |
//! | a limit in the request | shares the counter of the same entries and unit | counted apart per domain and entry keys, and per limit; unit `UNKNOWN` or 0 requests: `INVALID_ARGUMENT` |
//! | `is_negative_hits` | ignored: the hits are counted | `INVALID_ARGUMENT` |
//! | a malformed request | gRPC `UNKNOWN` (`/json`: 400) | `INVALID_ARGUMENT` (`/json`: 400) |
//! | a backend failure | gRPC `UNKNOWN` after up to the backend's timeout (10 s for Redis); `/json`: 400 | `UNAVAILABLE` within the budget (10 ms unless configured); `/json`: 503 |
//! | Redis Cluster | a round trip per descriptor, in series by default | a round trip per hash slot, in parallel; counted whole or not at all across slots |
//! | counter keys | the descriptors' values, in clear | an HMAC of the entries with the server's secret |
//! | statistics | per rule; per value with `detailed_metric`, `value_to_metric` and for limits in requests | per rule only (`domain`, `rule`); limits in requests by their keys, at most 256 labels |
//! | descriptors per request | any number | 16 unless configured |
//! | health | `ratelimit` and `""` | also `envoy.service.ratelimit.v3.RateLimitService`; not serving without a domain |
//! | reloading | on file-system notifications | by reading the files every second, alike on every file system |
//! | response headers | `RateLimit-Limit`, `-Remaining`, `-Reset` when enabled | the same, or the draft `RateLimit`/`RateLimit-Policy`, or both, when enabled |

pub mod backend;
pub mod cli;
pub mod config;
pub mod health;
pub mod http;
pub mod metrics;
pub mod proto;
pub mod reload;
pub mod server;
pub mod service;
