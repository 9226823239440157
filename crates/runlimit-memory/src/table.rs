//! One shard's storage: a slot arena, a prehashed index into it, and a lazy
//! expiry heap.
//!
//! The index stores 4-byte slot numbers instead of whole entries, so the
//! per-key footprint is a 48-byte slot, an index bucket and a 16-byte heap
//! entry. The heap records, for every stored key, a lower bound of its
//! deadline: deadlines only move later while a key is stored, so admissions
//! never touch the heap. Cleanup pops the earliest bound; a key whose real
//! deadline has moved is pushed back with the real value instead of removed.

use std::{cmp::Reverse, collections::BinaryHeap};

use hashbrown::HashTable;
use runlimit_core::CounterKey;

/// The 32-byte storage identity of a counter: the subject key XOR the policy
/// fingerprint.
///
/// Within one policy this is injective. Across policies two counters collide only
/// if their subject keys differ by exactly the XOR of their fingerprints, which
/// HMAC-derived subject keys make as unlikely as a SHA-256 collision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreKey([u64; 4]);

const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(word: u64) -> u64 {
    let product = word.wrapping_mul(MIX);
    product ^ (product >> 29)
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
        Self([word(0), word(1), word(2), word(3)])
    }

    /// The hash the shard's index uses. Keys are already digests; mixing only
    /// protects the table from application digests with structure.
    #[inline]
    fn table_hash(&self) -> u64 {
        mix(self.0[0] ^ self.0[2])
    }

    /// The shard this key lives in, from words the table hash does not use.
    #[inline]
    pub(crate) fn shard(&self, shard_count: usize) -> usize {
        if shard_count == 1 {
            return 0;
        }
        let spread = u128::from(mix(self.0[1] ^ self.0[3])) * shard_count as u128;
        // The high half of a 64×64 product is below shard_count.
        usize::try_from(spread >> 64).unwrap_or(0)
    }
}

/// A stored key and its state: 48 bytes, packed densely rather than padded to
/// a cache line. Random-key checks are bound by cache and TLB misses, and a
/// quarter fewer bytes per key measured faster than one line per slot, while
/// the slots sharing a line always belong to the same shard (and lock).
#[derive(Debug, Clone, Copy)]
struct Slot<S> {
    key: StoreKey,
    state: S,
}

/// Where a stored key lives inside its shard.
pub(crate) type SlotId = u32;

#[derive(Debug)]
pub(crate) struct Table<S> {
    index: HashTable<SlotId>,
    slots: Vec<Slot<S>>,
    free: Vec<SlotId>,
    /// `(deadline lower bound, slot)` for every occupied slot, earliest first.
    expiry: BinaryHeap<Reverse<(u64, SlotId)>>,
    capacity: usize,
    /// The latest time this shard has seen; time never moves backwards here.
    last_now: u64,
}

impl<S: Copy> Table<S> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            index: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            expiry: BinaryHeap::new(),
            capacity,
            last_now: 0,
        }
    }

    /// Moves this shard's time to `now` unless it has already seen a later time.
    #[inline]
    pub(crate) fn advance(&mut self, now: u64) -> u64 {
        self.last_now = self.last_now.max(now);
        self.last_now
    }

    pub(crate) fn last_now(&self) -> u64 {
        self.last_now
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn headroom(&self) -> usize {
        self.capacity.saturating_sub(self.len())
    }

    #[inline]
    pub(crate) fn find(&self, key: &StoreKey) -> Option<SlotId> {
        self.index
            .find(key.table_hash(), |&slot| {
                self.slots[slot as usize].key == *key
            })
            .copied()
    }

    #[inline]
    pub(crate) fn state(&self, slot: SlotId) -> S {
        self.slots[slot as usize].state
    }

    #[inline]
    pub(crate) fn set_state(&mut self, slot: SlotId, state: S) {
        self.slots[slot as usize].state = state;
    }

    /// Stores a new key. The caller has checked that the shard has headroom.
    pub(crate) fn insert(&mut self, key: StoreKey, state: S, deadline: u64) -> SlotId {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Slot { key, state };
                slot
            }
            None => {
                reserve_within(&mut self.slots, self.capacity);
                self.slots.push(Slot { key, state });
                // len <= capacity <= MAX_KEYS (2^31), so it fits a SlotId.
                SlotId::try_from(self.slots.len() - 1).unwrap_or(SlotId::MAX)
            }
        };
        let slots = &self.slots;
        self.index.insert_unique(key.table_hash(), slot, |&other| {
            slots[other as usize].key.table_hash()
        });
        if self.expiry.len() == self.expiry.capacity() {
            let additional = self
                .expiry
                .len()
                .max(4)
                .min(self.capacity - self.expiry.len());
            self.expiry.reserve_exact(additional);
        }
        self.expiry.push(Reverse((deadline, slot)));
        slot
    }

    /// Removes expired entries, popping at most `allowance` heap entries; a key
    /// in `protected` (slots an in-flight batch already resolved) is never
    /// removed. Returns how many entries were removed.
    pub(crate) fn remove_expired(
        &mut self,
        allowance: usize,
        now: u64,
        protected: &[SlotId],
        deadline: impl Fn(&S) -> u64,
    ) -> usize {
        let mut removed = 0;
        for _ in 0..allowance {
            let Some(&Reverse((bound, slot))) = self.expiry.peek() else {
                break;
            };
            if bound > now {
                break;
            }
            self.expiry.pop();
            let actual = deadline(&self.slots[slot as usize].state);
            if actual > now || protected.contains(&slot) {
                // Still live: record its real deadline (for a protected expired key,
                // push it past `now` so it is looked at again by a later operation).
                self.expiry.push(Reverse((actual.max(now + 1), slot)));
                continue;
            }
            let key = self.slots[slot as usize].key;
            if let Ok(entry) = self
                .index
                .find_entry(key.table_hash(), |&other| other == slot)
            {
                entry.remove();
            }
            self.free.push(slot);
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

    /// Forgets every entry, keeping the shard's time.
    pub(crate) fn clear(&mut self) {
        self.index.clear();
        self.slots.clear();
        self.free.clear();
        self.expiry.clear();
    }
}

/// Grows `vec` for one more element without exceeding `limit` elements of
/// capacity, so a full shard holds no unused tail.
fn reserve_within<T>(vec: &mut Vec<T>, limit: usize) {
    if vec.len() == vec.capacity() {
        let additional = vec.len().max(4).min(limit.saturating_sub(vec.len())).max(1);
        vec.reserve_exact(additional);
    }
}
