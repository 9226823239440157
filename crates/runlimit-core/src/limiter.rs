//! The backend contract every store implements.

use std::future::Future;

use crate::{
    check::Check,
    decision::{BatchDecision, Decision},
    policy::Policy,
};

/// An asynchronous rate-limit backend.
///
/// Application adapters are generic over `Limiter`, so storage can be swapped
/// (memory in tests, PostgreSQL or Redis in production) without an async-runtime
/// abstraction:
///
/// ```
/// use runlimit_core::{BatchDecision, Check, Limiter};
///
/// async fn admit<L: Limiter>(
///     limiter: &L,
///     checks: &[Check<'_, L::Policy>],
/// ) -> Result<BatchDecision, L::Error> {
///     limiter.check_all(checks).await
/// }
/// ```
///
/// The trait uses static dispatch: its methods return `Send` futures without
/// boxing, so it is intentionally not object-safe. Use a generic parameter to
/// substitute a backend in tests, or implement `Limiter` on an application-owned
/// enum to choose one at run time.
///
/// # Contract
///
/// * Futures do nothing until polled.
/// * A denial is an `Ok` decision; `Err` means the backend could not decide, and
///   callers should fail closed unless they deliberately chose otherwise.
/// * Denied checks consume nothing. [`check_all`](Self::check_all) is atomic: every
///   check is consumed or none is, allowed decisions keep input order, and caller
///   errors (see [`validate_batch`](crate::validate_batch)) consume nothing.
/// * Shadow policies never consume on a shadow denial; storage-capacity denials
///   and errors stay fail-closed in shadow mode.
pub trait Limiter: Send + Sync {
    /// The policy type this backend evaluates.
    type Policy: Policy;
    /// Why the backend could not decide.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Evaluates one check, consuming its cost if allowed.
    ///
    /// # Errors
    ///
    /// The backend's error when it could not decide; see the backend's error type
    /// for whether quota may have been consumed.
    fn check(
        &self,
        check: &Check<'_, Self::Policy>,
    ) -> impl Future<Output = Result<Decision, Self::Error>> + Send;

    /// Evaluates an atomic batch: all checks are consumed, or none is.
    ///
    /// # Errors
    ///
    /// Caller errors (an empty or oversized batch, duplicate counter keys, mixed
    /// quota modes) and backend failures. Caller errors never consume quota.
    fn check_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> impl Future<Output = Result<BatchDecision, Self::Error>> + Send;

    /// Evaluates one check at once, without a future, if this limiter decides
    /// without waiting: `Some` with exactly what [`check`](Self::check) would
    /// have returned (and consumed), or `None`, having done nothing, when the
    /// decision needs the future.
    ///
    /// A hint for callers that can take a shorter path for a decision in
    /// hand, as middleware does by not boxing an admission that never waits;
    /// like [`Iterator::size_hint`], it changes no semantics. The default is
    /// `None`, which is always correct: implement it only for a limiter whose
    /// check never waits (the in-process stores), never by blocking.
    ///
    /// ```
    /// use runlimit_core::{Check, Limiter};
    ///
    /// async fn decide<L: Limiter>(limiter: &L, check: &Check<'_, L::Policy>) -> Result<bool, L::Error> {
    ///     let decision = match limiter.check_now(check) {
    ///         Some(decided) => decided?,
    ///         None => limiter.check(check).await?,
    ///     };
    ///     Ok(decision.is_allowed())
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check), inside the `Some`.
    #[inline]
    fn check_now(&self, check: &Check<'_, Self::Policy>) -> Option<Result<Decision, Self::Error>> {
        let _ = check;
        None
    }
}
