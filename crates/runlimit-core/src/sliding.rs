//! Exact sliding-window arithmetic, shared by every backend.
//!
//! A key's state is the units admitted in each of the last nine eighths of a
//! window ([`Buckets`]): the eighth containing the latest admission, and the
//! eight before it. An eighth ("sub-window") is a whole number of clock units
//! in every backend (a window is whole milliseconds, and a millisecond is
//! 10<sup>6</sup> nanoseconds or 10<sup>3</sup> microseconds, both divisible
//! by 8), and eighths are aligned to the clock's origin, so [`SlidingExact`]
//! only adds counts and, when a check falls in a later eighth than a key's
//! counts end with, divides a time by a constant.
//!
//! Why nine: at time `t` in eighth `b`, the interval `(t - window, t]` starts in
//! eighth `b - 8` at the earliest, so the nine eighths `b - 8 ..= b` hold every
//! unit admitted within a window of `t`. Admitting only if their sum plus the
//! cost fits the limit therefore never lets any window exceed it, and a unit
//! drops out of the sum at the end of eighth `b + 8` for a unit admitted in
//! eighth `b`: at most one eighth after `window` has passed since it.

use std::time::Duration;

use crate::{
    decision::{Decision, Denial},
    policy::SlidingWindowPolicy,
};

/// How many eighths of a window a key's counts cover: the current one and the
/// eight before it.
pub const COUNTED: usize = 9;

/// The number of sub-windows a window divides into.
pub const SUB_WINDOWS: u64 = 8;

/// The units admitted in each of the nine eighths a key's counts cover.
///
/// Eighths are named by when they begin (in clock units, a multiple of the
/// policy's eighth), so a check in the eighth its counts already end with, the
/// common case, needs no division.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Buckets {
    /// When the eighth `counts[0]` is for began.
    pub latest_start: u64,
    /// `counts[i]` is the units admitted in the eighth `i` before the latest.
    pub counts: [u64; COUNTED],
}

impl Buckets {
    /// No units admitted, as of the eighth beginning at `latest_start`.
    #[must_use]
    pub const fn empty(latest_start: u64) -> Self {
        Self {
            latest_start,
            counts: [0; COUNTED],
        }
    }

    /// All units still counted.
    #[inline]
    #[must_use]
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// The exact quantities of sliding-window checks in one clock unit
/// (`1 / UNITS_PER_MILLI` of a millisecond).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingExact<const UNITS_PER_MILLI: u64> {
    /// An eighth of the window, in clock units.
    pub sub_window: u64,
    limit: u64,
}

/// Sliding windows in nanoseconds (the memory store).
pub type SlidingNanos = SlidingExact<1_000_000>;

/// Sliding windows in microseconds (PostgreSQL and Redis).
pub type SlidingMicros = SlidingExact<1_000>;

/// What an admission decides, before the quota mode applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlidingOutcome {
    /// Admitted: store these counts.
    Allowed {
        /// The decision to report.
        decision: Decision,
        /// The counts including this admission.
        next: Buckets,
    },
    /// Refused; nothing changes.
    Denied(Denial),
}

impl<const UNITS_PER_MILLI: u64> SlidingExact<UNITS_PER_MILLI> {
    /// The quantities for `policy`.
    #[inline]
    #[must_use]
    pub fn new(policy: &SlidingWindowPolicy) -> Self {
        Self {
            // A millisecond is a multiple of 8 clock units, so this is exact;
            // bounded by MAX_WINDOW in clock units.
            sub_window: policy
                .window_millis()
                .saturating_mul(UNITS_PER_MILLI / SUB_WINDOWS)
                .max(1),
            limit: policy.limit(),
        }
    }

    /// The number of the eighth `now` (in clock units) falls in, counted from
    /// the clock's origin.
    #[inline]
    #[must_use]
    pub fn bucket(&self, now: u64) -> u64 {
        now / self.sub_window
    }

    /// When eighth number `bucket` begins, in clock units.
    #[inline]
    #[must_use]
    pub fn start_of(&self, bucket: u64) -> u64 {
        bucket.saturating_mul(self.sub_window)
    }

    /// When the units counted in the eighth beginning at `latest_start` all
    /// stop counting: when the ninth eighth after it begins. A key whose
    /// latest admission fell in that eighth is worthless from then on.
    #[inline]
    #[must_use]
    pub fn expiry_of(&self, latest_start: u64) -> u64 {
        latest_start.saturating_add(COUNTED as u64 * self.sub_window)
    }

    /// The eighth an expiry from [`expiry_of`](Self::expiry_of) belongs to.
    #[inline]
    #[must_use]
    pub fn latest_start_of(&self, expires_at: u64) -> u64 {
        expires_at.saturating_sub(COUNTED as u64 * self.sub_window)
    }

    /// `stored` as of `now`: eighths that have fallen out of the nine dropped,
    /// `None` (no key) read as no units. A `now` before the latest eighth (a
    /// clock that stepped back) leaves the counts as they are.
    #[inline]
    #[must_use]
    pub fn at(&self, stored: Option<Buckets>, now: u64) -> Buckets {
        let Some(stored) = stored else {
            return Buckets::empty(now - now % self.sub_window);
        };
        // The common case: a check in the eighth the counts end with.
        if now < stored.latest_start.saturating_add(self.sub_window) {
            return stored;
        }
        let shift = (now - stored.latest_start) / self.sub_window;
        let mut counts = [0; COUNTED];
        if shift < COUNTED as u64 {
            // Below COUNTED, so the conversion cannot fail.
            let shift = usize::try_from(shift).unwrap_or(COUNTED);
            counts[shift..].copy_from_slice(&stored.counts[..COUNTED - shift]);
        }
        Buckets {
            latest_start: stored.latest_start + shift * self.sub_window,
            counts,
        }
    }

    /// The common case of [`admit`](Self::admit), decided in place: a check
    /// at `now` in the eighth the stored `counts` end with (which began at
    /// `latest_start`) that fits. Returns the decision (the caller adds `cost`
    /// to `counts[0]`), or `None` when `now` lies in another eighth or the
    /// cost does not fit, for [`admit`](Self::admit) to decide.
    #[inline]
    #[must_use]
    pub fn admit_in_latest(
        &self,
        latest_start: u64,
        counts: &[u64; COUNTED],
        cost: u64,
        now: u64,
    ) -> Option<Decision> {
        if now < latest_start || now >= latest_start.saturating_add(self.sub_window) {
            return None;
        }
        let total: u64 = counts.iter().sum();
        let remaining = self.limit.checked_sub(total.saturating_add(cost))?;
        let reset_after = self.until(self.expiry_of(latest_start), now);
        Decision::allowed(self.limit, remaining, reset_after).ok()
    }

    /// Decides `cost` units at `now` against `stored` counts (`None` for a key
    /// not stored).
    #[inline]
    #[must_use]
    pub fn admit(&self, stored: Option<Buckets>, cost: u64, now: u64) -> SlidingOutcome {
        if let Some(stored) = &stored
            && let Some(decision) =
                self.admit_in_latest(stored.latest_start, &stored.counts, cost, now)
        {
            let mut next = *stored;
            next.counts[0] += cost;
            return SlidingOutcome::Allowed { decision, next };
        }
        let mut counts = self.at(stored, now);
        let total = counts.total();
        if total.saturating_add(cost) > self.limit {
            return SlidingOutcome::Denied(self.denial(&counts, total, cost, now));
        }
        counts.counts[0] += cost;
        let reset_after = self.until(self.expiry_of(counts.latest_start), now);
        let decision = Decision::allowed(self.limit, self.limit - total - cost, reset_after)
            .unwrap_or_else(|_| unreachable!("remaining never exceeds a valid limit"));
        SlidingOutcome::Allowed {
            decision,
            next: counts,
        }
    }

    /// What a check of `cost` would get at `now`, changing nothing: allowed
    /// with the units available now and the time until every counted unit has
    /// dropped out, or denied with the time until `cost` fits.
    ///
    /// # Errors
    ///
    /// The denial when `cost` does not fit now.
    pub fn peek(&self, stored: Option<Buckets>, cost: u64, now: u64) -> Result<Decision, Denial> {
        let counts = self.at(stored, now);
        let total = counts.total();
        if total.saturating_add(cost) > self.limit {
            return Err(self.denial(&counts, total, cost, now));
        }
        let reset_after = match counts.counts.iter().position(|&count| count > 0) {
            Some(age) => self.until(
                self.expiry_of(counts.latest_start - age as u64 * self.sub_window),
                now,
            ),
            None => Duration::ZERO,
        };
        Ok(
            Decision::allowed(self.limit, self.limit - total, reset_after)
                .unwrap_or_else(|_| unreachable!("remaining never exceeds a valid limit")),
        )
    }

    /// [`peek`](Self::peek) as a [`Decision`], a denial following `policy`'s
    /// quota mode.
    #[must_use]
    pub fn peek_decision(
        &self,
        policy: &SlidingWindowPolicy,
        stored: Option<Buckets>,
        cost: u64,
        now: u64,
    ) -> Decision {
        self.peek(stored, cost, now)
            .unwrap_or_else(|denial| Decision::for_mode(policy.quota_mode(), denial))
    }

    /// The denial of `cost` against `counts` (as of now): the exact earliest
    /// time enough of the oldest eighths have dropped out for it to fit.
    #[cold]
    fn denial(&self, counts: &Buckets, total: u64, cost: u64, now: u64) -> Denial {
        let mut left = total;
        let mut retry_after = self.until(self.expiry_of(counts.latest_start), now);
        // After `k` more eighths begin, the `k` oldest have dropped out.
        for k in 1..=COUNTED {
            left -= counts.counts[COUNTED - k];
            if left + cost <= self.limit {
                retry_after = self.until(counts.latest_start + k as u64 * self.sub_window, now);
                break;
            }
        }
        Denial::QuotaExceeded {
            capacity: self.limit,
            retry_after,
        }
    }

    /// From `now` until `then` (clock units), rounded up to whole
    /// milliseconds.
    #[inline]
    fn until(&self, then: u64, now: u64) -> Duration {
        Duration::from_millis(then.saturating_sub(now).div_ceil(UNITS_PER_MILLI))
    }

    /// Gives back `cost` units admitted in the eighth beginning at
    /// `admitted_in` from `stored` at `now`: nothing if that eighth has
    /// dropped out of the counts. Returns the new counts when something was
    /// credited.
    #[must_use]
    pub fn refund(
        &self,
        stored: Buckets,
        admitted_in: u64,
        cost: u64,
        now: u64,
    ) -> Option<Buckets> {
        let mut counts = self.at(Some(stored), now);
        let age = counts.latest_start.checked_sub(admitted_in)? / self.sub_window;
        let index = usize::try_from(age).ok().filter(|&age| age < COUNTED)?;
        let credit = counts.counts[index].min(cost);
        if credit == 0 {
            return None;
        }
        counts.counts[index] -= credit;
        Some(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PolicyId, ScopeId};

    const MS: u64 = 1_000_000;

    fn policy(limit: u64, window_ms: u64) -> SlidingWindowPolicy {
        SlidingWindowPolicy::new(
            PolicyId::new("p").expect("valid"),
            ScopeId::new("s").expect("valid"),
            limit,
            Duration::from_millis(window_ms),
        )
        .expect("valid")
    }

    #[test]
    fn the_fixed_window_boundary_burst_is_refused() {
        // 4 per 80 ms: eighths of 10 ms. Four units at 79 ms, then at 81 ms a
        // fixed window anchored at 0 would have renewed; this one refuses
        // until the first eighth it counted them in has dropped out.
        let exact = SlidingNanos::new(&policy(4, 80));
        let mut stored = None;
        for _ in 0..4 {
            match exact.admit(stored, 1, 79 * MS) {
                SlidingOutcome::Allowed { next, .. } => stored = Some(next),
                SlidingOutcome::Denied(denial) => panic!("denied {denial:?}"),
            }
        }
        let SlidingOutcome::Denied(denial) = exact.admit(stored, 1, 81 * MS) else {
            panic!("a boundary burst");
        };
        // Counted in the eighth 70..80 ms, they drop out when the ninth eighth
        // after it begins, at 160 ms.
        assert_eq!(denial.retry_after(), Some(Duration::from_millis(160 - 81)));
        assert!(matches!(
            exact.admit(stored, 1, 160 * MS),
            SlidingOutcome::Allowed { .. }
        ));
    }

    #[test]
    fn retry_after_is_when_enough_of_the_oldest_eighths_drop_out() {
        let exact = SlidingNanos::new(&policy(3, 80));
        let mut stored = None;
        for at in [0, 20, 40] {
            let SlidingOutcome::Allowed { next, .. } = exact.admit(stored, 1, at * MS) else {
                panic!("fits");
            };
            stored = Some(next);
        }
        let SlidingOutcome::Denied(denial) = exact.admit(stored, 2, 45 * MS) else {
            panic!("over the limit");
        };
        // Two units must drop: those of eighths 0 and 2, at 90 and 110 ms.
        assert_eq!(denial.retry_after(), Some(Duration::from_millis(110 - 45)));
        // Peeking agrees, and changes nothing.
        let peeked = exact.peek(stored, 2, 45 * MS).expect_err("does not fit");
        assert_eq!(peeked, denial);
        assert_eq!(
            exact.peek(stored, 1, 95 * MS).map(|d| d.remaining()),
            Ok(Some(1))
        );
    }

    #[test]
    fn refunds_credit_only_an_eighth_still_counted() {
        let exact = SlidingNanos::new(&policy(2, 80));
        let SlidingOutcome::Allowed { next, .. } = exact.admit(None, 2, 5 * MS) else {
            panic!("fits");
        };
        let refunded = exact.refund(next, 0, 1, 30 * MS).expect("credited");
        assert_eq!(refunded.total(), 1);
        assert_eq!(
            exact.refund(next, 0, 1, 90 * MS),
            None,
            "dropped out at 90 ms"
        );
    }

    #[test]
    fn the_largest_policy_stays_in_range() {
        use crate::{MAX_LIMIT, MAX_WINDOW};
        let window = u64::try_from(MAX_WINDOW.as_millis()).expect("fits");
        let exact = SlidingMicros::new(&policy(MAX_LIMIT, window));
        let now = 1_800_000_000_000_000;
        let SlidingOutcome::Allowed { decision, next } = exact.admit(None, MAX_LIMIT, now) else {
            panic!("fits");
        };
        assert_eq!(decision.remaining(), Some(0));
        assert!(decision.reset_after() >= Some(MAX_WINDOW));
        assert!(matches!(
            exact.admit(Some(next), 1, now),
            SlidingOutcome::Denied(_)
        ));
        assert!(
            exact.expiry_of(next.latest_start) < 1 << 53,
            "exact in Lua's doubles"
        );
    }
}
