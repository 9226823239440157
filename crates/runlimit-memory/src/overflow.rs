//! The overflow tier: count-min sketches that decide the keys finding their
//! shard full, so a flood of distinct keys cannot lock new keys out.
//!
//! A sketch cell holds an upper bound of what every key hashed to it has
//! consumed, and a key's estimate is the least of its cells, so an estimate
//! is never below the key's own consumption and the tier never admits a check
//! the exact limiter would deny. Updates are conservative (a cell is raised
//! only as far as the key's new estimate), which keeps the over-count from
//! other keys as small as count-min sketches allow.
//!
//! Two kinds of sketch:
//! * Windows (fixed and sliding) count units in epochs of the window's
//!   length aligned to the clock's origin, the current and the previous one.
//!   At time `t` in epoch `e` the two cover `[(e-1)·window, t]`, which holds
//!   every unit an anchored window live at `t` counts (it began after
//!   `t - window`) and every unit of the nine eighths a sliding window sums
//!   (eighths are aligned the same way). One sketch per window length.
//! * GCRA keeps an upper bound of each key's theoretical arrival time, a
//!   point in time rather than a count, so one sketch serves every GCRA
//!   policy and needs no epochs: a bound in the past is a full bucket.
//!
//! A key the sketch counts something for (its estimate is not that of a
//! fresh key) is decided by the sketch even when its shard has room again:
//! it is stored only once its estimate is fresh, so the table never forgets
//! what the sketch counted. GCRA keys are the exception: an arrival time
//! bound is a state, so such a key is stored from it as soon as there is
//! room (a later arrival time only denies more). Every sketch change for a key happens while its
//! shard is held exclusively, and a new key is stored in its shard only while
//! the shard is held (staged under the read lock, or stored under the
//! write lock), so a key is never counted in both.

use std::{
    sync::{
        Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use runlimit_core::{Decision, Denial, Policy};

use crate::{
    algorithm::sealed::{Counting, Engine, Evaluation},
    config::{MAX_OVERFLOW_DEPTH, OverflowConfig},
    table::StoreKey,
};

/// The most window lengths one store's overflow tier keeps a sketch for; a
/// key of another window length finding its shard full is denied with
/// [`Denial::StorageCapacity`], as without the tier.
pub const MAX_OVERFLOW_SKETCHES: usize = 4;

/// Overflow-tier counters, for telemetry; never per key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct OverflowStats {
    /// Checks the overflow tier decided (batch checks included).
    pub checks: u64,
    /// Of those, the ones it admitted.
    pub admitted: u64,
    /// Checks denied with [`Denial::StorageCapacity`] despite the tier: a
    /// key of a window length beyond [`MAX_OVERFLOW_SKETCHES`], or one
    /// carrying a source's state.
    pub refused: u64,
    /// Sketches allocated (one per window length, one for GCRA).
    pub sketches: usize,
    /// The bytes their cells take.
    pub bytes: usize,
}

/// The cells a key occupies, one per row (the first `depth` are used).
#[derive(Clone, Copy)]
pub(crate) struct Cells {
    indices: [usize; MAX_OVERFLOW_DEPTH],
    depth: usize,
}

impl Cells {
    fn of(key: &StoreKey, config: &OverflowConfig) -> Self {
        let width = config.width();
        let mut indices = [0; MAX_OVERFLOW_DEPTH];
        for (row, index) in indices.iter_mut().take(config.depth()).enumerate() {
            let hash = key.sketch_hash(row);
            // The high half of a 64×64 product is below the width.
            let cell = usize::try_from((u128::from(hash) * width as u128) >> 64).unwrap_or(0);
            *index = row * width + cell;
        }
        Self {
            indices,
            depth: config.depth(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.indices[..self.depth].iter().copied()
    }
}

/// Units per epoch of one window length.
struct WindowSketch {
    window: u64,
    /// The epoch `current` counts: `now / window`.
    epoch: u64,
    current: Box<[u32]>,
    previous: Box<[u32]>,
}

/// What a window sketch estimates for a key at a time.
enum WindowEstimate {
    /// Units counted in the current and the previous epoch.
    Counted { current: u64, previous: u64 },
    /// The time lies in an epoch before the sketch's (another shard's clock
    /// ran ahead): the previous epoch's counts are gone, so nothing is known.
    Stale,
}

impl WindowSketch {
    fn new(window: u64, epoch: u64, cells: usize) -> Self {
        Self {
            window,
            epoch,
            current: vec![0; cells].into_boxed_slice(),
            previous: vec![0; cells].into_boxed_slice(),
        }
    }

    /// Moves the epochs on to `epoch`, if it is later.
    fn advance(&mut self, epoch: u64) {
        if epoch <= self.epoch {
            return;
        }
        if epoch == self.epoch + 1 {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.fill(0);
        } else {
            self.current.fill(0);
            self.previous.fill(0);
        }
        self.epoch = epoch;
    }

    fn estimate(&self, cells: &Cells, now: u64) -> WindowEstimate {
        let epoch = now / self.window;
        let least = |counts: &[u32]| {
            cells
                .iter()
                .map(|index| u64::from(counts[index]))
                .min()
                .unwrap_or(0)
        };
        match epoch.checked_sub(self.epoch) {
            Some(0) => WindowEstimate::Counted {
                current: least(&self.current),
                previous: least(&self.previous),
            },
            Some(1) => WindowEstimate::Counted {
                current: 0,
                previous: least(&self.current),
            },
            Some(_) => WindowEstimate::Counted {
                current: 0,
                previous: 0,
            },
            None => WindowEstimate::Stale,
        }
    }
}

/// Adds `cost` to a key's count in one epoch, conservatively: each cell is
/// raised to the key's new estimate at most.
fn add(counts: &mut [u32], cells: &Cells, cost: u64) {
    let least = cells.iter().map(|index| counts[index]).min().unwrap_or(0);
    let raised = u32::try_from(u64::from(least).saturating_add(cost)).unwrap_or(u32::MAX);
    for index in cells.iter() {
        let cell = &mut counts[index];
        *cell = (*cell).max(raised);
    }
}

/// Upper bounds of GCRA arrival times.
struct ArrivalSketch {
    cells: Box<[u64]>,
}

impl ArrivalSketch {
    fn estimate(&self, cells: &Cells) -> u64 {
        cells
            .iter()
            .map(|index| self.cells[index])
            .min()
            .unwrap_or(0)
    }

    fn raise(&mut self, cells: &Cells, tat: u64) {
        for index in cells.iter() {
            let cell = &mut self.cells[index];
            *cell = (*cell).max(tat);
        }
    }
}

#[derive(Default)]
struct Sketches {
    windows: Vec<WindowSketch>,
    arrival: Option<ArrivalSketch>,
}

/// A store's overflow tier.
pub(crate) struct Overflow {
    config: OverflowConfig,
    /// No key's estimate is anything but fresh at or after this time: the
    /// common case of a store that has never overflowed skips the sketches.
    live_until: AtomicU64,
    sketches: Mutex<Sketches>,
    checks: AtomicU64,
    admitted: AtomicU64,
    refused: AtomicU64,
}

/// What the overflow tier decided for one check.
pub(crate) enum Overflowed {
    /// Within the estimate: the decision, and what to record once admitted.
    Allowed(Decision, Pending),
    /// Over the estimate.
    Denied(Denial),
    /// The tier cannot decide this key: deny it for capacity.
    Refused,
}

/// An admission the sketch decided and has not recorded yet.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pending {
    Window { window: u64, cost: u64 },
    ArrivalTime { tat: u64 },
}

/// Locks the sketches; nothing that panics runs under the lock but bounded
/// slice indexing, and counts are upper bounds whatever a panic left.
fn lock(sketches: &Mutex<Sketches>) -> MutexGuard<'_, Sketches> {
    sketches.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Overflow {
    pub(crate) fn new(config: OverflowConfig) -> Self {
        Self {
            config,
            live_until: AtomicU64::new(0),
            sketches: Mutex::new(Sketches::default()),
            checks: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    fn cells_len(&self) -> usize {
        self.config.width() * self.config.depth()
    }

    /// Whether a key not stored in its shard may be stored at `now`: the
    /// sketch counts nothing for it (it holds no estimate beyond a fresh
    /// key's). The caller holds the key's shard.
    #[inline]
    pub(crate) fn is_fresh<A: Engine>(&self, policy: &A::Policy, key: &StoreKey, now: u64) -> bool {
        if now >= self.live_until.load(Ordering::Acquire) {
            return true;
        }
        self.is_fresh_slow::<A>(policy, key, now)
    }

    #[cold]
    #[inline(never)]
    fn is_fresh_slow<A: Engine>(&self, policy: &A::Policy, key: &StoreKey, now: u64) -> bool {
        let cells = Cells::of(key, &self.config);
        let sketches = lock(&self.sketches);
        match A::overflow_counting(policy) {
            Counting::Window { window, .. } => sketches
                .windows
                .iter()
                .find(|sketch| sketch.window == window)
                .is_none_or(|sketch| {
                    matches!(
                        sketch.estimate(&cells, now),
                        WindowEstimate::Counted {
                            current: 0,
                            previous: 0
                        }
                    )
                }),
            Counting::ArrivalTime => sketches
                .arrival
                .as_ref()
                .is_none_or(|sketch| sketch.estimate(&cells) <= now),
        }
    }

    /// Decides `cost` units of `key` at `now` from its estimate, recording
    /// nothing yet. The caller holds the key's shard exclusively.
    pub(crate) fn evaluate<A: Engine>(
        &self,
        policy: &A::Policy,
        key: &StoreKey,
        cost: u64,
        now: u64,
    ) -> Overflowed {
        let cells = Cells::of(key, &self.config);
        let cells_len = self.cells_len();
        let mut sketches = lock(&self.sketches);
        let decided = match A::overflow_counting(policy) {
            Counting::Window { limit, window } => {
                // Allocated here rather than when recording, so the number
                // of sketches stays within its bound whatever runs between.
                let position = match sketches
                    .windows
                    .iter()
                    .position(|sketch| sketch.window == window)
                {
                    Some(position) => position,
                    None if sketches.windows.len() < MAX_OVERFLOW_SKETCHES => {
                        sketches
                            .windows
                            .push(WindowSketch::new(window, now / window, cells_len));
                        sketches.windows.len() - 1
                    }
                    None => {
                        drop(sketches);
                        self.refuse();
                        return Overflowed::Refused;
                    }
                };
                let estimate = sketches.windows[position].estimate(&cells, now);
                drop(sketches);
                window_evaluation(limit, window, estimate, cost, now)
            }
            Counting::ArrivalTime => {
                let tat = sketches
                    .arrival
                    .as_ref()
                    .map_or(0, |sketch| sketch.estimate(&cells));
                drop(sketches);
                match A::evaluate(policy, A::from_arrival_time(tat), cost, now) {
                    Evaluation::Denied(denial) => Overflowed::Denied(denial),
                    Evaluation::Allowed { admitted, next } => Overflowed::Allowed(
                        A::decision(policy, admitted),
                        Pending::ArrivalTime {
                            tat: A::arrival_time_bound(&next),
                        },
                    ),
                }
            }
        };
        self.checks.fetch_add(1, Ordering::Relaxed);
        decided
    }

    /// Records an admission [`evaluate`](Self::evaluate) allowed for `key`
    /// at `now`. The caller still holds the key's shard exclusively.
    pub(crate) fn record(&self, key: &StoreKey, pending: Pending, now: u64) {
        let cells = Cells::of(key, &self.config);
        let cells_len = self.cells_len();
        let mut sketches = lock(&self.sketches);
        let live_until = match pending {
            Pending::Window { window, cost } => {
                let epoch = now / window;
                let Some(sketch) = sketches
                    .windows
                    .iter_mut()
                    .find(|sketch| sketch.window == window)
                else {
                    // Evaluate allocated it, and only clearing the store
                    // (which holds every shard) removes it.
                    return;
                };
                sketch.advance(epoch);
                // Another shard's clock may have moved the sketch on since
                // the check was decided: its unit then counts in the previous
                // epoch, or, two epochs on, in no window a later check sums.
                match sketch.epoch - epoch {
                    0 => add(&mut sketch.current, &cells, cost),
                    1 => add(&mut sketch.previous, &cells, cost),
                    _ => {}
                }
                (sketch.epoch + 2).saturating_mul(window)
            }
            Pending::ArrivalTime { tat } => {
                let sketch = sketches.arrival.get_or_insert_with(|| ArrivalSketch {
                    cells: vec![0; cells_len].into_boxed_slice(),
                });
                sketch.raise(&cells, tat);
                tat
            }
        };
        drop(sketches);
        self.live_until.fetch_max(live_until, Ordering::AcqRel);
        self.admitted.fetch_add(1, Ordering::Relaxed);
    }

    /// The state a key's estimate bounds, for storing it in the table:
    /// `None` unless its policy is counted by arrival time. The caller holds
    /// the key's shard exclusively.
    pub(crate) fn seed<A: Engine>(&self, policy: &A::Policy, key: &StoreKey) -> Option<A::State> {
        if A::overflow_counting(policy) != Counting::ArrivalTime {
            return None;
        }
        let cells = Cells::of(key, &self.config);
        let tat = lock(&self.sketches).arrival.as_ref()?.estimate(&cells);
        A::from_arrival_time(tat)
    }

    /// What a check of `cost` would get from the sketch at `now`, changing
    /// nothing; `None` when the sketch counts nothing for the key (it reads
    /// as a fresh key, as the table would).
    pub(crate) fn peek<A: Engine>(
        &self,
        policy: &A::Policy,
        key: &StoreKey,
        cost: u64,
        now: u64,
    ) -> Option<Decision> {
        if now >= self.live_until.load(Ordering::Acquire) {
            return None;
        }
        let cells = Cells::of(key, &self.config);
        let sketches = lock(&self.sketches);
        match A::overflow_counting(policy) {
            Counting::Window { limit, window } => {
                let sketch = sketches
                    .windows
                    .iter()
                    .find(|sketch| sketch.window == window)?;
                let epoch_end = (now / window + 1).saturating_mul(window);
                let until = |end: u64| Duration::from_nanos(end.saturating_sub(now));
                let (current, previous) = match sketch.estimate(&cells, now) {
                    WindowEstimate::Counted {
                        current: 0,
                        previous: 0,
                    } => return None,
                    WindowEstimate::Counted { current, previous } => (current, previous),
                    WindowEstimate::Stale => (limit, limit),
                };
                let used = current.saturating_add(previous);
                Some(if used.saturating_add(cost) <= limit {
                    Decision::allowed(limit, limit - used, until(epoch_end.saturating_add(window)))
                        .unwrap_or_else(|_| unreachable!("remaining never exceeds a valid limit"))
                } else {
                    let retry = window_retry(limit, window, current, cost, epoch_end);
                    Decision::for_mode(policy.quota_mode(), quota_denial(limit, until(retry)))
                })
            }
            Counting::ArrivalTime => {
                let tat = sketches.arrival.as_ref()?.estimate(&cells);
                (tat > now).then(|| A::peek(policy, A::from_arrival_time(tat), cost, now))
            }
        }
    }

    /// Counts a check denied for capacity although the tier is on.
    pub(crate) fn refuse(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> OverflowStats {
        let sketches = lock(&self.sketches);
        let count = sketches.windows.len() + usize::from(sketches.arrival.is_some());
        OverflowStats {
            checks: self.checks.load(Ordering::Relaxed),
            admitted: self.admitted.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            sketches: count,
            bytes: count * self.config.sketch_bytes(),
        }
    }

    /// Forgets every count, for [`Store::clear`](crate::Store::clear).
    pub(crate) fn clear(&self) {
        let mut sketches = lock(&self.sketches);
        *sketches = Sketches::default();
        self.live_until.store(0, Ordering::Release);
    }
}

/// A window key's decision from its estimate: allowed while the units of
/// both epochs and `cost` fit the limit.
fn window_evaluation(
    limit: u64,
    window: u64,
    estimate: WindowEstimate,
    cost: u64,
    now: u64,
) -> Overflowed {
    let epoch_end = (now / window + 1).saturating_mul(window);
    let until = |end: u64| Duration::from_nanos(end.saturating_sub(now));
    let (current, previous) = match estimate {
        WindowEstimate::Counted { current, previous } => (current, previous),
        WindowEstimate::Stale => return Overflowed::Denied(quota_denial(limit, until(epoch_end))),
    };
    let used = current.saturating_add(previous);
    if used.saturating_add(cost) > limit {
        let retry = window_retry(limit, window, current, cost, epoch_end);
        return Overflowed::Denied(quota_denial(limit, until(retry)));
    }
    let decision = Decision::allowed(
        limit,
        limit - used - cost,
        until(epoch_end.saturating_add(window)),
    )
    .unwrap_or_else(|_| unreachable!("remaining never exceeds a valid limit"));
    Overflowed::Allowed(decision, Pending::Window { window, cost })
}

/// When a denied window key's `cost` fits again: the previous epoch's units
/// drop out when the current epoch ends, the current epoch's one epoch
/// later.
fn window_retry(limit: u64, window: u64, current: u64, cost: u64, epoch_end: u64) -> u64 {
    if current.saturating_add(cost) <= limit {
        epoch_end
    } else {
        epoch_end.saturating_add(window)
    }
}

fn quota_denial(limit: u64, retry_after: Duration) -> Denial {
    Denial::QuotaExceeded {
        capacity: limit,
        retry_after,
    }
}
