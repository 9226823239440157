//! Process-local, hard-bounded storage for Runlimit.
//!
//! `runlimit-memory` implements [`runlimit_core::Limiter`] in process memory:
//! [`MemoryStore`] for anchored fixed windows ([`FixedWindowPolicy`]),
//! [`SlidingWindowStore`] for sliding windows ([`SlidingWindowPolicy`]) and
//! [`GcraStore`] for continuously replenished quotas ([`GcraPolicy`]), each
//! on one sharded table, and [`AnyStore`] for all three at once
//! ([`AnyPolicy`](runlimit_core::AnyPolicy) checks). Use it
//! for single-process services, tests, and as the coarse first-line gate in
//! front of a shared backend such as `runlimit-postgres`; it enforces a
//! per-process quota, not a fleet-wide one.
//!
//! [`FixedWindowPolicy`]: runlimit_core::FixedWindowPolicy
//! [`GcraPolicy`]: runlimit_core::GcraPolicy
//! [`SlidingWindowPolicy`]: runlimit_core::SlidingWindowPolicy
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use runlimit_core::{Check, GcraPolicy, PolicyId, ScopeId, SubjectKey};
//! use runlimit_memory::{GcraStore, MemoryStoreConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = GcraPolicy::new(
//!     PolicyId::new("api.read")?,
//!     ScopeId::new("client")?,
//!     10,                       // units replenished
//!     Duration::from_secs(1),   // during this period
//!     20,                       // maximum immediate burst
//! )?;
//! let limiter = GcraStore::new(MemoryStoreConfig::new(50_000)?);
//! let decision = limiter.check(&Check::new(
//!     &policy,
//!     SubjectKey::from_digest([7; 32]),
//! ))?;
//! assert!(decision.permits_request());
//! # Ok(())
//! # }
//! ```
//!
//! # Behaviour
//!
//! * **Bounded.** A store never holds more than `max_keys` entries. One shard
//!   (the default) makes all of them available whatever the key distribution;
//!   [`MemoryStoreConfig::with_shard_count`] divides them into fixed per-shard
//!   capacities behind separate locks.
//! * **Active entries are never evicted.** A new key that does not fit its shard
//!   is denied with [`Denial::StorageCapacity`](runlimit_core::Denial), carrying
//!   the earliest known time an entry may expire when the store knows one. Such
//!   denials fail closed even for shadow policies.
//!   With an [overflow tier](#a-flood-of-distinct-keys) (opt-in), such a key is
//!   decided by a count-min sketch instead, which can only over-count.
//! * **Bounded cleanup.** When a new key is stored in a shard at least half
//!   full, the check first removes at most
//!   [`cleanup_per_check`](MemoryStoreConfig::cleanup_per_check) expired
//!   entries from the shard (a batch gets that allowance once per check on
//!   the shard). A fixed-window entry expires at its anchored deadline; a
//!   sliding-window entry once nothing in its window still counts; a GCRA
//!   entry when its full burst has replenished. Until removed, an expired
//!   entry behaves exactly like an absent key, and a check of its key updates
//!   it in place: below half full, a key checked again after it replenished
//!   (most production keys) is not forgotten and stored again.
//! * **Fixed windows are anchored.** The first allowed check for a key starts its
//!   window; later checks use that anchor until the whole window has elapsed.
//!   Durations are exact at evaluation time.
//! * **Sliding windows never exceed their limit in any window.** Each entry
//!   counts the units of the nine eighths of a window before now (64 bytes, a
//!   fixed window's 32 twice); a unit is released at most an eighth of the
//!   window after an exact log would release it. See
//!   [`SlidingWindowPolicy`].
//! * **GCRA is exact.** Replenishment uses scaled integers (nanoseconds plus a
//!   remainder in units of `1 / quota` ns), never floating point; retry and reset
//!   durations are rounded up to whole milliseconds. State is constant-size per
//!   key.
//! * **Denials consume nothing; batches are all-or-nothing.** Allowed decisions
//!   keep input order; duplicate keys, mixed quota modes, empty and oversized
//!   batches are caller errors; a batch whose keys could never fit one shard is
//!   [`MemoryStoreError::BatchExceedsShardCapacity`].
//! * **Time never moves backwards within a shard**, whatever the clock does: an
//!   operation never runs at a time earlier than one an operation it follows on
//!   that shard ran at.
//! * **Checks on stored keys run side by side.** Such a check holds its shard
//!   only for reading and locks just its key's entry, so checks on different
//!   keys of one shard proceed in parallel and write no shared cache line.
//!   A fixed-window or GCRA check that is denied does not even lock the
//!   entry: it reads the state twice without the lock and answers from it
//!   when the reads agree (the decision the locked path would give), so
//!   threads denied on one hot key share its line only for reading.
//!   Cleanup, and batches with a key not yet stored, hold the shard
//!   exclusively; a batch of stored keys locks its entries. A new key is
//!   stored holding the shard only for reading when the shard has room and,
//!   if it is half full, nothing on it may be due for cleanup: it is staged
//!   beside the table (at most eight per shard) and merged in by the next
//!   operation that holds the shard exclusively, so a flood of new keys
//!   takes the shard's exclusive lock once per eight keys; otherwise storing
//!   it holds the shard exclusively. Either way the check decides, stores and cleans up exactly
//!   as the other would.
//! * **Poisoning.** If code panics while a shard lock is held (for example an
//!   injected clock), that shard stays poisoned: every later operation touching
//!   it returns [`MemoryStoreError::PoisonedShard`] without resetting counters.
//!   With one shard this makes the whole store unavailable; keep admissions
//!   failed closed and alert. [`Store::recover_poisoned`] empties only poisoned
//!   shards, an explicit availability trade-off: their lost state may admit
//!   requests it would have denied.
//! * **Refund, settle, grant, peek and reset** ([`runlimit_core::Lifecycle`],
//!   [`runlimit_core::Settle`] and [`runlimit_core::Grant`], also as inherent
//!   [`Store::admit`], [`Store::refund`], [`Store::settle`],
//!   [`Store::grant`], [`Store::peek`] and [`Store::reset`]) hold the shard
//!   only for reading and lock the key's entry, like a check. Each entry
//!   carries a 32-bit version (drawn afresh for a new key, changed by a reset
//!   and by refunds that void other receipts), so a receipt credits only the
//!   state it was issued for. A reset leaves the entry in place as an expired
//!   one, reclaimed by bounded cleanup once its deadline has passed; a peek
//!   never stores a key.
//! * **Observers** run after locks are released; their panics are caught, and
//!   without an observer no clock is read for timing. A store's capacity
//!   observations carry the name [`Store::with_name`] gave it (`default`
//!   otherwise): name the stores of one process apart, so their gauges do
//!   not overwrite each other's.
//!
//! # In front of a shared backend
//!
//! Two wrappers make the memory store the first line of the production
//! topology, in front of `runlimit-postgres` or `runlimit-redis` (or any
//! [`Limiter`](runlimit_core::Limiter)):
//!
//! * [`Tiered`]: a local gate and a shared backend as one admission. The
//!   gate's checks run first and are consumed; the shared ones run only if it
//!   allowed; a shared denial or failure refunds the gate.
//! * [`Leased`]: a lease per hot key, so checks are admitted from units the
//!   shared store granted this replica, without a round trip; every unit
//!   admitted was consumed at the shared store first, and the unspent ones
//!   go back with a settlement. A replica denies only what its lease and the
//!   shared store together cannot cover, so under-admission stays within
//!   what other replicas' leases hold (at most `replicas × max_grant` units
//!   of a key), for weighted checks too; at most
//!   [`max_keys`](LeaseConfig::new) keys hold a lease at once.
//! * [`DenialCache`] and [`Cached`]: keys the backend denied are denied
//!   locally, without a round trip, until the backend's own retry time; see
//!   the [`DenialCache`] documentation for exactly when a cached denial can
//!   outlive the backend's state.
//!
//! The inherent [`Store::check`] and [`Store::check_all`] are synchronous. The
//! [`Limiter`](runlimit_core::Limiter) implementation runs them when its future
//! is first polled; from a concrete store, call it as
//! `Limiter::check(&store, &check).await`.
//!
//! # A flood of distinct keys
//!
//! A store never evicts an active counter (an attacker's counter evicted is
//! an attacker's counter reset), so once its table is full every new key is
//! denied for capacity. That is the attack: an IPv6 /48 holds 65,536 /64s, a
//! botnet tens of thousands of addresses, and each fresh client or account
//! name is a new key. A flood of distinct keys fills the table within
//! seconds, and from then on every new legitimate user is answered "at
//! capacity" for as long as the flood lasts.
//!
//! [`MemoryStoreConfig::with_overflow`] adds an overflow tier: a key that
//! finds its shard full is decided by a count-min sketch of `depth` rows of
//! `width` cells ([`OverflowConfig`]) instead. What it guarantees:
//!
//! * **It never admits what an exact limiter would deny.** A cell holds an
//!   upper bound of what every key hashed to it consumed, and a key's
//!   estimate is the least of its cells. Windows (fixed and sliding) are
//!   counted in epochs of the window's length, the current and the previous
//!   one, which together hold every unit any window ending now counts; GCRA
//!   keeps an upper bound of the theoretical arrival time. A property test
//!   holds every algorithm, and [`AnyStore`], to an exact unbounded limiter
//!   replayed on the admitted checks, with tables of a few keys and sketches
//!   of a few cells.
//! * **Nothing is forgotten.** A GCRA key the sketch counts is stored as
//!   soon as its shard has room, from the arrival time its cells bound. A
//!   window key the sketch counts anything for is decided by the sketch until
//!   that count has dropped out (two windows after its last admission), even
//!   when its shard has room again, and only then stored: an anchored window
//!   cannot be rebuilt from epoch counts without admitting more. Sketch admissions return
//!   receipts whose refunds credit nothing, and [`Store::reset`] cannot lower
//!   a sketch's count: both err toward denying.
//! * **Memory stays bounded.** Each sketch takes `width × depth × 8` bytes,
//!   allocated on the first overflow: one per window length among the keys
//!   that overflow (at most [`MAX_OVERFLOW_SKETCHES`]; a key of a further
//!   window length is denied for capacity, as without the tier) and one for
//!   all GCRA policies.
//! * **What it costs legitimate users** is false denials: a key's estimate
//!   exceeds its own count by what the keys sharing its cells consumed. With
//!   `N` units counted in a window, the excess is above `e·N/width` with
//!   probability at most `e^-depth` (conservative updates make it smaller in
//!   practice). A user who has used `k` of a limit `L` is denied falsely only
//!   when the excess passes `L - k`.
//! * **What it costs attackers**: each flood key is held to its own limit
//!   (or less), as an exact limiter would hold it; a flood's aggregate is its
//!   number of keys times the limit. Limits on wider prefixes bound that.
//!
//! Sizing: choose `width ≥ e·N/(L - k)`, with `N` the units a flood can
//! spend in one window (keys times cost times checks per key that pass), and
//! `depth` 4 (at most 1.8% of users denied falsely, and measured far fewer).
//! For example, 500,000 flood keys a minute (ten times a 50,000-key table),
//! one login each, against a per-account limit of 8 that users use 3 of:
//! `N` = 500,000, a width of `e·500,000/5` ≈ 272,000 cells, 8.7 MB at depth
//! 4. A sketch's epochs are cleared when the window turns (a `width × depth
//! × 4`-byte fill, once per window).
//! Measured by `tests/overflow_bound.rs`: a table of 1,000 keys, 10,000
//! flood keys of one check each in a window, 1,000 new users of three checks
//! each on a limit of ten:
//!
//! | width | depth | `e·N/width` | users falsely denied | `e^-depth` |
//! |------:|------:|------------:|---------------------:|-----------:|
//! | 1,024 | 1 | 34.5 | 76.4% | (no bound: above `L - k` = 7) |
//! | 1,024 | 2 | 34.5 | 12.0% | (no bound) |
//! | 1,024 | 4 | 34.5 | 0% | (no bound) |
//! | 4,096 | 1 | 8.6 | 1.3% | (no bound) |
//! | 4,096 | 2 | 8.6 | 0% | (no bound) |
//! | 5,049 | 1 | 7.0 | 0.7% | 36.8% |
//! | 5,049 | 2 | 7.0 | 0% | 13.5% |
//! | 5,049 | 4 | 7.0 | 0% | 1.8% |
//! | 16,384 | 1 | 2.2 | 0% | 36.8% |
//!
//! (`N` = 13,000 units; 5,049 is `e·N/(L - k)`. A depth-4 sketch of 5,049
//! cells takes 158 KiB; the table it protects about 85 KB.) The flood's own
//! checks were all admitted, as an exact limiter admits them: each flood key
//! stayed within its limit. GCRA (a burst of ten replenished over the
//! window) measures alike: no user denied falsely at 5,049 cells. Its cells
//! keep arrival times, which run ahead of a key's own by the replenishment
//! of what the keys sharing them spent, so the same sizing applies with the
//! burst as the limit.
//!
//! The tier costs the normal path next to nothing: a stored key's check does
//! not look at it, and a new key's check reads one atomic word while the
//! sketch has counted nothing live. Counted by callgrind
//! (`examples/callgrind_checks.rs`, 100,000 fixed-window checks), a hot
//! key's check takes 344 instructions with the tier and without it (343
//! before the tier existed), a random stored key's 358 (357), a new key's in
//! a table with room 854 (850 before; 851 without the tier). A check the
//! sketch decides takes 2,120 instructions (a 2<sup>20</sup> × 4 sketch),
//! against 985 for the capacity denial it replaces.
//!
//! With [`Tiered`], give the gate store the overflow tier: a full gate then
//! keeps deciding new clients (rather than turning them all away, or letting
//! them through), and the shared store sees no more checks than an exact,
//! unbounded gate would pass; what the sketch denies never costs the shared
//! store a round trip or a row.
//!
//! # Changing policies and rotating secrets
//!
//! A check whose policy [continues](runlimit_core::FixedWindowPolicy::continuing)
//! from another, or whose key carries a previous secret's, starts a counter
//! that holds no live state from its sources' (see [`runlimit_core::carry`]
//! for the translation and the bound). The sources are read under their
//! entries' locks before the counter's shard is locked, and the carried
//! state is stored on that first check, allowed or denied, so it drains from
//! then on; a reset forgets the sources too. A counter with live state takes
//! the path it always takes. A store keeps its own algorithm's states only:
//! a change of algorithm carries in an [`AnyStore`], which keeps all three.
//!
//! # Maintenance
//!
//! With the `tokio` feature, [`maintenance`]`::spawn` runs a limiter's periodic
//! upkeep ([`Maintain`](runlimit_core::Maintain) rounds) on the Tokio runtime
//! until its handle is stopped or dropped: for a [`Leased`], idle leases
//! given back, then its shared backend's round (expired PostgreSQL rows
//! deleted). The [`maintenance`] module says what each limiter's round does;
//! the stores here need none.
//!
//! # Memory
//!
//! Each key costs a 32-byte entry stored inline in its shard's hash table (a
//! 128-bit fold of the counter's identity and 16 bytes of state) with its
//! control byte, and a 16-byte expiry-heap entry: about 85 bytes per key at a
//! million keys (the table rounds up to a power of two), counted by this
//! crate's allocation test, which holds it under 100. A sliding-window entry
//! is 64 bytes (about 152 per key in all), a cached denial 32. Two counters share an
//! entry only if their 128-bit identities collide, which for HMAC-derived
//! subject keys is as likely as guessing the HMAC.
//!
//! Each shard also costs about 1.1 KiB whatever it holds: its lock keeps eight
//! reader locks on cache lines of their own, so that readers on different
//! threads do not share one (`MAX_SHARDS` shards take about 4.5 MiB).
//!
//! # Features
//!
//! * `tokio` (on by default): a [`Leased`] dropped inside a Tokio runtime
//!   gives its unspent units back, and a check waits for the grant in flight
//!   for its key; [`maintenance`]`::spawn`.
//! * `serde` (enables `runlimit-core`'s): serialize and deserialize
//!   [`MemoryStoreConfig`] (through its validating constructors, rejecting
//!   unknown fields) and [`MemoryStoreStats`]. Live stores never serialize.

mod algorithm;
mod any;
mod clock;
mod config;
mod denial_cache;
mod error;
mod leased;
pub mod maintenance;
mod overflow;
mod shard;
mod stats;
mod store;
mod table;
mod tiered;

pub use algorithm::{
    Algorithm, FixedWindow, Gcra, GcraState, SlidingState, SlidingWindow, WindowState,
};
pub use any::{AnyAdmitted, AnyAlgorithm, AnyState};
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{
    ConfigError, DEFAULT_CLEANUP_PER_CHECK, MAX_BATCH_SIZE, MAX_CLEANUP_PER_CHECK, MAX_KEYS,
    MAX_OVERFLOW_DEPTH, MAX_OVERFLOW_WIDTH, MAX_SHARDS, MemoryStoreConfig, OverflowConfig,
};
pub use denial_cache::{Cached, DenialCache, DenialCacheStats};
pub use error::MemoryStoreError;
pub use leased::{Leasable, LeaseConfig, LeaseConfigError, LeaseStats, Leased, LeasedError};
pub use overflow::{MAX_OVERFLOW_SKETCHES, OverflowStats};
pub use stats::{MemoryStoreStats, ShardStats};
pub use store::Store;
pub use tiered::{Tiered, TieredError};

/// A hard-bounded, sharded, process-local store of anchored fixed windows.
///
/// See the [crate documentation](crate) for its behaviour.
pub type MemoryStore = Store<FixedWindow>;

/// A hard-bounded, sharded, process-local GCRA store.
///
/// See the [crate documentation](crate) for its behaviour.
pub type GcraStore = Store<Gcra>;

/// A hard-bounded, sharded, process-local store of sliding windows: at most
/// the limit in every interval of the window's length. Each key costs a
/// 64-byte entry (nine counts of eighths of the window); see
/// [`SlidingWindowPolicy`](runlimit_core::SlidingWindowPolicy) for the
/// guarantee and its bound.
///
/// `retry_after` is the exact earliest time a denied cost fits (when enough
/// of the oldest eighths have dropped out) and `reset_after` the time until
/// every counted unit is released, both rounded up to whole milliseconds. A
/// key becomes eligible for bounded cleanup once nothing in its window still
/// counts.
///
/// ```
/// use std::time::Duration;
///
/// use runlimit_core::{Check, PolicyId, ScopeId, SlidingWindowPolicy, SubjectKey};
/// use runlimit_memory::{MemoryStoreConfig, SlidingWindowStore};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // At most 5 password resets per recipient in any 15 minutes.
/// let policy = SlidingWindowPolicy::new(
///     PolicyId::new("auth.reset")?,
///     ScopeId::new("recipient")?,
///     5,
///     Duration::from_secs(15 * 60),
/// )?;
/// let limiter = SlidingWindowStore::new(MemoryStoreConfig::new(50_000)?);
/// let decision = limiter.check(&Check::new(&policy, SubjectKey::from_digest([7; 32])))?;
/// assert_eq!(decision.remaining(), Some(4));
/// # Ok(())
/// # }
/// ```
///
/// See the [crate documentation](crate) for the behaviour it shares with the
/// other stores.
pub type SlidingWindowStore = Store<SlidingWindow>;

/// A hard-bounded, sharded, process-local store of all three algorithms,
/// checked with [`AnyPolicy`](runlimit_core::AnyPolicy): for policies whose
/// algorithm is chosen at run time (a configuration file), batches that mix
/// algorithms (all-or-nothing, as in any store), and policies that
/// [continue](runlimit_core::FixedWindowPolicy::continuing) from a policy of
/// another algorithm, whose state only a store holding both can carry.
/// Each key costs a 64-byte entry, whatever its algorithm.
///
/// ```
/// use std::time::Duration;
///
/// use runlimit_core::{AnyPolicy, BatchDecision, Check, FixedWindowPolicy, GcraPolicy, PolicyId, ScopeId, SubjectKey};
/// use runlimit_memory::{AnyStore, MemoryStoreConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_minute: AnyPolicy =
///     FixedWindowPolicy::new(PolicyId::new("api")?, ScopeId::new("tenant")?, 600, Duration::from_secs(60))?.into();
/// let per_second: AnyPolicy =
///     GcraPolicy::new(PolicyId::new("api")?, ScopeId::new("client")?, 10, Duration::from_secs(1), 20)?.into();
/// let limiter = AnyStore::new(MemoryStoreConfig::new(50_000)?);
/// let batch = limiter.check_all(&[
///     Check::new(&per_minute, SubjectKey::from_digest([1; 32])),
///     Check::new(&per_second, SubjectKey::from_digest([2; 32])),
/// ])?;
/// assert!(matches!(batch, BatchDecision::Allowed(_)));
/// # Ok(())
/// # }
/// ```
pub type AnyStore = Store<AnyAlgorithm>;
