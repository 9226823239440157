//! Leases for hot rules: the checks of rules with
//! `rate_limit.runlimit.lease: true` are admitted from
//! [`Leased`](runlimit_memory::Leased) leases of the shared quota; the
//! others go to the shared store directly.

use std::{fmt, sync::Arc, time::Duration};

use runlimit_core::{
    Admission, AnyPolicy, Backend, BatchDecision, Check, Decision, Grant, Lifecycle, Limiter,
    Policy, Receipt, Refunded, Storage, SubjectKey,
};
use runlimit_memory::{LeaseConfig, LeaseStats, Leased, LeasedError};

use crate::reload::SharedConfig;

/// The issuer of receipts of admissions from leases: a wrapper around the
/// leased limiter's own receipt, so a refund finds its way back.
const ISSUER: &str = "runlimit-server/leases";

/// A shared limiter with leases for the rules that ask for them.
///
/// A request whose counted descriptors are all of lease rules is decided by
/// the [`Leased`] limiter: a lone descriptor from its key's lease (taking a
/// grant from the shared store when the lease is empty), several from their
/// leases when each holds enough, else by the shared store in one atomic
/// batch. A request with any descriptor of a rule without a lease goes to
/// the shared store directly, as a whole.
///
/// Exact: a lease only admits units the shared store consumed first, so
/// across every replica no more than the limit is admitted. The cost is on
/// the other side: units a replica holds unspent (at most the grant bound,
/// [`LeaseConfig::with_max_grant`], per key and replica) are denied to the
/// others until it spends them, gives them back (when idle for a second,
/// and at shutdown), or their window ends.
pub struct LeaseRouted<S: Limiter> {
    leased: Arc<Leased<S>>,
    config: Arc<SharedConfig>,
}

impl<S: Limiter + fmt::Debug> fmt::Debug for LeaseRouted<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseRouted")
            .field("leased", &self.leased)
            .finish_non_exhaustive()
    }
}

impl<S> LeaseRouted<S>
where
    S: Grant<Policy = AnyPolicy> + 'static,
{
    /// Leases on `shared`, as `leases` says, for the lease rules of the
    /// configuration in use.
    ///
    /// Spawns a task that gives back the units of leases idle for a second,
    /// every second, until the limiter is dropped (which gives back the
    /// rest, best-effort; [`flush`](Self::flush) to know).
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    #[must_use]
    pub fn new(shared: S, leases: LeaseConfig, config: Arc<SharedConfig>) -> Self {
        let leased = Arc::new(Leased::new(shared, leases.with_idle_after(IDLE)));
        let weak = Arc::downgrade(&leased);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(IDLE);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(leased) = weak.upgrade() else {
                    return;
                };
                if let Err(error) = leased.flush_idle().await {
                    tracing::debug!(error = %error, "giving back idle leases failed");
                }
            }
        });
        Self { leased, config }
    }

    /// Gives every lease's unspent units back to the shared store.
    ///
    /// # Errors
    ///
    /// The first give-back that failed; its units stay counted until their
    /// window ends.
    pub async fn flush(&self) -> Result<(), LeasedError<S::Error>> {
        self.leased.flush().await
    }

    /// What the leases have done, and hold now.
    #[must_use]
    pub fn stats(&self) -> LeaseStats {
        self.leased.stats()
    }

    /// The shared store.
    #[must_use]
    pub fn shared(&self) -> &S {
        self.leased.shared()
    }

    /// Whether every check is of a lease rule.
    fn leased(&self, checks: &[Check<'_, AnyPolicy>]) -> bool {
        let config = self.config.load();
        !checks.is_empty()
            && checks
                .iter()
                .all(|check| config.is_leased(check.policy().id()))
    }
}

/// A lease unused this long is given back.
const IDLE: Duration = Duration::from_secs(1);

fn wrap(receipt: Option<Receipt>) -> Option<Receipt> {
    receipt.map(|receipt| Receipt::tiered(ISSUER, Some(receipt), None))
}

impl<S> Limiter for LeaseRouted<S>
where
    S: Grant<Policy = AnyPolicy> + 'static,
{
    type Policy = AnyPolicy;
    type Error = LeasedError<S::Error>;

    async fn check(&self, check: &Check<'_, AnyPolicy>) -> Result<Decision, Self::Error> {
        if self.leased(std::slice::from_ref(check)) {
            self.leased.check(check).await
        } else {
            self.shared()
                .check(check)
                .await
                .map_err(LeasedError::Shared)
        }
    }

    async fn check_all(
        &self,
        checks: &[Check<'_, AnyPolicy>],
    ) -> Result<BatchDecision, Self::Error> {
        self.admit_all(checks)
            .await
            .map(|admission| admission.into_parts().0)
    }
}

impl<S> Lifecycle for LeaseRouted<S>
where
    S: Grant<Policy = AnyPolicy> + 'static,
{
    async fn admit(&self, check: &Check<'_, AnyPolicy>) -> Result<Admission, Self::Error> {
        if self.leased(std::slice::from_ref(check)) {
            let (decision, receipt) = self.leased.admit(check).await?.into_parts();
            Ok(Admission::new(decision, wrap(receipt)))
        } else {
            self.shared()
                .admit(check)
                .await
                .map_err(LeasedError::Shared)
        }
    }

    async fn admit_all(
        &self,
        checks: &[Check<'_, AnyPolicy>],
    ) -> Result<Admission<BatchDecision>, Self::Error> {
        if !self.leased(checks) {
            return self
                .shared()
                .admit_all(checks)
                .await
                .map_err(LeasedError::Shared);
        }
        if let [check] = checks {
            // A lone check takes grants for its lease; a batch only spends
            // from leases.
            let (decision, receipt) = self.leased.admit(check).await?.into_parts();
            return Ok(Admission::new(
                BatchDecision::from_decisions(vec![decision]),
                wrap(receipt),
            ));
        }
        let (batch, receipt) = self.leased.admit_all(checks).await?.into_parts();
        Ok(Admission::new(batch, wrap(receipt)))
    }

    async fn refund(
        &self,
        checks: &[Check<'_, AnyPolicy>],
        receipt: Receipt,
    ) -> Result<Refunded, Self::Error> {
        match receipt.into_tiers(ISSUER) {
            Ok((Some(leased), _)) => self.leased.refund(checks, leased).await,
            Ok((None, _)) => Ok(Refunded::new(0, checks.len())),
            Err(shared) => self
                .shared()
                .refund(checks, shared)
                .await
                .map_err(LeasedError::Shared),
        }
    }

    async fn peek(&self, check: &Check<'_, AnyPolicy>) -> Result<Decision, Self::Error> {
        if self.leased(std::slice::from_ref(check)) {
            self.leased.peek(check).await
        } else {
            self.shared().peek(check).await.map_err(LeasedError::Shared)
        }
    }

    async fn reset(&self, policy: &AnyPolicy, subject: &SubjectKey) -> Result<bool, Self::Error> {
        self.leased.reset(policy, subject).await
    }
}

impl<S> Backend for LeaseRouted<S>
where
    S: Grant<Policy = AnyPolicy> + Backend + 'static,
{
    fn storage(&self, policy: &AnyPolicy) -> Storage {
        self.shared().storage(policy)
    }
}
