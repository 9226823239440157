//! The partitions held now, each until a moment, within a bound.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
};

use tokio::time::Instant;

use crate::Partition;

/// Partitions and when their holds end; never more than `max` at once.
#[derive(Debug)]
pub(crate) struct Holds {
    max: usize,
    until: Mutex<HashMap<Partition, Instant>>,
}

impl Holds {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            until: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Partition, Instant>> {
        // Each operation leaves the map consistent; a panic elsewhere under
        // the lock cannot corrupt it.
        self.until.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When `partition`'s hold ends, if it has not ended by `now`.
    pub(crate) fn until(&self, partition: Partition, now: Instant) -> Option<Instant> {
        self.lock()
            .get(&partition)
            .copied()
            .filter(|&until| until > now)
    }

    /// Holds `partition` until `until` (or later, if it is held longer).
    /// With `max` partitions held, ended holds make room; if none has ended,
    /// the new partition is not held (an active hold is never dropped).
    /// Returns whether the partition is held.
    pub(crate) fn hold(&self, partition: Partition, until: Instant, now: Instant) -> bool {
        let mut holds = self.lock();
        if let Some(held) = holds.get_mut(&partition) {
            *held = (*held).max(until);
            return true;
        }
        if holds.len() >= self.max {
            holds.retain(|_, &mut held| held > now);
            if holds.len() >= self.max {
                return false;
            }
        }
        holds.insert(partition, until);
        true
    }

    /// How many partitions are held at `now`.
    pub(crate) fn held(&self, now: Instant) -> usize {
        self.lock().values().filter(|&&until| until > now).count()
    }
}
