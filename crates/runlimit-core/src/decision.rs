//! The outcome of a check or an atomic batch of checks.

use std::time::Duration;

use crate::policy::{MAX_LIMIT, QuotaMode};

/// Why a check was, or in shadow mode would have been, refused.
///
/// A denial is a normal outcome, not an error: backend failures are reported as
/// the backend's `Error` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Denial {
    /// The subject has used its quota.
    QuotaExceeded {
        /// The policy's capacity: the fixed-window limit or the GCRA burst.
        capacity: u64,
        /// How long until the same check could be admitted.
        retry_after: Duration,
    },
    /// A new subject could not be stored because the backend is at its configured
    /// capacity. Always fail-closed, even for shadow policies.
    StorageCapacity {
        /// The earliest known time after which the same operation may fit, when
        /// the backend knows one.
        retry_after: Option<Duration>,
    },
}

impl Denial {
    /// How long until the same check might be admitted, if known.
    #[inline]
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::QuotaExceeded { retry_after, .. } => Some(*retry_after),
            Self::StorageCapacity { retry_after } => *retry_after,
        }
    }

    /// [`retry_after`](Self::retry_after) rounded up to whole seconds, as an HTTP
    /// `Retry-After` value needs; whole seconds stay as they are.
    ///
    /// ```
    /// use std::time::Duration;
    /// use runlimit_core::Denial;
    ///
    /// let denial = Denial::QuotaExceeded { capacity: 8, retry_after: Duration::from_millis(2_001) };
    /// assert_eq!(denial.retry_after_seconds(), Some(3));
    /// let denial = Denial::QuotaExceeded { capacity: 8, retry_after: Duration::from_secs(2) };
    /// assert_eq!(denial.retry_after_seconds(), Some(2));
    /// ```
    #[inline]
    #[must_use]
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after().map(ceil_seconds)
    }

    /// Whether this is [`Denial::QuotaExceeded`].
    #[inline]
    #[must_use]
    pub fn is_quota_exceeded(&self) -> bool {
        matches!(self, Self::QuotaExceeded { .. })
    }

    /// Whether this is [`Denial::StorageCapacity`].
    #[inline]
    #[must_use]
    pub fn is_storage_capacity(&self) -> bool {
        matches!(self, Self::StorageCapacity { .. })
    }

    #[cfg(feature = "serde")]
    pub(crate) fn validate(&self) -> Result<(), DecisionError> {
        match self {
            Self::QuotaExceeded { capacity, .. } if !(1..=MAX_LIMIT).contains(capacity) => {
                Err(DecisionError::CapacityOutOfRange {
                    capacity: *capacity,
                })
            }
            _ => Ok(()),
        }
    }
}

/// `duration` in whole seconds, rounding any fraction up, as every
/// seconds-valued field Runlimit reports (`Retry-After`, `RateLimit`'s `t`)
/// must: a client that waits the reported time is never early.
///
/// ```
/// use std::time::Duration;
/// use runlimit_core::ceil_seconds;
///
/// assert_eq!(ceil_seconds(Duration::from_millis(2_001)), 3);
/// assert_eq!(ceil_seconds(Duration::from_secs(2)), 2);
/// assert_eq!(ceil_seconds(Duration::ZERO), 0);
/// ```
#[inline]
#[must_use]
pub fn ceil_seconds(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0))
}

/// Why a [`Decision`] or [`BatchDecision`] would break Runlimit's invariants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// `remaining` was above `limit`.
    #[error("remaining {remaining} exceeds the limit {limit}")]
    RemainingAboveLimit {
        /// The refused remaining count.
        remaining: u64,
        /// The limit.
        limit: u64,
    },
    /// A limit or capacity was zero or above [`MAX_LIMIT`].
    #[error("capacity {capacity} is outside 1..={MAX_LIMIT}")]
    CapacityOutOfRange {
        /// The refused value.
        capacity: u64,
    },
    /// A storage-capacity denial was marked as a shadow denial; capacity denials
    /// always fail closed.
    #[error("a storage-capacity denial cannot be a shadow denial")]
    ShadowStorageCapacity,
    /// An allowed batch held a decision that was not allowed, or a denied batch
    /// pointed outside the batch.
    #[error("an allowed batch may only hold allowed decisions")]
    DeniedDecisionInAllowedBatch,
    /// An allowed batch held no decisions. No backend produces one: an empty
    /// batch is a caller error, and admitting it would bypass every limit.
    #[error("an allowed batch must hold at least one decision")]
    EmptyAllowedBatch,
}

/// Which of the three outcomes a [`Decision`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecisionKind {
    /// Within quota; the cost was consumed.
    Allowed,
    /// Refused; nothing was consumed.
    Denied,
    /// A shadow policy would have refused; the request is permitted and nothing
    /// was consumed.
    ShadowDenied,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Outcome {
    Allowed {
        limit: u64,
        remaining: u64,
        reset_after: Duration,
    },
    Denied(Denial),
    ShadowDenied(Denial),
}

/// The outcome of one check.
///
/// Read it with the predicates, whose names are chosen so that none can be misread
/// for a shadow denial:
///
/// | kind | [`permits_request`](Self::permits_request) | [`would_deny`](Self::would_deny) | [`is_allowed`](Self::is_allowed) | [`is_denied`](Self::is_denied) | [`is_shadow_denied`](Self::is_shadow_denied) |
/// |---|---|---|---|---|---|
/// | allowed | true | false | true | false | false |
/// | denied | false | true | false | true | false |
/// | shadow-denied | true | true | false | false | true |
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use runlimit_core::{Decision, Denial};
///
/// let shadow = Decision::shadow_denied(Denial::QuotaExceeded {
///     capacity: 8,
///     retry_after: Duration::from_millis(1_500),
/// })?;
/// assert!(shadow.permits_request());
/// assert!(shadow.would_deny());
/// assert!(!shadow.is_allowed());
/// assert_eq!(shadow.retry_after_seconds(), Some(2));
/// # Ok::<(), runlimit_core::DecisionError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision(Outcome);

impl Decision {
    /// An allowed decision: `remaining` of `limit` units are left, and the quota
    /// fully resets after `reset_after`.
    ///
    /// # Errors
    ///
    /// [`DecisionError::CapacityOutOfRange`] unless `1 <= limit <= MAX_LIMIT`;
    /// [`DecisionError::RemainingAboveLimit`] if `remaining > limit`.
    #[inline]
    pub fn allowed(
        limit: u64,
        remaining: u64,
        reset_after: Duration,
    ) -> Result<Self, DecisionError> {
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(DecisionError::CapacityOutOfRange { capacity: limit });
        }
        if remaining > limit {
            return Err(DecisionError::RemainingAboveLimit { remaining, limit });
        }
        Ok(Self(Outcome::Allowed {
            limit,
            remaining,
            reset_after,
        }))
    }

    /// An enforced denial.
    #[inline]
    #[must_use]
    pub fn denied(denial: Denial) -> Self {
        Self(Outcome::Denied(denial))
    }

    /// A shadow denial: a shadow policy's quota is exhausted.
    ///
    /// # Errors
    ///
    /// [`DecisionError::ShadowStorageCapacity`] for a
    /// [`Denial::StorageCapacity`], which always fails closed.
    #[inline]
    pub fn shadow_denied(denial: Denial) -> Result<Self, DecisionError> {
        if denial.is_storage_capacity() {
            return Err(DecisionError::ShadowStorageCapacity);
        }
        Ok(Self(Outcome::ShadowDenied(denial)))
    }

    /// The decision a denial yields under `mode`: shadow-denied for a quota
    /// denial of a shadow policy, denied otherwise. Storage-capacity denials are
    /// always enforced, whatever the mode.
    #[inline]
    #[must_use]
    pub fn for_mode(mode: QuotaMode, denial: Denial) -> Self {
        match mode {
            QuotaMode::Shadow if denial.is_quota_exceeded() => Self(Outcome::ShadowDenied(denial)),
            _ => Self(Outcome::Denied(denial)),
        }
    }

    /// Which outcome this is.
    #[inline]
    #[must_use]
    pub fn kind(&self) -> DecisionKind {
        match self.0 {
            Outcome::Allowed { .. } => DecisionKind::Allowed,
            Outcome::Denied(_) => DecisionKind::Denied,
            Outcome::ShadowDenied(_) => DecisionKind::ShadowDenied,
        }
    }

    /// Whether the application should serve the request: true when allowed and
    /// when shadow-denied.
    #[inline]
    #[must_use]
    pub fn permits_request(&self) -> bool {
        !matches!(self.0, Outcome::Denied(_))
    }

    /// Whether the quota refused the check, enforced or not: true when denied and
    /// when shadow-denied.
    #[inline]
    #[must_use]
    pub fn would_deny(&self) -> bool {
        !matches!(self.0, Outcome::Allowed { .. })
    }

    /// Whether the check was within quota (never true for a shadow denial).
    #[inline]
    #[must_use]
    pub fn is_allowed(&self) -> bool {
        matches!(self.0, Outcome::Allowed { .. })
    }

    /// Whether the check was refused and the request must not be served.
    #[inline]
    #[must_use]
    pub fn is_denied(&self) -> bool {
        matches!(self.0, Outcome::Denied(_))
    }

    /// Whether a shadow policy would have refused the check.
    #[inline]
    #[must_use]
    pub fn is_shadow_denied(&self) -> bool {
        matches!(self.0, Outcome::ShadowDenied(_))
    }

    /// The denial, for denied and shadow-denied decisions.
    #[inline]
    #[must_use]
    pub fn denial(&self) -> Option<&Denial> {
        match &self.0 {
            Outcome::Allowed { .. } => None,
            Outcome::Denied(denial) | Outcome::ShadowDenied(denial) => Some(denial),
        }
    }

    /// The policy limit (fixed window) or burst capacity (GCRA) of an allowed
    /// decision.
    #[inline]
    #[must_use]
    pub fn limit(&self) -> Option<u64> {
        match self.0 {
            Outcome::Allowed { limit, .. } => Some(limit),
            _ => None,
        }
    }

    /// Units still available after an allowed decision.
    #[inline]
    #[must_use]
    pub fn remaining(&self) -> Option<u64> {
        match self.0 {
            Outcome::Allowed { remaining, .. } => Some(remaining),
            _ => None,
        }
    }

    /// After an allowed decision, how long until the quota is fully available
    /// again: the end of the fixed window, or the GCRA full replenishment.
    #[inline]
    #[must_use]
    pub fn reset_after(&self) -> Option<Duration> {
        match self.0 {
            Outcome::Allowed { reset_after, .. } => Some(reset_after),
            _ => None,
        }
    }

    /// For denied and shadow-denied decisions, how long until the same check might
    /// be admitted, if known.
    #[inline]
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.denial().and_then(Denial::retry_after)
    }

    /// [`retry_after`](Self::retry_after) rounded up to whole seconds; whole
    /// seconds stay as they are.
    #[inline]
    #[must_use]
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after().map(ceil_seconds)
    }
}

/// The outcome of an atomic batch of checks.
///
/// A batch is all-or-nothing: it is allowed only if every check is, and a denied
/// or shadow-denied batch consumes nothing. When several checks fail, a
/// storage-capacity denial takes precedence (it fails closed even in shadow
/// mode); otherwise the first quota denial in input order is reported.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BatchDecision {
    /// Every check was admitted; the decisions are in input order.
    Allowed(Vec<Decision>),
    /// The check at `index` was denied and the request must not be served.
    Denied {
        /// Input position of the check that was denied.
        index: usize,
        /// Why it was denied.
        denial: Denial,
    },
    /// A shadow policy's check at `index` would have been denied; the request is
    /// permitted and nothing was consumed.
    ShadowDenied {
        /// Input position of the check that would have been denied.
        index: usize,
        /// Why it would have been denied.
        denial: Denial,
    },
}

impl BatchDecision {
    /// Combines the decisions a backend computed for each check of a batch (in
    /// input order, before consuming anything) into the batch outcome.
    ///
    /// Returns `Allowed` with the same decisions when all are allowed; otherwise
    /// the first storage-capacity denial, or else the first quota denial, in input
    /// order.
    #[inline]
    #[must_use]
    pub fn from_decisions(decisions: Vec<Decision>) -> Self {
        let mut first_quota = None;
        for (index, decision) in decisions.iter().enumerate() {
            match decision.0 {
                Outcome::Allowed { .. } => {}
                Outcome::Denied(denial) if denial.is_storage_capacity() => {
                    return Self::Denied { index, denial };
                }
                Outcome::Denied(denial) => {
                    first_quota.get_or_insert(Self::Denied { index, denial });
                }
                Outcome::ShadowDenied(denial) => {
                    first_quota.get_or_insert(Self::ShadowDenied { index, denial });
                }
            }
        }
        first_quota.unwrap_or(Self::Allowed(decisions))
    }

    /// Whether the application should serve the request: true when allowed and
    /// when shadow-denied.
    #[inline]
    #[must_use]
    pub fn permits_request(&self) -> bool {
        !matches!(self, Self::Denied { .. })
    }

    /// Whether some check's quota refused it, enforced or not.
    #[inline]
    #[must_use]
    pub fn would_deny(&self) -> bool {
        !matches!(self, Self::Allowed(_))
    }

    /// Whether every check was within quota (never true for a shadow denial).
    #[inline]
    #[must_use]
    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Allowed(_))
    }

    /// The allowed decisions, in input order.
    #[inline]
    #[must_use]
    pub fn decisions(&self) -> Option<&[Decision]> {
        match self {
            Self::Allowed(decisions) => Some(decisions),
            _ => None,
        }
    }

    /// The failing check's index and denial, for denied and shadow-denied batches.
    #[inline]
    #[must_use]
    pub fn denial(&self) -> Option<(usize, &Denial)> {
        match self {
            Self::Allowed(_) => None,
            Self::Denied { index, denial } | Self::ShadowDenied { index, denial } => {
                Some((*index, denial))
            }
        }
    }

    /// For denied and shadow-denied batches, how long until the batch might be
    /// admitted, if known.
    #[inline]
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        self.denial().and_then(|(_, denial)| denial.retry_after())
    }

    /// [`retry_after`](Self::retry_after) rounded up to whole seconds.
    #[inline]
    #[must_use]
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after().map(ceil_seconds)
    }

    #[cfg(feature = "serde")]
    pub(crate) fn validate(&self) -> Result<(), DecisionError> {
        match self {
            Self::Allowed(decisions) if decisions.is_empty() => {
                Err(DecisionError::EmptyAllowedBatch)
            }
            Self::Allowed(decisions) => {
                if decisions.iter().all(Decision::is_allowed) {
                    Ok(())
                } else {
                    Err(DecisionError::DeniedDecisionInAllowedBatch)
                }
            }
            Self::Denied { denial, .. } => denial.validate(),
            Self::ShadowDenied { denial, .. } => {
                denial.validate()?;
                if denial.is_storage_capacity() {
                    Err(DecisionError::ShadowStorageCapacity)
                } else {
                    Ok(())
                }
            }
        }
    }
}

#[cfg(feature = "serde")]
mod serde_impl {
    //! Tagged serde representations that deserialize through the validating
    //! constructors.

    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    use super::{BatchDecision, Decision, DecisionError, Denial, Outcome};

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
    enum DenialRepr {
        QuotaExceeded {
            capacity: u64,
            retry_after: Duration,
        },
        StorageCapacity {
            retry_after: Option<Duration>,
        },
    }

    impl Serialize for Denial {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            match *self {
                Self::QuotaExceeded {
                    capacity,
                    retry_after,
                } => DenialRepr::QuotaExceeded {
                    capacity,
                    retry_after,
                },
                Self::StorageCapacity { retry_after } => {
                    DenialRepr::StorageCapacity { retry_after }
                }
            }
            .serialize(serializer)
        }
    }

    impl<'de> Deserialize<'de> for Denial {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let denial = match DenialRepr::deserialize(deserializer)? {
                DenialRepr::QuotaExceeded {
                    capacity,
                    retry_after,
                } => Self::QuotaExceeded {
                    capacity,
                    retry_after,
                },
                DenialRepr::StorageCapacity { retry_after } => {
                    Self::StorageCapacity { retry_after }
                }
            };
            denial.validate().map_err(serde::de::Error::custom)?;
            Ok(denial)
        }
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
    enum DecisionRepr {
        Allowed {
            limit: u64,
            remaining: u64,
            reset_after: Duration,
        },
        Denied {
            denial: Denial,
        },
        ShadowDenied {
            denial: Denial,
        },
    }

    impl Serialize for Decision {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            match self.0 {
                Outcome::Allowed {
                    limit,
                    remaining,
                    reset_after,
                } => DecisionRepr::Allowed {
                    limit,
                    remaining,
                    reset_after,
                },
                Outcome::Denied(denial) => DecisionRepr::Denied { denial },
                Outcome::ShadowDenied(denial) => DecisionRepr::ShadowDenied { denial },
            }
            .serialize(serializer)
        }
    }

    impl<'de> Deserialize<'de> for Decision {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let decision: Result<Self, DecisionError> =
                match DecisionRepr::deserialize(deserializer)? {
                    DecisionRepr::Allowed {
                        limit,
                        remaining,
                        reset_after,
                    } => Self::allowed(limit, remaining, reset_after),
                    DecisionRepr::Denied { denial } => Ok(Self::denied(denial)),
                    DecisionRepr::ShadowDenied { denial } => Self::shadow_denied(denial),
                };
            decision.map_err(serde::de::Error::custom)
        }
    }

    #[derive(Deserialize)]
    #[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
    enum BatchDecisionRepr {
        Allowed { decisions: Vec<Decision> },
        Denied { index: usize, denial: Denial },
        ShadowDenied { index: usize, denial: Denial },
    }

    /// The serializing twin of `BatchDecisionRepr`, borrowing instead of cloning.
    #[derive(Serialize)]
    #[serde(tag = "outcome", rename_all = "snake_case")]
    enum BatchDecisionRef<'a> {
        Allowed { decisions: &'a [Decision] },
        Denied { index: usize, denial: &'a Denial },
        ShadowDenied { index: usize, denial: &'a Denial },
    }

    impl Serialize for BatchDecision {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            match self {
                Self::Allowed(decisions) => BatchDecisionRef::Allowed { decisions },
                Self::Denied { index, denial } => BatchDecisionRef::Denied {
                    index: *index,
                    denial,
                },
                Self::ShadowDenied { index, denial } => BatchDecisionRef::ShadowDenied {
                    index: *index,
                    denial,
                },
            }
            .serialize(serializer)
        }
    }

    impl<'de> Deserialize<'de> for BatchDecision {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let batch = match BatchDecisionRepr::deserialize(deserializer)? {
                BatchDecisionRepr::Allowed { decisions } => Self::Allowed(decisions),
                BatchDecisionRepr::Denied { index, denial } => Self::Denied { index, denial },
                BatchDecisionRepr::ShadowDenied { index, denial } => {
                    Self::ShadowDenied { index, denial }
                }
            };
            batch.validate().map_err(serde::de::Error::custom)?;
            Ok(batch)
        }
    }
}
