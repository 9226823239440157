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
    /// The counter's raw reading at the origin.
    origin: u64,
}

impl SystemClock {
    /// A clock whose origin is now.
    #[must_use]
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self { clock, origin }
    }

    /// Whole milliseconds since the origin, in nanoseconds: the raw counter
    /// scaled once, with no `Duration` on the way (the stores count in
    /// nanoseconds).
    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        let nanos = self.clock.delta_as_nanos(self.origin, self.clock.raw());
        nanos - nanos % 1_000_000
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
        Duration::from_nanos(self.now_nanos())
    }
}

/// The clock a store reads: the system clock called directly, so that a
/// check makes no virtual call and converts no `Duration` on its hot path
/// (measured at 5–10% of a hot-key fixed-window check), or an
/// injected one behind the trait.
#[derive(Clone)]
pub(crate) enum StoreClock {
    System(SystemClock),
    Injected(Arc<dyn Clock>),
}

impl StoreClock {
    pub(crate) fn injected(clock: impl Clock) -> Self {
        Self::Injected(Arc::new(clock))
    }

    /// Nanoseconds since the clock's origin (saturating after 584 years).
    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        match self {
            Self::System(clock) => clock.now_nanos(),
            Self::Injected(clock) => {
                let now = clock.now();
                now.as_secs()
                    .saturating_mul(1_000_000_000)
                    .saturating_add(u64::from(now.subsec_nanos()))
            }
        }
    }
}

impl Default for StoreClock {
    fn default() -> Self {
        Self::System(SystemClock::new())
    }
}

impl fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::System(clock) => clock.fmt(f),
            Self::Injected(clock) => clock.fmt(f),
        }
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
    use super::{Clock, ManualClock, StoreClock, SystemClock};
    use std::time::Duration;

    #[test]
    fn the_system_clock_ticks_in_whole_milliseconds() {
        let clock = SystemClock::new();
        for _ in 0..1_000 {
            assert_eq!(clock.now().subsec_nanos() % 1_000_000, 0);
            assert_eq!(clock.now_nanos() % 1_000_000, 0);
        }
    }

    #[test]
    fn a_store_reads_an_injected_clock_in_nanoseconds() {
        let manual = ManualClock::new();
        let clock = StoreClock::injected(manual.clone());
        manual.advance(Duration::new(3, 250));
        assert_eq!(clock.now_nanos(), 3_000_000_250);
        manual.set(Duration::MAX);
        assert_eq!(clock.now_nanos(), u64::MAX);
    }
}
