//! One shard's storage: a prehashed table holding each key's state inline, and
//! a lazy expiry heap.
//!
//! The per-key footprint is a 32-byte entry and a control byte at the hash
//! table's load factor, plus a 16-byte heap entry. A lookup touches the table's
//! control bytes and then the entry itself: no second hop through an index.
//!
//! An entry's state is two atomic words, and the second carries a lock bit. A
//! check on a stored key holds its shard only for reading and takes the entry's
//! lock bit, so it writes nothing but the entry's own cache line (a batch of
//! stored keys takes several). Everything that changes the table itself
//! (inserts, removals) holds the shard exclusively, and then no entry lock is
//! held.
//!
//! Except the first store of a key when nothing is due for cleanup: taking
//! a reader-sharded lock exclusively writes every reader's line, which made
//! a flood of new keys cost about half again a stored key's check. Such a
//! key is staged beside the table under a small mutex while the shard is held
//! for reading, and the next exclusive holder merges the staged keys in, so
//! the write lock is paid once per [`STAGED_KEYS`] new keys.
//!
//! The heap records, for every stored key, a lower bound of its deadline and the
//! table bucket that holds the key: admissions only move deadlines later, so
//! they never touch the heap. (A reset or refund can move a deadline earlier;
//! the entry is then reclaimed when its recorded bound passes, exactly when
//! it would have been without the reset.) Cleanup pops the earliest bound;
//! a key whose real deadline has moved is pushed back with the real value
//! instead of removed. Buckets stay put until the table grows (or rehashes
//! away its tombstones); the table then rebuilds the heap from the entries,
//! which costs no more than the rehash itself.

use std::{
    cmp::Reverse,
    collections::BinaryHeap,
    sync::{
        Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use crossbeam_utils::CachePadded;
use hashbrown::HashTable;
use runlimit_core::CounterKey;

use crate::algorithm::sealed::{AtomicWords, Packed};

/// The 16-byte storage identity of a counter: the 32-byte subject key XOR the
/// policy fingerprint, folded to 128 bits.
///
/// Subject keys are HMAC outputs (or application digests that must be just as
/// unpredictable), so two distinct counters share an identity with probability
/// about 2⁻¹²⁸ per pair, the same odds as guessing the HMAC. The fold runs the
/// upper words through a bijective mixer first, so application digests that
/// vary in one word only still map to distinct identities.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreKey([u64; 2]);

/// Redacted: a counter's identity is derived from its subject.
impl std::fmt::Debug for StoreKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreKey(<redacted>)")
    }
}

const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(word: u64) -> u64 {
    let product = word.wrapping_mul(MIX);
    product ^ (product >> 29)
}

/// SplitMix64's finalizer: every input bit flips every output bit with
/// probability one half.
fn avalanche(word: u64) -> u64 {
    let word = (word ^ (word >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let word = (word ^ (word >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    word ^ (word >> 31)
}

impl StoreKey {
    #[inline]
    pub(crate) fn new(counter: &CounterKey) -> Self {
        let fingerprint = counter.fingerprint().as_bytes();
        let subject = counter.subject().as_bytes();
        let word = |index: usize| {
            let read = |bytes: &[u8; 32]| {
                let mut word = [0; 8];
                word.copy_from_slice(&bytes[index * 8..index * 8 + 8]);
                u64::from_le_bytes(word)
            };
            read(fingerprint) ^ read(subject)
        };
        Self([word(0) ^ mix(word(2)), word(1) ^ mix(word(3))])
    }

    /// The hash the shard's index uses. Keys are already digests; mixing only
    /// protects the table from application digests with structure.
    #[inline]
    fn table_hash(&self) -> u64 {
        mix(self.0[0])
    }

    /// The hash choosing this key's cell in row `row` of an overflow sketch:
    /// both words through a full-avalanche mixer seeded per row, so rows are
    /// independent of each other and of the table's and shard's hashes.
    #[inline]
    pub(crate) fn sketch_hash(&self, row: usize) -> u64 {
        let seed = (row as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F);
        avalanche(self.0[0] ^ seed) ^ avalanche(self.0[1].wrapping_add(seed)).rotate_left(32)
    }

    /// The shard this key lives in, from the word the table hash does not use.
    #[inline]
    pub(crate) fn shard(&self, shard_count: usize) -> usize {
        if shard_count == 1 {
            return 0;
        }
        let spread = u128::from(mix(self.0[1])) * shard_count as u128;
        // The high half of a 64×64 product is below shard_count.
        usize::try_from(spread >> 64).unwrap_or(0)
    }
}

/// A stored key and its state, aligned so that an entry never straddles two
/// cache lines: 32 bytes for fixed windows and GCRA (two state words), 64 for
/// sliding windows (six). Random-key checks are bound by cache misses, and
/// this is the line a lookup must load.
///
/// The zero-length array of `S::Align` (an empty type aligned to the entry's
/// size) sets the alignment without taking space.
#[repr(C)]
pub(crate) struct Entry<S: Packed> {
    _align: [S::Align; 0],
    key: StoreKey,
    /// The packed state; bit 63 of the last word is the entry's lock.
    state: S::Atomic,
}

impl<S: Packed> std::fmt::Debug for Entry<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// The lock bit in an entry's last state word.
const LOCKED: u64 = 1 << 63;

/// Spins on a held entry lock before yielding the thread: a holder keeps it
/// for one evaluation, unless it was preempted.
const SPINS_BEFORE_YIELD: u32 = 64;

impl<S: Packed> Entry<S> {
    fn new(key: StoreKey, state: S) -> Self {
        let mut words = state.pack();
        if let Some(last) = words.as_mut().last_mut() {
            *last &= !LOCKED;
        }
        Self {
            _align: [],
            key,
            state: S::Atomic::new(words),
        }
    }

    fn words(&self) -> &[AtomicU64] {
        self.state.words()
    }

    fn last(&self) -> &AtomicU64 {
        let words = self.words();
        &words[words.len() - 1]
    }

    /// The state, read by a holder of the shard's exclusive lock (no entry lock
    /// is held then).
    fn state(&self) -> S {
        let last = self.last().load(Ordering::Relaxed) & !LOCKED;
        self.state_with_last(last)
    }

    /// The state whose last word is `last` (the holder's copy, with the lock
    /// bit clear) and whose other words are stored.
    fn state_with_last(&self, last: u64) -> S {
        let mut words = S::Words::default();
        let stored = self.words();
        let count = stored.len();
        for (word, atomic) in words.as_mut()[..count - 1].iter_mut().zip(stored) {
            *word = atomic.load(Ordering::Relaxed);
        }
        words.as_mut()[count - 1] = last;
        S::unpack(words)
    }

    /// The first and last words of a two-word state, read without the
    /// entry's lock, for a denial; `None` while a check holds the entry, or
    /// if a check committed between the reads.
    ///
    /// The words are read first, last, first, last, each with acquire, and
    /// each pair must agree. What that proves:
    /// - The first word belongs to a committed state: a holder takes the lock
    ///   before it stores the word (with release), so loading the word orders
    ///   that lock before the next load of the lock word, and finding it free
    ///   there means the holder released it.
    /// - The last word is a released state's (it was read unlocked), and it
    ///   did not change between its two reads except through states with the
    ///   same version. Resets change the version, so the two reads span no
    ///   reset unless 2<sup>32</sup> resets of one key ran between them.
    ///
    /// The pair need not be one state's (a commit may store the first word
    /// between the reads of the last); each algorithm's
    /// `deny_from_words` says why its denials hold all the same.
    #[inline]
    pub(crate) fn words_for_denial(&self) -> Option<(u64, u64)> {
        let words = self.words();
        if words.len() != 2 {
            return None;
        }
        let first = words[0].load(Ordering::Acquire);
        let last = words[1].load(Ordering::Acquire);
        let first_again = words[0].load(Ordering::Acquire);
        let last_again = words[1].load(Ordering::Acquire);
        (last & LOCKED == 0 && last == last_again && first == first_again).then_some((first, last))
    }

    /// Takes this entry's lock, waiting while another check holds it.
    #[inline]
    pub(crate) fn lock(&self) -> HeldEntry<'_, S> {
        let word = self.last();
        let mut spins = 0;
        loop {
            let last = word.load(Ordering::Relaxed) & !LOCKED;
            // Acquire: see the other words as the previous holder stored them.
            if word
                .compare_exchange_weak(last, last | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return HeldEntry { entry: self, last };
            }
            spins += 1;
            if spins < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Takes this entry's lock if no other check holds it.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<HeldEntry<'_, S>> {
        let word = self.last();
        let last = word.load(Ordering::Relaxed) & !LOCKED;
        // Acquire: see the other words as the previous holder stored them.
        word.compare_exchange(last, last | LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        Some(HeldEntry { entry: self, last })
    }
}

/// A held entry lock. Dropping it releases the entry with the state it had,
/// unless [`commit`](Self::commit) replaced it, so a panic while it is held
/// (an injected clock, say) leaves the entry unchanged and unlocked.
#[derive(Debug)]
pub(crate) struct HeldEntry<'a, S: Packed> {
    entry: &'a Entry<S>,
    /// The last state word to store when the lock is released.
    last: u64,
}

impl<S: Packed> HeldEntry<'_, S> {
    /// The entry's state.
    #[inline]
    pub(crate) fn state(&self) -> S {
        self.entry.state_with_last(self.last)
    }

    /// Replaces the entry's state and releases the lock.
    #[inline]
    pub(crate) fn commit(mut self, state: S) {
        let words = state.pack();
        let words = words.as_ref();
        let count = words.len();
        debug_assert_eq!(
            words[count - 1] & LOCKED,
            0,
            "a packed state uses the lock bit"
        );
        // Release: a check reading the first word without the lock (see
        // `words_for_denial`) then sees this lock taken, or released.
        for (atomic, word) in self.entry.words().iter().zip(&words[..count - 1]) {
            atomic.store(*word, Ordering::Release);
        }
        self.last = words[count - 1] & !LOCKED;
    }
}

impl<S: Packed> Drop for HeldEntry<'_, S> {
    #[inline]
    fn drop(&mut self) {
        // Release: the next holder sees the other words stored before this.
        self.entry.last().store(self.last, Ordering::Release);
    }
}

/// Where a stored key lives inside its shard: a table bucket, stable until the
/// table grows.
pub(crate) type SlotId = u32;

/// One shard's entries and expiry heap, for states of type `S`, and the new
/// keys staged beside them.
#[derive(Debug)]
pub(crate) struct Table<S: Packed> {
    entries: HashTable<Entry<S>>,
    capacity: usize,
    /// `(deadline lower bound, bucket)` for every stored key, earliest first.
    expiry: BinaryHeap<Reverse<(u64, SlotId)>>,
    /// When a state expires.
    deadline: fn(&S) -> u64,
    /// New keys stored by checks that hold the shard only for reading; on
    /// its own line, since checks of stored keys only read the table's.
    staging: CachePadded<Mutex<Staging<S>>>,
}

/// The most new keys a shard holds beside its table before an exclusive
/// holder merges them in: each staged key saves a shard-wide write lock,
/// and a lookup that misses the table scans them all (four cache lines for
/// two-word states, eight for sliding windows).
pub(crate) const STAGED_KEYS: usize = 8;

/// New keys stored under the shard's read lock, waiting to be merged into
/// its table by the next holder of the shard's exclusive lock.
///
/// A key is either in the table or here, never both: keys come here only
/// from a reader that missed the table (and no key enters the table while a
/// reader holds the shard), and leave only by the exclusive merge. A staged
/// key is never changed here: a second operation on it takes the exclusive
/// path, which merges it first, so a hot new key is staged for one check.
struct Staging<S> {
    keys: Vec<(StoreKey, S)>,
    /// The earliest deadline of a staged key (`u64::MAX` when none is).
    earliest: u64,
    /// Counts inserts, staged or not; a new key's version is drawn from it.
    inserts: u32,
}

/// Redacted: staged keys are derived from subjects.
impl<S> std::fmt::Debug for Staging<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging")
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

impl<S: Packed> Staging<S> {
    /// `state` with a fresh version.
    fn versioned(&mut self, state: S) -> S {
        self.inserts = self.inserts.wrapping_add(1);
        state.with_version(self.inserts.wrapping_mul(VERSION_STEP))
    }
}

/// A shard's staged keys, held by a check that holds the shard for reading.
pub(crate) struct StagingGuard<'a, S: Packed> {
    table: &'a Table<S>,
    staging: MutexGuard<'a, Staging<S>>,
}

impl<S: Packed> StagingGuard<'_, S> {
    /// Whether a new `key` may be staged at `now`, doing exactly what the
    /// exclusive path would: it is not staged already (a second operation on
    /// a staged key merges it), there is room for it, and either the shard is
    /// less than half full or no stored or staged key may have expired (the
    /// exclusive path would spend its cleanup allowance on those first).
    #[inline]
    pub(crate) fn accepts(&self, key: &StoreKey, now: u64) -> bool {
        let staged = &self.staging.keys;
        let stored = self.table.entries.len() + staged.len();
        staged.len() < STAGED_KEYS
            && stored < self.table.capacity
            && (!cleans_at(stored, self.table.capacity)
                || (self.staging.earliest > now
                    && self
                        .table
                        .expiry
                        .peek()
                        .is_none_or(|&Reverse((bound, _))| bound > now)))
            && !staged.iter().any(|(staged, _)| staged == key)
    }

    /// Stages a new key the caller found [`accepts`](Self::accepts)able, with
    /// a fresh version, and returns the state as staged.
    #[inline]
    pub(crate) fn stage(&mut self, key: StoreKey, state: S) -> S {
        let state = self.staging.versioned(state);
        self.staging.earliest = self.staging.earliest.min((self.table.deadline)(&state));
        self.staging.keys.push((key, state));
        state
    }
}

/// An odd constant close to 2<sup>32</sup> / φ: successive inserts get
/// versions spread over the whole 32-bit range, so a key stored again after
/// a reset and cleanup almost never gets a version that a receipt issued
/// before carries (a receipt's version is its entry's version at admission,
/// plus the few invalidations since).
const VERSION_STEP: u32 = 0x9E37_79B9;

/// Whether a shard holding `stored` of `capacity` keys cleans up before it
/// stores another: from half full on.
fn cleans_at(stored: usize, capacity: usize) -> bool {
    stored.saturating_mul(2) >= capacity
}

fn slot_id(bucket: usize) -> SlotId {
    // A shard holds at most MAX_KEYS (2^31) keys, so its table has at most 2^32
    // buckets and every bucket index fits.
    SlotId::try_from(bucket).unwrap_or(SlotId::MAX)
}

impl<S: Packed> Table<S> {
    /// An empty table for at most `capacity` keys whose states expire at
    /// `deadline`.
    pub(crate) fn new(capacity: usize, deadline: fn(&S) -> u64) -> Self {
        Self {
            entries: HashTable::new(),
            expiry: BinaryHeap::new(),
            capacity,
            deadline,
            staging: CachePadded::new(Mutex::new(Staging {
                keys: Vec::with_capacity(STAGED_KEYS),
                earliest: u64::MAX,
                inserts: 0,
            })),
        }
    }

    /// Keys stored and staged.
    pub(crate) fn len(&self) -> usize {
        self.entries.len() + self.lock_staging().keys.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether storing a new key first removes expired entries: from half
    /// full on. Below that a key whose state expired stays, and a check of it
    /// updates it in place (most GCRA keys replenish between checks), while
    /// the cleanup from half full on keeps the expiry heap's bounds fresh by
    /// the time the shard fills.
    pub(crate) fn cleans_on_insert(&self) -> bool {
        cleans_at(self.len(), self.capacity)
    }

    pub(crate) fn headroom(&self) -> usize {
        self.capacity.saturating_sub(self.len())
    }

    /// Holds the shard's staged keys, for a check that holds the shard for
    /// reading and missed the table.
    #[inline]
    pub(crate) fn staging(&self) -> StagingGuard<'_, S> {
        StagingGuard {
            table: self,
            staging: self.lock_staging(),
        }
    }

    /// Whether `key` is staged beside the table.
    pub(crate) fn is_staged(&self, key: &StoreKey) -> bool {
        self.lock_staging()
            .keys
            .iter()
            .any(|(staged, _)| staged == key)
    }

    fn lock_staging(&self) -> MutexGuard<'_, Staging<S>> {
        // Nothing that can panic runs under this lock but the algorithm's
        // arithmetic, and a panic there poisons the shard itself.
        self.staging.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn staging_mut(&mut self) -> &mut Staging<S> {
        self.staging
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves the staged keys into the table, for the holder of the shard's
    /// exclusive lock. Invalidates every slot returned before.
    pub(crate) fn merge_staged(&mut self) {
        let staging = self.staging_mut();
        if staging.keys.is_empty() {
            return;
        }
        staging.earliest = u64::MAX;
        let mut staged = std::mem::take(&mut staging.keys);
        for (key, state) in staged.drain(..) {
            self.store(key, state);
        }
        // Back in place, keeping its allocation.
        self.staging_mut().keys = staged;
    }

    /// The entry storing `key`, for a check that holds the shard for reading
    /// and will lock the entry.
    #[inline]
    pub(crate) fn entry(&self, key: &StoreKey) -> Option<&Entry<S>> {
        self.entries
            .find(key.table_hash(), |entry| entry.key == *key)
    }

    /// Where `key` is stored, and its state, for a holder of the shard's
    /// exclusive lock.
    #[inline]
    pub(crate) fn find(&self, key: &StoreKey) -> Option<(SlotId, S)> {
        let bucket = self
            .entries
            .find_bucket_index(key.table_hash(), |entry| entry.key == *key)?;
        let entry = self.entries.get_bucket(bucket)?;
        Some((slot_id(bucket), entry.state()))
    }

    /// Replaces the state of the key `find` returned `slot` for. Slots stay
    /// valid until the next [`insert`](Self::insert).
    #[inline]
    pub(crate) fn set_state(&mut self, slot: SlotId, state: S) {
        if let Some(entry) = self.entries.get_bucket_mut(slot as usize) {
            let mut words = state.pack();
            if let Some(last) = words.as_mut().last_mut() {
                *last &= !LOCKED;
            }
            entry.state.set(words);
        }
    }

    /// Stores a new key with a fresh version, and returns the state as
    /// stored. The caller has checked that the shard has headroom.
    /// Invalidates every slot returned before.
    pub(crate) fn insert(&mut self, key: StoreKey, state: S) -> S {
        let state = self.staging_mut().versioned(state);
        self.store(key, state);
        state
    }

    /// Stores a new key's versioned state in the table.
    fn store(&mut self, key: StoreKey, state: S) {
        // With no growth left, an insert that does not reuse a tombstone grows the
        // table or rehashes it in place, moving entries; either leaves room after.
        let was_full = self.entries.len() == self.entries.capacity();
        let bucket = self
            .entries
            .insert_unique(key.table_hash(), Entry::new(key, state), |entry| {
                entry.key.table_hash()
            })
            .bucket_index();
        if was_full && self.entries.len() < self.entries.capacity() {
            self.rebuild_expiry();
            return;
        }
        if self.expiry.len() == self.expiry.capacity() {
            let additional = self
                .expiry
                .len()
                .max(4)
                .min(self.capacity.saturating_sub(self.expiry.len()).max(1));
            self.expiry.reserve_exact(additional);
        }
        self.expiry
            .push(Reverse(((self.deadline)(&state), slot_id(bucket))));
    }

    /// Records every stored key's real deadline under its current bucket.
    fn rebuild_expiry(&mut self) {
        let deadline = self.deadline;
        let mut heap = std::mem::take(&mut self.expiry).into_vec();
        heap.clear();
        let needed = self.entries.len().min(self.capacity);
        if heap.capacity() < needed {
            heap.reserve_exact(needed - heap.len());
        }
        heap.extend(self.entries.iter_buckets().filter_map(|bucket| {
            let entry = self.entries.get_bucket(bucket)?;
            Some(Reverse((deadline(&entry.state()), slot_id(bucket))))
        }));
        self.expiry = BinaryHeap::from(heap);
    }

    /// Removes expired entries, popping at most `allowance` heap entries; a key
    /// in `protected` (slots an in-flight batch already resolved) is never
    /// removed. Removal never moves other entries, so resolved slots stay valid.
    /// Returns how many entries were removed.
    pub(crate) fn remove_expired(
        &mut self,
        allowance: usize,
        now: u64,
        protected: &[SlotId],
    ) -> usize {
        let deadline = self.deadline;
        let mut removed = 0;
        for _ in 0..allowance {
            let Some(&Reverse((bound, slot))) = self.expiry.peek() else {
                break;
            };
            if bound > now {
                break;
            }
            self.expiry.pop();
            let Ok(entry) = self.entries.get_bucket_entry(slot as usize) else {
                // Every heap record names a stored key; nothing to remove otherwise.
                continue;
            };
            let actual = deadline(&entry.get().state());
            if actual > now || protected.contains(&slot) {
                // Still live: record its real deadline (for a protected expired key,
                // push it past `now` so it is looked at again by a later operation).
                self.expiry.push(Reverse((actual.max(now + 1), slot)));
                continue;
            }
            entry.remove();
            removed += 1;
        }
        removed
    }

    /// The earliest time any stored entry may expire, when it lies after `now`.
    pub(crate) fn next_expiry_after(&self, now: u64) -> Option<u64> {
        self.expiry
            .peek()
            .map(|&Reverse((bound, _))| bound)
            .filter(|&bound| bound > now)
    }

    /// Forgets every entry, stored or staged.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.expiry.clear();
        let staging = self.staging_mut();
        staging.keys.clear();
        staging.earliest = u64::MAX;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::{Packed, StoreKey, Table};

    /// A test state: the key's deadline itself.
    impl Packed for u64 {
        type Words = [u64; 2];
        type Atomic = [std::sync::atomic::AtomicU64; 2];
        type Align = crate::algorithm::sealed::Align32;

        fn pack(self) -> [u64; 2] {
            [self, 0]
        }

        fn unpack([deadline, _]: [u64; 2]) -> Self {
            deadline
        }

        fn version(&self) -> u32 {
            0
        }

        fn with_version(self, _: u32) -> Self {
            self
        }
    }

    /// The state is the key's deadline itself.
    fn deadline(state: &u64) -> u64 {
        *state
    }

    fn key(id: u8) -> StoreKey {
        StoreKey([
            u64::from(id).wrapping_mul(0x0123_4567_89AB_CDEF),
            u64::from(id),
        ])
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Store key `id` (if absent and there is room) living `ttl` from now.
        Insert(u8, u64),
        /// Move a stored key's deadline later by `by`.
        Extend(u8, u64),
        Advance(u64),
        /// Remove expired entries with this allowance.
        Clean(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..64, 1u64..50).prop_map(|(id, ttl)| Op::Insert(id, ttl)),
            2 => (0u8..64, 1u64..50).prop_map(|(id, by)| Op::Extend(id, by)),
            2 => (1u64..20).prop_map(Op::Advance),
            2 => (1usize..6).prop_map(Op::Clean),
        ]
    }

    proptest! {
        /// Growth, in-place rehashes and tombstone reuse move entries between
        /// buckets; the expiry heap must follow them, so cleanup removes exactly
        /// expired keys and never loses or keeps a stale one.
        #[test]
        fn the_expiry_heap_follows_entries_through_growth_and_churn(
            ops in prop::collection::vec(op(), 1..400),
        ) {
            let mut table = Table::<u64>::new(40, deadline);
            let mut model: HashMap<u8, u64> = HashMap::new();
            let mut now = 0;
            for op in ops {
                match op {
                    Op::Insert(id, ttl) => {
                        if table.find(&key(id)).is_none() && table.headroom() > 0 {
                            table.insert(key(id), now + ttl);
                            model.insert(id, now + ttl);
                        }
                    }
                    Op::Extend(id, by) => {
                        if let Some((slot, state)) = table.find(&key(id)) {
                            table.set_state(slot, state + by);
                            model.insert(id, state + by);
                        }
                    }
                    Op::Advance(by) => now += by,
                    Op::Clean(allowance) => {
                        let removed = table.remove_expired(allowance, now, &[]);
                        let gone: Vec<u64> = model
                            .iter()
                            .filter(|&(&id, _)| table.find(&key(id)).is_none())
                            .map(|(_, &due)| due)
                            .collect();
                        prop_assert!(gone.iter().all(|&due| due <= now), "removed a live key");
                        prop_assert_eq!(gone.len(), removed);
                        prop_assert!(removed <= allowance);
                        model.retain(|&id, _| table.find(&key(id)).is_some());
                    }
                }
                prop_assert_eq!(table.len(), model.len());
                for (&id, &due) in &model {
                    prop_assert_eq!(table.find(&key(id)).map(|(_, state)| state), Some(due));
                }
                // The heap's earliest bound never lies after a live key's deadline.
                if let Some(earliest) = table.next_expiry_after(now) {
                    prop_assert!(model.values().all(|&due| due <= now || due >= earliest));
                }
            }
            let removed = table.remove_expired(usize::MAX, now, &[]);
            let expired = model.values().filter(|&&due| due <= now).count();
            prop_assert_eq!(removed, expired);
            prop_assert_eq!(table.len(), model.len() - expired);
        }
    }
}
