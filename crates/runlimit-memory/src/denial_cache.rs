//! A process-wide cache of denials a shared backend gave, so checks of an
//! already-denied key are denied locally, without a round trip, until the
//! retry time the backend itself reported.
//!
//! Under a credential-stuffing burst most checks are denied, and every one
//! would otherwise cost the shared store a round trip and a row or key lock.
//! [`DenialCache`] remembers, per counter key, when the backend said the
//! denied cost fits again; [`Cached`] puts it in front of any [`Limiter`].
//!
//! See [`DenialCache`] for exactly what it may deny, for how long, and when a
//! cached denial can outlive the backend's state.

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use runlimit_core::{
    Admission, AdmissionObservation, AdmissionOutcome, Backend, BatchDecision, Check, Consumption,
    DEFAULT_MAX_BATCH_SIZE, Decision, Denial, Lifecycle, Limiter, Observer, Operation, Policy,
    PolicyLabel, Receipt, Refunded, Settle, Storage, SubjectKey, notify, validate_batch,
};

use crate::{
    algorithm::{
        pack_low,
        sealed::{Align32, Packed},
        unpack_low,
    },
    clock::{Clock, StoreClock},
    config::MemoryStoreConfig,
    shard::Shard,
    table::StoreKey,
};

/// One cached denial: until when (nanoseconds on the cache's clock) checks
/// of at least `cost` are denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CachedDenial {
    until: u64,
    cost: u64,
    version: u32,
}

impl Packed for CachedDenial {
    type Words = [u64; 2];
    type Atomic = [std::sync::atomic::AtomicU64; 2];
    type Align = Align32;

    fn pack(self) -> [u64; 2] {
        // Costs are at most MAX_LIMIT < 2^30.
        [self.until, pack_low(self.cost, self.version)]
    }

    fn unpack([until, word]: [u64; 2]) -> Self {
        let (cost, version) = unpack_low(word);
        Self {
            until,
            cost,
            version,
        }
    }

    fn version(&self) -> u32 {
        self.version
    }

    fn with_version(self, version: u32) -> Self {
        Self { version, ..self }
    }
}

fn deadline(denial: &CachedDenial) -> u64 {
    denial.until
}

/// What the cache has done, for operators and the demo's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DenialCacheStats {
    /// Denials held now (live or not yet cleaned up).
    pub entries: usize,
    /// The most denials it can hold.
    pub capacity: usize,
    /// Checks and batches it denied without asking the backend: the round
    /// trips it saved.
    pub hits: u64,
    /// Denials it could not remember because their shard was full of live
    /// ones.
    pub refused: u64,
}

/// A bounded, sharded, process-wide cache of denials a shared backend gave.
///
/// Share one cache (it is `Sync`; wrap it in an [`Arc`]) among the
/// [`Cached`] limiters of a process.
///
/// # What it never does
///
/// * **It never admits.** A check the cache cannot answer goes to the
///   backend; the cache only answers denials.
/// * **It denies only what the backend denied, and only until the backend's
///   own retry time.** A denial of cost `c` with retry time `r` is cached
///   until `sent + r`, where `sent` is when the check was sent (on the
///   cache's clock, before the round trip), so it ends no later than the
///   retry time the backend computed. It then denies checks of the same
///   counter with a cost of at least `c`; smaller costs go to the backend,
///   since they may fit. Quota and shadow denials are cached (a shadow
///   policy's check is then answered with the shadow denial); capacity
///   denials are not.
///
/// # When a cached denial outlives the backend's state
///
/// Quota comes back early only through a refund or a reset. Those made
/// through the same [`Cached`] limiter forget the key's cached denial. Those
/// made elsewhere (another replica, or the backend directly) cannot be seen,
/// so the key keeps being denied locally until the cached retry time: at
/// most the `retry_after` of the denial that was cached, measured from when
/// that check was sent. For a fixed window that is the rest of the window;
/// for GCRA and sliding windows, the time until the denied cost would have
/// fit.
///
/// # Bounded
///
/// The cache holds at most `max_keys` denials, in shards, like the memory
/// stores. Each denial it remembers first removes at most
/// `cleanup_per_check` expired ones from its shard; a denial that still does
/// not fit is not cached (the next check of that key asks the backend), and
/// counted in [`DenialCacheStats::refused`]. It never evicts a live denial,
/// and never fails: a shard poisoned by a panic is bypassed.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use runlimit_memory::{DenialCache, MemoryStore, MemoryStoreConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cache = Arc::new(DenialCache::new(MemoryStoreConfig::new(100_000)?));
/// // Any Limiter: a PostgreSQL or Redis limiter in production.
/// let shared = MemoryStore::new(MemoryStoreConfig::new(1_000)?);
/// let limiter = cache.in_front_of(shared);
/// # let _ = limiter;
/// # Ok(())
/// # }
/// ```
pub struct DenialCache {
    shards: Box<[Shard<CachedDenial>]>,
    config: MemoryStoreConfig,
    clock: StoreClock,
    hits: AtomicU64,
    refused: AtomicU64,
}

impl fmt::Debug for DenialCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenialCache")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl DenialCache {
    /// An empty cache of at most `config.max_keys()` denials, in
    /// `config.shard_count()` shards, on the system clock.
    #[must_use]
    pub fn new(config: MemoryStoreConfig) -> Self {
        let shards = (0..config.shard_count())
            .map(|index| Shard::new(config.shard_capacity(index), deadline))
            .collect();
        Self {
            shards,
            config,
            clock: StoreClock::default(),
            hits: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Replaces the clock, for example with a
    /// [`ManualClock`](crate::ManualClock) in tests. Call it before the first
    /// check: cached retry times are measured on the previous clock.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = StoreClock::injected(clock);
        self
    }

    /// `backend` behind this cache.
    #[must_use]
    pub fn in_front_of<S: Limiter>(self: &Arc<Self>, backend: S) -> Cached<S> {
        Cached {
            backend,
            cache: Arc::clone(self),
            observer: None,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
        }
    }

    /// What the cache holds and has done.
    #[must_use]
    pub fn stats(&self) -> DenialCacheStats {
        DenialCacheStats {
            entries: self
                .shards
                .iter()
                .map(|shard| shard.read_even_if_poisoned().len())
                .sum(),
            capacity: self.config.max_keys(),
            hits: self.hits.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    fn shard(&self, key: &StoreKey) -> (usize, &Shard<CachedDenial>) {
        let index = key.shard(self.shards.len());
        (index, &self.shards[index])
    }

    /// Until when `cost` units of `key` are denied, if a live cached denial
    /// covers them at `now`.
    fn denied_until(&self, key: &StoreKey, cost: u64, now: u64) -> Option<u64> {
        let (index, shard) = self.shard(key);
        let table = shard.read(index).ok()?;
        let entry = table.entry(key)?;
        let denial = entry.lock().state();
        (now < denial.until && cost >= denial.cost).then_some(denial.until)
    }

    /// Remembers that `cost` units of `key` were denied until `until`,
    /// replacing what was cached for it: the latest denial is the backend's
    /// latest word.
    fn remember(&self, key: StoreKey, cost: u64, until: u64, now: u64) {
        let (index, shard) = self.shard(&key);
        let Ok(mut table) = shard.write(index) else {
            return;
        };
        let denial = CachedDenial {
            until,
            cost,
            version: 0,
        };
        if let Some((slot, _)) = table.find(&key) {
            table.set_state(slot, denial);
            return;
        }
        table.remove_expired(self.config.cleanup_per_check(), now, &[]);
        if table.headroom() == 0 {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        table.insert(key, denial);
    }

    /// Forgets `key`'s cached denial: quota came back through this process.
    fn forget(&self, key: &StoreKey) {
        let (index, shard) = self.shard(key);
        let Ok(mut table) = shard.write(index) else {
            return;
        };
        if let Some((slot, denial)) = table.find(key) {
            // Expired in place; bounded cleanup reclaims the slot.
            table.set_state(slot, CachedDenial { until: 0, ..denial });
        }
    }
}

/// A [`Limiter`] behind a [`DenialCache`]: checks of a key the backend denied
/// are denied locally until the backend's retry time; everything else goes
/// to the backend. Built by [`DenialCache::in_front_of`].
///
/// Decisions are the backend's own, or ones the backend gave for the same
/// counter moments before, with `retry_after` counted down; errors are the
/// backend's, unchanged (so their "may have consumed" classification is
/// kept). Denials the cache answers are reported to its observer (marked
/// [`cached`](AdmissionObservation::cached)), and counted in
/// [`DenialCacheStats::hits`]. Refunds and resets through it forget the
/// keys' cached denials; peeks always ask the backend.
pub struct Cached<S> {
    backend: S,
    cache: Arc<DenialCache>,
    observer: Option<Arc<dyn Observer>>,
    max_batch_size: usize,
}

impl<S: fmt::Debug> fmt::Debug for Cached<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cached")
            .field("backend", &self.backend)
            .field("cache", &self.cache)
            .field("observer", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

impl<S> Cached<S> {
    /// Installs an observer for the denials the cache answers (the backend
    /// reports its own).
    #[must_use]
    pub fn with_observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The largest batch answered from the cache: set it to the backend's
    /// own maximum, so an oversized batch always reaches the backend and gets
    /// its error. [`DEFAULT_MAX_BATCH_SIZE`] by default, every backend's
    /// default.
    #[must_use]
    pub fn with_max_batch_size(mut self, max_batch_size: usize) -> Self {
        self.max_batch_size = max_batch_size;
        self
    }

    /// The backend.
    #[must_use]
    pub fn backend(&self) -> &S {
        &self.backend
    }

    /// The cache.
    #[must_use]
    pub fn cache(&self) -> &Arc<DenialCache> {
        &self.cache
    }
}

/// How long a denial may be cached: its retry time, for a quota denial
/// (enforced or shadow) that has one.
fn cacheable(decision: &Decision) -> Option<Duration> {
    let denial = decision.denial()?;
    if !denial.is_quota_exceeded() {
        return None;
    }
    denial.retry_after().filter(|retry| !retry.is_zero())
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl<S: Limiter> Cached<S> {
    /// The decision the backend gave for `check` moments ago, if the cache
    /// holds it: a quota denial counted down to `until`.
    fn cached<P: Policy + ?Sized>(&self, check: &Check<'_, P>, now: u64) -> Option<Denial> {
        let until =
            self.cache
                .denied_until(&StoreKey::new(&check.counter_key()), check.cost(), now)?;
        let left = until - now;
        Some(Denial::QuotaExceeded {
            capacity: check.policy().capacity(),
            // Whole milliseconds, rounded up, as every backend reports them.
            retry_after: Duration::from_millis(left.div_ceil(1_000_000)),
        })
    }

    fn learn<P: Policy + ?Sized>(&self, check: &Check<'_, P>, decision: &Decision, sent: u64) {
        if let Some(retry) = cacheable(decision) {
            let until = sent.saturating_add(nanos(retry));
            self.cache.remember(
                StoreKey::new(&check.counter_key()),
                check.cost(),
                until,
                sent,
            );
        }
    }

    fn report<P: Policy + ?Sized>(
        &self,
        operation: Operation,
        checks: &[Check<'_, P>],
        index: usize,
        decision: &Decision,
        started: Instant,
    ) {
        self.cache.hits.fetch_add(1, Ordering::Relaxed);
        let Some(observer) = &self.observer else {
            return;
        };
        let labels: Vec<PolicyLabel<'_>> = checks.iter().map(PolicyLabel::of).collect();
        let outcome = if decision.is_shadow_denied() {
            AdmissionOutcome::ShadowDenied
        } else {
            AdmissionOutcome::QuotaDenied
        };
        let observation = AdmissionObservation::new(
            operation,
            &labels,
            Some(index),
            outcome,
            Consumption::NotConsumed,
            started.elapsed(),
        )
        .from_cache();
        notify(&**observer, |observer| observer.on_admission(&observation));
    }

    /// The decision for one check the cache holds a denial for at `sent`,
    /// counted as a hit; `None` on a miss.
    fn answer_from_cache(&self, check: &Check<'_, S::Policy>, sent: u64) -> Option<Decision> {
        let started = Instant::now();
        let denial = self.cached(check, sent)?;
        let decision = Decision::for_mode(check.policy().quota_mode(), denial);
        self.report(
            Operation::Check,
            std::slice::from_ref(check),
            0,
            &decision,
            started,
        );
        Some(decision)
    }

    /// One check: from the cache, or from the backend (learning its denial).
    async fn decide_one(
        &self,
        check: &Check<'_, S::Policy>,
        decide: impl AsyncFnOnce() -> Result<(Decision, Option<Receipt>), S::Error>,
    ) -> Result<(Decision, Option<Receipt>), S::Error> {
        let sent = self.cache.now();
        if let Some(decision) = self.answer_from_cache(check, sent) {
            return Ok((decision, None));
        }
        let (decision, receipt) = decide().await?;
        self.learn(check, &decision, sent);
        Ok((decision, receipt))
    }

    /// A batch: denied from the cache when one of its checks is, else the
    /// backend's, learning the denial of the check that decided it.
    async fn decide_batch(
        &self,
        checks: &[Check<'_, S::Policy>],
        decide: impl AsyncFnOnce() -> Result<(BatchDecision, Option<Receipt>), S::Error>,
    ) -> Result<(BatchDecision, Option<Receipt>), S::Error> {
        let started = Instant::now();
        let sent = self.cache.now();
        // An invalid batch goes to the backend, which refuses it with its
        // own error, whatever the cache holds.
        if validate_batch(checks, self.max_batch_size).is_ok()
            && let Some((index, denial)) = checks
                .iter()
                .enumerate()
                .find_map(|(index, check)| Some((index, self.cached(check, sent)?)))
        {
            let decision = Decision::for_mode(checks[index].policy().quota_mode(), denial);
            self.report(Operation::Batch, checks, index, &decision, started);
            let batch = if decision.is_shadow_denied() {
                BatchDecision::ShadowDenied { index, denial }
            } else {
                BatchDecision::Denied { index, denial }
            };
            return Ok((batch, None));
        }
        let (batch, receipt) = decide().await?;
        match &batch {
            BatchDecision::Denied { index, denial }
            | BatchDecision::ShadowDenied { index, denial } => {
                if let Some(check) = checks.get(*index) {
                    self.learn(check, &Decision::denied(*denial), sent);
                }
            }
            _ => {}
        }
        Ok((batch, receipt))
    }

    fn forget_all<P: Policy + ?Sized>(&self, checks: &[Check<'_, P>]) {
        for check in checks {
            self.cache.forget(&StoreKey::new(&check.counter_key()));
        }
    }
}

impl<S: Limiter> Limiter for Cached<S> {
    type Policy = S::Policy;
    type Error = S::Error;

    async fn check(&self, check: &Check<'_, S::Policy>) -> Result<Decision, S::Error> {
        self.decide_one(check, async || Ok((self.backend.check(check).await?, None)))
            .await
            .map(|(decision, _)| decision)
    }

    async fn check_all(&self, checks: &[Check<'_, S::Policy>]) -> Result<BatchDecision, S::Error> {
        self.decide_batch(checks, async || {
            Ok((self.backend.check_all(checks).await?, None))
        })
        .await
        .map(|(batch, _)| batch)
    }

    /// At once for a cached denial, and for a miss whose backend decides at
    /// once (whose denial it learns, as [`check`](Limiter::check) does).
    fn check_now(&self, check: &Check<'_, S::Policy>) -> Option<Result<Decision, S::Error>> {
        let sent = self.cache.now();
        if let Some(decision) = self.answer_from_cache(check, sent) {
            return Some(Ok(decision));
        }
        let decided = self.backend.check_now(check)?;
        if let Ok(decision) = &decided {
            self.learn(check, decision, sent);
        }
        Some(decided)
    }
}

/// Refunds and resets forget the keys' cached denials, since they give quota
/// back; peeks ask the backend.
impl<S: Lifecycle> Lifecycle for Cached<S> {
    async fn admit(&self, check: &Check<'_, S::Policy>) -> Result<Admission<Decision>, S::Error> {
        self.decide_one(check, async || {
            Ok(self.backend.admit(check).await?.into_parts())
        })
        .await
        .map(|(decision, receipt)| Admission::new(decision, receipt))
    }

    async fn admit_all(
        &self,
        checks: &[Check<'_, S::Policy>],
    ) -> Result<Admission<BatchDecision>, S::Error> {
        self.decide_batch(checks, async || {
            Ok(self.backend.admit_all(checks).await?.into_parts())
        })
        .await
        .map(|(batch, receipt)| Admission::new(batch, receipt))
    }

    async fn refund(
        &self,
        checks: &[Check<'_, S::Policy>],
        receipt: Receipt,
    ) -> Result<Refunded, S::Error> {
        let refunded = self.backend.refund(checks, receipt).await?;
        self.forget_all(checks);
        Ok(refunded)
    }

    async fn peek(&self, check: &Check<'_, S::Policy>) -> Result<Decision, S::Error> {
        self.backend.peek(check).await
    }

    async fn reset(&self, policy: &S::Policy, subject: &SubjectKey) -> Result<bool, S::Error> {
        let existed = self.backend.reset(policy, subject).await?;
        self.forget_all(&[Check::new(policy, *subject)]);
        Ok(existed)
    }
}

/// A settlement goes to the backend; then, like a refund, it forgets the
/// denials cached for its checks' keys.
impl<S: Settle> Settle for Cached<S> {
    async fn settle(
        &self,
        checks: &[Check<'_, S::Policy>],
        receipt: Receipt,
        used: &[u64],
    ) -> Result<Refunded, S::Error> {
        let refunded = self.backend.settle(checks, receipt, used).await?;
        self.forget_all(checks);
        Ok(refunded)
    }
}

impl<S: Backend> Backend for Cached<S> {
    fn storage(&self, policy: &S::Policy) -> Storage {
        self.backend.storage(policy)
    }
}
