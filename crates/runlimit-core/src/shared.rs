//! One backend behind an [`Arc`], as a backend of its own.

use std::{future::Future, sync::Arc};

use crate::{
    Admission, Backend, BatchDecision, Check, Decision, Grant, Granted, Lifecycle, Limiter,
    Receipt, Refunded, Settle, Storage, SubjectKey,
};

/// A backend behind an [`Arc`], as a backend of its own: clones share it.
///
/// Wrappers that own their backend (a lease per replica, a denial cache, a
/// tiered admission) take it by value; `Shared` lets several of them stand
/// in front of one store, as replicas stand in front of one database.
///
/// ```
/// use std::sync::Arc;
///
/// use runlimit_core::{Limiter, Shared};
///
/// fn two_handles<L: Limiter>(store: L) -> (Shared<L>, Shared<L>) {
///     let shared = Shared(Arc::new(store));
///     (shared.clone(), shared)
/// }
/// ```
#[derive(Debug)]
pub struct Shared<L>(pub Arc<L>);

impl<L> From<Arc<L>> for Shared<L> {
    fn from(backend: Arc<L>) -> Self {
        Self(backend)
    }
}

impl<L> Clone for Shared<L> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<L: Limiter> Limiter for Shared<L> {
    type Policy = L::Policy;
    type Error = L::Error;

    fn check(
        &self,
        check: &Check<'_, Self::Policy>,
    ) -> impl Future<Output = Result<Decision, Self::Error>> + Send {
        self.0.check(check)
    }

    fn check_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> impl Future<Output = Result<BatchDecision, Self::Error>> + Send {
        self.0.check_all(checks)
    }

    #[inline]
    fn check_now(&self, check: &Check<'_, Self::Policy>) -> Option<Result<Decision, Self::Error>> {
        self.0.check_now(check)
    }
}

impl<L: Lifecycle> Lifecycle for Shared<L> {
    fn admit(
        &self,
        check: &Check<'_, Self::Policy>,
    ) -> impl Future<Output = Result<Admission<Decision>, Self::Error>> + Send {
        self.0.admit(check)
    }

    fn admit_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> impl Future<Output = Result<Admission<BatchDecision>, Self::Error>> + Send {
        self.0.admit_all(checks)
    }

    fn refund(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
    ) -> impl Future<Output = Result<Refunded, Self::Error>> + Send {
        self.0.refund(checks, receipt)
    }

    fn peek(
        &self,
        check: &Check<'_, Self::Policy>,
    ) -> impl Future<Output = Result<Decision, Self::Error>> + Send {
        self.0.peek(check)
    }

    fn reset(
        &self,
        policy: &Self::Policy,
        subject: &SubjectKey,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.0.reset(policy, subject)
    }
}

impl<L: Settle> Settle for Shared<L> {
    fn settle(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
        used: &[u64],
    ) -> impl Future<Output = Result<Refunded, Self::Error>> + Send {
        self.0.settle(checks, receipt, used)
    }
}

impl<L: Grant> Grant for Shared<L> {
    fn grant(
        &self,
        check: &Check<'_, Self::Policy>,
        up_to: u64,
    ) -> impl Future<Output = Result<Granted, Self::Error>> + Send {
        self.0.grant(check, up_to)
    }
}

impl<L: Backend> Backend for Shared<L> {
    fn storage(&self, policy: &Self::Policy) -> Storage {
        self.0.storage(policy)
    }
}
