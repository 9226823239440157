//! One unit of admission work: a policy, a subject key and a cost.

use std::fmt;

use crate::{
    key::{CounterKey, SubjectKey},
    policy::Policy,
    tier::TieredPolicy,
};

/// Why a weighted [`Check`] could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CostError {
    /// The cost was zero or above the policy's capacity, so no window or burst
    /// could ever admit it.
    #[error("cost {cost} is outside 1..={capacity}, the policy's capacity")]
    OutOfRange {
        /// The refused cost.
        cost: u64,
        /// The policy's [`capacity`](Policy::capacity).
        capacity: u64,
    },
}

/// A request to consume `cost` units of `policy`'s quota for one subject.
///
/// A check borrows its policy, so building one costs no allocation; its
/// [`CounterKey`] combines the policy fingerprint with the subject key.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use runlimit_core::{Check, CostError, GcraPolicy, PolicyId, ScopeId, SubjectKey};
///
/// let policy = GcraPolicy::new(
///     PolicyId::new("api.write")?,
///     ScopeId::new("client")?,
///     100,
///     Duration::from_secs(60),
///     10,
/// )?;
/// let key = SubjectKey::from_digest([1; 32]);
/// assert_eq!(Check::new(&policy, key).cost(), 1);
/// assert_eq!(Check::weighted(&policy, key, 10)?.cost(), 10);
/// assert_eq!(
///     Check::weighted(&policy, key, 11).unwrap_err(),
///     CostError::OutOfRange { cost: 11, capacity: 10 },
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Check<'a, P: ?Sized> {
    policy: &'a P,
    subject: SubjectKey,
    cost: u64,
}

impl<'a, P: Policy + ?Sized> Check<'a, P> {
    /// A check of cost 1.
    #[inline]
    #[must_use]
    pub fn new(policy: &'a P, subject: SubjectKey) -> Self {
        Self {
            policy,
            subject,
            cost: 1,
        }
    }

    /// A check of `cost` units, for requests that do more work than others.
    ///
    /// # Errors
    ///
    /// [`CostError::OutOfRange`] unless `1 <= cost <= policy.capacity()`: a
    /// larger cost could never be admitted, so it is a caller error rather than a
    /// denial.
    #[inline]
    pub fn weighted(policy: &'a P, subject: SubjectKey, cost: u64) -> Result<Self, CostError> {
        let capacity = policy.capacity();
        if cost == 0 || cost > capacity {
            return Err(CostError::OutOfRange { cost, capacity });
        }
        Ok(Self {
            policy,
            subject,
            cost,
        })
    }

    /// The policy being checked.
    #[inline]
    #[must_use]
    pub fn policy(&self) -> &'a P {
        self.policy
    }

    /// The subject key.
    #[inline]
    #[must_use]
    pub fn subject(&self) -> &SubjectKey {
        &self.subject
    }

    /// Units this check consumes when allowed.
    #[inline]
    #[must_use]
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The key the backend stores this check's counter under.
    #[inline]
    #[must_use]
    pub fn counter_key(&self) -> CounterKey {
        CounterKey::new(*self.policy.fingerprint(), self.subject)
    }
}

// Manual impls: a derive would demand `P: Clone`, but only a reference is copied.
impl<P: ?Sized> Clone for Check<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: ?Sized> Copy for Check<'_, P> {}

impl<P: Policy + ?Sized> fmt::Debug for Check<'_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check")
            .field("policy", &self.policy)
            .field("subject", &self.subject)
            .field("cost", &self.cost)
            .finish()
    }
}

/// A check of a [`TieredPolicy`], as the check of the tier it belongs to.
#[derive(Debug)]
pub enum TierCheck<'a, G: Policy, S: Policy> {
    /// A check for the local gate.
    Gate(Check<'a, G>),
    /// A check for the shared backend.
    Shared(Check<'a, S>),
}

impl<G: Policy, S: Policy> Clone for TierCheck<'_, G, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<G: Policy, S: Policy> Copy for TierCheck<'_, G, S> {}

impl<'a, G: Policy, S: Policy> Check<'a, TieredPolicy<G, S>> {
    /// The same check (subject, cost and counter) for the policy of its tier.
    #[inline]
    #[must_use]
    pub fn tier(&self) -> TierCheck<'a, G, S> {
        // The tiered policy's capacity is its inner policy's, so the cost
        // stays valid.
        match self.policy {
            TieredPolicy::Gate(policy) => TierCheck::Gate(Check {
                policy,
                subject: self.subject,
                cost: self.cost,
            }),
            TieredPolicy::Shared(policy) => TierCheck::Shared(Check {
                policy,
                subject: self.subject,
                cost: self.cost,
            }),
        }
    }
}
