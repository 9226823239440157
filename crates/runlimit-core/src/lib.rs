//! The contract every Runlimit crate builds on.
//!
//! `runlimit-core` holds what is independent of storage and framework:
//!
//! * validated identifiers ([`PolicyId`], [`ScopeId`], [`StoreName`]) and policies
//!   ([`FixedWindowPolicy`], [`SlidingWindowPolicy`], [`GcraPolicy`], any of
//!   them as an [`AnyPolicy`]) whose bounds ([`MAX_LIMIT`], [`MAX_WINDOW`])
//!   every backend represents exactly, and the lineage and translation that
//!   carry a subject's state across a change of policy or secret ([`carry`]);
//! * HMAC-derived subject keys ([`KeyHasher`], [`SubjectKey`]) and the
//!   [`CounterKey`] a backend stores a counter under;
//! * [`Check`]s and their outcomes ([`Decision`], [`Denial`], [`BatchDecision`]);
//! * the asynchronous [`Limiter`] trait that backends implement: `runlimit-memory`
//!   in process, `runlimit-postgres` and `runlimit-redis` across replicas;
//! * [`Lifecycle`] beside it: refunds (through move-only [`Receipt`]s, and in
//!   part with [`Settle`]), peeks
//!   and resets; and [`Backend`], where a backend keeps counters ([`Storage`]);
//! * [`Maintain`] beside it too: the periodic upkeep a backend needs (expired
//!   rows deleted, idle leases given back), one round at a time;
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
//! # Choosing a policy
//!
//! | policy | guarantees | the largest burst it allows |
//! |---|---|---|
//! | [`FixedWindowPolicy`] | at most `limit` per window, anchored at the first allowed check | `2 × limit`, across the end of one window and the start of the next |
//! | [`SlidingWindowPolicy`] | at most `limit` in every interval of the window's length | `limit`, in any window |
//! | [`GcraPolicy`] | a steady rate with a bounded burst | `burst` at once, then the replenishment rate |
//!
//! # Rules every backend keeps
//!
//! * **Denied checks consume nothing.** A batch ([`Limiter::check_all`]) is
//!   all-or-nothing, and its allowed decisions keep input order.
//! * **Caller mistakes change nothing.** Duplicate counters in a batch, mixed
//!   quota modes and empty or oversized batches are errors that consume no
//!   quota; an invalid policy cannot be built.
//! * **A policy's identity is its fingerprint.** The policy id, scope and quota
//!   parameters are folded into the [`CounterKey`], so changing any of them
//!   starts independent counters, unless the new policy
//!   [`continues`](FixedWindowPolicy::continuing) from the one it replaces:
//!   then each subject's state is carried over the first time it is checked
//!   ([`carry`]; a rotated secret likewise, with
//!   [`KeyHasher::with_previous_secret`]). The [`QuotaMode`] is not part of
//!   the fingerprint, so switching a warmed shadow policy to enforcement keeps
//!   its counters.
//! * **Shadow mode observes without enforcing.** Under
//!   [`QuotaMode::Shadow`] an exhausted quota yields a shadow denial:
//!   [`Decision::permits_request`] and [`Decision::would_deny`] are both true
//!   and nothing is consumed. Storage-capacity denials and backend errors stay
//!   fail-closed.
//! * **Errors are classified.** A backend error says whether the check was
//!   definitely not applied or may have consumed quota; admission fails closed
//!   unless the application chose otherwise.
//! * **Retry times round up.** [`Denial::retry_after_seconds`] is the HTTP
//!   `Retry-After` value, the retry time rounded up to a whole second.
//!
//! # Features
//!
//! * `serde`: serialize identifiers, policies (without fingerprints), quota modes
//!   and tagged decisions; deserialization goes through the validating
//!   constructors and rejects unknown fields. [`SubjectKey`], [`CounterKey`],
//!   [`PolicyFingerprint`] and [`KeyHasher`] deliberately never serialize.

mod backend;
mod batch;
pub mod carry;
mod check;
mod decision;
mod divisor;
pub mod gcra;
pub mod grant;
mod hmac_midstate;
mod id;
pub mod key;
mod lifecycle;
mod limiter;
mod lineage;
mod maintenance;
mod observation;
pub mod observers;
pub mod policy;
mod shared;
pub mod sliding;
mod tier;

pub use backend::{Backend, Storage};
pub use batch::{BatchError, DEFAULT_MAX_BATCH_SIZE, validate_batch};
pub use check::{Check, CostError, TierCheck};
pub use decision::{BatchDecision, Decision, DecisionError, DecisionKind, Denial, ceil_seconds};
pub use grant::{Grant, Granted};
pub use id::{IdError, IdKind, MAX_ID_LEN, PolicyId, ScopeId, StoreName};
pub use key::{
    CounterKey, KeyHasher, KeyHasherError, MIN_SECRET_LEN, PreparedKeyHasher, SubjectKey,
};
pub use lifecycle::{
    Admission, Admitted, Credits, Lifecycle, Receipt, RefundError, Refunded, Settle, Stamp,
};
pub use limiter::Limiter;
pub use lineage::{AnyPolicy, PolicyKind};
pub use maintenance::{Maintain, MaintenanceFailure, MaintenanceReport};
pub use observation::{
    AdmissionObservation, AdmissionOutcome, AdmissionReporter, CapacityObservation, CarriedFrom,
    CarryObservation, CleanupObservation, Consumption, Observer, Operation, PolicyLabel, notify,
};
pub use policy::{
    Algorithm, FixedWindowPolicy, GcraPolicy, MAX_LIMIT, MAX_WINDOW, Policy, PolicyError,
    PolicyField, PolicyFingerprint, QuotaMode, SlidingWindowPolicy,
};
pub use shared::Shared;
pub use tier::{MayHaveConsumed, TieredPolicy};
