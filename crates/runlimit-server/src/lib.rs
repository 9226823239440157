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
//! * [`config`]: loading a directory of rule files, refusing invalid ones
//!   with the reference service's messages, matching request descriptors to
//!   rules, and keeping counters across reloads.
//!
//! The library holds the logic, so that tests and applications can embed it.

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
