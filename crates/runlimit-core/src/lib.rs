//! The contract every Runlimit crate builds on.
//!
//! `runlimit-core` holds what is independent of storage and framework:
//!
//! * validated identifiers ([`PolicyId`], [`ScopeId`]) and policies
//!   ([`FixedWindowPolicy`], [`SlidingWindowPolicy`], [`GcraPolicy`]) whose bounds ([`MAX_LIMIT`],
//!   [`MAX_WINDOW`]) every backend represents exactly;
//! * HMAC-derived subject keys ([`KeyHasher`], [`SubjectKey`]) and the
//!   [`CounterKey`] a backend stores a counter under;
//! * [`Check`]s and their outcomes ([`Decision`], [`Denial`], [`BatchDecision`]);
//! * the asynchronous [`Limiter`] trait that backends implement: `runlimit-memory`
//!   in process, `runlimit-postgres` and `runlimit-redis` across replicas;
//! * [`Lifecycle`] beside it: refunds (through move-only [`Receipt`]s), peeks
//!   and resets; and [`Backend`], where a backend keeps counters ([`Storage`]);
//! * [`Observer`]s for privacy-preserving operational telemetry.
//!
//! HTTP field encoding lives in `runlimit-http` and the Tower/Axum admission layer
//! in `runlimit-axum`. Core depends on no async runtime, database or web framework.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use runlimit_core::{Check, FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
//!
//! let policy = FixedWindowPolicy::new(
//!     PolicyId::new("auth.login")?,
//!     ScopeId::new("identity")?,
//!     8,
//!     Duration::from_secs(60),
//! )?;
//! // Load the secret from secret storage; it must be at least 32 bytes.
//! let hasher = KeyHasher::new(b"0123456789abcdef0123456789abcdef")?;
//! let check = Check::new(&policy, hasher.hash_for(&policy, b"user@example.test"));
//! assert_eq!(check.cost(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Features
//!
//! * `serde`: serialize identifiers, policies (without fingerprints), quota modes
//!   and tagged decisions; deserialization goes through the validating
//!   constructors and rejects unknown fields. [`SubjectKey`], [`CounterKey`],
//!   [`PolicyFingerprint`] and [`KeyHasher`] deliberately never serialize.

mod backend;
mod batch;
mod check;
mod decision;
mod divisor;
pub mod gcra;
mod hmac_midstate;
mod id;
pub mod key;
mod lifecycle;
mod limiter;
mod observation;
pub mod observers;
pub mod policy;
pub mod sliding;
mod tier;

pub use backend::{Backend, Storage};
pub use batch::{BatchError, DEFAULT_MAX_BATCH_SIZE, validate_batch};
pub use check::{Check, CostError, TierCheck};
pub use decision::{BatchDecision, Decision, DecisionError, DecisionKind, Denial, ceil_seconds};
pub use id::{IdError, IdKind, MAX_ID_LEN, PolicyId, ScopeId};
pub use key::{
    CounterKey, KeyHasher, KeyHasherError, MIN_SECRET_LEN, PreparedKeyHasher, SubjectKey,
};
pub use lifecycle::{Admission, Admitted, Lifecycle, Receipt, RefundError, Refunded, Stamp};
pub use limiter::Limiter;
pub use observation::{
    AdmissionObservation, AdmissionOutcome, AdmissionReporter, CapacityObservation,
    CleanupObservation, Consumption, Observer, Operation, PolicyLabel, notify,
};
pub use policy::{
    Algorithm, FixedWindowPolicy, GcraPolicy, MAX_LIMIT, MAX_WINDOW, Policy, PolicyError,
    PolicyField, PolicyFingerprint, QuotaMode, SlidingWindowPolicy,
};
pub use tier::{MayHaveConsumed, TieredPolicy};
