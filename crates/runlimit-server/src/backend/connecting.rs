//! A shared backend connected in the background, so that the server starts
//! (and answers `UNAVAILABLE`) while its store is down.

use std::{
    fmt,
    future::Future,
    sync::{Arc, OnceLock, Weak},
    time::Duration,
};

use runlimit_core::{
    Admission, Backend, BatchDecision, Check, Decision, Grant, Granted, Lifecycle, Limiter,
    MayHaveConsumed, Receipt, Refunded, Settle, Storage, SubjectKey,
};

/// The first pause between two attempts to connect; pauses double up to
/// [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(25);

/// The longest pause between two attempts to connect: a store that comes
/// up is used within about this long.
pub const MAX_RETRY_DELAY: Duration = Duration::from_millis(500);

/// How long the server's start waits for the first attempt; a slower one
/// is tried again in the background while the server serves.
const FIRST_ATTEMPT: Duration = Duration::from_secs(1);

/// A limiter that is built, once, by a task that tries until it succeeds.
///
/// Until then every call fails at once with
/// [`ConnectingError::NotConnected`] (nothing sent, nothing consumed); then
/// every call goes to the limiter, whose own reconnection handles later
/// outages.
pub struct Connecting<L> {
    limiter: Arc<OnceLock<L>>,
    backend: &'static str,
}

impl<L> fmt::Debug for Connecting<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connecting")
            .field("backend", &self.backend)
            .field("connected", &self.is_connected())
            .finish()
    }
}

/// Why a [`Connecting`] limiter failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectingError<E> {
    /// The store has not been reached since the server started; nothing
    /// was sent.
    #[error("the {0} backend has not been reached yet")]
    NotConnected(&'static str),
    /// The limiter failed.
    #[error(transparent)]
    Backend(E),
}

impl<E: MayHaveConsumed> MayHaveConsumed for ConnectingError<E> {
    fn may_have_consumed_quota(&self) -> bool {
        match self {
            Self::NotConnected(_) => false,
            Self::Backend(error) => error.may_have_consumed_quota(),
        }
    }
}

impl<L: Send + Sync + 'static> Connecting<L> {
    /// Tries `connect` once, for at most a second, and, if it fails, keeps
    /// trying on a task of its own, with pauses from 25 ms doubling up to [`MAX_RETRY_DELAY`],
    /// until it succeeds or the limiter is dropped. `backend` names the store
    /// in logs and errors; failures are logged, never with their URL.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime with its timer enabled.
    pub async fn start<F, Fut, E>(backend: &'static str, connect: F) -> Self
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<L, E>> + Send + 'static,
        E: std::error::Error + 'static,
    {
        let limiter = Arc::new(OnceLock::new());
        match tokio::time::timeout(FIRST_ATTEMPT, connect()).await {
            Ok(Ok(connected)) => {
                let _ = limiter.set(connected);
            }
            Ok(Err(error)) => {
                tracing::warn!(
                    backend,
                    error = %error,
                    "cannot reach the backend: answering UNAVAILABLE while retrying"
                );
                tokio::spawn(retry(Arc::downgrade(&limiter), backend, connect));
            }
            Err(_) => {
                tracing::warn!(
                    backend,
                    "the backend did not answer in time: answering UNAVAILABLE while retrying"
                );
                tokio::spawn(retry(Arc::downgrade(&limiter), backend, connect));
            }
        }
        Self { limiter, backend }
    }
}

impl<L> Connecting<L> {
    /// A limiter that is connected already.
    pub fn connected(backend: &'static str, limiter: L) -> Self {
        Self {
            limiter: Arc::new(OnceLock::from(limiter)),
            backend,
        }
    }

    /// Whether the store has been reached (it may be down again since).
    #[must_use]
    pub fn is_connected(&self) -> bool {
        self.limiter.get().is_some()
    }

    /// The limiter, once connected.
    #[must_use]
    pub fn get(&self) -> Option<&L> {
        self.limiter.get()
    }

    fn limiter<E>(&self) -> Result<&L, ConnectingError<E>> {
        self.limiter
            .get()
            .ok_or(ConnectingError::NotConnected(self.backend))
    }
}

async fn retry<L, F, Fut, E>(limiter: Weak<OnceLock<L>>, backend: &'static str, connect: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<L, E>>,
    E: std::error::Error,
{
    let mut delay = FIRST_RETRY_DELAY;
    loop {
        tokio::time::sleep(delay).await;
        if limiter.strong_count() == 0 {
            return;
        }
        match connect().await {
            Ok(connected) => {
                if let Some(limiter) = limiter.upgrade() {
                    let _ = limiter.set(connected);
                    tracing::info!(backend, "reached the backend");
                }
                return;
            }
            Err(error) => {
                tracing::debug!(backend, error = %error, "cannot reach the backend yet");
            }
        }
        delay = delay.saturating_mul(2).min(MAX_RETRY_DELAY);
    }
}

impl<L: Limiter> Limiter for Connecting<L> {
    type Policy = L::Policy;
    type Error = ConnectingError<L::Error>;

    async fn check(&self, check: &Check<'_, Self::Policy>) -> Result<Decision, Self::Error> {
        self.limiter()?
            .check(check)
            .await
            .map_err(ConnectingError::Backend)
    }

    async fn check_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> Result<BatchDecision, Self::Error> {
        self.limiter()?
            .check_all(checks)
            .await
            .map_err(ConnectingError::Backend)
    }
}

impl<L: Lifecycle> Lifecycle for Connecting<L> {
    async fn admit(&self, check: &Check<'_, Self::Policy>) -> Result<Admission, Self::Error> {
        self.limiter()?
            .admit(check)
            .await
            .map_err(ConnectingError::Backend)
    }

    async fn admit_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> Result<Admission<BatchDecision>, Self::Error> {
        self.limiter()?
            .admit_all(checks)
            .await
            .map_err(ConnectingError::Backend)
    }

    async fn refund(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
    ) -> Result<Refunded, Self::Error> {
        self.limiter()?
            .refund(checks, receipt)
            .await
            .map_err(ConnectingError::Backend)
    }

    async fn peek(&self, check: &Check<'_, Self::Policy>) -> Result<Decision, Self::Error> {
        self.limiter()?
            .peek(check)
            .await
            .map_err(ConnectingError::Backend)
    }

    async fn reset(
        &self,
        policy: &Self::Policy,
        subject: &SubjectKey,
    ) -> Result<bool, Self::Error> {
        self.limiter()?
            .reset(policy, subject)
            .await
            .map_err(ConnectingError::Backend)
    }
}

impl<L: Settle> Settle for Connecting<L> {
    async fn settle(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
        used: &[u64],
    ) -> Result<Refunded, Self::Error> {
        self.limiter()?
            .settle(checks, receipt, used)
            .await
            .map_err(ConnectingError::Backend)
    }
}

impl<L: Grant> Grant for Connecting<L> {
    async fn grant(
        &self,
        check: &Check<'_, Self::Policy>,
        up_to: u64,
    ) -> Result<Granted, Self::Error> {
        self.limiter()?
            .grant(check, up_to)
            .await
            .map_err(ConnectingError::Backend)
    }
}

/// Shared: only shared stores are connected to.
impl<L: Backend> Backend for Connecting<L> {
    fn storage(&self, policy: &Self::Policy) -> Storage {
        self.limiter
            .get()
            .map_or(Storage::Shared, |limiter| limiter.storage(policy))
    }
}
