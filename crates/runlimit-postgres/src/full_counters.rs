//! Counters that recent replies found full: which statement a batch takes.
//!
//! A small batch is sent as an `UPDATE` that admits it in place (the `batch`
//! module). When one of its counters is full, that update has usually added
//! the other checks' costs before it finds out, and settling the batch must
//! take them back: two writes to deny. A login form under credential
//! stuffing sends the same full counter again and again, so the limiter
//! remembers, per limiter and for as long as the reply said the window
//! would stay full, which counters were full, and sends a batch naming one
//! of them to the settling function directly, which denies it from the rows
//! as last committed without writing anything.
//!
//! This only chooses a statement: both decide the same way. A remembered
//! counter that is no longer full (refunded, reset, its window ended early
//! on the database's clock) costs its batch the general function's locks,
//! as every batch paid before; a full counter not remembered costs the
//! first denial its writes. Memory is fixed: counters share a few slots by
//! a hash of their key, and a collision can only send a batch the slower
//! way.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

/// Slots of the table: 8 KiB per limiter (shared by its clones).
const SLOTS: usize = 1_024;

/// Until when each remembered counter is full, in milliseconds since the
/// table was made, plus one (zero is an empty slot).
#[doc(hidden)]
pub struct FullCounters {
    epoch: Instant,
    until: Box<[AtomicU64]>,
}

impl FullCounters {
    pub(crate) fn new() -> Self {
        Self {
            epoch: Instant::now(),
            until: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slot(&self, lock_id: i64) -> &AtomicU64 {
        // The lock id is already a hash of the counter key.
        let index = usize::try_from(lock_id.unsigned_abs() % SLOTS as u64).unwrap_or(0);
        &self.until[index]
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether a reply found one of these counters full, in a window that
    /// has not ended yet.
    pub(crate) fn any(&self, lock_ids: impl IntoIterator<Item = i64>) -> bool {
        let now = self.now();
        lock_ids
            .into_iter()
            .any(|id| self.slot(id).load(Ordering::Relaxed) > now.saturating_add(1))
    }

    /// Records what a reply said of a counter: full for `full_for` more, or
    /// (with `None`) not full.
    pub(crate) fn record(&self, lock_id: i64, full_for: Option<Duration>) {
        let slot = self.slot(lock_id);
        match full_for {
            Some(left) => {
                let left = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
                let until = self.now().saturating_add(left).saturating_add(1);
                slot.store(until, Ordering::Relaxed);
            }
            // Loads first: most replies are admissions of counters never
            // found full, and a store would bounce the cache line between
            // cores for nothing.
            None if slot.load(Ordering::Relaxed) != 0 => slot.store(0, Ordering::Relaxed),
            None => {}
        }
    }
}

impl std::fmt::Debug for FullCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FullCounters").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_is_remembered_full_until_its_window_ends_or_a_reply_says_otherwise() {
        let full = FullCounters::new();
        assert!(!full.any([7, 8]));
        full.record(7, Some(Duration::from_secs(60)));
        assert!(full.any([8, 7]));
        assert!(!full.any([8]));
        full.record(7, None);
        assert!(!full.any([7]));
        // A window that ends now leaves nothing to remember.
        full.record(9, Some(Duration::ZERO));
        assert!(!full.any([9]));
    }
}
