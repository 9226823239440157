//! Exact GCRA arithmetic for backends whose clock counts microseconds.
//!
//! PostgreSQL and Redis keep a key's theoretical arrival time as whole
//! microseconds plus a remainder in units of `1 / quota` microsecond. The
//! products such a backend needs (`cost × period / quota` and
//! `burst × period / quota`) are formed here with 128-bit integers and handed to
//! the server already reduced, so a server only adds, subtracts and compares
//! values below 2<sup>53</sup>; the server's answer (how far the new arrival time
//! lies ahead of now) is turned back into a [`Decision`] here too.

use std::time::Duration;

use crate::{
    decision::{Decision, Denial},
    policy::GcraPolicy,
};

/// A duration of `micros + remainder / quota` microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExactMicros {
    /// Whole microseconds.
    pub micros: u64,
    /// The fraction of a microsecond, in units of `1 / quota`; below the quota.
    pub remainder: u64,
}

impl ExactMicros {
    fn ratio(factor: u64, micros: u64, quota: u64) -> Self {
        let product = u128::from(factor) * u128::from(micros);
        let quota = u128::from(quota);
        Self {
            // Bounded by MAX_WINDOW in microseconds for every valid policy and cost.
            micros: u64::try_from(product / quota).unwrap_or(u64::MAX),
            // Below quota <= MAX_LIMIT.
            remainder: u64::try_from(product % quota).unwrap_or(0),
        }
    }

    /// `self - other`, saturating at zero.
    fn minus(self, other: Self, quota: u64) -> Self {
        if self <= other {
            return Self {
                micros: 0,
                remainder: 0,
            };
        }
        if self.remainder >= other.remainder {
            Self {
                micros: self.micros - other.micros,
                remainder: self.remainder - other.remainder,
            }
        } else {
            Self {
                micros: self.micros - other.micros - 1,
                remainder: self.remainder + quota - other.remainder,
            }
        }
    }

    /// Rounded up to whole milliseconds.
    fn ceil_millis(self) -> Duration {
        let micros = self.micros.saturating_add(u64::from(self.remainder > 0));
        Duration::from_millis(micros.div_ceil(1_000))
    }
}

/// The exact quantities one GCRA check needs, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GcraMicros {
    /// The policy's quota: the denominator of every remainder.
    pub quota: u64,
    /// The time this check's cost takes to replenish.
    pub increment: ExactMicros,
    /// The burst tolerance: how far ahead of now the arrival time may run.
    pub tolerance: ExactMicros,
    period_micros: u64,
}

impl GcraMicros {
    /// The quantities for a check of `cost` units under `policy`.
    #[must_use]
    pub fn new(policy: &GcraPolicy, cost: u64) -> Self {
        let period_micros = policy.period_millis().saturating_mul(1_000);
        let quota = policy.quota();
        Self {
            quota,
            increment: ExactMicros::ratio(cost, period_micros, quota),
            tolerance: ExactMicros::ratio(policy.burst_capacity(), period_micros, quota),
            period_micros,
        }
    }

    /// The decision for a check whose new arrival time lies `ahead` of now:
    /// allowed when within the tolerance (with the units left and the time to
    /// full replenishment), otherwise a quota denial under the policy's mode.
    /// Durations round up to whole milliseconds.
    #[must_use]
    pub fn decision(&self, policy: &GcraPolicy, ahead: ExactMicros) -> Decision {
        if ahead > self.tolerance {
            let retry_after = ahead.minus(self.tolerance, self.quota).ceil_millis();
            return Decision::for_mode(
                policy.quota_mode(),
                Denial::QuotaExceeded {
                    capacity: policy.burst_capacity(),
                    retry_after,
                },
            );
        }
        let slack = self.tolerance.minus(ahead, self.quota);
        let scaled =
            u128::from(slack.micros) * u128::from(self.quota) + u128::from(slack.remainder);
        let remaining = u64::try_from(scaled / u128::from(self.period_micros.max(1)))
            .unwrap_or(u64::MAX)
            .min(policy.burst_capacity());
        Decision::allowed(policy.burst_capacity(), remaining, ahead.ceil_millis())
            .unwrap_or_else(|_| unreachable!("remaining is clamped to the burst capacity"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PolicyId, ScopeId};

    #[test]
    fn thirds_of_a_microsecond_stay_exact() {
        let policy = GcraPolicy::new(
            PolicyId::new("p").expect("valid"),
            ScopeId::new("s").expect("valid"),
            3,
            Duration::from_millis(10),
            1,
        )
        .expect("valid");
        let check = GcraMicros::new(&policy, 1);
        assert_eq!(
            check.increment,
            ExactMicros {
                micros: 3_333,
                remainder: 1
            }
        );
        let allowed = check.decision(&policy, check.increment);
        assert_eq!(allowed.remaining(), Some(0));
        assert_eq!(allowed.reset_after(), Some(Duration::from_millis(4)));
        let twice = ExactMicros {
            micros: 6_666,
            remainder: 2,
        };
        let denied = check.decision(&policy, twice);
        assert_eq!(denied.retry_after(), Some(Duration::from_millis(4)));
    }
}
