//! A rate-limit service for Envoy, deciding on Runlimit's stores.
//!
//! Proxies such as Envoy (and Istio, Envoy Gateway, Contour or Emissary in
//! front of it) ask one gRPC method, `ShouldRateLimit`, whether a request
//! is within its limits. `runlimit-server` answers it with Runlimit's exact,
//! shared quotas: a request's descriptors are admitted together or not at
//! all, a denied request consumes nothing, and descriptor values reach no
//! store, log or metric in clear.
//!
//! Its rules come from YAML files in the format of Envoy's reference
//! rate-limit service, which load unchanged ([`config`]): domains of nested
//! descriptors, each rule a fixed window per unit unless it chooses a
//! sliding window or GCRA.
//!
//! The library holds the logic, so tests and applications can embed it;
//! policies, keys and stores come from `runlimit-core` and the backend
//! crates.

pub mod config;
