//! Charging by outcome: admit with a receipt, refund when the response says
//! the request should not count, or settle it to what the response says it
//! used.

use std::{future::Future, pin::Pin, sync::Arc};

use http::{Extensions, HeaderMap, StatusCode};
use runlimit_core::{BatchDecision, Check, Decision, Lifecycle, Limiter, Receipt, Settle};

/// Whether a request whose response has this head counts.
pub(crate) type Counts = Arc<dyn Fn(StatusCode, &HeaderMap) -> bool + Send + Sync>;

/// The units a request used, which its handler reports by inserting this in
/// the response's extensions, for a layer that
/// [reserves](crate::RateLimitLayer::reserve) a cost up front.
///
/// The layer then gives back what each check reserved beyond `Used`; a
/// response without it keeps the whole reservation, and a `Used` above the
/// reservation keeps it too.
///
/// ```
/// use axum::response::IntoResponse;
/// use runlimit_axum::Used;
///
/// async fn complete() -> impl IntoResponse {
///     let tokens = 1_250; // what the model's answer took
///     let mut response = "...".into_response();
///     response.extensions_mut().insert(Used(tokens));
///     response
/// }
/// # let _ = complete;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Used(pub u64);

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

    /// The units a counted request used, when the layer settles to it.
    fn used(&self, _extensions: &Extensions) -> Option<u64> {
        None
    }

    /// Settles `receipt` to `used` units of each check (at most its cost).
    /// Errors are the backend's to observe, as for a refund.
    fn settle<'a>(
        &'a self,
        _limiter: &'a L,
        _checks: &'a [Check<'a, L::Policy>],
        _receipt: Receipt,
        _used: u64,
    ) -> Boxed<'a, ()> {
        // Only a settling charge reports what was used; keeping the charge
        // is the safe direction for any other.
        Box::pin(async {})
    }
}

/// Admits `checks` (one check alone, several as a batch), keeping the
/// receipt.
fn admit_with_receipt<'a, L: Lifecycle>(
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

/// Counts a request when `counts` says so, refunding it otherwise.
pub(crate) struct CountWhen(pub(crate) Counts);

impl<L: Lifecycle> Charge<L> for CountWhen {
    fn admit<'a>(
        &'a self,
        limiter: &'a L,
        checks: &'a [Check<'a, L::Policy>],
    ) -> Boxed<'a, AdmitResult<L::Error>> {
        admit_with_receipt(limiter, checks)
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

/// Admits a reserved cost and, after the response, gives back what the
/// handler reported it did not use; with `counts`, also refunds requests
/// that do not count.
pub(crate) struct Reserve {
    pub(crate) counts: Option<Counts>,
}

impl<L: Settle> Charge<L> for Reserve {
    fn admit<'a>(
        &'a self,
        limiter: &'a L,
        checks: &'a [Check<'a, L::Policy>],
    ) -> Boxed<'a, AdmitResult<L::Error>> {
        admit_with_receipt(limiter, checks)
    }

    fn counts(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        self.counts
            .as_ref()
            .is_none_or(|counts| counts(status, headers))
    }

    fn refund<'a>(
        &'a self,
        limiter: &'a L,
        checks: &'a [Check<'a, L::Policy>],
        receipt: Receipt,
    ) -> Boxed<'a, ()> {
        Box::pin(async move {
            let _ = limiter.refund(checks, receipt).await;
        })
    }

    fn used(&self, extensions: &Extensions) -> Option<u64> {
        extensions.get::<Used>().map(|&Used(units)| units)
    }

    fn settle<'a>(
        &'a self,
        limiter: &'a L,
        checks: &'a [Check<'a, L::Policy>],
        receipt: Receipt,
        used: u64,
    ) -> Boxed<'a, ()> {
        Box::pin(async move {
            let used: smallvec::SmallVec<[u64; 4]> =
                checks.iter().map(|check| used.min(check.cost())).collect();
            // As for a refund: a failed settlement keeps the charge.
            let _ = limiter.settle(checks, receipt, &used).await;
        })
    }
}
