//! Two-tier admission: which tier a check belongs to, and the receipts and
//! errors that span both.
//!
//! A tiered limiter (`runlimit_memory::Tiered`) evaluates a cheap local gate
//! and a shared backend as one admission. Its checks carry a
//! [`TieredPolicy`], which names the tier and holds that tier's own policy,
//! so each tier keeps its policy type while one batch mixes both.

use std::fmt;

use crate::{
    id::{PolicyId, ScopeId},
    lifecycle::Receipt,
    lineage::{AnyPolicy, PolicyKind},
    policy::{Algorithm, Policy, PolicyFingerprint, QuotaMode, sealed},
};

/// A policy of one tier of a tiered limiter: `Gate` for the local gate (a
/// memory store, checked first), `Shared` for the shared backend.
///
/// It is the policy it holds in every respect (identifier, scope, quota mode,
/// fingerprint, capacity): the same subject key and counter, the same
/// advertised fields.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use runlimit_core::{FixedWindowPolicy, PolicyId, ScopeId, TieredPolicy};
///
/// let per_client = FixedWindowPolicy::new(
///     PolicyId::new("auth.login.local")?,
///     ScopeId::new("client")?,
///     40,
///     Duration::from_secs(60),
/// )?;
/// let per_identity = FixedWindowPolicy::new(
///     PolicyId::new("auth.login.shared")?,
///     ScopeId::new("identity")?,
///     8,
///     Duration::from_secs(60),
/// )?;
/// let gate: TieredPolicy<FixedWindowPolicy, FixedWindowPolicy> = TieredPolicy::Gate(per_client);
/// let shared = TieredPolicy::<FixedWindowPolicy, _>::Shared(per_identity);
/// assert!(gate.is_gate() && !shared.is_gate());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum TieredPolicy<G, S> {
    /// Checked by the local gate.
    Gate(G),
    /// Checked by the shared backend, once the gate allowed.
    Shared(S),
}

impl<G: Policy, S: Policy> TieredPolicy<G, S> {
    /// Whether the local gate checks this policy.
    #[inline]
    #[must_use]
    pub fn is_gate(&self) -> bool {
        matches!(self, Self::Gate(_))
    }

    /// The policy itself, as the [`Policy`] every method delegates to.
    #[inline]
    #[must_use]
    pub fn inner(&self) -> &dyn Policy {
        match self {
            Self::Gate(policy) => policy,
            Self::Shared(policy) => policy,
        }
    }
}

impl<G: fmt::Debug, S: fmt::Debug> fmt::Debug for TieredPolicy<G, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gate(policy) => f.debug_tuple("Gate").field(policy).finish(),
            Self::Shared(policy) => f.debug_tuple("Shared").field(policy).finish(),
        }
    }
}

impl<G: Policy, S: Policy> sealed::Sealed for TieredPolicy<G, S> {}

macro_rules! delegate {
    ($self:ident, $method:ident) => {
        match $self {
            Self::Gate(policy) => policy.$method(),
            Self::Shared(policy) => policy.$method(),
        }
    };
}

impl<G: Policy, S: Policy> Policy for TieredPolicy<G, S> {
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

/// Errors that tell whether the failed operation may have consumed quota:
/// "definitely not applied" (`false`) or "may have applied" (`true`).
///
/// Implemented by every backend's error, so wrappers such as a tiered
/// limiter or a denial cache can keep the classification of the backend they
/// wrap.
pub trait MayHaveConsumed {
    /// Whether quota may have been consumed although the operation failed.
    fn may_have_consumed_quota(&self) -> bool;
}

impl Receipt {
    /// A receipt holding the receipts of each tier of one admission, for
    /// tiered limiters; [`into_tiers`](Self::into_tiers) takes it apart.
    pub fn tiered(issuer: &'static str, gate: Option<Receipt>, shared: Option<Receipt>) -> Self {
        let admitted: Vec<_> = gate
            .iter()
            .chain(shared.iter())
            .flat_map(|receipt| receipt.admitted().iter().copied())
            .collect();
        Self::with_tiers(issuer, admitted, Box::new((gate, shared)))
    }

    /// The gate's and the shared backend's receipts, if this receipt was
    /// built by [`tiered`](Self::tiered) with `issuer`; otherwise the receipt
    /// itself, unchanged.
    ///
    /// # Errors
    ///
    /// The receipt, when it is not a tiered receipt of `issuer`.
    pub fn into_tiers(
        self,
        issuer: &'static str,
    ) -> Result<(Option<Receipt>, Option<Receipt>), Receipt> {
        if self.issuer() != issuer {
            return Err(self);
        }
        self.take_tiers()
    }
}
