//! Granting as many units as fit: the shared-store half of a lease.

use std::future::Future;

use crate::{check::Check, decision::Decision, lifecycle::Receipt, lifecycle::Settle};

/// What a [`Grant::grant`] consumed: between the check's cost and the
/// maximum asked for, as many units as fitted, or nothing when not even the
/// cost did.
///
/// The receipt records a check of [`units`](Self::units) units: settle it
/// with `Check::weighted(policy, subject, granted.units())` to give back what
/// was not spent.
#[derive(Debug)]
pub struct Granted {
    decision: Decision,
    units: u64,
    receipt: Option<Receipt>,
}

impl Granted {
    /// A grant, for backends: `units` is 0 exactly when the decision consumed
    /// nothing, and `receipt` is present exactly when it consumed.
    #[must_use]
    pub fn new(decision: Decision, units: u64, receipt: Option<Receipt>) -> Self {
        Self {
            decision,
            units,
            receipt,
        }
    }

    /// The decision, as for a check of [`units`](Self::units) units when
    /// granted (what remains after the grant), else the check's denial.
    #[must_use]
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The units consumed: 0 when denied.
    #[must_use]
    pub fn units(&self) -> u64 {
        self.units
    }

    /// Takes the receipt out: `Some` only once, and only if units were
    /// granted.
    pub fn take_receipt(&mut self) -> Option<Receipt> {
        self.receipt.take()
    }

    /// The decision, the units and the receipt.
    #[must_use]
    pub fn into_parts(self) -> (Decision, u64, Option<Receipt>) {
        (self.decision, self.units, self.receipt)
    }
}

/// Consuming as many units as fit, beside [`Settle`]: what a replica asks the
/// shared store for when it admits from a local lease.
///
/// [`grant`](Self::grant) consumes between `check.cost()` and `up_to` units
/// (`up_to` is raised to the cost and lowered to the policy's capacity), as
/// many as the quota holds right now on the backend's clock, in one round
/// trip; when not even the cost fits, it denies as the check would and
/// consumes nothing. Units granted are consumed as if admitted by one check
/// of that cost, so everything a grant hands out counts against the limit
/// before anyone spends it.
pub trait Grant: Settle {
    /// Grants between `check.cost()` and `up_to` units of `check`'s quota.
    ///
    /// # Errors
    ///
    /// The backend's failure, classified like a check's.
    fn grant(
        &self,
        check: &Check<'_, Self::Policy>,
        up_to: u64,
    ) -> impl Future<Output = Result<Granted, Self::Error>> + Send;
}

/// The number of units a grant of `check` asks for: `up_to`, raised to the
/// check's cost and lowered to its policy's capacity.
#[must_use]
pub fn grant_bound<P: crate::Policy + ?Sized>(check: &Check<'_, P>, up_to: u64) -> u64 {
    up_to
        .max(check.cost())
        .min(check.policy().capacity().max(check.cost()))
}
