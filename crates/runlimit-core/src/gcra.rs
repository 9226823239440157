//! Exact GCRA arithmetic, shared by every backend.
//!
//! A GCRA key's theoretical arrival time, and every quantity compared with it,
//! is kept as whole clock units plus a remainder in units of `1 / quota` of a
//! clock unit, so no policy ever rounds. The memory store counts nanoseconds
//! ([`ExactNanos`], [`GcraNanos`]); PostgreSQL and Redis count microseconds
//! ([`ExactMicros`], [`GcraMicros`]) and receive the products they need
//! (`cost × period / quota` and `burst × period / quota`) already reduced, so a
//! server only adds, subtracts and compares values below 2<sup>53</sup>. The
//! answer (how far the new arrival time lies ahead of now) becomes a
//! [`Decision`] here, with durations rounded up to whole milliseconds.

use std::time::Duration;

use crate::{
    decision::{Decision, Denial},
    divisor::Divisor,
    policy::GcraPolicy,
};

/// A duration of `whole + remainder / quota` clock units, where a clock unit
/// is `1 / UNITS_PER_MILLI` of a millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Exact<const UNITS_PER_MILLI: u64> {
    /// Whole clock units.
    pub whole: u64,
    /// The fraction of a clock unit, in units of `1 / quota`; below the quota.
    pub remainder: u64,
}

/// Nanoseconds plus a fraction: the memory store's clock unit.
pub type ExactNanos = Exact<1_000_000>;

/// Microseconds plus a fraction: the clock unit of PostgreSQL and Redis.
pub type ExactMicros = Exact<1_000>;

/// Ordered by whole units, then remainder (the remainder is below the
/// quota, so this is the order of the durations), compared as one 128-bit
/// number: a compare and a borrow instead of the derived pair of branches,
/// on a check's hot path.
impl<const UNITS_PER_MILLI: u64> Ord for Exact<UNITS_PER_MILLI> {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_wide().cmp(&other.as_wide())
    }
}

impl<const UNITS_PER_MILLI: u64> PartialOrd for Exact<UNITS_PER_MILLI> {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }

    #[inline]
    fn lt(&self, other: &Self) -> bool {
        self.as_wide() < other.as_wide()
    }

    #[inline]
    fn le(&self, other: &Self) -> bool {
        self.as_wide() <= other.as_wide()
    }

    #[inline]
    fn gt(&self, other: &Self) -> bool {
        self.as_wide() > other.as_wide()
    }

    #[inline]
    fn ge(&self, other: &Self) -> bool {
        self.as_wide() >= other.as_wide()
    }
}

impl<const UNITS_PER_MILLI: u64> Exact<UNITS_PER_MILLI> {
    /// Whole units in the high half, the remainder in the low: ordered as
    /// the durations are.
    #[inline]
    fn as_wide(self) -> u128 {
        (u128::from(self.whole) << 64) | u128::from(self.remainder)
    }

    /// A whole number of clock units.
    #[inline]
    #[must_use]
    pub const fn from_whole(whole: u64) -> Self {
        Self {
            whole,
            remainder: 0,
        }
    }

    /// `factor × units / quota` clock units, computed exactly in 128 bits.
    pub(crate) fn ratio(factor: u64, units: u64, quota: u64) -> Self {
        let product = u128::from(factor) * u128::from(units);
        let quota = u128::from(quota);
        Self {
            // Policies bound the quotient by MAX_WINDOW in clock units.
            whole: u64::try_from(product / quota).unwrap_or(u64::MAX),
            // Below quota <= MAX_LIMIT.
            remainder: u64::try_from(product % quota).unwrap_or(0),
        }
    }

    /// `factor` times this duration, exactly (saturating beyond `u64`).
    #[inline]
    #[must_use]
    pub fn times(self, factor: u64, quota: u64) -> Self {
        if factor == 1 {
            return self;
        }
        match (
            factor.checked_mul(self.whole),
            factor.checked_mul(self.remainder),
        ) {
            // The common case stays in 64-bit arithmetic.
            (Some(whole), Some(remainder)) => Self {
                whole: whole.saturating_add(remainder / quota),
                remainder: remainder % quota,
            },
            _ => {
                let remainder = u128::from(factor) * u128::from(self.remainder);
                let whole =
                    u128::from(factor) * u128::from(self.whole) + remainder / u128::from(quota);
                Self {
                    whole: u64::try_from(whole).unwrap_or(u64::MAX),
                    // Below quota.
                    remainder: u64::try_from(remainder % u128::from(quota)).unwrap_or(0),
                }
            }
        }
    }

    /// `self + other`, carrying a whole remainder into the units.
    #[inline]
    #[must_use]
    pub fn saturating_add(self, other: Self, quota: u64) -> Self {
        let remainder = self.remainder + other.remainder;
        let carry = remainder >= quota;
        Self {
            whole: self
                .whole
                .saturating_add(other.whole)
                .saturating_add(u64::from(carry)),
            remainder: if carry { remainder - quota } else { remainder },
        }
    }

    /// `self - other`, or zero when `other` is not smaller.
    #[inline]
    #[must_use]
    pub fn saturating_sub(self, other: Self, quota: u64) -> Self {
        if self <= other {
            Self::from_whole(0)
        } else if self.remainder >= other.remainder {
            Self {
                whole: self.whole - other.whole,
                remainder: self.remainder - other.remainder,
            }
        } else {
            Self {
                whole: self.whole - other.whole - 1,
                remainder: self.remainder + quota - other.remainder,
            }
        }
    }

    /// Whole clock units, rounding any fraction up.
    #[inline]
    #[must_use]
    pub fn ceil_whole(self) -> u64 {
        self.whole.saturating_add(u64::from(self.remainder > 0))
    }

    /// Rounded up to whole milliseconds.
    #[inline]
    #[must_use]
    pub fn ceil_millis(self) -> Duration {
        Duration::from_millis(self.ceil_whole().div_ceil(UNITS_PER_MILLI))
    }
}

/// The exact quantities one GCRA check needs, in one clock unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GcraExact<const UNITS_PER_MILLI: u64> {
    /// The policy's quota: the denominator of every remainder.
    pub quota: u64,
    /// The time this check's cost takes to replenish.
    pub increment: Exact<UNITS_PER_MILLI>,
    /// The burst tolerance: how far ahead of now the arrival time may run.
    pub tolerance: Exact<UNITS_PER_MILLI>,
    period_units: Divisor,
    burst_capacity: u64,
}

/// A check's GCRA quantities in nanoseconds (the memory store).
pub type GcraNanos = GcraExact<1_000_000>;

/// A check's GCRA quantities in microseconds (PostgreSQL and Redis).
pub type GcraMicros = GcraExact<1_000>;

impl GcraNanos {
    /// The quantities for a check of `cost` units under `policy`, from the
    /// constants the policy precomputed: no division for a unit cost.
    #[inline]
    #[must_use]
    pub fn new(policy: &GcraPolicy, cost: u64) -> Self {
        let quota = policy.quota();
        Self {
            quota,
            increment: policy.emission_interval_nanos().times(cost, quota),
            tolerance: policy.burst_tolerance_nanos(),
            // Precomputed by the policy: the division an allowed check needs
            // is a multiplication (see `Divisor`).
            period_units: policy.period_nanos(),
            burst_capacity: policy.burst_capacity(),
        }
    }
}

impl GcraMicros {
    /// The quantities for a check of `cost` units under `policy`.
    #[must_use]
    pub fn new(policy: &GcraPolicy, cost: u64) -> Self {
        let period_units = policy.period_millis().saturating_mul(1_000);
        let quota = policy.quota();
        Self {
            quota,
            increment: Exact::ratio(cost, period_units, quota),
            tolerance: Exact::ratio(policy.burst_capacity(), period_units, quota),
            period_units: Divisor::new(period_units),
            burst_capacity: policy.burst_capacity(),
        }
    }
}

impl<const UNITS_PER_MILLI: u64> GcraExact<UNITS_PER_MILLI> {
    /// The outcome for a check whose new arrival time lies `ahead` of now:
    /// within the tolerance, the units left and the time to full replenishment;
    /// beyond it, the time until the check would fit. Durations round up to
    /// whole milliseconds.
    ///
    /// # Errors
    ///
    /// The retry-after duration when the check exceeds the burst tolerance.
    #[inline]
    pub fn outcome(&self, ahead: Exact<UNITS_PER_MILLI>) -> Result<(u64, Duration), Duration> {
        // Whole clock units (the tolerance of most policies, and every
        // arrival time under them): the same answer without the remainders'
        // 128-bit comparisons, borrows and rounding. An allowed check in the
        // memory store computes this after the miss on its entry, where every
        // instruction saved lets the next check's loads start sooner.
        if (ahead.remainder | self.tolerance.remainder) == 0
            && ahead.whole <= self.tolerance.whole
            && let Some(scaled) = (self.tolerance.whole - ahead.whole).checked_mul(self.quota)
        {
            return Ok((
                self.period_units.divide(scaled).min(self.burst_capacity),
                Duration::from_millis(ahead.whole.div_ceil(UNITS_PER_MILLI)),
            ));
        }
        if ahead > self.tolerance {
            return Err(ahead
                .saturating_sub(self.tolerance, self.quota)
                .ceil_millis());
        }
        // Units still available: floor((tolerance - ahead) / (period / quota)).
        let slack = self.tolerance.saturating_sub(ahead, self.quota);
        let period = self.period_units;
        let remaining = match slack
            .whole
            .checked_mul(self.quota)
            .and_then(|scaled| scaled.checked_add(slack.remainder))
        {
            Some(scaled) => period.divide(scaled),
            // Large tolerances (a million a day, say) overflow 64 bits; the
            // quotient is at most the burst capacity all the same.
            None => small_quotient(
                u128::from(slack.whole) * u128::from(self.quota) + u128::from(slack.remainder),
                period.get(),
            ),
        };
        Ok((remaining.min(self.burst_capacity), ahead.ceil_millis()))
    }

    /// What a peek reports when the arrival time lies `ahead` of now before
    /// any check: allowed with the units available now and the time until the
    /// full burst is back, or (`Err`) the time until this check's cost would
    /// fit. Durations round up to whole milliseconds.
    ///
    /// # Errors
    ///
    /// The retry-after duration when the cost does not fit now.
    pub fn peek(&self, ahead: Exact<UNITS_PER_MILLI>) -> Result<Decision, Duration> {
        let after = ahead.saturating_add(self.increment, self.quota);
        if after > self.tolerance {
            return Err(after
                .saturating_sub(self.tolerance, self.quota)
                .ceil_millis());
        }
        // `ahead` is below `after`, so within the tolerance too.
        let (remaining, reset_after) = self.outcome(ahead).unwrap_or((0, Duration::ZERO));
        Ok(
            Decision::allowed(self.burst_capacity, remaining, reset_after)
                .unwrap_or_else(|_| unreachable!("remaining is clamped to the burst capacity")),
        )
    }

    /// [`peek`](Self::peek) as a [`Decision`], a quota denial following the
    /// policy's mode.
    #[must_use]
    pub fn peek_decision(&self, policy: &GcraPolicy, ahead: Exact<UNITS_PER_MILLI>) -> Decision {
        self.peek(ahead).unwrap_or_else(|retry_after| {
            Decision::for_mode(
                policy.quota_mode(),
                Denial::QuotaExceeded {
                    capacity: self.burst_capacity,
                    retry_after,
                },
            )
        })
    }

    /// [`outcome`](Self::outcome) as a [`Decision`], a quota denial following
    /// the policy's mode.
    #[must_use]
    pub fn decision(&self, policy: &GcraPolicy, ahead: Exact<UNITS_PER_MILLI>) -> Decision {
        match self.outcome(ahead) {
            Ok((remaining, reset_after)) => {
                Decision::allowed(self.burst_capacity, remaining, reset_after)
                    .unwrap_or_else(|_| unreachable!("remaining is clamped to the burst capacity"))
            }
            Err(retry_after) => Decision::for_mode(
                policy.quota_mode(),
                Denial::QuotaExceeded {
                    capacity: self.burst_capacity,
                    retry_after,
                },
            ),
        }
    }
}

/// `floor(numerator / divisor)` for a quotient below 2<sup>52</sup>, without
/// a 128-bit division (a library call several times the cost of the rest of
/// a check): a floating-point estimate is within one of the quotient, and
/// 128-bit products, single instructions, correct it exactly.
#[inline]
fn small_quotient(numerator: u128, divisor: u64) -> u64 {
    debug_assert!(divisor > 0, "periods are at least a millisecond");
    let divisor_wide = u128::from(divisor);
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let mut quotient = (numerator as f64 / divisor as f64) as u64;
    // The estimate's relative error is a few parts in 2^53 of a quotient
    // below 2^52: at most one either way. Each loop runs at most once then;
    // for larger quotients they still end at the exact answer.
    while quotient > 0 && u128::from(quotient) * divisor_wide > numerator {
        quotient -= 1;
    }
    while (u128::from(quotient) + 1) * divisor_wide <= numerator {
        quotient += 1;
    }
    quotient
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PolicyId, ScopeId};

    fn policy(quota: u64, period: Duration, burst: u64) -> GcraPolicy {
        GcraPolicy::new(
            PolicyId::new("p").expect("valid"),
            ScopeId::new("s").expect("valid"),
            quota,
            period,
            burst,
        )
        .expect("valid")
    }

    proptest::proptest! {
        /// The 128-bit comparison orders as the (whole, remainder) pairs do.
        #[test]
        fn exact_durations_order_as_pairs(
            a_whole in proptest::prop_oneof![0u64..3, proptest::prelude::any::<u64>()],
            a_remainder in proptest::prop_oneof![0u64..3, proptest::prelude::any::<u64>()],
            b_whole in proptest::prop_oneof![0u64..3, proptest::prelude::any::<u64>()],
            b_remainder in proptest::prop_oneof![0u64..3, proptest::prelude::any::<u64>()],
        ) {
            let a = ExactNanos { whole: a_whole, remainder: a_remainder };
            let b = ExactNanos { whole: b_whole, remainder: b_remainder };
            let pairs = (a_whole, a_remainder).cmp(&(b_whole, b_remainder));
            proptest::prop_assert_eq!(a.cmp(&b), pairs);
            proptest::prop_assert_eq!(a.partial_cmp(&b), Some(pairs));
            proptest::prop_assert_eq!(a < b, pairs.is_lt());
            proptest::prop_assert_eq!(a <= b, pairs.is_le());
            proptest::prop_assert_eq!(a > b, pairs.is_gt());
            proptest::prop_assert_eq!(a >= b, pairs.is_ge());
            proptest::prop_assert_eq!(a.max(b), if pairs.is_ge() { a } else { b });
        }
    }

    #[test]
    fn exact_arithmetic_carries_and_borrows() {
        let quota = 3;
        let a = ExactNanos {
            whole: 1,
            remainder: 2,
        }; // 1 + 2/3
        assert_eq!(
            ExactNanos {
                whole: 0,
                remainder: 2
            }
            .times(4, quota),
            ExactNanos {
                whole: 2,
                remainder: 2
            }
        );
        assert_eq!(
            a.saturating_add(a, quota),
            ExactNanos {
                whole: 3,
                remainder: 1
            }
        );
        assert_eq!(
            ExactNanos {
                whole: 3,
                remainder: 1
            }
            .saturating_sub(a, quota),
            a
        );
        assert_eq!(
            a.saturating_sub(a.times(2, quota), quota),
            ExactNanos::from_whole(0)
        );
        assert_eq!(a.ceil_whole(), 2);
        assert_eq!(
            ExactNanos::from_whole(1_000_000).ceil_millis(),
            Duration::from_millis(1)
        );
        assert_eq!(
            ExactNanos {
                whole: 1_000_000,
                remainder: 1
            }
            .ceil_millis(),
            Duration::from_millis(2)
        );
        // Products beyond 64 bits stay exact: 8 × (5 + (2^62 - 1) / 2^62).
        let quota = 1 << 62;
        let wide = ExactMicros {
            whole: 5,
            remainder: quota - 1,
        };
        assert_eq!(
            wide.times(8, quota),
            ExactMicros {
                whole: 47,
                remainder: quota - 8
            }
        );
    }

    #[test]
    fn thirds_of_a_microsecond_stay_exact() {
        let policy = policy(3, Duration::from_millis(10), 1);
        let check = GcraMicros::new(&policy, 1);
        assert_eq!(
            check.increment,
            ExactMicros {
                whole: 3_333,
                remainder: 1
            }
        );
        let allowed = check.decision(&policy, check.increment);
        assert_eq!(allowed.remaining(), Some(0));
        assert_eq!(allowed.reset_after(), Some(Duration::from_millis(4)));
        let twice = ExactMicros {
            whole: 6_666,
            remainder: 2,
        };
        let denied = check.decision(&policy, twice);
        assert_eq!(denied.retry_after(), Some(Duration::from_millis(4)));
    }

    #[test]
    fn nanosecond_and_microsecond_checks_agree() {
        let policy = policy(7, Duration::from_millis(3), 5);
        for cost in 1..=5 {
            let nanos = GcraNanos::new(&policy, cost);
            let micros = GcraMicros::new(&policy, cost);
            // The same exact quantity in both units: x ns = x / 1000 µs.
            assert_eq!(
                u128::from(nanos.increment.whole) * 7 + u128::from(nanos.increment.remainder),
                (u128::from(micros.increment.whole) * 7 + u128::from(micros.increment.remainder))
                    * 1_000
            );
            assert_eq!(
                nanos.outcome(nanos.increment),
                micros.outcome(micros.increment)
            );
        }
    }

    /// Where [`outcome_and_definition`] puts `ahead`: `share` thousandths of
    /// the tolerance, with the remainder zeroed or taken from `remainder_seed`.
    #[derive(Debug, Clone, Copy)]
    struct AheadShape {
        share: u64,
        remainder_seed: u64,
        whole: bool,
    }

    type Outcome = Result<(u64, Duration), Duration>;

    /// `check.outcome(ahead)` for an `ahead` of the given shape, and the
    /// outcome by definition in 128-bit rationals: the units left are
    /// `floor((tolerance - ahead) × quota / period)` (at most the burst), the
    /// reset and retry times round up to whole milliseconds.
    fn outcome_and_definition<const UNITS_PER_MILLI: u64>(
        check: &GcraExact<UNITS_PER_MILLI>,
        period_ms: u64,
        shape: AheadShape,
    ) -> (Outcome, Outcome) {
        let quota = u128::from(check.quota);
        // Durations as counts of 1/quota clock units.
        let tolerance =
            u128::from(check.tolerance.whole) * quota + u128::from(check.tolerance.remainder);
        let mut scaled_ahead = tolerance * u128::from(shape.share) / 1_000;
        if shape.whole {
            scaled_ahead -= scaled_ahead % quota;
        } else {
            scaled_ahead += u128::from(shape.remainder_seed) % quota;
        }
        let ahead = Exact::<UNITS_PER_MILLI> {
            whole: u64::try_from(scaled_ahead / quota).expect("below the tolerance's 110%"),
            remainder: u64::try_from(scaled_ahead % quota).expect("below the quota"),
        };
        let ceil_millis = |scaled: u128| {
            let per_milli = quota * u128::from(UNITS_PER_MILLI);
            Duration::from_millis(u64::try_from(scaled.div_ceil(per_milli)).expect("fits"))
        };
        let expected = if scaled_ahead > tolerance {
            Err(ceil_millis(scaled_ahead - tolerance))
        } else {
            let period = u128::from(period_ms) * u128::from(UNITS_PER_MILLI);
            let remaining = (tolerance - scaled_ahead) / period;
            Ok((
                u64::try_from(remaining.min(u128::from(check.burst_capacity))).expect("fits"),
                ceil_millis(scaled_ahead),
            ))
        };
        (check.outcome(ahead), expected)
    }

    proptest::proptest! {
        /// Every allowed and denied outcome, whole or not, in both clock
        /// units, is the one [`outcome_and_definition`] defines.
        #[test]
        fn outcomes_match_the_definition(
            quota in proptest::prop_oneof![1u64..=10, 1u64..=crate::MAX_LIMIT],
            period_ms in proptest::prop_oneof![1u64..=1_000, 1u64..=86_400_000],
            burst in proptest::prop_oneof![1u64..=10, 1u64..=crate::MAX_LIMIT],
            ahead_share in 0u64..=1_100,
            remainder_seed: u64,
            whole_ahead: bool,
        ) {
            let Ok(policy) = GcraPolicy::new(
                PolicyId::new("p").expect("valid"),
                ScopeId::new("s").expect("valid"),
                quota,
                Duration::from_millis(period_ms),
                burst,
            ) else {
                return Ok(());
            };
            let shape = AheadShape { share: ahead_share, remainder_seed, whole: whole_ahead };
            let (nanos, expected) =
                outcome_and_definition(&GcraNanos::new(&policy, 1), period_ms, shape);
            proptest::prop_assert_eq!(nanos, expected);
            // The clock unit of PostgreSQL and Redis.
            let (micros, expected) =
                outcome_and_definition(&GcraMicros::new(&policy, 1), period_ms, shape);
            proptest::prop_assert_eq!(micros, expected);
        }

        #[test]
        fn small_quotients_are_exact(
            quotient in 0u64..(1 << 52),
            divisor in 1u64..=u64::MAX,
            fraction in 0u64..=u64::MAX,
        ) {
            let numerator = u128::from(quotient) * u128::from(divisor)
                + u128::from(fraction % divisor);
            proptest::prop_assert_eq!(small_quotient(numerator, divisor), quotient);
        }
    }
}
