//! Validated fixed-window and GCRA policies, and the portable bounds they obey.
//!
//! # Portable bounds
//!
//! Every policy that core accepts must be computed exactly by every backend
//! Runlimit ships, so the bounds are set by the weakest arithmetic among them:
//!
//! * Redis Lua numbers are IEEE-754 doubles, exact only for integers below
//!   2<sup>53</sup> ≈ 9.007 × 10<sup>15</sup>.
//! * PostgreSQL stores counters as `bigint` (2<sup>63</sup>) and times with
//!   microsecond resolution.
//! * HTTP `RateLimit` fields carry RFC 9651 integers of at most 15 digits.
//!
//! [`MAX_LIMIT`] is 10<sup>9</sup>: a counter plus a cost (at most
//! 2 × 10<sup>9</sup>) and every GCRA remainder (below the quota) stay far below
//! 2<sup>53</sup>, and fit an RFC 9651 integer. [`MAX_WINDOW`] is 366 days, long
//! enough for calendar-year quotas in leap years: a Unix time in microseconds
//! plus 366 days of microseconds (3.2 × 10<sup>13</sup>) stays below 2<sup>53</sup>
//! until the year 2255. Backends never multiply two policy parameters inside a
//! script or statement: products such as `cost × period` are computed in Rust with
//! 128-bit integers and handed over already reduced to a whole part below
//! [`MAX_WINDOW`] and a remainder below the quota.

pub use crate::gcra::ExactNanos;
use std::{fmt, time::Duration};

use sha2::{Digest, Sha256};

use crate::{
    decision::{Decision, Denial},
    divisor::Divisor,
    id::{PolicyId, ScopeId},
    lineage::{AnyPolicy, PolicyKind, Predecessor, predecessor_for},
};

/// The largest limit, GCRA quota or burst capacity a policy may have: 10<sup>9</sup>.
///
/// See the [module documentation](crate::policy#portable-bounds) for why.
pub const MAX_LIMIT: u64 = 1_000_000_000;

/// The longest fixed window, GCRA period or GCRA full-replenishment time: 366 days.
///
/// See the [module documentation](crate::policy#portable-bounds) for why.
pub const MAX_WINDOW: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// Whether a policy enforces its quota or only reports what it would do.
///
/// The mode is not part of the [`PolicyFingerprint`], so promoting a warmed
/// [`Shadow`](QuotaMode::Shadow) policy to [`Enforce`](QuotaMode::Enforce) keeps
/// its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum QuotaMode {
    /// Quota exhaustion denies the request.
    #[default]
    Enforce,
    /// Quota exhaustion yields a shadow denial: the request is permitted, nothing
    /// is consumed, and the decision reports that it would have been denied.
    /// Storage-capacity denials and backend errors still fail closed.
    Shadow,
}

/// The rate-limiting algorithm a policy uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// Anchored fixed windows ([`FixedWindowPolicy`]).
    FixedWindow,
    /// The generic cell rate algorithm ([`GcraPolicy`]).
    Gcra,
    /// Sliding windows ([`SlidingWindowPolicy`]).
    SlidingWindow,
}

impl Algorithm {
    /// A stable lowercase name, suitable for metric labels.
    #[inline]
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed_window",
            Self::Gcra => "gcra",
            Self::SlidingWindow => "sliding_window",
        }
    }
}

/// A numeric or duration parameter of a policy, named in [`PolicyError`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PolicyField {
    /// [`FixedWindowPolicy::limit`].
    Limit,
    /// [`FixedWindowPolicy::window`].
    Window,
    /// [`GcraPolicy::quota`].
    Quota,
    /// [`GcraPolicy::period`].
    Period,
    /// [`GcraPolicy::burst_capacity`].
    BurstCapacity,
}

impl fmt::Display for PolicyField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Limit => "limit",
            Self::Window => "window",
            Self::Quota => "quota",
            Self::Period => "period",
            Self::BurstCapacity => "burst capacity",
        })
    }
}

/// Why a policy could not be constructed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A count was zero or above [`MAX_LIMIT`].
    #[error("{field} {value} is outside 1..={maximum}")]
    CountOutOfRange {
        /// The refused parameter.
        field: PolicyField,
        /// The refused value.
        value: u64,
        /// [`MAX_LIMIT`].
        maximum: u64,
    },
    /// A duration had a sub-millisecond part.
    #[error("{field} {value:?} is not a whole number of milliseconds")]
    DurationNotWholeMilliseconds {
        /// The refused parameter.
        field: PolicyField,
        /// The refused value.
        value: Duration,
    },
    /// A duration was zero or longer than [`MAX_WINDOW`].
    #[error("{field} {value:?} is outside (0, {maximum:?}]")]
    DurationOutOfRange {
        /// The refused parameter.
        field: PolicyField,
        /// The refused value.
        value: Duration,
        /// [`MAX_WINDOW`].
        maximum: Duration,
    },
    /// A policy continues only from a policy with its id and scope (subject
    /// keys are derived from both, so no other policy's counters can be found).
    #[error("a policy can continue only from a policy with the same id and scope")]
    PredecessorIdentity,
    /// Replenishing the full GCRA burst would take longer than [`MAX_WINDOW`].
    #[error("replenishing the full burst takes {replenishment:?}, longer than {maximum:?}")]
    ReplenishmentTooLong {
        /// `burst_capacity × period / quota`, rounded up to whole milliseconds.
        replenishment: Duration,
        /// [`MAX_WINDOW`].
        maximum: Duration,
    },
}

fn validate_count(field: PolicyField, value: u64) -> Result<u64, PolicyError> {
    if (1..=MAX_LIMIT).contains(&value) {
        Ok(value)
    } else {
        Err(PolicyError::CountOutOfRange {
            field,
            value,
            maximum: MAX_LIMIT,
        })
    }
}

/// Validates a window or period and returns it in whole milliseconds.
fn validate_duration(field: PolicyField, value: Duration) -> Result<u64, PolicyError> {
    if value.is_zero() || value > MAX_WINDOW {
        return Err(PolicyError::DurationOutOfRange {
            field,
            value,
            maximum: MAX_WINDOW,
        });
    }
    if !value.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(PolicyError::DurationNotWholeMilliseconds { field, value });
    }
    // Bounded by MAX_WINDOW (3.2e10 ms), so the conversion cannot fail.
    u64::try_from(value.as_millis()).map_err(|_| PolicyError::DurationOutOfRange {
        field,
        value,
        maximum: MAX_WINDOW,
    })
}

/// A domain-separated SHA-256 digest of a policy's algorithm, identifiers and
/// every quota parameter.
///
/// Backends store counters under the fingerprint, so changing the policy id, scope,
/// algorithm or any quota parameter starts an independent counter instead of
/// reinterpreting old state. The [`QuotaMode`] is deliberately excluded.
///
/// The digest is `SHA-256` of the concatenation of, with `lp(x)` meaning the
/// length of `x` as an 8-byte big-endian integer followed by `x`, and `u64(n)` an
/// 8-byte big-endian integer:
///
/// * fixed window: `lp("runlimit policy fingerprint v1") ‖ lp("fixed_window") ‖
///   lp(id) ‖ lp(scope) ‖ u64(limit) ‖ u64(window in ms)`;
/// * GCRA: `lp("runlimit policy fingerprint v1") ‖ lp("gcra") ‖ lp(id) ‖
///   lp(scope) ‖ u64(quota) ‖ u64(period in ms) ‖ u64(burst capacity)`;
/// * sliding window: `lp("runlimit policy fingerprint v1") ‖ lp("sliding_window")
///   ‖ lp(id) ‖ lp(scope) ‖ u64(limit) ‖ u64(window in ms)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyFingerprint([u8; 32]);

impl PolicyFingerprint {
    const DOMAIN: &'static [u8] = b"runlimit policy fingerprint v1";

    fn compute(algorithm: Algorithm, id: &PolicyId, scope: &ScopeId, parameters: &[u64]) -> Self {
        let mut digest = Sha256::new();
        for field in [
            Self::DOMAIN,
            algorithm.as_str().as_bytes(),
            id.as_str().as_bytes(),
            scope.as_str().as_bytes(),
        ] {
            digest.update((field.len() as u64).to_be_bytes());
            digest.update(field);
        }
        for parameter in parameters {
            digest.update(parameter.to_be_bytes());
        }
        Self(digest.finalize().into())
    }

    /// The 32 digest bytes.
    #[inline]
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for PolicyFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not secret, but high-cardinality and useless in logs; show a short prefix.
        write!(
            f,
            "PolicyFingerprint({:02x}{:02x}{:02x}{:02x}…)",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// What every policy offers to checks, key hashing and backends.
///
/// Implemented by [`FixedWindowPolicy`], [`GcraPolicy`] and
/// [`SlidingWindowPolicy`]; sealed, because a backend must know the exact
/// semantics of every policy it is handed.
pub trait Policy: fmt::Debug + Send + Sync + sealed::Sealed {
    /// The algorithm this policy uses.
    fn algorithm(&self) -> Algorithm;
    /// The policy identifier.
    fn id(&self) -> &PolicyId;
    /// The scope identifier.
    fn scope(&self) -> &ScopeId;
    /// Whether quota exhaustion is enforced or only reported.
    fn quota_mode(&self) -> QuotaMode;
    /// The digest that keys this policy's counters.
    fn fingerprint(&self) -> &PolicyFingerprint;
    /// The largest cost a single check may carry: the fixed- or sliding-window
    /// limit, or the GCRA burst capacity.
    fn capacity(&self) -> u64;
    /// The policy with its algorithm's parameters, for a backend to match on.
    fn kind(&self) -> PolicyKind<'_>;
    /// The policy this one continues from, if any: a subject's state under it
    /// is carried into this policy's counter the first time the subject is
    /// checked (see [`carry`](crate::carry)).
    fn predecessor(&self) -> Option<&AnyPolicy>;
}

/// The accessors every policy shares (inherent, so callers need not import
/// [`Policy`]) and its [`Policy`] implementation; `$capacity` names the field
/// holding the largest cost a single check may carry.
macro_rules! policy_identity {
    ($policy:ty, $algorithm:expr, $kind:ident, $capacity:ident) => {
        impl $policy {
            /// Returns the policy continuing from `predecessor`, the policy it
            /// replaces (of any algorithm, with the same id and scope): a
            /// subject's state under the predecessor is carried into this
            /// policy's counter the first time the subject is checked under
            /// it, translated to this policy's parameters, on every backend.
            /// Raising a limit gives a subject the difference at once;
            /// lowering it denies until the carried usage falls under the new
            /// limit. The bound a change keeps is stated in
            /// [`carry`](crate::carry).
            ///
            /// The lineage is not part of the fingerprint: dropping it later
            /// (once the predecessor's longest window has passed) keeps every
            /// counter. A predecessor's own predecessor is not kept, and a
            /// predecessor with this policy's fingerprint changes nothing.
            ///
            /// # Errors
            ///
            /// [`PolicyError::PredecessorIdentity`] when `predecessor` has
            /// another id or scope.
            pub fn continuing<Q: Policy + ?Sized>(
                mut self,
                predecessor: &Q,
            ) -> Result<Self, PolicyError> {
                self.predecessor =
                    predecessor_for(&self.id, &self.scope, &self.fingerprint, predecessor)?;
                Ok(self)
            }

            /// The policy without a predecessor.
            pub(crate) fn without_predecessor(mut self) -> Self {
                self.predecessor = None;
                self
            }

            /// The policy identifier.
            #[inline]
            #[must_use]
            pub fn id(&self) -> &PolicyId {
                &self.id
            }

            /// The scope identifier.
            #[inline]
            #[must_use]
            pub fn scope(&self) -> &ScopeId {
                &self.scope
            }

            /// Whether quota exhaustion is enforced or only reported.
            #[inline]
            #[must_use]
            pub fn quota_mode(&self) -> QuotaMode {
                self.quota_mode
            }

            /// The digest that keys this policy's counters.
            #[inline]
            #[must_use]
            pub fn fingerprint(&self) -> &PolicyFingerprint {
                &self.fingerprint
            }
        }

        impl sealed::Sealed for $policy {}

        impl Policy for $policy {
            #[inline]
            fn algorithm(&self) -> Algorithm {
                $algorithm
            }
            #[inline]
            fn id(&self) -> &PolicyId {
                &self.id
            }
            #[inline]
            fn scope(&self) -> &ScopeId {
                &self.scope
            }
            #[inline]
            fn quota_mode(&self) -> QuotaMode {
                self.quota_mode
            }
            #[inline]
            fn fingerprint(&self) -> &PolicyFingerprint {
                &self.fingerprint
            }
            #[inline]
            fn capacity(&self) -> u64 {
                self.$capacity
            }
            #[inline]
            fn kind(&self) -> PolicyKind<'_> {
                PolicyKind::$kind(self)
            }
            #[inline]
            fn predecessor(&self) -> Option<&AnyPolicy> {
                self.predecessor.as_deref()
            }
        }
    };
}

/// An anchored fixed-window policy: at most `limit` units per `window`, where each
/// subject's window starts at its first allowed check.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use runlimit_core::{FixedWindowPolicy, PolicyId, QuotaMode, ScopeId};
///
/// let policy = FixedWindowPolicy::new(
///     PolicyId::new("auth.login")?,
///     ScopeId::new("client")?,
///     40,
///     Duration::from_secs(60),
/// )?
/// .with_quota_mode(QuotaMode::Shadow);
/// assert_eq!(policy.limit(), 40);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FixedWindowPolicy {
    id: PolicyId,
    scope: ScopeId,
    limit: u64,
    window: Duration,
    window_ms: u64,
    quota_mode: QuotaMode,
    fingerprint: PolicyFingerprint,
    predecessor: Predecessor,
}

impl FixedWindowPolicy {
    /// Creates an enforcing policy of `limit` units per `window`.
    ///
    /// # Errors
    ///
    /// [`PolicyError::CountOutOfRange`] unless `1 <= limit <= MAX_LIMIT`;
    /// [`PolicyError::DurationOutOfRange`] unless `0 < window <= MAX_WINDOW`;
    /// [`PolicyError::DurationNotWholeMilliseconds`] if `window` has a
    /// sub-millisecond part.
    pub fn new(
        id: PolicyId,
        scope: ScopeId,
        limit: u64,
        window: Duration,
    ) -> Result<Self, PolicyError> {
        let limit = validate_count(PolicyField::Limit, limit)?;
        let window_ms = validate_duration(PolicyField::Window, window)?;
        let fingerprint =
            PolicyFingerprint::compute(Algorithm::FixedWindow, &id, &scope, &[limit, window_ms]);
        Ok(Self {
            id,
            scope,
            limit,
            window,
            window_ms,
            quota_mode: QuotaMode::Enforce,
            fingerprint,
            predecessor: None,
        })
    }

    /// Returns the policy with `quota_mode`; the fingerprint, and so every stored
    /// counter, stays the same.
    #[inline]
    #[must_use]
    pub fn with_quota_mode(mut self, quota_mode: QuotaMode) -> Self {
        self.quota_mode = quota_mode;
        self
    }

    /// Units admitted per window.
    #[inline]
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    #[inline]
    #[must_use]
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The window length in whole milliseconds.
    #[inline]
    #[must_use]
    pub fn window_millis(&self) -> u64 {
        self.window_ms
    }

    /// What a peek of `cost` units reports for a live window that has `used`
    /// units and ends after `left` (`0` and [`Duration::ZERO`] when no window
    /// is live): allowed with the units available now and the time until the
    /// window ends, or a quota denial (following the quota mode) with that
    /// time as the retry. Backends share it so peeks agree everywhere.
    #[must_use]
    pub fn peek_decision(&self, used: u64, left: Duration, cost: u64) -> Decision {
        let remaining = self.limit.saturating_sub(used);
        if cost > remaining {
            return Decision::for_mode(
                self.quota_mode,
                Denial::QuotaExceeded {
                    capacity: self.limit,
                    retry_after: left,
                },
            );
        }
        Decision::allowed(self.limit, remaining, left)
            .unwrap_or_else(|_| unreachable!("remaining never exceeds a valid limit"))
    }
}

impl fmt::Debug for FixedWindowPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedWindowPolicy")
            .field("id", &self.id)
            .field("scope", &self.scope)
            .field("limit", &self.limit)
            .field("window", &self.window)
            .field("quota_mode", &self.quota_mode)
            .field("continuing", &self.predecessor)
            .finish_non_exhaustive()
    }
}

policy_identity!(
    FixedWindowPolicy,
    Algorithm::FixedWindow,
    FixedWindow,
    limit
);

/// A GCRA (generic cell rate algorithm) policy: `quota` units replenish
/// continuously over each `period`, and at most `burst_capacity` units may be
/// taken at once.
///
/// # Burst and replenishment
///
/// A fresh subject may spend `burst_capacity` units immediately. Each unit then
/// replenishes after `period / quota`; backends track this with exact scaled
/// integers, never floating point. The full burst replenishes after
/// `burst_capacity × period / quota`, which must not exceed [`MAX_WINDOW`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use runlimit_core::{GcraPolicy, PolicyId, ScopeId};
///
/// let policy = GcraPolicy::new(
///     PolicyId::new("api.read")?,
///     ScopeId::new("client")?,
///     10,                     // units replenished
///     Duration::from_secs(1), // during this period
///     20,                     // maximum immediate burst
/// )?;
/// assert_eq!(policy.full_replenishment(), Duration::from_secs(2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct GcraPolicy {
    id: PolicyId,
    scope: ScopeId,
    quota: u64,
    period: Duration,
    period_ms: u64,
    burst_capacity: u64,
    full_replenishment: Duration,
    emission_interval: ExactNanos,
    burst_tolerance: ExactNanos,
    /// The period in nanoseconds, which the units an allowed check leaves
    /// are divided by.
    period_nanos: Divisor,
    quota_mode: QuotaMode,
    fingerprint: PolicyFingerprint,
    predecessor: Predecessor,
}

impl GcraPolicy {
    /// Creates an enforcing policy replenishing `quota` units per `period` with at
    /// most `burst_capacity` units available at once.
    ///
    /// # Errors
    ///
    /// [`PolicyError::CountOutOfRange`] unless `quota` and `burst_capacity` are in
    /// `1..=MAX_LIMIT`; [`PolicyError::DurationOutOfRange`] or
    /// [`PolicyError::DurationNotWholeMilliseconds`] unless `period` is a whole
    /// number of milliseconds in `(0, MAX_WINDOW]`;
    /// [`PolicyError::ReplenishmentTooLong`] if the full burst would take longer
    /// than [`MAX_WINDOW`] to replenish.
    pub fn new(
        id: PolicyId,
        scope: ScopeId,
        quota: u64,
        period: Duration,
        burst_capacity: u64,
    ) -> Result<Self, PolicyError> {
        let quota = validate_count(PolicyField::Quota, quota)?;
        let period_ms = validate_duration(PolicyField::Period, period)?;
        let burst_capacity = validate_count(PolicyField::BurstCapacity, burst_capacity)?;
        let replenishment_ms =
            (u128::from(burst_capacity) * u128::from(period_ms)).div_ceil(u128::from(quota));
        // At most 1e9 × 3.2e10 ms, which can exceed u64; saturate only for reporting.
        let full_replenishment =
            Duration::from_millis(u64::try_from(replenishment_ms).unwrap_or(u64::MAX));
        if full_replenishment > MAX_WINDOW {
            return Err(PolicyError::ReplenishmentTooLong {
                replenishment: full_replenishment,
                maximum: MAX_WINDOW,
            });
        }
        let fingerprint = PolicyFingerprint::compute(
            Algorithm::Gcra,
            &id,
            &scope,
            &[quota, period_ms, burst_capacity],
        );
        // Periods are bounded by MAX_WINDOW, far below u64::MAX / 1e6.
        let period_nanos = period_ms * 1_000_000;
        Ok(Self {
            id,
            scope,
            quota,
            period,
            period_ms,
            burst_capacity,
            full_replenishment,
            emission_interval: ExactNanos::ratio(1, period_nanos, quota),
            burst_tolerance: ExactNanos::ratio(burst_capacity, period_nanos, quota),
            period_nanos: Divisor::new(period_nanos),
            quota_mode: QuotaMode::Enforce,
            fingerprint,
            predecessor: None,
        })
    }

    /// Returns the policy with `quota_mode`; the fingerprint, and so every stored
    /// counter, stays the same.
    #[inline]
    #[must_use]
    pub fn with_quota_mode(mut self, quota_mode: QuotaMode) -> Self {
        self.quota_mode = quota_mode;
        self
    }

    /// Units replenished per [`period`](Self::period).
    #[inline]
    #[must_use]
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// The replenishment period.
    #[inline]
    #[must_use]
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The replenishment period in whole milliseconds.
    #[inline]
    #[must_use]
    pub fn period_millis(&self) -> u64 {
        self.period_ms
    }

    /// The most units available at once.
    #[inline]
    #[must_use]
    pub fn burst_capacity(&self) -> u64 {
        self.burst_capacity
    }

    /// How long an exhausted subject takes to regain its full burst:
    /// `burst_capacity × period / quota`, rounded up to whole milliseconds.
    #[inline]
    #[must_use]
    pub fn full_replenishment(&self) -> Duration {
        self.full_replenishment
    }

    /// The time one unit takes to replenish, `period / quota`, exactly: whole
    /// nanoseconds plus a remainder in units of `1 / quota` nanosecond.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use runlimit_core::{GcraPolicy, PolicyId, ScopeId, policy::ExactNanos};
    /// let policy = GcraPolicy::new(PolicyId::new("p")?, ScopeId::new("s")?, 3, Duration::from_millis(1), 1)?;
    /// // 1 ms / 3 = 333_333 ns + 1/3 ns.
    /// assert_eq!(policy.emission_interval_nanos(), ExactNanos { whole: 333_333, remainder: 1 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    #[must_use]
    pub fn emission_interval_nanos(&self) -> ExactNanos {
        self.emission_interval
    }

    /// The burst tolerance, `burst_capacity × period / quota`, exactly, in the
    /// same form as [`emission_interval_nanos`](Self::emission_interval_nanos).
    #[inline]
    #[must_use]
    pub fn burst_tolerance_nanos(&self) -> ExactNanos {
        self.burst_tolerance
    }

    /// The period in nanoseconds, ready to divide by.
    #[inline]
    pub(crate) fn period_nanos(&self) -> Divisor {
        self.period_nanos
    }
}

impl fmt::Debug for GcraPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GcraPolicy")
            .field("id", &self.id)
            .field("scope", &self.scope)
            .field("quota", &self.quota)
            .field("period", &self.period)
            .field("burst_capacity", &self.burst_capacity)
            .field("quota_mode", &self.quota_mode)
            .field("continuing", &self.predecessor)
            .finish_non_exhaustive()
    }
}

policy_identity!(GcraPolicy, Algorithm::Gcra, Gcra, burst_capacity);

/// A sliding-window policy: at most `limit` units in **every** interval of
/// length `window`, with no boundary at which a caller may spend a quota twice.
///
/// # The guarantee, and what constant state costs
///
/// Backends keep constant state per key, whatever the limit: the units
/// admitted in each of the last nine eighths of a window (the current eighth
/// and the eight before it; [`SUB_WINDOWS`](crate::sliding::SUB_WINDOWS)). A
/// check is admitted only if those counts plus its cost fit the limit, and
/// they always cover the whole window before now, so:
///
/// * **never more than `limit` units are admitted in any interval of length
///   `window`**, under any interleaving of checks, weighted costs, batches and
///   refunds;
/// * the price: a unit admitted in one eighth stops counting when the ninth
///   eighth after it begins, so **a unit is available again at most
///   `window / 8` after an exact per-request log would release it**, never
///   before. The store may deny slightly earlier than an exact log; it never
///   admits what the log would refuse.
///
/// `retry_after` is the exact earliest time at which the denied cost fits
/// (when enough of the oldest eighths have dropped out), and `reset_after` the
/// time until every counted unit has dropped out, both rounded up to whole
/// milliseconds.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use runlimit_core::{PolicyId, ScopeId, SlidingWindowPolicy};
///
/// // At most 5 password resets per recipient in any 15 minutes.
/// let policy = SlidingWindowPolicy::new(
///     PolicyId::new("auth.reset")?,
///     ScopeId::new("recipient")?,
///     5,
///     Duration::from_secs(15 * 60),
/// )?;
/// assert_eq!(policy.sub_window(), Duration::from_millis(112_500));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SlidingWindowPolicy {
    id: PolicyId,
    scope: ScopeId,
    limit: u64,
    window: Duration,
    window_ms: u64,
    quota_mode: QuotaMode,
    fingerprint: PolicyFingerprint,
    predecessor: Predecessor,
}

impl SlidingWindowPolicy {
    /// Creates an enforcing policy of at most `limit` units in any `window`.
    ///
    /// # Errors
    ///
    /// [`PolicyError::CountOutOfRange`] unless `1 <= limit <= MAX_LIMIT`;
    /// [`PolicyError::DurationOutOfRange`] unless `0 < window <= MAX_WINDOW`;
    /// [`PolicyError::DurationNotWholeMilliseconds`] if `window` has a
    /// sub-millisecond part.
    pub fn new(
        id: PolicyId,
        scope: ScopeId,
        limit: u64,
        window: Duration,
    ) -> Result<Self, PolicyError> {
        let limit = validate_count(PolicyField::Limit, limit)?;
        let window_ms = validate_duration(PolicyField::Window, window)?;
        let fingerprint =
            PolicyFingerprint::compute(Algorithm::SlidingWindow, &id, &scope, &[limit, window_ms]);
        Ok(Self {
            id,
            scope,
            limit,
            window,
            window_ms,
            quota_mode: QuotaMode::Enforce,
            fingerprint,
            predecessor: None,
        })
    }

    /// Returns the policy with `quota_mode`; the fingerprint, and so every stored
    /// counter, stays the same.
    #[inline]
    #[must_use]
    pub fn with_quota_mode(mut self, quota_mode: QuotaMode) -> Self {
        self.quota_mode = quota_mode;
        self
    }

    /// Units admitted in any window.
    #[inline]
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    #[inline]
    #[must_use]
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The window length in whole milliseconds.
    #[inline]
    #[must_use]
    pub fn window_millis(&self) -> u64 {
        self.window_ms
    }

    /// An eighth of the window: how finely backends count, and so the most a
    /// unit's release can lag an exact log's.
    #[inline]
    #[must_use]
    pub fn sub_window(&self) -> Duration {
        self.window / 8
    }
}

impl fmt::Debug for SlidingWindowPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingWindowPolicy")
            .field("id", &self.id)
            .field("scope", &self.scope)
            .field("limit", &self.limit)
            .field("window", &self.window)
            .field("quota_mode", &self.quota_mode)
            .field("continuing", &self.predecessor)
            .finish_non_exhaustive()
    }
}

policy_identity!(
    SlidingWindowPolicy,
    Algorithm::SlidingWindow,
    SlidingWindow,
    limit
);

#[cfg(feature = "serde")]
mod serde_impl {
    //! Policies serialize their parameters (never their fingerprint) and
    //! deserialize through the validating constructors.

    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    use super::{FixedWindowPolicy, GcraPolicy, PolicyError, QuotaMode, SlidingWindowPolicy};
    use crate::id::{PolicyId, ScopeId};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct WindowRepr {
        id: PolicyId,
        scope: ScopeId,
        limit: u64,
        window: Duration,
        #[serde(default)]
        quota_mode: QuotaMode,
    }

    impl Serialize for FixedWindowPolicy {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            WindowRepr {
                id: self.id.clone(),
                scope: self.scope.clone(),
                limit: self.limit,
                window: self.window,
                quota_mode: self.quota_mode,
            }
            .serialize(serializer)
        }
    }

    impl<'de> Deserialize<'de> for FixedWindowPolicy {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let repr = WindowRepr::deserialize(deserializer)?;
            Self::new(repr.id, repr.scope, repr.limit, repr.window)
                .map(|policy| policy.with_quota_mode(repr.quota_mode))
                .map_err(|error: PolicyError| serde::de::Error::custom(error))
        }
    }

    /// A sliding window has a fixed window's parameters, and so its form.
    impl Serialize for SlidingWindowPolicy {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            WindowRepr {
                id: self.id.clone(),
                scope: self.scope.clone(),
                limit: self.limit,
                window: self.window,
                quota_mode: self.quota_mode,
            }
            .serialize(serializer)
        }
    }

    impl<'de> Deserialize<'de> for SlidingWindowPolicy {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let repr = WindowRepr::deserialize(deserializer)?;
            Self::new(repr.id, repr.scope, repr.limit, repr.window)
                .map(|policy| policy.with_quota_mode(repr.quota_mode))
                .map_err(|error: PolicyError| serde::de::Error::custom(error))
        }
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct GcraRepr {
        id: PolicyId,
        scope: ScopeId,
        quota: u64,
        period: Duration,
        burst_capacity: u64,
        #[serde(default)]
        quota_mode: QuotaMode,
    }

    impl Serialize for GcraPolicy {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            GcraRepr {
                id: self.id.clone(),
                scope: self.scope.clone(),
                quota: self.quota,
                period: self.period,
                burst_capacity: self.burst_capacity,
                quota_mode: self.quota_mode,
            }
            .serialize(serializer)
        }
    }

    impl<'de> Deserialize<'de> for GcraPolicy {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let repr = GcraRepr::deserialize(deserializer)?;
            Self::new(
                repr.id,
                repr.scope,
                repr.quota,
                repr.period,
                repr.burst_capacity,
            )
            .map(|policy| policy.with_quota_mode(repr.quota_mode))
            .map_err(|error: PolicyError| serde::de::Error::custom(error))
        }
    }
}
