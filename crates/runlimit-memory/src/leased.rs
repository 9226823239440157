//! Exact leases: a replica admits a hot key's checks from units the shared
//! store granted it, without a round trip, and never admits a unit the shared
//! store did not consume first.
//!
//! Every admission on a shared quota costs a round trip, so a hot key shared
//! by many replicas is bounded by the shared store's round-trip rate.
//! [`Leased`] puts a lease per key in front of any shared backend that can
//! [grant](runlimit_core::Grant) and [settle](runlimit_core::Settle): it takes
//! a block of units from the shared store in one round trip, admits checks
//! from it locally, and gives back what it did not spend.

use std::{
    collections::HashMap,
    fmt,
    hash::{BuildHasherDefault, Hasher},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use runlimit_core::{
    Admission, AdmissionObservation, AdmissionOutcome, Admitted, AnyPolicy, Backend, BatchDecision,
    Check, Consumption, CounterKey, Decision, FixedWindowPolicy, GcraPolicy, Grant, Lifecycle,
    Limiter, MayHaveConsumed, Observer, Operation, Policy, PolicyLabel, QuotaMode, Receipt,
    RefundError, Refunded, Settle, SlidingWindowPolicy, Stamp, Storage, SubjectKey, notify,
};

use crate::{Clock, clock::StoreClock};

/// The issuer of a leased limiter's receipts (which hold either local
/// admissions or the shared backend's receipt).
const ISSUER: &str = "runlimit-memory/leased";

/// Lease shards: leases of different keys are taken and spent under
/// different locks.
const SHARDS: usize = 16;

/// Policies whose grants a lease may hold: whether they are leased, and how
/// long units granted with an allowed decision stay spendable.
pub trait Leasable: Policy + Clone + Send + Sync + 'static {
    /// Whether checks of this policy are admitted from leases; those of a
    /// policy that is not are decided by the shared store, one check each.
    const LEASED: bool = true;

    /// How long after a grant the shared store allowed with `decision` was
    /// sent its units may still be admitted locally.
    ///
    /// A unit admitted locally must count at the shared store for as long as
    /// an admission at that moment would: a fixed window's units only until
    /// its window ends, a sliding window's only within the eighth of the
    /// window they were consumed in.
    fn lease_lifetime(&self, decision: &Decision) -> Duration;

    /// For a policy whose granted units stop being spendable one at a time
    /// (GCRA), the time between two of them, rounded up: at `left` before
    /// the lifetime ends, at most `left / spacing` units are spendable. `None`
    /// (the default) when every unit is spendable until the lifetime ends.
    fn unit_spacing(&self) -> Option<Duration> {
        None
    }
}

/// Retry and reset times round up to whole milliseconds; a lease ends one
/// millisecond early so that rounding never lets it outlive its window.
const ROUNDING: Duration = Duration::from_millis(1);

impl Leasable for FixedWindowPolicy {
    /// Until the window that granted the units ends.
    fn lease_lifetime(&self, decision: &Decision) -> Duration {
        decision
            .reset_after()
            .unwrap_or_default()
            .saturating_sub(ROUNDING)
    }
}

impl Leasable for SlidingWindowPolicy {
    /// Until the eighth of the window the units were consumed in ends: the
    /// grant's units are released when the ninth eighth after theirs begins,
    /// `reset_after` from the grant, so their eighth ends a window before.
    fn lease_lifetime(&self, decision: &Decision) -> Duration {
        decision
            .reset_after()
            .unwrap_or_default()
            .saturating_sub(self.window())
            .saturating_sub(ROUNDING)
    }
}

/// A GCRA grant is consumed ahead: its units take the last increments of the
/// arrival time it leaves. A unit is exact when it is admitted before its
/// increment begins (admitted then, GCRA would have queued it at the same
/// place), so the latest unit stays spendable until the arrival time less
/// one increment, the one before it one increment less, and so on: at `left`
/// before the arrival time, `left / increment` units. Spending takes the
/// earliest of them. No other admission's refund can move these increments
/// earlier, since every backend credits only a subject's latest admission.
impl Leasable for GcraPolicy {
    /// Until the arrival time the grant left.
    fn lease_lifetime(&self, decision: &Decision) -> Duration {
        decision
            .reset_after()
            .unwrap_or_default()
            .saturating_sub(ROUNDING)
    }

    /// The emission interval, rounded up to a nanosecond.
    fn unit_spacing(&self) -> Option<Duration> {
        let period = u64::try_from(self.period().as_nanos()).unwrap_or(u64::MAX);
        Some(Duration::from_nanos(period.div_ceil(self.quota().max(1))))
    }
}

/// Each check by its algorithm's rule, so a lease serves policies chosen
/// at run time exactly as it serves their algorithm's own type.
impl Leasable for AnyPolicy {
    fn lease_lifetime(&self, decision: &Decision) -> Duration {
        match self {
            Self::FixedWindow(policy) => policy.lease_lifetime(decision),
            Self::SlidingWindow(policy) => policy.lease_lifetime(decision),
            Self::Gcra(policy) => policy.lease_lifetime(decision),
        }
    }

    fn unit_spacing(&self) -> Option<Duration> {
        match self {
            Self::FixedWindow(policy) => policy.unit_spacing(),
            Self::SlidingWindow(policy) => policy.unit_spacing(),
            Self::Gcra(policy) => policy.unit_spacing(),
        }
    }
}

/// A [`LeaseConfig`] value out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseConfigError {
    /// `max_keys` was zero.
    #[error("a lease table needs room for at least one key")]
    NoKeys,
    /// The maximum grant was zero.
    #[error("the maximum grant must be at least 1")]
    NoGrant,
    /// The share of the remaining quota was not within 1 to 100 percent.
    #[error("the share of the remaining quota must be 1 to 100 percent, not {0}")]
    Share(u8),
}

/// How [`Leased`] sizes, holds and returns its leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    max_keys: usize,
    max_grant: u64,
    remaining_share: u8,
    grow_within: Duration,
    idle_after: Duration,
}

impl LeaseConfig {
    /// Leases for at most `max_keys` keys at once, across the whole limiter;
    /// a key that finds them all taken is admitted by the shared store
    /// directly, one check at a time, until a lease is given back
    /// ([`Leased::flush_idle`]). Defaults: grants of at most 64 units,
    /// never more than 10% of what the shared store reported remaining,
    /// growing when the next grant is needed within 100 ms, idle after 1 s.
    ///
    /// # Errors
    ///
    /// [`LeaseConfigError::NoKeys`] when `max_keys` is zero.
    pub fn new(max_keys: usize) -> Result<Self, LeaseConfigError> {
        if max_keys == 0 {
            return Err(LeaseConfigError::NoKeys);
        }
        Ok(Self {
            max_keys,
            max_grant: 64,
            remaining_share: 10,
            grow_within: Duration::from_millis(100),
            idle_after: Duration::from_secs(1),
        })
    }

    /// The most units one grant may take for one key (a check costing more
    /// takes up to its cost): the most this replica holds unspent per key,
    /// whatever the checks cost, and so, summed over replicas, the bound on
    /// units held away from any one of them.
    ///
    /// # Errors
    ///
    /// [`LeaseConfigError::NoGrant`] when `units` is zero.
    pub fn with_max_grant(mut self, units: u64) -> Result<Self, LeaseConfigError> {
        if units == 0 {
            return Err(LeaseConfigError::NoGrant);
        }
        self.max_grant = units;
        Ok(self)
    }

    /// The largest share, in percent, of the units the shared store last
    /// reported remaining that a grant may take; near exhaustion grants
    /// shrink to the check's cost.
    ///
    /// # Errors
    ///
    /// [`LeaseConfigError::Share`] unless `1 <= percent <= 100`.
    pub fn with_remaining_share(mut self, percent: u8) -> Result<Self, LeaseConfigError> {
        if !(1..=100).contains(&percent) {
            return Err(LeaseConfigError::Share(percent));
        }
        self.remaining_share = percent;
        Ok(self)
    }

    /// A key whose next grant is needed within `within` of the last doubles
    /// its grant size (up to the maximum); one needed later starts again at
    /// the check's cost, so a cold key costs a round trip per check and holds
    /// nothing.
    #[must_use]
    pub fn with_grow_within(mut self, within: Duration) -> Self {
        self.grow_within = within;
        self
    }

    /// A lease unused for `idle` is returned by [`Leased::flush_idle`].
    #[must_use]
    pub fn with_idle_after(mut self, idle: Duration) -> Self {
        self.idle_after = idle;
        self
    }

    /// The most leases held at once.
    #[must_use]
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The most units one grant takes.
    #[must_use]
    pub fn max_grant(&self) -> u64 {
        self.max_grant
    }
}

/// What a [`Leased`] limiter has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Grants taken from the shared store (each one round trip).
    pub grants: u64,
    /// Units those grants consumed at the shared store.
    pub units_granted: u64,
    /// Checks admitted from a lease, without a round trip.
    pub local_hits: u64,
    /// Checks and batches decided by the shared store directly (a check that
    /// found the key's grant in flight again after waiting for one, or
    /// without the `tokio` feature; batches not held by leases, keys beyond
    /// `max_keys`, shadow policies).
    pub shared_checks: u64,
    /// Unspent units given back to the shared store.
    pub units_returned: u64,
    /// Checks that waited for the grant in flight for their key instead of
    /// taking a round trip of their own (with the `tokio` feature).
    pub waits: u64,
    /// Leases held now.
    pub leases: u64,
    /// Units held now, granted and not yet spent, in leases still valid.
    pub units_held: u64,
}

/// Why a leased admission failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeasedError<E> {
    /// A refund's receipt was not this limiter's, or did not match its
    /// checks. Nothing was changed.
    #[error("invalid refund: {0}")]
    InvalidRefund(RefundError),
    /// The shared backend failed.
    #[error("the shared backend failed")]
    Shared(#[source] E),
}

impl<E: MayHaveConsumed> MayHaveConsumed for LeasedError<E> {
    /// The shared backend's classification; a refused refund changed nothing.
    fn may_have_consumed_quota(&self) -> bool {
        match self {
            Self::InvalidRefund(_) => false,
            Self::Shared(error) => error.may_have_consumed_quota(),
        }
    }
}

/// The units of one grant this replica holds for one key.
struct Lease<P> {
    /// The key's policy and subject, to settle the grant without a check.
    policy: Arc<P>,
    subject: SubjectKey,
    /// Drawn afresh when the lease is created and with every grant, so a
    /// local receipt credits only the grant it was admitted from, and a grant
    /// lands only in the lease (and on the piece) it was taken for.
    generation: u64,
    /// The grant's receipt and its units; `None` before the first grant.
    piece: Option<(Receipt, u64)>,
    unspent: u64,
    /// Local time (ns) from which the units may no longer be admitted.
    valid_until: u64,
    /// For GCRA, the emission interval (ns, rounded up): one unit stops
    /// being spendable per interval before `valid_until`; 0 otherwise.
    spacing: u64,
    /// When the grant was sent, and its decision's reset time from then.
    granted_at: u64,
    reset_after: Duration,
    /// What the shared store reported remaining after the grant.
    shared_remaining: u64,
    /// The bound of the next grant.
    size: u64,
    last_used: u64,
    /// A grant for this key is in flight: other checks wait for it to land
    /// (once, with the `tokio` feature) or go to the shared store for their
    /// cost alone, so a replica holds at most one grant's units per key.
    granting: bool,
    /// Wakes the checks waiting for the grant in flight when it lands.
    #[cfg(feature = "tokio")]
    landed: Option<Arc<tokio::sync::Notify>>,
    /// The grant in flight may bring units beyond its check's cost (it is
    /// not the shared store's plain admission of one check), so other checks
    /// of the key wait for it.
    #[cfg(feature = "tokio")]
    bringing_units: bool,
}

impl<P> Lease<P> {
    /// The grant in flight has landed (or was abandoned): the key takes
    /// grants again, and the checks waiting for it try its lease again.
    fn land(&mut self) {
        self.granting = false;
        #[cfg(feature = "tokio")]
        if let Some(landed) = &self.landed {
            landed.notify_waiters();
        }
    }

    fn valid_at(&self, now: u64) -> bool {
        self.piece.is_some() && now < self.valid_until
    }

    /// The units still spendable at `now`.
    fn spendable(&self, now: u64) -> u64 {
        if !self.valid_at(now) {
            return 0;
        }
        match (self.valid_until - now).checked_div(self.spacing) {
            Some(increments) => self.unspent.min(increments),
            None => self.unspent,
        }
    }

    /// Forgets the units no longer spendable at `now`.
    fn expire(&mut self, now: u64) {
        self.unspent = self.spendable(now);
    }

    /// Takes the grant and what is still spendable of it at `now`, to give
    /// back; `None` when nothing is.
    fn take_unspent(&mut self, now: u64) -> Option<Unspent<P>> {
        let units = self.spendable(now);
        if units == 0 {
            return None;
        }
        let (receipt, granted) = self.piece.take()?;
        self.unspent = 0;
        Some(Unspent {
            policy: Arc::clone(&self.policy),
            subject: self.subject,
            receipt,
            granted,
            units: units.min(granted),
        })
    }
}

/// Units of one grant a lease did not spend, on their way back to the
/// shared store.
struct Unspent<P> {
    policy: Arc<P>,
    subject: SubjectKey,
    receipt: Receipt,
    granted: u64,
    units: u64,
}

/// Settles `unspent`'s grant to what was spent of it; whether the shared
/// store credited anything.
async fn settle_unspent<S: Grant>(
    shared: &S,
    unspent: Unspent<S::Policy>,
) -> Result<bool, S::Error> {
    let Unspent {
        policy,
        subject,
        receipt,
        granted,
        units,
    } = unspent;
    let as_granted = weighted(&*policy, subject, granted);
    let refunded = shared
        .settle(&[as_granted], receipt, &[granted - units])
        .await?;
    Ok(refunded.credited() > 0)
}

/// Hands what the leases hold to a task that gives it back.
type ReturnOnDrop<P> = Box<dyn Fn(Vec<Unspent<P>>) + Send + Sync>;

/// With the `tokio` feature: a task on the current runtime (if any) settles
/// every grant; without it, nothing is given back on drop.
#[cfg(feature = "tokio")]
fn return_on_drop<S>(shared: &Arc<S>) -> Option<ReturnOnDrop<S::Policy>>
where
    S: Grant + 'static,
    S::Policy: Leasable,
{
    let shared = Arc::clone(shared);
    Some(Box::new(move |taken: Vec<Unspent<S::Policy>>| {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = Arc::clone(&shared);
        runtime.spawn(async move {
            for unspent in taken {
                // Best-effort: a failed settlement keeps its units consumed
                // until the window renews, as if the replica had died.
                let _ = settle_unspent(&*shared, unspent).await;
            }
        });
    }))
}

#[cfg(not(feature = "tokio"))]
fn return_on_drop<S>(_shared: &Arc<S>) -> Option<ReturnOnDrop<S::Policy>>
where
    S: Grant + 'static,
    S::Policy: Leasable,
{
    None
}

impl<S: Limiter> Drop for Leased<S> {
    fn drop(&mut self) {
        let Some(return_unspent) = &self.on_drop else {
            return;
        };
        let now = self.clock.now_nanos();
        let taken: Vec<_> = self
            .shards
            .iter_mut()
            .flat_map(|shard| {
                let leases = shard
                    .get_mut()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                leases
                    .values_mut()
                    .filter_map(|lease| lease.take_unspent(now))
                    .collect::<Vec<_>>()
            })
            .collect();
        if !taken.is_empty() {
            return_unspent(taken);
        }
    }
}

type Leases<P> = HashMap<CounterKey, Lease<P>, BuildHasherDefault<FoldKey>>;

/// Hashes a counter key by folding its first words: its bytes are an HMAC
/// and a fingerprint, uniform already, so a general-purpose hasher's mixing
/// (most of a local admission's time with SipHash) buys nothing.
#[derive(Default)]
struct FoldKey(u64);

impl Hasher for FoldKey {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        if let Some(word) = bytes.first_chunk::<8>() {
            self.0 = self.0.rotate_left(29) ^ u64::from_le_bytes(*word);
        }
    }

    fn write_usize(&mut self, _length: usize) {}
}
type Shard<P> = Mutex<Leases<P>>;

/// A shared backend with a lease per hot key: checks are admitted from units
/// the shared store granted this replica, without a round trip, and the
/// units a lease did not spend are given back.
///
/// # Exact
///
/// Every unit admitted locally was consumed at the shared store first, by a
/// [grant](Grant) on the shared store's clock, and is admitted only while the
/// shared state that granted it still counts it ([`Leasable`]): so across all
/// replicas no fixed or sliding window admits more than its limit, and GCRA
/// admissions conform to the rate and burst as if each had reached the
/// shared store when it was admitted. The lease's clock must run no slower
/// than the shared store's: a slow one would keep units past the end of what
/// granted them (system clocks tick at the same rate; an offset between them
/// does not matter, since a lease only measures elapsed time). A batch is
/// admitted locally only when every one of its checks fits its lease, under
/// all their leases' locks; otherwise the shared backend decides it as one
/// atomic batch.
///
/// # What it costs: bounded under-admission
///
/// A subject can be denied while units sit unspent in another replica's
/// lease. Per key a replica holds at most one grant's units, at most
/// [`max_grant`](LeaseConfig::with_max_grant) of them, and takes no more
/// than a share of what the shared store last reported remaining, so at
/// most `replicas × max_grant` units of a key are held away from any one
/// replica. This holds for weighted checks too: a check that costs more
/// than its lease holds spends what the lease holds and takes a grant for
/// the rest of its cost only, so when the new grant replaces the old one,
/// none of the old one's units are left behind. A replica denies a check
/// only when what its own lease holds and what the shared store has left
/// fall short of the check's cost (or, while a grant for the key is in
/// flight, when the shared store's alone do); one replica checking one key
/// at a time admits exactly what the shared store would.
///
/// A cold key's grant is exactly its cost (a round trip per check, as
/// without leases, holding nothing); a key whose next grant is needed
/// quickly doubles its grant; near exhaustion grants shrink to the cost, so
/// the last units of a window are admitted exactly as without leases. While
/// a grant for a key is in flight, what the lease held is set aside for the
/// check that sent it; if the grant may bring more than that check needs,
/// the key's other checks wait for it (with the `tokio` feature, once each)
/// and are admitted from what it brings, rather than each taking a round
/// trip of its own; one that still finds no units goes to the shared store.
///
/// At most [`max_keys`](LeaseConfig::new) keys hold a lease at once, across
/// the whole limiter. A key that finds no room is decided by the shared
/// store, a round trip per check, until [`flush_idle`](Self::flush_idle)
/// or [`flush`](Self::flush) gives a lease back.
///
/// Unspent units go back to the shared store with a [settlement](Settle) on
/// [`flush`](Self::flush), on [`flush_idle`](Self::flush_idle) for leases
/// unused for [`idle_after`](LeaseConfig::with_idle_after) (call it
/// periodically), and best-effort when the limiter is dropped inside a Tokio
/// runtime (the `tokio` feature, on by default). When a window ends, or a
/// GCRA unit's increment begins, they expire with it (a settlement would
/// credit nothing). A replica that dies without flushing loses its unspent
/// units until the window renews (for GCRA, until their increments pass): at
/// most one grant per key. The shared stores credit a GCRA settlement only
/// for a subject's latest admission, so a GCRA lease's units go back only
/// while no other admission of its key reached the shared store after its
/// grant; otherwise they stay consumed until their increments pass, as a
/// dead replica's would.
///
/// # Refunds, settlements and resets
///
/// A refund or settlement of a local admission gives its units back to the
/// lease it was admitted from, while that lease still holds, and nothing
/// afterwards (for GCRA, only while the lease has admitted nothing since, as
/// the shared stores credit only a subject's latest admission); one of a
/// check the shared store decided goes to the shared store. A check that
/// spent the last units of one grant and the first of the next gets back
/// only its units of the later one: the others went with the grant they
/// came from, and stay consumed until they expire. A reset drops
/// this replica's lease and resets the shared counter; other replicas'
/// leases survive it, so after a reset up to `(replicas - 1) × max_grant`
/// units may still be admitted that the reset counter does not count.
///
/// Shadow-mode policies are passed to the shared store unleased. A batch is
/// admitted locally only from leases its keys' single checks took.
///
/// ```
/// use std::time::Duration;
///
/// use runlimit_core::{Check, FixedWindowPolicy, Limiter, PolicyId, ScopeId, SubjectKey};
/// use runlimit_memory::{LeaseConfig, Leased, MemoryStore, MemoryStoreConfig};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // In production the shared store is a PostgresLimiter or RedisLimiter.
/// let shared = MemoryStore::new(MemoryStoreConfig::new(1_000)?);
/// let limiter = Leased::new(shared, LeaseConfig::new(10_000)?.with_max_grant(50)?);
/// let policy = FixedWindowPolicy::new(
///     PolicyId::new("api")?,
///     ScopeId::new("tenant")?,
///     10_000,
///     Duration::from_secs(60),
/// )?;
/// let check = Check::new(&policy, SubjectKey::from_digest([7; 32]));
/// for _ in 0..100 {
///     assert!(limiter.check(&check).await?.is_allowed());
/// }
/// assert!(limiter.stats().grants < 100);
/// limiter.flush().await?; // the unspent units go back
/// # Ok(())
/// # }
/// ```
pub struct Leased<S: Limiter> {
    shared: Arc<S>,
    /// Gives back what the leases hold when the limiter is dropped.
    on_drop: Option<ReturnOnDrop<S::Policy>>,
    config: LeaseConfig,
    shards: Box<[Shard<S::Policy>]>,
    /// Keys with a lease, across every shard: a key takes a slot before its
    /// lease is inserted and gives it back when the lease is removed, so at
    /// most `max_keys` are held at once.
    leased_keys: AtomicUsize,
    clock: StoreClock,
    observer: Option<Arc<dyn Observer>>,
    generations: AtomicU64,
    grants: AtomicU64,
    units_granted: AtomicU64,
    local_hits: AtomicU64,
    shared_checks: AtomicU64,
    units_returned: AtomicU64,
    waits: AtomicU64,
}

impl<S: Limiter + fmt::Debug> fmt::Debug for Leased<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leased")
            .field("shared", &self.shared)
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// A grant in flight for a key's lease: if its future is dropped before it
/// lands, the lease gets back what the check set aside and takes grants
/// again.
struct InFlight<'a, P> {
    shard: &'a Shard<P>,
    key: CounterKey,
    sending: Sending,
    landed: bool,
}

impl<P> Drop for InFlight<'_, P> {
    fn drop(&mut self) {
        if !self.landed {
            abandon(self.shard, &self.key, &self.sending);
        }
    }
}

/// Gives the lease `sending` was planned on back the units its check set
/// aside, and lets the key take grants again: the grant was not taken, or
/// its future was dropped. A lease with another generation (a reset dropped
/// the planned one) is left alone.
fn abandon<P>(shard: &Shard<P>, key: &CounterKey, sending: &Sending) {
    if let Some(lease) = lock(shard).get_mut(key)
        && lease.generation == sending.generation
    {
        lease.unspent += sending.reserved;
        lease.land();
    }
}

impl<S: Limiter> Leased<S> {
    /// The shared backend.
    #[must_use]
    pub fn shared(&self) -> &S {
        &self.shared
    }

    /// What this limiter has done, and the leases it holds now.
    #[must_use]
    pub fn stats(&self) -> LeaseStats {
        LeaseStats {
            grants: self.grants.load(Ordering::Relaxed),
            units_granted: self.units_granted.load(Ordering::Relaxed),
            local_hits: self.local_hits.load(Ordering::Relaxed),
            shared_checks: self.shared_checks.load(Ordering::Relaxed),
            units_returned: self.units_returned.load(Ordering::Relaxed),
            waits: self.waits.load(Ordering::Relaxed),
            leases: self.leased_keys.load(Ordering::Relaxed) as u64,
            units_held: {
                let now = self.clock.now_nanos();
                self.shards
                    .iter()
                    .flat_map(|shard| {
                        lock(shard)
                            .values()
                            .map(|lease| lease.spendable(now))
                            .collect::<Vec<_>>()
                    })
                    .sum()
            },
        }
    }
}

/// How a check reaches the shared store when no lease serves it.
enum Plan {
    /// Take a grant for the check, holding the key's lease until it lands.
    Grant(Sending),
    /// Admit the check at the shared store for its cost alone.
    Direct,
    /// Wait for the key's grant in flight to land, then try again.
    #[cfg(feature = "tokio")]
    Wait(tokio::sync::futures::OwnedNotified),
}

/// A grant a check is about to take for its key's lease.
#[derive(Clone, Copy)]
struct Sending {
    /// The most units the grant may take.
    size: u64,
    /// When it is sent, on the lease's clock.
    at: u64,
    /// The lease's generation when it was planned.
    generation: u64,
    /// What the lease held, fewer units than the check's cost, set aside to
    /// be spent toward it: the grant needs only the rest of the cost.
    reserved: u64,
}

/// What became of a check when its grant landed.
enum Landed {
    /// Allowed from the lease the grant refilled (or from what the lease
    /// held), or denied.
    Decided(Decision, Stamp),
    /// What the lease had set aside stopped being spendable while the grant
    /// was in flight (the lease ended, a GCRA increment began), and the
    /// grant alone does not cover the check: the lease holds the grant now,
    /// and the check tries again.
    Retry,
}

/// A landed grant: what became of its check, and what is left of the
/// grant it replaced in the lease, to give back.
struct Landing<P> {
    landed: Landed,
    replaced: Option<Unspent<P>>,
}

impl<P> Landing<P> {
    /// The shared store's `decision`, with no local receipt: a denial, or
    /// an admission whose lease a reset dropped.
    fn unleased(decision: Decision) -> Self {
        Self {
            landed: Landed::Decided(decision, Stamp::new([u64::MAX, 0, 0])),
            replaced: None,
        }
    }
}

impl<S> Leased<S>
where
    S: Grant + 'static,
    S::Policy: Leasable,
{
    /// Leases on `shared`, sized and held as `config` says.
    ///
    /// With the `tokio` feature (on by default), dropping the limiter inside
    /// a Tokio runtime gives the unspent units back on a task it spawns,
    /// best-effort; [`flush`](Self::flush) before dropping to know they were.
    #[must_use]
    pub fn new(shared: S, config: LeaseConfig) -> Self {
        let shared = Arc::new(shared);
        Self {
            on_drop: return_on_drop(&shared),
            shared,
            config,
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
            leased_keys: AtomicUsize::new(0),
            clock: StoreClock::default(),
            observer: None,
            generations: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            units_granted: AtomicU64::new(0),
            local_hits: AtomicU64::new(0),
            shared_checks: AtomicU64::new(0),
            units_returned: AtomicU64::new(0),
            waits: AtomicU64::new(0),
        }
    }
}

impl<S> Leased<S>
where
    S: Grant,
    S::Policy: Leasable,
{
    /// Measures lease lifetimes and idleness on `clock` instead of the
    /// system's, for tests that must never sleep. It must run no slower than
    /// the shared store's clock: a lease measures how long its units stay
    /// spendable on it.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = StoreClock::injected(clock);
        self
    }

    /// Reports admissions from a lease to `observer`, marked
    /// [`leased`](AdmissionObservation::leased); the shared backend reports
    /// its own operations, grants included, to its own observer.
    #[must_use]
    pub fn with_observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// Takes one of the `max_keys` slots for a new lease; `false` when all
    /// are taken. Only a key without a lease pays for it.
    fn take_key_slot(&self) -> bool {
        self.leased_keys
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |taken| {
                (taken < self.config.max_keys).then_some(taken + 1)
            })
            .is_ok()
    }

    fn shard(&self, key: &CounterKey) -> &Shard<S::Policy> {
        let bytes = key.subject().as_bytes();
        let index = usize::from(bytes[0] ^ key.fingerprint().as_bytes()[0]) % SHARDS;
        &self.shards[index]
    }

    /// Gives every lease's unspent units back to the shared store and drops
    /// the leases.
    ///
    /// # Errors
    ///
    /// The first settlement that failed (the others are still attempted); its
    /// units stay consumed.
    pub async fn flush(&self) -> Result<(), LeasedError<S::Error>> {
        self.flush_where(|_| true).await
    }

    /// Gives back the unspent units of leases unused for the configured
    /// [`idle_after`](LeaseConfig::with_idle_after), and drops them (and
    /// leases that expired). Call it periodically.
    ///
    /// # Errors
    ///
    /// As [`flush`](Self::flush).
    pub async fn flush_idle(&self) -> Result<(), LeasedError<S::Error>> {
        let now = self.clock.now_nanos();
        let idle = nanos(self.config.idle_after);
        self.flush_where(|lease| {
            now.saturating_sub(lease.last_used) >= idle || !lease.valid_at(now)
        })
        .await
    }

    async fn flush_where(
        &self,
        returns: impl Fn(&Lease<S::Policy>) -> bool,
    ) -> Result<(), LeasedError<S::Error>> {
        let now = self.clock.now_nanos();
        let mut taken = Vec::new();
        for shard in &self.shards {
            let mut leases = lock(shard);
            let before = leases.len();
            leases.retain(|_, lease| {
                if lease.granting || !returns(lease) {
                    return true;
                }
                taken.extend(lease.take_unspent(now));
                false
            });
            self.leased_keys
                .fetch_sub(before - leases.len(), Ordering::Relaxed);
        }
        let mut first_error = None;
        for unspent in taken {
            if let Err(error) = self.give_back(unspent).await {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Settles a grant to what was spent of it.
    async fn give_back(&self, unspent: Unspent<S::Policy>) -> Result<(), LeasedError<S::Error>> {
        let units = unspent.units;
        if settle_unspent(&*self.shared, unspent)
            .await
            .map_err(LeasedError::Shared)?
        {
            self.units_returned.fetch_add(units, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Admits `check` from its lease when it holds enough, or says how the
    /// shared store must decide it.
    /// A check that finds the key's grant in flight waits for it when
    /// `may_wait` (and the `tokio` feature is on), else goes to the shared
    /// store.
    fn try_local(
        &self,
        check: &Check<'_, S::Policy>,
        may_wait: bool,
    ) -> Result<(Decision, Stamp), Plan> {
        #[cfg(not(feature = "tokio"))]
        let _ = may_wait;
        let policy = check.policy();
        if !S::Policy::LEASED || policy.quota_mode() == QuotaMode::Shadow {
            return Err(Plan::Direct);
        }
        let key = check.counter_key();
        let now = self.clock.now_nanos();
        let mut leases = lock(self.shard(&key));
        let lease = match leases.get_mut(&key) {
            Some(lease) => lease,
            None if !self.take_key_slot() => return Err(Plan::Direct),
            None => leases.entry(key).or_insert_with(|| Lease {
                policy: Arc::new(policy.clone()),
                subject: *check.subject(),
                generation: self.generations.fetch_add(1, Ordering::Relaxed) + 1,
                piece: None,
                unspent: 0,
                valid_until: 0,
                spacing: 0,
                granted_at: 0,
                reset_after: Duration::ZERO,
                shared_remaining: 0,
                size: check.cost(),
                last_used: now,
                granting: false,
                #[cfg(feature = "tokio")]
                landed: None,
                #[cfg(feature = "tokio")]
                bringing_units: false,
            }),
        };
        let cost = check.cost();
        let valid = lease.valid_at(now);
        lease.expire(now);
        if valid && lease.unspent >= cost {
            lease.unspent -= cost;
            lease.last_used = now;
            return Ok((local_decision(policy, lease, now), local_stamp(lease, 0)));
        }
        if lease.granting {
            #[cfg(feature = "tokio")]
            if may_wait && lease.bringing_units {
                // Registered before the lock is released, so the landing's
                // wake-up cannot be missed.
                let landed = Arc::clone(lease.landed.get_or_insert_with(Default::default));
                return Err(Plan::Wait(landed.notified_owned()));
            }
            return Err(Plan::Direct);
        }
        if !valid {
            // Expired units count no more at the shared store: nothing to
            // give back, and nothing to spend.
            lease.piece = None;
            lease.unspent = 0;
        }
        // What the lease still holds, fewer units than the cost, is set
        // aside toward it, and the grant asks only for the rest: the new
        // grant replaces the old one with nothing of it left unspent, and no
        // other check spends the set-aside units while the grant is in
        // flight. They are spent when it lands, if still spendable then.
        let reserved = std::mem::take(&mut lease.unspent);
        let quick = now.saturating_sub(lease.granted_at) < nanos(self.config.grow_within);
        let grown = if lease.granted_at > 0 && quick {
            lease.size.saturating_mul(2)
        } else {
            cost
        };
        let share = lease
            .shared_remaining
            .saturating_mul(u64::from(self.config.remaining_share))
            / 100;
        let size = grown
            .min(self.config.max_grant)
            .min(if lease.granted_at > 0 {
                share
            } else {
                u64::MAX
            })
            .max(cost);
        lease.granting = true;
        #[cfg(feature = "tokio")]
        {
            lease.bringing_units = size > cost - reserved;
        }
        Err(Plan::Grant(Sending {
            size,
            at: now,
            generation: lease.generation,
            reserved,
        }))
    }

    /// Takes a grant for what `check` costs beyond the units its lease set
    /// aside, and admits it from both.
    async fn admit_granted(
        &self,
        check: &Check<'_, S::Policy>,
        sending: Sending,
    ) -> Result<Landed, LeasedError<S::Error>> {
        let key = check.counter_key();
        let rest = weighted(
            check.policy(),
            *check.subject(),
            check.cost() - sending.reserved,
        );
        let size = sending.size;
        let mut in_flight = InFlight {
            shard: self.shard(&key),
            key,
            sending,
            landed: false,
        };
        let granted = self.shared.grant(&rest, size).await;
        self.grants.fetch_add(1, Ordering::Relaxed);
        in_flight.landed = true;
        let Landing { landed, replaced } = self.land(check, &in_flight, granted)?;
        if let Some(replaced) = replaced {
            // Best-effort, as on drop: a failed settlement keeps its units
            // consumed until they expire, and the check's answer stands.
            let _ = self.give_back(replaced).await;
        }
        Ok(landed)
    }

    /// Spends what the lease set aside and the grant toward the check, and
    /// puts the grant in the lease; returns what is left of the grant it
    /// replaced, to give back.
    fn land(
        &self,
        check: &Check<'_, S::Policy>,
        in_flight: &InFlight<'_, S::Policy>,
        granted: Result<runlimit_core::Granted, S::Error>,
    ) -> Result<Landing<S::Policy>, LeasedError<S::Error>> {
        let (policy, cost) = (check.policy(), check.cost());
        let Sending {
            size,
            at: sent,
            generation,
            reserved,
        } = in_flight.sending;
        let now = self.clock.now_nanos();
        let mut leases = lock(in_flight.shard);
        let Some(lease) = leases
            .get_mut(&in_flight.key)
            .filter(|lease| lease.generation == generation)
        else {
            // Dropped while the grant was in flight (a reset): the set-aside
            // units went with it, and the grant's units beyond this check
            // stay consumed, as the reset allows.
            let granted = granted.map_err(LeasedError::Shared)?;
            return Ok(Landing::unleased(*granted.decision()));
        };
        lease.land();
        // The set-aside units, with any a refund credited meanwhile, as far
        // as they are still spendable now.
        lease.unspent += reserved;
        lease.expire(now);
        let from_lease = lease.unspent.min(cost);
        let (decision, units, receipt) = granted.map_err(LeasedError::Shared)?.into_parts();
        let Some(receipt) = receipt.filter(|_| units > 0) else {
            // Denied: the lease keeps what it holds, which covers the check
            // only if refunds credited it while the grant was in flight.
            if from_lease < cost {
                return Ok(Landing::unleased(decision));
            }
            lease.unspent -= cost;
            lease.last_used = now;
            return Ok(Landing {
                landed: Landed::Decided(local_decision(policy, lease, now), local_stamp(lease, 0)),
                replaced: None,
            });
        };
        self.units_granted.fetch_add(units, Ordering::Relaxed);
        let need = cost - from_lease;
        let covered = units >= need;
        if covered {
            lease.unspent -= from_lease;
        }
        // The new grant replaces the old one: what is left of the old one
        // (nothing, unless refunds credited it while the grant was in
        // flight, or the check could not be covered) goes back.
        let replaced = lease.take_unspent(now);
        lease.generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        lease.piece = Some((receipt, units));
        lease.unspent = if covered { units - need } else { units };
        lease.valid_until = sent.saturating_add(nanos(policy.lease_lifetime(&decision)));
        lease.spacing = policy
            .unit_spacing()
            .map_or(0, |spacing| nanos(spacing).max(1));
        lease.granted_at = sent.max(1);
        lease.reset_after = decision.reset_after().unwrap_or_default();
        lease.shared_remaining = decision.remaining().unwrap_or(0);
        lease.size = size;
        lease.last_used = sent;
        let landed = if covered {
            Landed::Decided(
                local_decision(policy, lease, now),
                local_stamp(lease, from_lease),
            )
        } else {
            Landed::Retry
        };
        Ok(Landing { landed, replaced })
    }

    /// A cold key's check: admitted by the shared store for its cost, and
    /// recorded in the key's lease so that a key checked again soon grows.
    /// A plain check (`with_receipt` false) is the shared store's own check,
    /// which some backends answer more cheaply than an admission.
    async fn admit_exactly(
        &self,
        check: &Check<'_, S::Policy>,
        sending: Sending,
        with_receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), LeasedError<S::Error>> {
        let key = check.counter_key();
        let (sent, generation) = (sending.at, sending.generation);
        let mut in_flight = InFlight {
            shard: self.shard(&key),
            key,
            sending,
            landed: false,
        };
        let admitted = if with_receipt {
            self.shared
                .admit(check)
                .await
                .map(runlimit_core::Admission::into_parts)
        } else {
            self.shared
                .check(check)
                .await
                .map(|decision| (decision, None))
        };
        self.grants.fetch_add(1, Ordering::Relaxed);
        in_flight.landed = true;
        {
            let mut leases = lock(in_flight.shard);
            if let Some(lease) = leases
                .get_mut(&key)
                .filter(|lease| lease.generation == generation)
            {
                lease.land();
                if let Ok((decision, _)) = &admitted
                    && decision.is_allowed()
                {
                    lease.granted_at = sent.max(1);
                    lease.shared_remaining = decision.remaining().unwrap_or(0);
                    lease.size = check.cost();
                    lease.last_used = sent;
                    self.units_granted
                        .fetch_add(check.cost(), Ordering::Relaxed);
                }
            }
        }
        let (decision, receipt) = admitted.map_err(LeasedError::Shared)?;
        Ok((
            decision,
            receipt.map(|receipt| Receipt::tiered(ISSUER, None, Some(receipt))),
        ))
    }

    /// One check: from its lease, from a new grant (or, once, the grant in
    /// flight for its key), or at the shared store.
    // Without the `tokio` feature no check waits, and the loop runs once.
    #[cfg_attr(not(feature = "tokio"), allow(clippy::never_loop))]
    async fn admit_one(
        &self,
        check: &Check<'_, S::Policy>,
        with_receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), LeasedError<S::Error>> {
        #[cfg(feature = "tokio")]
        let mut may_wait = true;
        #[cfg(not(feature = "tokio"))]
        let may_wait = false;
        loop {
            return match self.try_local(check, may_wait) {
                Ok((decision, stamp)) => {
                    self.local_hits.fetch_add(1, Ordering::Relaxed);
                    self.report_local(Operation::Check, std::slice::from_ref(check));
                    Ok((
                        decision,
                        with_receipt.then(|| local_receipt(&[(check, stamp)])),
                    ))
                }
                Err(Plan::Grant(sending))
                    if sending.size == check.cost() && sending.reserved == 0 =>
                {
                    // A grant of exactly the check's cost, with nothing set
                    // aside, leaves nothing to hold: the shared store's own
                    // admission is the cheaper statement.
                    self.admit_exactly(check, sending, with_receipt).await
                }
                Err(Plan::Grant(sending)) => match self.admit_granted(check, sending).await? {
                    Landed::Decided(decision, stamp) => {
                        let receipt =
                            (with_receipt && decision.is_allowed() && stamp.words()[0] != u64::MAX)
                                .then(|| local_receipt(&[(check, stamp)]));
                        Ok((decision, receipt))
                    }
                    Landed::Retry => continue,
                },
                #[cfg(feature = "tokio")]
                Err(Plan::Wait(landed)) => {
                    // The grant in flight usually brings units for this check
                    // too; if not, the check takes its own way after one wait,
                    // so a burst never queues behind grant after grant.
                    self.waits.fetch_add(1, Ordering::Relaxed);
                    landed.await;
                    may_wait = false;
                    continue;
                }
                Err(Plan::Direct) => {
                    self.shared_checks.fetch_add(1, Ordering::Relaxed);
                    let (decision, receipt) = self
                        .shared
                        .admit(check)
                        .await
                        .map_err(LeasedError::Shared)?
                        .into_parts();
                    Ok((
                        decision,
                        receipt.map(|receipt| Receipt::tiered(ISSUER, None, Some(receipt))),
                    ))
                }
            };
        }
    }

    /// A batch: from its checks' leases when every one fits, else at the
    /// shared store as one atomic batch.
    async fn admit_batch(
        &self,
        checks: &[Check<'_, S::Policy>],
    ) -> Result<(BatchDecision, Option<Receipt>), LeasedError<S::Error>> {
        if let Some((decisions, stamps)) = self.try_local_batch(checks) {
            self.local_hits.fetch_add(1, Ordering::Relaxed);
            self.report_local(Operation::Batch, checks);
            let pairs: Vec<_> = checks.iter().zip(stamps).collect();
            return Ok((
                BatchDecision::from_decisions(decisions),
                Some(local_receipt(&pairs)),
            ));
        }
        self.shared_checks.fetch_add(1, Ordering::Relaxed);
        let (batch, receipt) = self
            .shared
            .admit_all(checks)
            .await
            .map_err(LeasedError::Shared)?
            .into_parts();
        Ok((
            batch,
            receipt.map(|receipt| Receipt::tiered(ISSUER, None, Some(receipt))),
        ))
    }

    /// Spends every check of `checks` from its lease, all or none, under all
    /// their shards' locks (taken in shard order).
    fn try_local_batch(
        &self,
        checks: &[Check<'_, S::Policy>],
    ) -> Option<(Vec<Decision>, Vec<Stamp>)> {
        if checks.is_empty()
            || runlimit_core::validate_batch(checks, runlimit_core::DEFAULT_MAX_BATCH_SIZE).is_err()
            || !S::Policy::LEASED
            || checks
                .iter()
                .any(|check| check.policy().quota_mode() == QuotaMode::Shadow)
        {
            return None;
        }
        let keys: Vec<CounterKey> = checks.iter().map(Check::counter_key).collect();
        let mut indices: Vec<usize> = keys
            .iter()
            .map(|key| {
                let shard = self.shard(key);
                self.shards
                    .iter()
                    .position(|candidate| std::ptr::eq(candidate, shard))
                    .unwrap_or(0)
            })
            .collect();
        let of_check = indices.clone();
        indices.sort_unstable();
        indices.dedup();
        let mut guards: Vec<(usize, MutexGuard<'_, Leases<S::Policy>>)> = indices
            .iter()
            .map(|&index| (index, lock(&self.shards[index])))
            .collect();
        let now = self.clock.now_nanos();
        let fits = checks
            .iter()
            .zip(&keys)
            .zip(&of_check)
            .all(|((check, key), shard)| {
                guards
                    .iter()
                    .find(|(index, _)| index == shard)
                    .and_then(|(_, leases)| leases.get(key))
                    .is_some_and(|lease| lease.spendable(now) >= check.cost())
            });
        if !fits {
            return None;
        }
        let mut decisions = Vec::with_capacity(checks.len());
        let mut stamps = Vec::with_capacity(checks.len());
        for ((check, key), shard) in checks.iter().zip(&keys).zip(&of_check) {
            let leases = &mut guards
                .iter_mut()
                .find(|(index, _)| index == shard)
                .map(|(_, leases)| leases)?;
            let lease = leases.get_mut(key)?;
            lease.expire(now);
            lease.unspent -= check.cost();
            lease.last_used = now;
            decisions.push(local_decision(check.policy(), lease, now));
            stamps.push(local_stamp(lease, 0));
        }
        Some((decisions, stamps))
    }

    fn report_local(&self, operation: Operation, checks: &[Check<'_, S::Policy>]) {
        let Some(observer) = &self.observer else {
            return;
        };
        let labels: Vec<PolicyLabel<'_>> = checks.iter().map(PolicyLabel::of).collect();
        let observation = AdmissionObservation::new(
            operation,
            &labels,
            None,
            AdmissionOutcome::Allowed,
            Consumption::Consumed,
            Duration::ZERO,
        )
        .from_lease();
        notify(&**observer, |observer| observer.on_admission(&observation));
    }

    /// Gives `units` of each local admission back to the lease it came from,
    /// while that lease still holds.
    fn credit_local(
        &self,
        checks: &[Check<'_, S::Policy>],
        receipt: &Receipt,
        units: &[u64],
    ) -> usize {
        let now = self.clock.now_nanos();
        let mut credited = 0;
        for ((check, admitted), &units) in checks.iter().zip(receipt.admitted()).zip(units) {
            let [generation, unspent_after, from_before] = admitted.stamp().words();
            // Units the check spent from the grant before this one went with
            // it: only its units from this grant can come back here.
            let units = units.min(check.cost().saturating_sub(from_before));
            if units == 0 {
                continue;
            }
            let key = check.counter_key();
            let mut leases = lock(self.shard(&key));
            // A GCRA lease's units are its grant's last increments, spent
            // earliest first: the admission's own go back only while nothing
            // was spent after it (they sit just before what the lease still
            // holds); window units are interchangeable until the lease ends.
            if let Some(lease) = leases.get_mut(&key)
                && lease.valid_at(now)
                && lease.generation == generation
                && (lease.spacing == 0 || lease.unspent == unspent_after)
                && let Some((_, granted)) = &lease.piece
            {
                lease.unspent = (lease.unspent + units).min(*granted);
                credited += 1;
            }
        }
        credited
    }

    /// A refund (`used` of `None`) or settlement of `receipt`.
    async fn give_back_receipt(
        &self,
        checks: &[Check<'_, S::Policy>],
        receipt: Receipt,
        used: Option<&[u64]>,
    ) -> Result<Refunded, LeasedError<S::Error>> {
        let (local, shared) = receipt
            .into_tiers(ISSUER)
            .map_err(|_| LeasedError::InvalidRefund(RefundError::ForeignReceipt))?;
        if let Some(shared) = shared {
            return match used {
                None => self.shared.refund(checks, shared).await,
                Some(used) => self.shared.settle(checks, shared, used).await,
            }
            .map_err(LeasedError::Shared);
        }
        let Some(local) = local else {
            return Ok(Refunded::new(0, checks.len()));
        };
        let units: Vec<u64> = match used {
            None => {
                local
                    .matches(ISSUER, checks)
                    .map_err(LeasedError::InvalidRefund)?;
                checks.iter().map(Check::cost).collect()
            }
            Some(used) => local
                .unused(ISSUER, checks, used)
                .map_err(LeasedError::InvalidRefund)?
                .into_vec(),
        };
        Ok(Refunded::new(
            self.credit_local(checks, &local, &units),
            checks.len(),
        ))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic under a lease lock leaves the leases as consistent as between
    // any two operations (each is updated in place, field by field, with no
    // call out); keep serving them.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

fn weighted<P: Policy>(policy: &P, subject: SubjectKey, units: u64) -> Check<'_, P> {
    Check::weighted(policy, subject, units)
        .unwrap_or_else(|_| unreachable!("a lease's units stay within the policy's capacity"))
}

/// What a check admitted from `lease` at `now` reports: this replica's view,
/// the shared store's remaining as of the grant plus the lease's unspent
/// units.
fn local_decision<P: Policy>(policy: &P, lease: &Lease<P>, now: u64) -> Decision {
    let capacity = policy.capacity();
    let elapsed = Duration::from_nanos(now.saturating_sub(lease.granted_at));
    Decision::allowed(
        capacity,
        lease
            .shared_remaining
            .saturating_add(lease.unspent)
            .min(capacity),
        lease.reset_after.saturating_sub(elapsed),
    )
    .unwrap_or_else(|_| unreachable!("remaining is capped at the capacity"))
}

/// A local admission's stamp: the grant it was admitted from, what the
/// lease held unspent right after it, and how many of its units it spent
/// from the grant before (when that grant's last units went toward it).
fn local_stamp<P>(lease: &Lease<P>, from_before: u64) -> Stamp {
    Stamp::new([lease.generation, lease.unspent, from_before])
}

fn local_receipt<P: Policy>(admitted: &[(&Check<'_, P>, Stamp)]) -> Receipt {
    let local = Receipt::new(
        ISSUER,
        admitted
            .iter()
            .map(|(check, stamp)| Admitted::new(*check, *stamp)),
    );
    Receipt::tiered(ISSUER, Some(local), None)
}

impl<S> Limiter for Leased<S>
where
    S: Grant,
    S::Policy: Leasable,
{
    type Policy = S::Policy;
    type Error = LeasedError<S::Error>;

    async fn check(&self, check: &Check<'_, Self::Policy>) -> Result<Decision, Self::Error> {
        self.admit_one(check, false)
            .await
            .map(|(decision, _)| decision)
    }

    /// Decides at once when the check's lease holds it.
    fn check_now(&self, check: &Check<'_, Self::Policy>) -> Option<Result<Decision, Self::Error>> {
        match self.try_local(check, false) {
            Ok((decision, _)) => {
                self.local_hits.fetch_add(1, Ordering::Relaxed);
                self.report_local(Operation::Check, std::slice::from_ref(check));
                Some(Ok(decision))
            }
            Err(Plan::Grant(sending)) => {
                // Not served here: release the key, and what its lease set
                // aside, for the awaited check.
                let key = check.counter_key();
                abandon(self.shard(&key), &key, &sending);
                None
            }
            Err(_) => None,
        }
    }

    async fn check_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> Result<BatchDecision, Self::Error> {
        self.admit_batch(checks).await.map(|(batch, _)| batch)
    }
}

impl<S> Lifecycle for Leased<S>
where
    S: Grant,
    S::Policy: Leasable,
{
    async fn admit(&self, check: &Check<'_, Self::Policy>) -> Result<Admission, Self::Error> {
        let (decision, receipt) = self.admit_one(check, true).await?;
        Ok(Admission::new(decision, receipt))
    }

    async fn admit_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> Result<Admission<BatchDecision>, Self::Error> {
        let (batch, receipt) = self.admit_batch(checks).await?;
        Ok(Admission::new(batch, receipt))
    }

    /// A local admission's units go back to its lease; a shared one's to the
    /// shared store.
    async fn refund(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
    ) -> Result<Refunded, Self::Error> {
        self.give_back_receipt(checks, receipt, None).await
    }

    /// The shared store's answer, with what this replica's lease holds for
    /// the key.
    async fn peek(&self, check: &Check<'_, Self::Policy>) -> Result<Decision, Self::Error> {
        let shared = self.shared.peek(check).await.map_err(LeasedError::Shared)?;
        let key = check.counter_key();
        let now = self.clock.now_nanos();
        let leases = lock(self.shard(&key));
        Ok(match leases.get(&key) {
            Some(lease) if lease.spendable(now) >= check.cost() => {
                let capacity = check.policy().capacity();
                Decision::allowed(
                    capacity,
                    shared
                        .remaining()
                        .unwrap_or(0)
                        .saturating_add(lease.spendable(now))
                        .min(capacity),
                    shared.reset_after().unwrap_or_default(),
                )
                .unwrap_or(shared)
            }
            _ => shared,
        })
    }

    /// Drops this replica's lease for the key and resets the shared counter.
    async fn reset(
        &self,
        policy: &Self::Policy,
        subject: &SubjectKey,
    ) -> Result<bool, Self::Error> {
        let key = Check::new(policy, *subject).counter_key();
        if let Some(mut lease) = lock(self.shard(&key)).remove(&key) {
            self.leased_keys.fetch_sub(1, Ordering::Relaxed);
            // Checks waiting for a grant in flight try again, without it.
            lease.land();
        }
        self.shared
            .reset(policy, subject)
            .await
            .map_err(LeasedError::Shared)
    }
}

impl<S> Settle for Leased<S>
where
    S: Grant,
    S::Policy: Leasable,
{
    async fn settle(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
        used: &[u64],
    ) -> Result<Refunded, Self::Error> {
        self.give_back_receipt(checks, receipt, Some(used)).await
    }
}

impl<S> Backend for Leased<S>
where
    S: Grant + Backend,
    S::Policy: Leasable,
{
    /// Where the shared backend keeps the policy: a lease only holds units
    /// the shared store consumed.
    fn storage(&self, policy: &Self::Policy) -> Storage {
        self.shared.storage(policy)
    }
}
