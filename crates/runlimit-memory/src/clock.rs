//! Injectable monotonic clocks.

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

/// A monotonic time source for the memory stores.
///
/// `now` returns the time elapsed since an arbitrary origin fixed when the clock
/// was created. Stores never let time move backwards within a shard, so a clock
/// that occasionally steps back only delays replenishment; it cannot admit extra
/// requests.
///
/// Stores read the clock once per operation while holding the shard locks the
/// operation needs, so a clock that panics poisons those shards.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Time since this clock's origin.
    fn now(&self) -> Duration;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Duration {
        (**self).now()
    }
}

/// The default clock: the CPU's time-stamp counter, calibrated against the
/// operating system's monotonic clock, in whole milliseconds.
///
/// Reading the OS clock costs more than the rest of a hot-key check, so this
/// clock uses [`quanta`], which reads an invariant TSC where the CPU has one
/// and falls back to the OS monotonic clock where it does not. Counters that
/// differ slightly between cores are harmless: each shard never lets time move
/// backwards.
///
/// It ticks in whole milliseconds, the unit every policy's durations are
/// stated in. A shard records the latest time it has seen, to keep time from
/// moving backwards; with a millisecond tick that record changes once per
/// millisecond instead of on every check, so checks on stored keys running on
/// different cores do not write one shared cache line.
#[derive(Debug, Clone)]
pub struct SystemClock {
    clock: quanta::Clock,
    origin: quanta::Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    #[must_use]
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.now();
        Self { clock, origin }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Duration {
        let elapsed = self.clock.now().duration_since(self.origin);
        let nanos = elapsed.subsec_nanos();
        Duration::new(elapsed.as_secs(), nanos - nanos % 1_000_000)
    }
}

/// A clock that only moves when told to, for tests that must never sleep.
///
/// Clones share the same time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use runlimit_memory::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(1_500));
/// assert_eq!(shared.now(), Duration::from_millis(1_500));
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at its origin.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by` (saturating at about 584 years).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // fetch_update never fails with a closure that always returns Some.
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(by))
            });
    }

    /// Sets the time since the origin, which may move the clock backwards.
    pub fn set(&self, now: Duration) {
        self.nanos.store(
            u64::try_from(now.as_nanos()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::{Clock, SystemClock};

    #[test]
    fn the_system_clock_ticks_in_whole_milliseconds() {
        let clock = SystemClock::new();
        for _ in 0..1_000 {
            assert_eq!(clock.now().subsec_nanos() % 1_000_000, 0);
        }
    }
}
