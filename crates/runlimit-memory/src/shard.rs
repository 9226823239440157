//! One shard of a store: its table behind a reader-sharded lock, the latest
//! time an operation on it ran at, and its poison flag.
//!
//! Checks on stored keys are most of a store's work, and they only read the
//! table's structure (they change an entry through its own lock bit), so they
//! hold the shard for reading. The lock is [`ShardedLock`]: a reader locks one
//! of eight cache-padded reader locks picked by its thread, so two threads
//! checking keys on the same shard write different cache lines. A lock word
//! shared by every check on a shard (a mutex, or a plain reader-writer lock's
//! reader count) has to move between cores on every other check, and on a
//! two-core machine that transfer, not the work, limits how far a second thread
//! adds throughput. Writers (inserts, cleanup, batches that store a new key)
//! lock all eight, which is why a new key is staged beside the table under the
//! read lock when it can be (see [`Table`]).

use std::{
    ops::{Deref, DerefMut},
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
};

use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};

use crate::{algorithm::sealed::Packed, error::MemoryStoreError, table::Table};

/// A shard, aligned so that neighbouring shards' writes never share a line.
#[repr(align(128))]
pub(crate) struct Shard<S: Packed> {
    table: ShardedLock<Table<S>>,
    /// The latest time an operation on this shard ran at, in nanoseconds.
    last_now: AtomicU64,
    /// Set when code panicked while holding this shard; cleared only by
    /// recovery.
    poisoned: AtomicBool,
    /// The most keys the shard may hold, readable without its lock.
    capacity: usize,
}

impl<S: Packed> Shard<S> {
    /// An empty shard for at most `capacity` keys whose states expire at
    /// `deadline`.
    pub(crate) fn new(capacity: usize, deadline: fn(&S) -> u64) -> Self {
        Self {
            table: ShardedLock::new(Table::new(capacity, deadline)),
            last_now: AtomicU64::new(0),
            poisoned: AtomicBool::new(false),
            capacity,
        }
    }

    /// The most keys this shard may hold.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Holds the table for reading: lookups, and entry updates under an entry's
    /// lock.
    ///
    /// # Errors
    ///
    /// [`MemoryStoreError::PoisonedShard`] if the shard is poisoned.
    #[inline]
    pub(crate) fn read(&self, shard_index: usize) -> Result<SharedTable<'_, S>, MemoryStoreError> {
        let table = self.read_even_if_poisoned();
        if self.is_poisoned() {
            return Err(MemoryStoreError::PoisonedShard { shard_index });
        }
        Ok(table)
    }

    /// Holds the table exclusively: inserts, removals, and batches with a key
    /// not yet stored. Keys staged by readers are merged into the table first,
    /// so an exclusive holder finds every key in it.
    ///
    /// # Errors
    ///
    /// [`MemoryStoreError::PoisonedShard`] if the shard is poisoned.
    pub(crate) fn write(
        &self,
        shard_index: usize,
    ) -> Result<ExclusiveTable<'_, S>, MemoryStoreError> {
        let mut table = self.write_even_if_poisoned();
        if self.is_poisoned() {
            return Err(MemoryStoreError::PoisonedShard { shard_index });
        }
        table.merge_staged();
        Ok(table)
    }

    /// Holds the table for reading whether or not it is poisoned, for
    /// statistics.
    pub(crate) fn read_even_if_poisoned(&self) -> SharedTable<'_, S> {
        // The lock's own poisoning is not used: a panic under a read guard does
        // not set it, so `PoisonOnPanic` keeps this shard's flag for both kinds.
        let table = self
            .table
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        SharedTable {
            _poison: PoisonOnPanic(&self.poisoned),
            table,
        }
    }

    fn write_even_if_poisoned(&self) -> ExclusiveTable<'_, S> {
        let table = self
            .table
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ExclusiveTable {
            _poison: PoisonOnPanic(&self.poisoned),
            table,
        }
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        // Set before the panicking holder released the lock and read after
        // taking it. Two readers hold different reader locks, so the flag's own
        // release and acquire order a reader's panic before what sees it.
        self.poisoned.load(Ordering::Acquire)
    }

    /// Empties the shard if it is poisoned and clears the poison. Returns
    /// whether it was poisoned.
    pub(crate) fn recover(&self) -> bool {
        let mut table = self.write_even_if_poisoned();
        if !self.is_poisoned() {
            return false;
        }
        // Cleared while the emptied shard is still held, so no other operation
        // can observe it half-recovered.
        table.clear();
        self.poisoned.store(false, Ordering::Release);
        true
    }

    /// The time to run an operation at: `now`, unless an operation on this shard
    /// already ran at a later time. Call it while holding what orders this
    /// operation after earlier ones (the shard exclusively, or the entry's
    /// lock), so time never moves backwards within the shard.
    ///
    /// Writes the shard's line only when the clock has moved on, so a clock
    /// with a coarse tick (the default [`SystemClock`](crate::SystemClock)
    /// ticks in milliseconds) lets checks on stored keys write nothing shared.
    #[inline]
    pub(crate) fn advance(&self, now: u64) -> u64 {
        let last = self.last_now.load(Ordering::Acquire);
        if now <= last {
            return last;
        }
        self.last_now.fetch_max(now, Ordering::AcqRel).max(now)
    }

    /// The latest time an operation on this shard ran at.
    pub(crate) fn last_now(&self) -> u64 {
        self.last_now.load(Ordering::Acquire)
    }
}

/// Marks its shard poisoned when dropped while the thread panics.
struct PoisonOnPanic<'a>(&'a AtomicBool);

impl Drop for PoisonOnPanic<'_> {
    #[inline]
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// A shard's table held for reading.
pub(crate) struct SharedTable<'a, S: Packed> {
    // Declared first, so a panicking holder poisons the shard before the lock
    // is released.
    _poison: PoisonOnPanic<'a>,
    table: ShardedLockReadGuard<'a, Table<S>>,
}

impl<S: Packed> Deref for SharedTable<'_, S> {
    type Target = Table<S>;

    fn deref(&self) -> &Table<S> {
        &self.table
    }
}

/// A shard's table held exclusively.
pub(crate) struct ExclusiveTable<'a, S: Packed> {
    // Declared first, so a panicking holder poisons the shard before the lock
    // is released.
    _poison: PoisonOnPanic<'a>,
    table: ShardedLockWriteGuard<'a, Table<S>>,
}

impl<S: Packed> Deref for ExclusiveTable<'_, S> {
    type Target = Table<S>;

    fn deref(&self) -> &Table<S> {
        &self.table
    }
}

impl<S: Packed> DerefMut for ExclusiveTable<'_, S> {
    fn deref_mut(&mut self) -> &mut Table<S> {
        &mut self.table
    }
}
