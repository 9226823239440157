//! The partitions held now, each until a moment, within a bound.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use http::{HeaderMap, StatusCode};
use tokio::time::Instant;
use tower::retry::budget::Budget;

use crate::{MAX_HOLD, Partition, exhausted::exhausted_for};

/// Sending a refused request again: how long to wait first (beyond the
/// partition's hold, which the next attempt waits for), spread by `spread`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry {
    /// To sleep before the next attempt: the whole wait when no hold was
    /// recorded for it, else nothing.
    pub(crate) sleep: Duration,
    /// Added to the end of the partition's hold before the next attempt.
    pub(crate) spread: Duration,
}

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

    /// The most partitions held at once.
    pub(crate) fn max(&self) -> usize {
        self.max
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

    /// Records the hold a response with `status` and `headers` asks for, and
    /// says whether to send its request again: only when it was refused (429
    /// or 503) with a wait of at most [`MAX_HOLD`], a copy of the request
    /// exists (`replayable`), and `budget` allows.
    pub(crate) fn after_response(
        &self,
        partition: Option<Partition>,
        status: StatusCode,
        headers: &HeaderMap,
        replayable: bool,
        budget: Option<&(dyn Budget + Send + Sync)>,
    ) -> Option<Retry> {
        let wait = exhausted_for(status, headers)?;
        let now = Instant::now();
        let recorded =
            partition.is_some_and(|partition| self.hold(partition, now + wait.min(MAX_HOLD), now));
        let refused = matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        );
        if !(refused && replayable && wait <= MAX_HOLD && budget.is_some_and(Budget::withdraw)) {
            return None;
        }
        let spread = crate::layer::jitter(wait);
        Some(Retry {
            sleep: if recorded {
                Duration::ZERO
            } else {
                wait + spread
            },
            spread,
        })
    }

    /// How many partitions are held at `now`.
    pub(crate) fn held(&self, now: Instant) -> usize {
        self.lock().values().filter(|&&until| until > now).count()
    }
}
