//! The sharded store shared by [`MemoryStore`](crate::MemoryStore) and
//! [`GcraStore`](crate::GcraStore).

use std::{
    fmt,
    sync::Arc,
    time::{Duration, Instant},
};

use smallvec::SmallVec;

use runlimit_core::{
    Admission, AdmissionOutcome, AdmissionReporter, Admitted, Backend, BatchDecision,
    CapacityObservation, CarriedFrom, CarryObservation, Check, CleanupObservation, CounterKey,
    Decision, Denial, Grant, Granted, Lifecycle, Limiter, Observer, Operation, Policy, PolicyLabel,
    Receipt, RefundError, Refunded, Settle, Stamp, Storage, StoreName, SubjectKey, carry::carry,
    grant::grant_bound, notify, validate_batch,
};

use crate::{
    algorithm::{
        Algorithm,
        sealed::{Credit, Evaluation, Packed, next_version},
    },
    clock::{Clock, StoreClock},
    config::MemoryStoreConfig,
    error::MemoryStoreError,
    overflow::{Overflow, Overflowed, Pending},
    shard::{ExclusiveTable, Shard, SharedTable},
    stats::{MemoryStoreStats, ShardStats},
    table::{Entry, HeldEntry, SlotId, StoreKey, Table},
};

/// A sharded, hard-bounded, process-local rate-limit store.
///
/// Use it as [`MemoryStore`](crate::MemoryStore) for fixed windows or
/// [`GcraStore`](crate::GcraStore) for GCRA; see the [crate documentation](crate)
/// for the behaviour both share.
pub struct Store<A: Algorithm> {
    shards: Box<[Shard<A::State>]>,
    config: MemoryStoreConfig,
    clock: StoreClock,
    observer: Option<Arc<dyn Observer>>,
    name: StoreName,
    /// Decides keys that find their shard full, when configured.
    overflow: Option<Overflow>,
}

/// Batches up to this size keep their working state on the stack.
const INLINE_BATCH: usize = 4;

/// The receipt stamps of what an allowed batch committed, in check order
/// (empty otherwise).
type Committed = SmallVec<[[u64; 3]; INLINE_BATCH]>;

/// The stamp of an admission the overflow tier decided: no state's stamp is
/// ever this, so refunding it credits nothing (the sketch only counts up).
const OVERFLOW_STAMP: [u64; 3] = [u64::MAX; 3];

/// A single check's decision and, when allowed, the receipt stamp of the
/// state it committed (three words, rather than a state of up to six: the
/// result crosses several frames on the hot path).
type Checked = Result<(Decision, Option<[u64; 3]>), MemoryStoreError>;

/// A batch's decision and the states it committed.
type BatchChecked = Result<(BatchDecision, Committed), MemoryStoreError>;

/// One check of a batch while it is being decided.
struct Item<S> {
    key: StoreKey,
    shard: usize,
    /// Where the key is stored, if it is.
    slot: Option<SlotId>,
    /// The state to store if the batch is allowed; `None` when this check is denied.
    next: Option<S>,
    /// The state carried from a source, for a key that holds no live state.
    carried: Option<(S, CarriedFrom)>,
    /// The carried state the check started from, if it started from one.
    started_from: Option<S>,
    /// What the overflow tier records if the batch is allowed, for a key it
    /// decided.
    overflowed: Option<Pending>,
}

/// What a locked operation did that observers may want to hear about.
#[derive(Default)]
struct Effects {
    removed: usize,
    cleanup_allowance: usize,
    cleanup_elapsed: Duration,
    capacity: Vec<CapacityObservation<'static>>,
    /// A single check that stored a carried state, and what it carried from.
    carried: Option<CarriedFrom>,
}

impl<A: Algorithm> Store<A> {
    /// An empty store using the system clock and no observer.
    #[must_use]
    pub fn new(config: MemoryStoreConfig) -> Self {
        let shards = (0..config.shard_count())
            .map(|index| Shard::new(config.shard_capacity(index), A::deadline))
            .collect();
        Self {
            shards,
            config,
            clock: StoreClock::default(),
            observer: None,
            name: StoreName::default(),
            overflow: config.overflow().map(Overflow::new),
        }
    }

    /// Replaces the clock, for example with a
    /// [`ManualClock`](crate::ManualClock) in tests. Call it before the first
    /// check: stored deadlines are measured on the previous clock.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = StoreClock::injected(clock);
        self
    }

    /// Installs an observer for admission, cleanup and capacity observations.
    ///
    /// Without one, the store reads no clock for timing and builds no
    /// observations.
    #[must_use]
    pub fn with_observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// Names the store in what it reports to its observer: the `store` label
    /// of its capacity gauges and the `store` field of its capacity events.
    /// Unnamed, a store is `default`; give every store of a process its own
    /// name, as two stores with one name report over each other's gauges.
    ///
    /// ```
    /// use runlimit_core::{StoreName, observers::MetricsObserver};
    /// use runlimit_memory::{GcraStore, MemoryStore, MemoryStoreConfig};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let login = MemoryStore::new(MemoryStoreConfig::new(10_000)?)
    ///     .with_name(StoreName::new("login")?)
    ///     .with_observer(MetricsObserver::new());
    /// let api = GcraStore::new(MemoryStoreConfig::new(50_000)?)
    ///     .with_name(StoreName::new("api")?)
    ///     .with_observer(MetricsObserver::new());
    /// assert_eq!(login.name().as_str(), "login");
    /// # let _ = api;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_name(mut self, name: StoreName) -> Self {
        self.name = name;
        self
    }

    /// The store's name: what [`with_name`](Self::with_name) set, or
    /// `default`.
    #[must_use]
    pub fn name(&self) -> &StoreName {
        &self.name
    }

    /// The configuration the store was built with.
    #[must_use]
    pub fn config(&self) -> &MemoryStoreConfig {
        &self.config
    }

    /// Evaluates one check, consuming its cost if allowed.
    ///
    /// A denied check consumes nothing. A new key that does not fit its shard is
    /// denied with [`Denial::StorageCapacity`], even for a shadow policy.
    ///
    /// # Errors
    ///
    /// [`MemoryStoreError::PoisonedShard`] if the key's shard is poisoned.
    pub fn check(&self, check: &Check<'_, A::Policy>) -> Result<Decision, MemoryStoreError> {
        self.check_reported(check).map(|(decision, _)| decision)
    }

    /// Like [`check`](Self::check), also returning the receipt that refunds
    /// the check when it was allowed; see [`Lifecycle`].
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check).
    pub fn admit(
        &self,
        check: &Check<'_, A::Policy>,
    ) -> Result<Admission<Decision>, MemoryStoreError> {
        let (decision, committed) = self.check_reported(check)?;
        let receipt = committed
            .map(|stamp| Receipt::new(A::ISSUER, [Admitted::new(check, Stamp::new(stamp))]));
        Ok(Admission::new(decision, receipt))
    }

    /// Consumes between `check.cost()` and `up_to` units, as many as fit now;
    /// see [`Grant`]. A stored key is decided under its entry's lock; a new
    /// key is admitted at the whole bound (a fresh quota holds it), through
    /// the path that stores keys, so capacity and cleanup work as for a check.
    ///
    /// # Errors
    ///
    /// [`MemoryStoreError::PoisonedShard`] if the key's shard is poisoned.
    pub fn grant(
        &self,
        check: &Check<'_, A::Policy>,
        up_to: u64,
    ) -> Result<Granted, MemoryStoreError> {
        let policy = check.policy();
        let bound = grant_bound(check, up_to);
        let of_cost = |units: u64| {
            Check::weighted(policy, *check.subject(), units)
                .unwrap_or_else(|_| unreachable!("a grant stays within the policy's capacity"))
        };
        // A key another thread stores between the two paths is decided again
        // under its lock; after that, the check's own cost decides.
        for _ in 0..2 {
            let report = AdmissionReporter::start(self.observer.as_deref());
            let carries = check.carries();
            let locked = self.with_entry(check, |held, now| {
                let state = held.state();
                if carries && A::deadline(&state) <= now {
                    // No live state: granted below, from what it carries.
                    return None;
                }
                let fits = A::peek(policy, Some(state), check.cost(), now)
                    .remaining()
                    .filter(|&available| available >= check.cost());
                let units = fits.map_or(check.cost(), |available| available.min(bound));
                Some(match A::evaluate(policy, Some(state), units, now) {
                    // Dropping `held` releases the entry unchanged.
                    Evaluation::Denied(denial) => {
                        (Decision::for_mode(policy.quota_mode(), denial), 0, None)
                    }
                    Evaluation::Allowed { admitted, next } => {
                        held.commit(next);
                        (A::decision(policy, admitted), units, Some(A::stamp(&next)))
                    }
                })
            });
            let (decision, units, stamp) = match locked {
                Ok(Some(Some(granted))) => granted,
                Ok(Some(None) | None) => {
                    // Not stored: a fresh quota holds the whole bound, a
                    // carried one what it has room for (the admission
                    // reports itself).
                    let wanted = if carries {
                        let room = self.peek_inner(check)?.remaining().unwrap_or(0);
                        of_cost(if room >= check.cost() {
                            room.min(bound)
                        } else {
                            check.cost()
                        })
                    } else {
                        of_cost(bound)
                    };
                    let (decision, receipt) = self.admit(&wanted)?.into_parts();
                    let raced = decision.denial().is_some_and(Denial::is_quota_exceeded);
                    if !raced {
                        let units = if receipt.is_some() { bound } else { 0 };
                        return Ok(Granted::new(decision, units, receipt));
                    }
                    continue;
                }
                Err(error) => {
                    report.finish(
                        Operation::Check,
                        std::slice::from_ref(check),
                        AdmissionOutcome::of_failure(false),
                    );
                    return Err(error);
                }
            };
            report.finish(
                Operation::Check,
                std::slice::from_ref(&of_cost(units.max(check.cost()))),
                AdmissionOutcome::of_decision(&decision),
            );
            let receipt = stamp.map(|stamp| {
                Receipt::new(
                    A::ISSUER,
                    [Admitted::new(&of_cost(units), Stamp::new(stamp))],
                )
            });
            return Ok(Granted::new(decision, units, receipt));
        }
        let (decision, receipt) = self.admit(check)?.into_parts();
        let units = if receipt.is_some() { check.cost() } else { 0 };
        Ok(Granted::new(decision, units, receipt))
    }

    /// One check, observed; with the stamp of the state it committed when
    /// allowed. Inlined into `check` and `admit` (the paths that store a key
    /// are not inlined into it), so each writes its result once.
    #[inline]
    fn check_reported(&self, check: &Check<'_, A::Policy>) -> Checked {
        let report = AdmissionReporter::start(self.observer.as_deref());
        let key = StoreKey::new(&check.counter_key());
        let shard_index = key.shard(self.shards.len());
        let mut effects = Effects::default();
        let result = self.check_stored(shard_index, &key, check, &mut effects);
        let outcome = match &result {
            Ok((decision, _)) => AdmissionOutcome::of_decision(decision),
            Err(_) => AdmissionOutcome::of_failure(false),
        };
        report.finish(Operation::Check, std::slice::from_ref(check), outcome);
        self.report_effects(&effects);
        if let Some(from) = effects.carried {
            self.report_carry(check, from);
        }
        result
    }

    /// Checks a key holding its shard only for reading: a stored key, so the
    /// check writes nothing but the key's entry, or a new key it can stage;
    /// otherwise, with the shard released, the exclusive path. It returns the
    /// result it wrote, so nothing copies it again.
    #[inline]
    fn check_stored(
        &self,
        shard_index: usize,
        key: &StoreKey,
        check: &Check<'_, A::Policy>,
        effects: &mut Effects,
    ) -> Checked {
        let shard = &self.shards[shard_index];
        let table = shard.read(shard_index)?;
        let Some(entry) = table.entry(key) else {
            if check.carries() {
                drop(table);
                return self.check_carrying(shard_index, key, check, effects);
            }
            if let Some(staged) = self.check_staged(shard, shard_index, &table, key, check, effects)
            {
                return staged;
            }
            drop(table);
            return self.check_exclusive(shard_index, key, check, None, effects);
        };
        // Read the clock before waiting for the entry, so the likely cache miss
        // on a cold entry overlaps the clock read.
        let clock_now = self.now_nanos();
        let policy = check.policy();
        // A denial the state's words decide when read without the entry's
        // lock is answered so, and checks denied on one hot key write no
        // shared line. The time is taken after the words, as the locked path
        // takes it after the lock: never earlier than the state's own.
        if A::DENIES_WITHOUT_LOCK
            && let Some(denial) = entry.words_for_denial().and_then(|words| {
                A::deny_from_words(policy, words, check.cost(), shard.advance(clock_now))
            })
        {
            return Ok((Decision::for_mode(policy.quota_mode(), denial), None));
        }
        let held = entry.lock();
        let now = shard.advance(clock_now);
        if check.carries() && A::deadline(&held.state()) <= now {
            // No live state: the counter may carry a source's.
            drop(held);
            drop(table);
            return self.check_carrying(shard_index, key, check, effects);
        }
        Ok(
            match A::evaluate(policy, Some(held.state()), check.cost(), now) {
                // Dropping `held` releases the entry unchanged.
                Evaluation::Denied(denial) => {
                    (Decision::for_mode(policy.quota_mode(), denial), None)
                }
                Evaluation::Allowed { admitted, next } => {
                    held.commit(next);
                    (A::decision(policy, admitted), Some(A::stamp(&next)))
                }
            },
        )
    }

    /// Checks a key its shard does not store, holding the shard for reading,
    /// and stages it beside the table if allowed. `None` when the exclusive
    /// path must decide instead: the key is staged already, the shard has no
    /// room for it, or it is half full and something may be due for cleanup
    /// (see [`StagingGuard::accepts`](crate::table::StagingGuard::accepts)),
    /// so a staged check decides and stores exactly what the exclusive path
    /// would.
    #[inline(never)]
    fn check_staged(
        &self,
        shard: &Shard<A::State>,
        shard_index: usize,
        table: &Table<A::State>,
        key: &StoreKey,
        check: &Check<'_, A::Policy>,
        effects: &mut Effects,
    ) -> Option<Checked> {
        let clock_now = self.now_nanos();
        let mut staging = table.staging();
        let now = shard.advance(clock_now);
        let policy = check.policy();
        if !staging.accepts(key, now) || !self.is_fresh(policy, key, now) {
            return None;
        }
        Some(Ok(match A::evaluate(policy, None, check.cost(), now) {
            Evaluation::Denied(denial) => (Decision::for_mode(policy.quota_mode(), denial), None),
            Evaluation::Allowed { admitted, next } => {
                let staged = staging.stage(*key, next);
                // Counting the shard's keys takes the staging lock again.
                drop(staging);
                if self.observer.is_some() {
                    effects.capacity.push(capacity_of(table, shard_index));
                }
                (A::decision(policy, admitted), Some(A::stamp(&staged)))
            }
        }))
    }

    /// Checks a key whose counter holds no live state and may carry a
    /// source's: the state carried (read with no lock held), then the
    /// exclusive path from it.
    #[cold]
    #[inline(never)]
    fn check_carrying(
        &self,
        shard_index: usize,
        key: &StoreKey,
        check: &Check<'_, A::Policy>,
        effects: &mut Effects,
    ) -> Checked {
        let carried = self.carried(check, self.now_nanos())?;
        self.check_exclusive(shard_index, key, check, carried, effects)
    }

    /// Checks a key holding its shard exclusively, so a new key can be stored,
    /// starting from `carried` if the key holds no live state.
    #[inline(never)]
    fn check_exclusive(
        &self,
        shard_index: usize,
        key: &StoreKey,
        check: &Check<'_, A::Policy>,
        carried: Option<(A::State, CarriedFrom)>,
        effects: &mut Effects,
    ) -> Checked {
        let shard = &self.shards[shard_index];
        let mut table = shard.write(shard_index)?;
        // Another check may have stored the key since it was looked up.
        let found = table.find(key);
        let now = shard.advance(self.now_nanos());
        let policy = check.policy();
        if found.is_none() && !self.is_fresh(policy, key, now) {
            if carried.is_none()
                && let Some(seeded) =
                    self.seed_from_overflow(&mut table, shard_index, key, check, now, effects)
            {
                return Ok(seeded);
            }
            // The overflow tier counts this key: it decides it until it
            // counts nothing for it, so the table forgets nothing.
            return Ok(self.check_overflowed(&table, key, check, carried.is_some(), now));
        }
        let (initial, carries) = start_from::<A>(found.map(|(_, state)| state), carried, now);
        let (decision, keep) = match A::evaluate(policy, initial, check.cost(), now) {
            // A carried state is kept even when the check is denied: carrying
            // is not consuming, and from now on it drains at the new policy's
            // rate rather than being carried again at every check.
            Evaluation::Denied(denial) => {
                let denied = Decision::for_mode(policy.quota_mode(), denial);
                match carries.and(initial) {
                    Some(carried) => (Err(denied), carried),
                    None => return Ok((denied, None)),
                }
            }
            Evaluation::Allowed { admitted, next } => (Ok(admitted), next),
        };
        let stored = match found {
            Some((slot, _)) => {
                table.set_state(slot, keep);
                Some(keep)
            }
            None => {
                // Below half full, expired entries stay: a key checked again
                // finds its entry and updates it in place.
                if table.cleans_on_insert() {
                    self.clean(
                        &mut table,
                        self.config.cleanup_per_check(),
                        now,
                        &[],
                        effects,
                    );
                }
                let stored = (table.headroom() > 0).then(|| table.insert(*key, keep));
                if self.observer.is_some() {
                    effects.capacity.push(capacity_of(&table, shard_index));
                }
                stored
            }
        };
        Ok(match (decision, stored) {
            (Ok(admitted), Some(stored)) => {
                effects.carried = carries;
                (A::decision(policy, admitted), Some(A::stamp(&stored)))
            }
            (Ok(_), None) => self.check_overflowed(&table, key, check, carries.is_some(), now),
            (Err(denied), stored) => {
                if stored.is_some() {
                    effects.carried = carries;
                }
                (denied, None)
            }
        })
    }

    /// Whether `key`, not stored in its shard, may be stored: the overflow
    /// tier (if any) counts nothing for it. The caller holds the key's shard.
    #[inline]
    fn is_fresh(&self, policy: &A::Policy, key: &StoreKey, now: u64) -> bool {
        self.overflow
            .as_ref()
            .is_none_or(|overflow| overflow.is_fresh::<A>(policy, key, now))
    }

    /// Stores a key the overflow tier counts, from the state its estimate
    /// bounds, when the algorithm's state can hold that bound (a GCRA
    /// arrival time: a later one denies more, so the entry stays at least as
    /// strict as the sketch) and the shard has room; `None` otherwise, and
    /// when the check is denied (the sketch keeps deciding the key then).
    /// Window counts cannot seed an anchored entry (its anchor is unknown),
    /// so window keys stay with the sketch until their count drops out.
    #[cold]
    fn seed_from_overflow(
        &self,
        table: &mut ExclusiveTable<'_, A::State>,
        shard_index: usize,
        key: &StoreKey,
        check: &Check<'_, A::Policy>,
        now: u64,
        effects: &mut Effects,
    ) -> Option<(Decision, Option<[u64; 3]>)> {
        let policy = check.policy();
        let seed = self.overflow.as_ref()?.seed::<A>(policy, key)?;
        if table.cleans_on_insert() {
            self.clean(table, self.config.cleanup_per_check(), now, &[], effects);
        }
        if table.headroom() == 0 {
            return None;
        }
        let Evaluation::Allowed { admitted, next } =
            A::evaluate(policy, Some(seed), check.cost(), now)
        else {
            return None;
        };
        let stored = table.insert(*key, next);
        if self.observer.is_some() {
            effects.capacity.push(capacity_of(table, shard_index));
        }
        Some((A::decision(policy, admitted), Some(A::stamp(&stored))))
    }

    /// Decides a key its shard does not store and will not store now, in the
    /// overflow tier; without one (or for a key carrying a source's state,
    /// which the sketch cannot hold), denies it for capacity. The caller holds
    /// the key's shard exclusively.
    #[cold]
    #[inline(never)]
    fn check_overflowed(
        &self,
        table: &Table<A::State>,
        key: &StoreKey,
        check: &Check<'_, A::Policy>,
        carries: bool,
        now: u64,
    ) -> (Decision, Option<[u64; 3]>) {
        let policy = check.policy();
        let capacity = || (Decision::denied(capacity_denial(table, now)), None);
        let Some(overflow) = &self.overflow else {
            return capacity();
        };
        if carries {
            overflow.refuse();
            return capacity();
        }
        match overflow.evaluate::<A>(policy, key, check.cost(), now) {
            Overflowed::Allowed(decision, pending) => {
                overflow.record(key, pending, now);
                (decision, Some(OVERFLOW_STAMP))
            }
            Overflowed::Denied(denial) => (Decision::for_mode(policy.quota_mode(), denial), None),
            Overflowed::Refused => capacity(),
        }
    }

    /// A batch check the overflow tier decides, recording nothing until the
    /// batch is allowed: its decision, and what to record then.
    fn batch_overflowed(
        &self,
        table: &Table<A::State>,
        item: &Item<A::State>,
        check: &Check<'_, A::Policy>,
        now: u64,
    ) -> (Decision, Option<Pending>) {
        let policy = check.policy();
        let capacity = || (Decision::denied(capacity_denial(table, now)), None);
        let Some(overflow) = &self.overflow else {
            return capacity();
        };
        if item.carried.is_some() {
            overflow.refuse();
            return capacity();
        }
        match overflow.evaluate::<A>(policy, &item.key, check.cost(), now) {
            Overflowed::Allowed(decision, pending) => (decision, Some(pending)),
            Overflowed::Denied(denial) => (Decision::for_mode(policy.quota_mode(), denial), None),
            Overflowed::Refused => capacity(),
        }
    }

    /// Evaluates an atomic batch: every check is consumed, or none is.
    ///
    /// Allowed decisions keep input order. A denied or shadow-denied batch
    /// consumes nothing. Shards are locked in ascending order and time is read
    /// once for the whole batch.
    ///
    /// # Errors
    ///
    /// [`MemoryStoreError::InvalidBatch`] for an empty or oversized batch,
    /// duplicate keys or mixed quota modes;
    /// [`MemoryStoreError::BatchExceedsShardCapacity`] when one shard could never
    /// hold the batch's keys; [`MemoryStoreError::PoisonedShard`] when a targeted
    /// shard is poisoned. None of them consumes quota.
    pub fn check_all(
        &self,
        checks: &[Check<'_, A::Policy>],
    ) -> Result<BatchDecision, MemoryStoreError> {
        self.check_all_reported(checks).map(|(batch, _)| batch)
    }

    /// Like [`check_all`](Self::check_all), also returning the receipt that
    /// refunds the batch when it was allowed; see [`Lifecycle`].
    ///
    /// # Errors
    ///
    /// As [`check_all`](Self::check_all).
    pub fn admit_all(
        &self,
        checks: &[Check<'_, A::Policy>],
    ) -> Result<Admission<BatchDecision>, MemoryStoreError> {
        let (batch, committed) = self.check_all_reported(checks)?;
        let receipt = batch.is_allowed().then(|| {
            Receipt::new(
                A::ISSUER,
                checks
                    .iter()
                    .zip(&committed)
                    .map(|(check, stamp)| Admitted::new(check, Stamp::new(*stamp))),
            )
        });
        Ok(Admission::new(batch, receipt))
    }

    /// One batch, observed; with the states it committed when allowed.
    fn check_all_reported(&self, checks: &[Check<'_, A::Policy>]) -> BatchChecked {
        let report = AdmissionReporter::start(self.observer.as_deref());
        let mut effects = Effects::default();
        let result = self.check_all_inner(checks, &mut effects);
        let outcome = match &result {
            Ok((batch, _)) => AdmissionOutcome::of_batch(batch),
            Err(_) => AdmissionOutcome::of_failure(false),
        };
        report.finish(Operation::Batch, checks, outcome);
        self.report_effects(&effects);
        result
    }

    fn check_all_inner(
        &self,
        checks: &[Check<'_, A::Policy>],
        effects: &mut Effects,
    ) -> BatchChecked {
        validate_batch(checks, self.config.max_batch_size())?;
        let shard_count = self.shards.len();
        // Built by pushing in place: collecting into a SmallVec moves it afterwards.
        let mut items: SmallVec<[Item<A::State>; INLINE_BATCH]> = SmallVec::new();
        let mut shard_indices: SmallVec<[usize; INLINE_BATCH]> = SmallVec::new();
        for check in checks {
            let key = StoreKey::new(&check.counter_key());
            let shard = key.shard(shard_count);
            items.push(Item {
                key,
                shard,
                slot: None,
                next: None,
                carried: None,
                started_from: None,
                overflowed: None,
            });
            if !shard_indices.contains(&shard) {
                shard_indices.push(shard);
            }
        }
        shard_indices.sort_unstable();
        for &shard_index in &shard_indices {
            // Keys are distinct (validated), so this counts distinct keys.
            let key_count = items
                .iter()
                .filter(|item| item.shard == shard_index)
                .count();
            let capacity = self.shards[shard_index].capacity();
            if key_count > capacity {
                return Err(MemoryStoreError::BatchExceedsShardCapacity {
                    shard_index,
                    key_count,
                    capacity,
                });
            }
        }

        if let Some(result) = self.check_all_stored(checks, &mut items, &shard_indices, effects) {
            return result;
        }

        // Sources are read before any shard is locked: a source may share a
        // shard with the batch.
        if checks.iter().any(Check::carries) {
            let now = self.now_nanos();
            for (check, item) in checks.iter().zip(items.iter_mut()) {
                if check.carries() {
                    item.carried = self.carried(check, now)?;
                }
            }
        }

        // Ascending lock order keeps concurrent batches deadlock-free.
        let mut guards: SmallVec<[ExclusiveTable<'_, A::State>; INLINE_BATCH]> =
            SmallVec::with_capacity(shard_indices.len());
        for &shard_index in &shard_indices {
            guards.push(self.shards[shard_index].write(shard_index)?);
        }
        let position_of = |shard: usize| position_in(&shard_indices, shard);

        let now = self.batch_now(&shard_indices);

        // Preflight: decide every check against current state, changing nothing.
        let mut decisions = Vec::with_capacity(checks.len());
        for (check, item) in checks.iter().zip(items.iter_mut()) {
            let table = &guards[position_of(item.shard)];
            let found = table.find(&item.key);
            item.slot = found.map(|(slot, _)| slot);
            let policy = check.policy();
            if found.is_none() && !self.is_fresh(policy, &item.key, now) {
                let (decision, pending) = self.batch_overflowed(table, item, check, now);
                decisions.push(decision);
                item.overflowed = pending;
                continue;
            }
            let (initial, carries) =
                start_from::<A>(found.map(|(_, state)| state), item.carried, now);
            item.started_from = carries.and(initial);
            match A::evaluate(policy, initial, check.cost(), now) {
                Evaluation::Allowed { admitted, next } => {
                    decisions.push(A::decision(policy, admitted));
                    item.next = Some(next);
                }
                Evaluation::Denied(denial) => {
                    decisions.push(Decision::for_mode(policy.quota_mode(), denial));
                }
            }
        }

        // Room for new keys: on a shard half full or short of room, each
        // check brings the shard one cleanup allowance.
        for (position, &shard_index) in shard_indices.iter().enumerate() {
            let new_keys = items
                .iter()
                .filter(|item| {
                    item.shard == shard_index && item.slot.is_none() && item.next.is_some()
                })
                .count();
            if new_keys == 0 {
                continue;
            }
            let protected: SmallVec<[SlotId; INLINE_BATCH]> = items
                .iter()
                .filter(|item| item.shard == shard_index)
                .filter_map(|item| item.slot)
                .collect();
            let on_shard = items
                .iter()
                .filter(|item| item.shard == shard_index)
                .count();
            let table = &mut guards[position];
            if table.headroom() < new_keys || table.cleans_on_insert() {
                self.clean(
                    table,
                    self.config.cleanup_per_check() * on_shard,
                    now,
                    &protected,
                    effects,
                );
            }
            let mut headroom = table.headroom();
            for ((check, item), decision) in checks
                .iter()
                .zip(items.iter_mut())
                .zip(decisions.iter_mut())
            {
                if item.shard != shard_index || item.slot.is_some() || item.next.is_none() {
                    continue;
                }
                if headroom == 0 {
                    (*decision, item.overflowed) = self.batch_overflowed(table, item, check, now);
                    item.next = None;
                } else {
                    headroom -= 1;
                }
            }
        }

        let batch = BatchDecision::from_decisions(decisions);
        let mut committed = Committed::new();
        if let Some(overflow) = &self.overflow
            && batch.is_allowed()
        {
            for item in &items {
                if let Some(pending) = item.overflowed {
                    overflow.record(&item.key, pending, now);
                }
            }
        }
        if !batch.is_allowed() {
            // Carrying is not consuming: a denied batch keeps the states its
            // checks carried, so they drain from now on.
            for item in &mut items {
                item.next = item.started_from;
            }
        }
        // Stored keys are updated before new keys go in, because an insert
        // may move entries and invalidate the slots the preflight resolved.
        for item in &items {
            if let (Some(slot), Some(next)) = (item.slot, item.next) {
                guards[position_of(item.shard)].set_state(slot, next);
            }
        }
        for item in &mut items {
            if let (None, Some(next)) = (item.slot, item.next) {
                let table = &mut guards[position_of(item.shard)];
                // An allowed batch has room for its new keys (the preflight
                // made it); a denied one keeps a carried state only where
                // one fits.
                item.next = (table.headroom() > 0).then(|| table.insert(item.key, next));
            }
        }
        if batch.is_allowed() {
            // Every check of an allowed batch has a next state, or the
            // overflow tier decided it.
            committed.extend(items.iter().filter_map(|item| {
                item.next
                    .map(|next| A::stamp(&next))
                    .or(item.overflowed.map(|_| OVERFLOW_STAMP))
            }));
        }
        if self.observer.is_some() {
            for (table, &shard_index) in guards.iter().zip(&shard_indices) {
                effects.capacity.push(capacity_of(table, shard_index));
            }
            drop(guards);
            for (check, item) in checks.iter().zip(&items) {
                if let (Some(_), Some(_), Some((_, from))) =
                    (item.started_from, item.next, item.carried)
                {
                    self.report_carry(check, from);
                }
            }
        }
        Ok((batch, committed))
    }

    /// Evaluates a batch whose keys are all stored, holding each shard only for
    /// reading and locking the batch's entries. `None` when a key is not stored:
    /// storing it needs its shard exclusively.
    fn check_all_stored(
        &self,
        checks: &[Check<'_, A::Policy>],
        items: &mut [Item<A::State>],
        shard_indices: &[usize],
        effects: &mut Effects,
    ) -> Option<BatchChecked> {
        // Ascending, like exclusive holders, so the two never wait on each other
        // in a cycle.
        let mut tables: SmallVec<[SharedTable<'_, A::State>; INLINE_BATCH]> =
            SmallVec::with_capacity(shard_indices.len());
        for &shard_index in shard_indices {
            match self.shards[shard_index].read(shard_index) {
                Ok(table) => tables.push(table),
                Err(error) => return Some(Err(error)),
            }
        }
        // Entries are taken with try-locks, in input order: a batch never waits
        // for an entry while holding another, so batches sharing keys cannot
        // deadlock. On contention (or a key not yet stored) it lets go of
        // everything and takes the exclusive path, which waits for holders to
        // finish instead. The same holds for two counters whose 128-bit
        // identities collide: the second try-lock fails.
        let mut held: SmallVec<[HeldEntry<'_, A::State>; INLINE_BATCH]> = SmallVec::new();
        for item in items.iter() {
            let table = &tables[position_in(shard_indices, item.shard)];
            held.push(table.entry(&item.key)?.try_lock()?);
        }
        let now = self.batch_now(shard_indices);

        let mut decisions = Vec::with_capacity(checks.len());
        for ((check, entry), item) in checks.iter().zip(&held).zip(items.iter_mut()) {
            let policy = check.policy();
            if check.carries() && A::deadline(&entry.state()) <= now {
                // No live state: the exclusive path carries a source's.
                return None;
            }
            match A::evaluate(policy, Some(entry.state()), check.cost(), now) {
                Evaluation::Allowed { admitted, next } => {
                    decisions.push(A::decision(policy, admitted));
                    item.next = Some(next);
                }
                Evaluation::Denied(denial) => {
                    decisions.push(Decision::for_mode(policy.quota_mode(), denial));
                }
            }
        }
        let batch = BatchDecision::from_decisions(decisions);
        let mut committed = Committed::new();
        if batch.is_allowed() {
            // Every check of an allowed batch has a next state.
            for (entry, item) in held.drain(..).zip(items.iter()) {
                if let Some(next) = item.next {
                    entry.commit(next);
                    committed.push(A::stamp(&next));
                }
            }
        }
        // Otherwise dropping `held` releases every entry unchanged.
        if self.observer.is_some() {
            for (table, &shard_index) in tables.iter().zip(shard_indices) {
                effects.capacity.push(capacity_of(table, shard_index));
            }
        }
        Some(Ok((batch, committed)))
    }

    /// Gives back what `receipt` records for `checks` (the checks it was
    /// issued for, in order); see [`Lifecycle`] and the algorithm's refund
    /// rule. Each check is credited under its entry's lock; a key no longer
    /// stored gets nothing.
    ///
    /// # Errors
    ///
    /// [`MemoryStoreError::InvalidRefund`] when the receipt does not match
    /// `checks` (nothing changed); [`MemoryStoreError::PoisonedShard`] when a
    /// targeted shard is poisoned (checks before it in the receipt may have
    /// been credited).
    pub fn refund(
        &self,
        checks: &[Check<'_, A::Policy>],
        receipt: Receipt,
    ) -> Result<Refunded, MemoryStoreError> {
        let costs = receipt
            .matches(A::ISSUER, checks)
            .map(|()| receipt.admitted().iter().map(Admitted::cost).collect());
        self.credit_reported(checks, &receipt, costs)
    }

    /// Gives back what each of `checks` consumed beyond `used` (one amount
    /// per check); see [`Settle`] and the algorithm's refund rule, applied to
    /// the units given back. A check that keeps its whole cost is not
    /// touched.
    ///
    /// # Errors
    ///
    /// As [`refund`](Self::refund); a used amount above its check's cost is
    /// [`MemoryStoreError::InvalidRefund`] and changes nothing.
    pub fn settle(
        &self,
        checks: &[Check<'_, A::Policy>],
        receipt: Receipt,
        used: &[u64],
    ) -> Result<Refunded, MemoryStoreError> {
        let unused = receipt.unused(A::ISSUER, checks, used);
        self.credit_reported(checks, &receipt, unused)
    }

    /// Credits `units` (one amount per check, or why the receipt was refused)
    /// and reports it to the observer as a refund.
    fn credit_reported(
        &self,
        checks: &[Check<'_, A::Policy>],
        receipt: &Receipt,
        units: Result<SmallVec<[u64; 2]>, RefundError>,
    ) -> Result<Refunded, MemoryStoreError> {
        let report = AdmissionReporter::start(self.observer.as_deref());
        let result = units
            .map_err(MemoryStoreError::from)
            .and_then(|units| self.credit(checks, receipt, units));
        let outcome = match &result {
            Ok(refunded) => AdmissionOutcome::of_refund(refunded),
            Err(MemoryStoreError::InvalidRefund(_)) => AdmissionOutcome::of_failure(false),
            Err(_) => AdmissionOutcome::of_failure(true),
        };
        report.finish(Operation::Refund, checks, outcome);
        result
    }

    /// Credits `units` to each of `checks` under the receipt's stamps (the
    /// receipt already matched).
    fn credit(
        &self,
        checks: &[Check<'_, A::Policy>],
        receipt: &Receipt,
        units: impl IntoIterator<Item = u64>,
    ) -> Result<Refunded, MemoryStoreError> {
        let mut credited = 0;
        for ((check, admitted), units) in checks.iter().zip(receipt.admitted()).zip(units) {
            if units == 0 {
                continue;
            }
            let credit = self.with_entry(check, |held, now| {
                match A::refund(
                    check.policy(),
                    held.state(),
                    admitted.stamp().words(),
                    units,
                    now,
                ) {
                    Credit::To(next) => {
                        held.commit(next);
                        true
                    }
                    // Dropping `held` releases the entry unchanged.
                    Credit::Nothing => false,
                }
            })?;
            credited += usize::from(credit == Some(true));
        }
        Ok(Refunded::new(credited, checks.len()))
    }

    /// What `check` would get now, consuming nothing and storing nothing (a
    /// key not stored reads as a full quota); see [`Lifecycle::peek`].
    ///
    /// # Errors
    ///
    /// [`MemoryStoreError::PoisonedShard`] if the key's shard is poisoned.
    pub fn peek(&self, check: &Check<'_, A::Policy>) -> Result<Decision, MemoryStoreError> {
        let report = AdmissionReporter::start(self.observer.as_deref());
        let result = self.peek_inner(check);
        let outcome = match &result {
            Ok(decision) => AdmissionOutcome::of_peek(decision),
            Err(_) => AdmissionOutcome::of_failure(false),
        };
        report.finish(Operation::Peek, std::slice::from_ref(check), outcome);
        result
    }

    /// [`peek`](Self::peek), unobserved.
    fn peek_inner(&self, check: &Check<'_, A::Policy>) -> Result<Decision, MemoryStoreError> {
        let policy = check.policy();
        let carries = check.carries();
        let found = self.with_entry(check, |held, now| {
            let state = held.state();
            if !carries || A::deadline(&state) > now {
                Ok(A::peek(policy, Some(state), check.cost(), now))
            } else {
                Err(state)
            }
        })?;
        let found = match found {
            Some(Ok(decision)) => return Ok(decision),
            Some(Err(state)) => Some(state),
            None => None,
        };
        let now = self.now_nanos();
        let carried = if carries {
            self.carried(check, now)?
        } else {
            None
        };
        // A key the overflow tier counts reads as the tier would decide it.
        if found.is_none()
            && carried.is_none()
            && let Some(overflow) = &self.overflow
            && let Some(decision) = overflow.peek::<A>(
                policy,
                &StoreKey::new(&check.counter_key()),
                check.cost(),
                now,
            )
        {
            return Ok(decision);
        }
        let (initial, _) = start_from::<A>(found, carried, now);
        Ok(A::peek(policy, initial, check.cost(), now))
    }

    /// The state `check`'s counter starts from when it holds no live state:
    /// that of the first of its carry sources stored here that holds live
    /// state, translated at `now`, and which source it was. Reads each source
    /// under its entry's lock, with no other lock held.
    #[cold]
    fn carried(
        &self,
        check: &Check<'_, A::Policy>,
        now: u64,
    ) -> Result<Option<(A::State, CarriedFrom)>, MemoryStoreError> {
        let to = check.policy().kind();
        for source in check.carry_sources() {
            let read = self.with_counter(source.counter(), |held, _| {
                A::carry_source(source.policy(), &held.state())
            })?;
            let carried = read
                .flatten()
                .and_then(|state| carry(source.policy(), &state, to, now))
                .and_then(|state| A::carried(check.policy(), state));
            if let Some(state) = carried {
                return Ok(Some((state, source.from())));
            }
        }
        Ok(None)
    }

    /// Tells the observer that `check`'s counter carried a source's state.
    fn report_carry(&self, check: &Check<'_, A::Policy>, from: CarriedFrom) {
        if let Some(observer) = &self.observer {
            let observation = CarryObservation::new(PolicyLabel::of(check), from);
            notify(&**observer, |observer| observer.on_carry(&observation));
        }
    }

    /// Forgets `subject`'s counter for `policy` and returns whether a live
    /// counter existed; receipts issued before credit nothing afterwards. See
    /// [`Lifecycle::reset`]. The entry's slot is reclaimed by bounded
    /// cleanup once the deadline it had would have passed, when the shard
    /// is at least half full.
    ///
    /// # Errors
    ///
    /// [`MemoryStoreError::PoisonedShard`] if the key's shard is poisoned.
    pub fn reset(
        &self,
        policy: &A::Policy,
        subject: &SubjectKey,
    ) -> Result<bool, MemoryStoreError> {
        let report = AdmissionReporter::start(self.observer.as_deref());
        let check = Check::new(policy, *subject);
        let forget = |counter: &CounterKey| {
            self.with_counter(counter, |held, now| {
                let state = held.state();
                if A::deadline(&state) <= now {
                    return false;
                }
                held.commit(A::forget(state, now));
                true
            })
            .map(|existed| existed == Some(true))
        };
        // A reset counter must not carry its sources' state again.
        let result = check
            .carry_sources()
            .try_fold(forget(&check.counter_key())?, |existed, source| {
                Ok(forget(source.counter())? || existed)
            });
        let outcome = match &result {
            Ok(existed) => AdmissionOutcome::of_reset(*existed),
            Err(_) => AdmissionOutcome::of_failure(false),
        };
        report.finish(Operation::Reset, std::slice::from_ref(&check), outcome);
        result
    }

    /// Runs `operate` on `check`'s stored entry under its lock, at a time no
    /// earlier than any operation on its shard before; `None` when the key is
    /// not stored. Holds the shard only for reading, unless the key is staged.
    fn with_entry<T>(
        &self,
        check: &Check<'_, A::Policy>,
        operate: impl FnOnce(HeldEntry<'_, A::State>, u64) -> T,
    ) -> Result<Option<T>, MemoryStoreError> {
        self.with_counter(&check.counter_key(), operate)
    }

    /// [`with_entry`](Self::with_entry) for any counter of the store.
    fn with_counter<T>(
        &self,
        counter: &CounterKey,
        operate: impl FnOnce(HeldEntry<'_, A::State>, u64) -> T,
    ) -> Result<Option<T>, MemoryStoreError> {
        let key = StoreKey::new(counter);
        let shard_index = key.shard(self.shards.len());
        let shard = &self.shards[shard_index];
        let run = |entry: &Entry<A::State>| {
            let clock_now = self.now_nanos();
            let held = entry.lock();
            let now = shard.advance(clock_now);
            operate(held, now)
        };
        let table = shard.read(shard_index)?;
        if let Some(entry) = table.entry(&key) {
            return Ok(Some(run(entry)));
        }
        if !table.is_staged(&key) {
            return Ok(None);
        }
        drop(table);
        // A staged key is operated on in the table, once merged.
        let table = shard.write(shard_index)?;
        Ok(table.entry(&key).map(run))
    }

    /// Statistics for every shard: entries (including expired entries not yet
    /// removed), capacity, headroom and poisoning.
    #[must_use]
    pub fn stats(&self) -> MemoryStoreStats {
        let shards: Vec<ShardStats> = self
            .shards
            .iter()
            .enumerate()
            .map(|(index, shard)| {
                let table = shard.read_even_if_poisoned();
                ShardStats {
                    index,
                    entries: table.len(),
                    capacity: table.capacity(),
                    poisoned: shard.is_poisoned(),
                }
            })
            .collect();
        MemoryStoreStats {
            entries: shards.iter().map(|shard| shard.entries).sum(),
            capacity: self.config.max_keys(),
            shards,
            overflow: self.overflow.as_ref().map(Overflow::stats),
        }
    }

    /// Forgets every counter, admitting requests that stored state would have
    /// denied.
    ///
    /// # Errors
    ///
    /// [`MemoryStoreError::PoisonedShard`] if any shard is poisoned; nothing is
    /// cleared then. Use [`recover_poisoned`](Self::recover_poisoned) first.
    pub fn clear(&self) -> Result<(), MemoryStoreError> {
        let mut guards = Vec::with_capacity(self.shards.len());
        for (index, shard) in self.shards.iter().enumerate() {
            guards.push(shard.write(index)?);
        }
        for table in &mut guards {
            table.clear();
        }
        // While every shard is held, so no check counts in the sketch now.
        if let Some(overflow) = &self.overflow {
            overflow.clear();
        }
        Ok(())
    }

    /// Empties every poisoned shard, clears its poison and returns how many
    /// shards were recovered. Healthy shards keep their counters.
    ///
    /// This is an explicit availability trade-off: resetting a shard's counters
    /// can admit requests its lost state would have denied.
    pub fn recover_poisoned(&self) -> usize {
        self.shards.iter().filter(|shard| shard.recover()).count()
    }

    /// Reads the clock once for a whole batch and returns the time it runs at:
    /// never earlier than any of its shards has seen, and recorded in each.
    /// Call it holding what orders the batch after earlier operations.
    fn batch_now(&self, shard_indices: &[usize]) -> u64 {
        let now = shard_indices
            .iter()
            .map(|&shard_index| self.shards[shard_index].last_now())
            .fold(self.now_nanos(), u64::max);
        for &shard_index in shard_indices {
            self.shards[shard_index].advance(now);
        }
        now
    }

    #[inline]
    fn now_nanos(&self) -> u64 {
        self.clock.now_nanos()
    }

    fn clean(
        &self,
        table: &mut Table<A::State>,
        allowance: usize,
        now: u64,
        protected: &[SlotId],
        effects: &mut Effects,
    ) {
        let started = self.observer.as_ref().map(|_| Instant::now());
        let removed = table.remove_expired(allowance, now, protected);
        effects.removed += removed;
        effects.cleanup_allowance += allowance;
        if let Some(started) = started {
            effects.cleanup_elapsed += started.elapsed();
        }
    }

    /// Reports the cleanup and capacity effects of an operation, after every
    /// lock is released. Without an observer, a branch.
    #[inline]
    fn report_effects(&self, effects: &Effects) {
        if let Some(observer) = &self.observer {
            Self::report_observed_effects(&**observer, &self.name, effects);
        }
    }

    #[inline(never)]
    fn report_observed_effects(observer: &dyn Observer, name: &StoreName, effects: &Effects) {
        if effects.removed > 0 {
            let cleanup = CleanupObservation::new(
                effects.cleanup_allowance as u64,
                Some(effects.removed as u64),
                effects.cleanup_elapsed,
            );
            notify(observer, |observer| observer.on_cleanup(&cleanup));
        }
        for capacity in &effects.capacity {
            let capacity = capacity.in_store(name);
            notify(observer, |observer| observer.on_capacity(&capacity));
        }
    }
}

/// Where `shard` is in a batch's ascending list of the shards it touches.
/// The state a check starts from: the stored one while it is live;
/// otherwise the carried one, if any (over an expired entry, with the next
/// version, so the entry's receipts credit nothing), with its source;
/// otherwise the stored one.
fn start_from<A: Algorithm>(
    found: Option<A::State>,
    carried: Option<(A::State, CarriedFrom)>,
    now: u64,
) -> (Option<A::State>, Option<CarriedFrom>) {
    match (found, carried) {
        (Some(state), _) if A::deadline(&state) > now => (Some(state), None),
        (Some(state), Some((carried, from))) => (
            Some(carried.with_version(next_version(state.version()))),
            Some(from),
        ),
        (None, Some((carried, from))) => (Some(carried), Some(from)),
        (found, None) => (found, None),
    }
}

fn position_in(shard_indices: &[usize], shard: usize) -> usize {
    if shard_indices.len() == 1 {
        0
    } else {
        shard_indices.binary_search(&shard).unwrap_or(0)
    }
}

fn capacity_denial<S: Packed>(table: &Table<S>, now: u64) -> Denial {
    Denial::StorageCapacity {
        retry_after: table
            .next_expiry_after(now)
            .map(|deadline| Duration::from_nanos(deadline - now)),
    }
}

fn capacity_of<S: Packed>(table: &Table<S>, shard_index: usize) -> CapacityObservation<'static> {
    CapacityObservation::new(
        table.len() as u64,
        table.capacity() as u64,
        Some(shard_index),
    )
}

impl<A: Algorithm> fmt::Debug for Store<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("algorithm", &std::any::type_name::<A>())
            .field("config", &self.config)
            .field("clock", &self.clock)
            .field("observer", &self.observer.is_some())
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Process-local: each process counts on its own.
impl<A: Algorithm> Backend for Store<A>
where
    A::Policy: Policy,
{
    fn storage(&self, _policy: &Self::Policy) -> Storage {
        Storage::ProcessLocal
    }
}

impl<A: Algorithm> Lifecycle for Store<A>
where
    A::Policy: Policy,
{
    /// Runs [`Store::admit`] when first polled.
    async fn admit(
        &self,
        check: &Check<'_, Self::Policy>,
    ) -> Result<Admission<Decision>, Self::Error> {
        Store::admit(self, check)
    }

    /// Runs [`Store::admit_all`] when first polled.
    async fn admit_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> Result<Admission<BatchDecision>, Self::Error> {
        Store::admit_all(self, checks)
    }

    /// Runs [`Store::refund`] when first polled.
    async fn refund(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
    ) -> Result<Refunded, Self::Error> {
        Store::refund(self, checks, receipt)
    }

    /// Runs [`Store::peek`] when first polled.
    async fn peek(&self, check: &Check<'_, Self::Policy>) -> Result<Decision, Self::Error> {
        Store::peek(self, check)
    }

    /// Runs [`Store::reset`] when first polled.
    async fn reset(
        &self,
        policy: &Self::Policy,
        subject: &SubjectKey,
    ) -> Result<bool, Self::Error> {
        Store::reset(self, policy, subject)
    }
}

impl<A: Algorithm> Grant for Store<A>
where
    A::Policy: Policy,
{
    /// Runs [`Store::grant`] when first polled.
    async fn grant(
        &self,
        check: &Check<'_, Self::Policy>,
        up_to: u64,
    ) -> Result<Granted, Self::Error> {
        Store::grant(self, check, up_to)
    }
}

impl<A: Algorithm> Settle for Store<A>
where
    A::Policy: Policy,
{
    /// Runs [`Store::settle`] when first polled.
    async fn settle(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
        used: &[u64],
    ) -> Result<Refunded, Self::Error> {
        Store::settle(self, checks, receipt, used)
    }
}

impl<A: Algorithm> Limiter for Store<A>
where
    A::Policy: Policy,
{
    type Policy = A::Policy;
    type Error = MemoryStoreError;

    /// Runs [`Store::check`] when first polled.
    async fn check(&self, check: &Check<'_, Self::Policy>) -> Result<Decision, Self::Error> {
        Store::check(self, check)
    }

    /// Always decides at once: [`Store::check`].
    #[inline]
    fn check_now(&self, check: &Check<'_, Self::Policy>) -> Option<Result<Decision, Self::Error>> {
        Some(Store::check(self, check))
    }

    /// Runs [`Store::check_all`] when first polled.
    async fn check_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> Result<BatchDecision, Self::Error> {
        Store::check_all(self, checks)
    }
}
