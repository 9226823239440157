//! Charging by outcome: admit with a receipt, refund when the response says
//! the request should not count.

use std::{future::Future, pin::Pin};

use http::{HeaderMap, StatusCode};
use runlimit_core::{BatchDecision, Check, Decision, Lifecycle, Limiter, Receipt};

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An admission's outcome and, when it consumed quota, its receipt.
pub(crate) type AdmitResult<E> = Result<(Outcome, Option<Receipt>), E>;

/// What the backend answered for a layer's checks.
pub(crate) enum Outcome {
    Single(Decision),
    Batch(BatchDecision),
}

/// Admission and refund for a layer that charges by outcome, with the
/// backend's [`Lifecycle`] erased so the service needs only [`Limiter`].
pub(crate) trait Charge<L: Limiter>: Send + Sync {
    /// Admits `checks` (one check alone, several as a batch), with the
    /// receipt when they consumed quota.
    fn admit<'a>(
        &'a self,
        limiter: &'a L,
        checks: &'a [Check<'a, L::Policy>],
    ) -> Boxed<'a, AdmitResult<L::Error>>;

    /// Whether a request whose response has this head counts.
    fn counts(&self, status: StatusCode, headers: &HeaderMap) -> bool;

    /// Refunds `receipt`. Errors are the backend's to observe; the response
    /// is not changed by them.
    fn refund<'a>(
        &'a self,
        limiter: &'a L,
        checks: &'a [Check<'a, L::Policy>],
        receipt: Receipt,
    ) -> Boxed<'a, ()>;
}

/// Counts a request when `counts` says so, refunding it otherwise.
pub(crate) struct CountWhen<F>(pub(crate) F);

impl<L, F> Charge<L> for CountWhen<F>
where
    L: Lifecycle,
    F: Fn(StatusCode, &HeaderMap) -> bool + Send + Sync,
{
    fn admit<'a>(
        &'a self,
        limiter: &'a L,
        checks: &'a [Check<'a, L::Policy>],
    ) -> Boxed<'a, AdmitResult<L::Error>> {
        Box::pin(async move {
            Ok(match checks {
                [single] => {
                    let (decision, receipt) = limiter.admit(single).await?.into_parts();
                    (Outcome::Single(decision), receipt)
                }
                all => {
                    let (batch, receipt) = limiter.admit_all(all).await?.into_parts();
                    (Outcome::Batch(batch), receipt)
                }
            })
        })
    }

    fn counts(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        (self.0)(status, headers)
    }

    fn refund<'a>(
        &'a self,
        limiter: &'a L,
        checks: &'a [Check<'a, L::Policy>],
        receipt: Receipt,
    ) -> Boxed<'a, ()> {
        Box::pin(async move {
            // The backend's observer sees a failed refund; the request keeps
            // its charge, the error direction a limiter must take.
            let _ = limiter.refund(checks, receipt).await;
        })
    }
}
