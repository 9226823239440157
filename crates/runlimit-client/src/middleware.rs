//! The layer's behaviour for reqwest, as a `reqwest-middleware` middleware.

use std::{sync::Arc, time::Duration};

use http::{Extensions, Method};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use tokio::time::Instant;
use tower::retry::budget::Budget;

use crate::{
    HoldLayerError, HoldObserver, Partition,
    layer::{Core, MAX_RETRIES},
};

/// [`HoldLayer`](crate::HoldLayer)'s behaviour for a
/// `reqwest_middleware::ClientWithMiddleware` (feature `reqwest`): requests
/// to an origin whose quota the last response said is exhausted wait until
/// the reset, and with [`retry_idempotent`](Self::retry_idempotent) a
/// refused idempotent request whose body reqwest can clone is sent again
/// after the wait, within a retry budget.
///
/// ```
/// use std::time::Duration;
///
/// use runlimit_client::HoldMiddleware;
/// use tower::retry::budget::TpsBudget;
///
/// # fn main() -> Result<(), runlimit_client::HoldLayerError> {
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(
///         HoldMiddleware::new(10_000)?
///             .retry_idempotent(TpsBudget::new(Duration::from_secs(10), 1, 0.2)),
///     )
///     .build();
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct HoldMiddleware {
    core: Core,
    budget: Option<Arc<dyn Budget + Send + Sync>>,
    key: Option<RequestKey>,
}

/// A function naming a reqwest request's partition.
type RequestKey = Arc<dyn Fn(&Request) -> Option<Partition> + Send + Sync>;

impl std::fmt::Debug for HoldMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldMiddleware")
            .field("core", &self.core)
            .field("retries", &self.budget.is_some())
            .field("partition_by", &self.key.is_some())
            .finish()
    }
}

impl HoldMiddleware {
    /// Holds at most `max_partitions` origins at once.
    ///
    /// # Errors
    ///
    /// [`HoldLayerError::NoPartitions`] when `max_partitions` is zero.
    pub fn new(max_partitions: usize) -> Result<Self, HoldLayerError> {
        Ok(Self {
            core: Core::new(max_partitions)?,
            budget: None,
            key: None,
        })
    }

    /// Names each request's partition with `key` instead of its origin (a
    /// per-token or per-tenant quota behind one origin), as
    /// [`HoldLayer::partition_by`](crate::HoldLayer::partition_by) does:
    /// `None` leaves a request untracked.
    ///
    /// ```
    /// use runlimit_client::{HoldMiddleware, Partition};
    ///
    /// # fn main() -> Result<(), runlimit_client::HoldLayerError> {
    /// let by_token = HoldMiddleware::new(10_000)?.partition_by(|request: &reqwest::Request| {
    ///     let token = request.headers().get("authorization")?;
    ///     Some(Partition::of(token.as_bytes()))
    /// });
    /// # let _ = by_token;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn partition_by(
        mut self,
        key: impl Fn(&Request) -> Option<Partition> + Send + Sync + 'static,
    ) -> Self {
        self.key = Some(Arc::new(key));
        self
    }

    /// Sends a request refused with 429 or 503, whose response says how long
    /// to wait, again after that wait (spread by up to a tenth of it), when
    /// its method is idempotent, reqwest can clone it (a streaming body
    /// cannot be), and `budget` allows: at most twice per request.
    #[must_use]
    pub fn retry_idempotent(mut self, budget: impl Budget + Send + Sync + 'static) -> Self {
        self.budget = Some(Arc::new(budget));
        self
    }

    /// Also paces each origin to the policy its server advertises, as
    /// [`HoldLayer::pace`](crate::HoldLayer::pace) does.
    ///
    /// # Errors
    ///
    /// [`HoldLayerError::TooManyPartitions`] when the bound is more than
    /// 2³¹.
    pub fn pace(mut self) -> Result<Self, HoldLayerError> {
        self.core.pace()?;
        Ok(self)
    }

    /// Tells `observer` of the middleware's waits, retries and refusals.
    #[must_use]
    pub fn with_observer(mut self, observer: impl HoldObserver) -> Self {
        self.core.observe(observer);
        self
    }

    /// How many origins are held now.
    #[must_use]
    pub fn held_partitions(&self) -> usize {
        self.core.holds.held(Instant::now())
    }
}

fn origin(request: &Request) -> Option<Partition> {
    let url = request.url();
    let host = url.host_str()?;
    let authority = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    Some(Partition::of_origin(url.scheme(), authority.as_bytes()))
}

fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

#[async_trait::async_trait]
impl Middleware for HoldMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let observer = &self.core.observer;
        if let Some(budget) = &self.budget {
            budget.deposit();
        }
        let partition = match &self.key {
            Some(key) => key(&request),
            None => origin(&request),
        };
        let mut request = request;
        let mut sent = 0;
        let mut spread = Duration::ZERO;
        loop {
            let began = observer.start();
            let outstanding = self.core.wait_turn(partition, None, spread).await;
            observer.waited(began);
            let again =
                (self.budget.is_some() && sent < MAX_RETRIES && idempotent(request.method()))
                    .then(|| request.try_clone())
                    .flatten();
            let response = next.clone().run(request, extensions).await?;
            sent += 1;
            match self.core.answered(
                partition,
                outstanding,
                response.status(),
                response.headers(),
                again,
                self.budget.as_deref(),
            ) {
                Some((copy, retry)) => {
                    drop(response);
                    spread = retry.spread;
                    tokio::time::sleep(retry.sleep).await;
                    request = copy;
                }
                None => return Ok(response),
            }
        }
    }
}
