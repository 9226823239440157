//! Policies chosen at run time, and the policy a policy continues from.
//!
//! A policy's parameters are part of its [`PolicyFingerprint`], so a changed
//! limit is a new counter. [`continuing`](crate::FixedWindowPolicy::continuing)
//! names the policy a new one replaces: a subject's state under that
//! predecessor is carried into the new counter the first time the subject is
//! checked under the new policy, translated to its parameters (see
//! [`carry`](crate::carry) for the translation and its bound).

use std::{fmt, sync::Arc};

use crate::{
    id::{PolicyId, ScopeId},
    policy::{
        Algorithm, FixedWindowPolicy, GcraPolicy, Policy, PolicyError, PolicyFingerprint,
        QuotaMode, SlidingWindowPolicy, sealed,
    },
};

/// A policy of any of the three algorithms, as a borrowed view: what a
/// backend matches on to read its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyKind<'a> {
    /// A fixed window.
    FixedWindow(&'a FixedWindowPolicy),
    /// A sliding window.
    SlidingWindow(&'a SlidingWindowPolicy),
    /// GCRA.
    Gcra(&'a GcraPolicy),
}

impl PolicyKind<'_> {
    /// The policy as an owned [`AnyPolicy`], without a predecessor of its own.
    #[must_use]
    pub fn to_any(self) -> AnyPolicy {
        match self {
            Self::FixedWindow(policy) => {
                AnyPolicy::FixedWindow(policy.clone().without_predecessor())
            }
            Self::SlidingWindow(policy) => {
                AnyPolicy::SlidingWindow(policy.clone().without_predecessor())
            }
            Self::Gcra(policy) => AnyPolicy::Gcra(policy.clone().without_predecessor()),
        }
    }
}

/// A policy of any of the three algorithms, for code that chooses the
/// algorithm at run time (a configuration file, say) and for limiters that
/// keep all three.
///
/// It is the policy it holds in every respect: the same fingerprint,
/// subject keys and counters.
///
/// ```
/// use std::time::Duration;
/// use runlimit_core::{AnyPolicy, GcraPolicy, Policy, PolicyId, ScopeId};
///
/// let policy: AnyPolicy = GcraPolicy::new(
///     PolicyId::new("api.read")?,
///     ScopeId::new("client")?,
///     10,
///     Duration::from_secs(1),
///     20,
/// )?
/// .into();
/// assert_eq!(policy.capacity(), 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum AnyPolicy {
    /// A fixed window.
    FixedWindow(FixedWindowPolicy),
    /// A sliding window.
    SlidingWindow(SlidingWindowPolicy),
    /// GCRA.
    Gcra(GcraPolicy),
}

impl fmt::Debug for AnyPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FixedWindow(policy) => policy.fmt(f),
            Self::SlidingWindow(policy) => policy.fmt(f),
            Self::Gcra(policy) => policy.fmt(f),
        }
    }
}

impl From<FixedWindowPolicy> for AnyPolicy {
    fn from(policy: FixedWindowPolicy) -> Self {
        Self::FixedWindow(policy)
    }
}

impl From<SlidingWindowPolicy> for AnyPolicy {
    fn from(policy: SlidingWindowPolicy) -> Self {
        Self::SlidingWindow(policy)
    }
}

impl From<GcraPolicy> for AnyPolicy {
    fn from(policy: GcraPolicy) -> Self {
        Self::Gcra(policy)
    }
}

impl AnyPolicy {
    /// Returns the policy with `quota_mode`; the fingerprint, and so every
    /// stored counter, stays the same.
    #[must_use]
    pub fn with_quota_mode(self, quota_mode: QuotaMode) -> Self {
        match self {
            Self::FixedWindow(policy) => Self::FixedWindow(policy.with_quota_mode(quota_mode)),
            Self::SlidingWindow(policy) => Self::SlidingWindow(policy.with_quota_mode(quota_mode)),
            Self::Gcra(policy) => Self::Gcra(policy.with_quota_mode(quota_mode)),
        }
    }

    /// Returns the policy continuing from `predecessor`; see
    /// [`FixedWindowPolicy::continuing`].
    ///
    /// # Errors
    ///
    /// [`PolicyError::PredecessorIdentity`] when `predecessor` has another
    /// id or scope.
    pub fn continuing<Q: Policy + ?Sized>(self, predecessor: &Q) -> Result<Self, PolicyError> {
        Ok(match self {
            Self::FixedWindow(policy) => Self::FixedWindow(policy.continuing(predecessor)?),
            Self::SlidingWindow(policy) => Self::SlidingWindow(policy.continuing(predecessor)?),
            Self::Gcra(policy) => Self::Gcra(policy.continuing(predecessor)?),
        })
    }
}

impl sealed::Sealed for AnyPolicy {}

macro_rules! delegate {
    ($self:ident, $method:ident) => {
        match $self {
            Self::FixedWindow(policy) => policy.$method(),
            Self::SlidingWindow(policy) => policy.$method(),
            Self::Gcra(policy) => policy.$method(),
        }
    };
}

impl Policy for AnyPolicy {
    #[inline]
    fn algorithm(&self) -> Algorithm {
        delegate!(self, algorithm)
    }
    #[inline]
    fn id(&self) -> &PolicyId {
        delegate!(self, id)
    }
    #[inline]
    fn scope(&self) -> &ScopeId {
        delegate!(self, scope)
    }
    #[inline]
    fn quota_mode(&self) -> QuotaMode {
        delegate!(self, quota_mode)
    }
    #[inline]
    fn fingerprint(&self) -> &PolicyFingerprint {
        delegate!(self, fingerprint)
    }
    #[inline]
    fn capacity(&self) -> u64 {
        delegate!(self, capacity)
    }
    #[inline]
    fn kind(&self) -> PolicyKind<'_> {
        delegate!(self, kind)
    }
    #[inline]
    fn predecessor(&self) -> Option<&AnyPolicy> {
        delegate!(self, predecessor)
    }
}

/// The predecessor a policy keeps: `None`, or the policy it continues from
/// (without that policy's own predecessor), shared between clones.
pub(crate) type Predecessor = Option<Arc<AnyPolicy>>;

/// Validates `predecessor` for a policy of `id`, `scope` and `fingerprint`:
/// the predecessor it should keep.
pub(crate) fn predecessor_for<Q: Policy + ?Sized>(
    id: &PolicyId,
    scope: &ScopeId,
    fingerprint: &PolicyFingerprint,
    predecessor: &Q,
) -> Result<Predecessor, PolicyError> {
    // Subject keys are derived from the id and scope (not the parameters), so
    // only a policy of the same id and scope finds its subjects' old counters.
    if predecessor.id() != id || predecessor.scope() != scope {
        return Err(PolicyError::PredecessorIdentity);
    }
    if predecessor.fingerprint() == fingerprint {
        // The same counters: nothing to carry.
        return Ok(None);
    }
    Ok(Some(Arc::new(predecessor.kind().to_any())))
}
