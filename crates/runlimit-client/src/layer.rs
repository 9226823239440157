//! The layer: hold a request while its partition's quota is exhausted.

use std::{
    future::{Future, poll_fn},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use http::{Request, Response};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use crate::{ByOrigin, PartitionKey, exhausted::exhausted_for, holds::Holds};

/// A [`HoldLayer`] built with a bound of zero partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HoldLayerError {
    /// `max_partitions` was zero.
    #[error("a hold layer needs room for at least one partition")]
    NoPartitions,
}

/// Holds each outbound request, instead of sending it, while the last
/// response of its partition said the quota is exhausted (see the crate
/// docs for what says so). Clones share their holds, so one layer put in
/// front of several clients holds them all.
///
/// # Errors and cancellation
///
/// The inner service's errors and responses pass through unchanged. A
/// request whose future is dropped while held is never sent and holds
/// nothing. The inner service is made ready before the hold (Tower's
/// contract), and asked again after it, so a readiness it reserved is kept
/// while the request waits: a client such as hyper-util's, always ready,
/// reserves none.
#[derive(Debug, Clone)]
pub struct HoldLayer<K = ByOrigin> {
    holds: Arc<Holds>,
    key: K,
}

impl HoldLayer {
    /// Holds at most `max_partitions` partitions at once, partitioned by
    /// origin.
    ///
    /// # Errors
    ///
    /// [`HoldLayerError::NoPartitions`] when `max_partitions` is zero.
    pub fn new(max_partitions: usize) -> Result<Self, HoldLayerError> {
        if max_partitions == 0 {
            return Err(HoldLayerError::NoPartitions);
        }
        Ok(Self {
            holds: Arc::new(Holds::new(max_partitions)),
            key: ByOrigin,
        })
    }
}

impl<K> HoldLayer<K> {
    /// Names each request's partition with `key` instead (a per-token or
    /// per-tenant quota): a function of the request returning a
    /// [`Partition`](crate::Partition), or `None` to leave it untracked.
    #[must_use]
    pub fn partition_by<K2>(self, key: K2) -> HoldLayer<K2> {
        HoldLayer {
            holds: self.holds,
            key,
        }
    }

    /// How many partitions are held now.
    #[must_use]
    pub fn held_partitions(&self) -> usize {
        self.holds.held(Instant::now())
    }
}

impl<S, K: Clone> Layer<S> for HoldLayer<K> {
    type Service = Hold<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        Hold {
            inner,
            holds: Arc::clone(&self.holds),
            key: self.key.clone(),
        }
    }
}

/// The service [`HoldLayer`] builds.
#[derive(Debug, Clone)]
pub struct Hold<S, K = ByOrigin> {
    inner: S,
    holds: Arc<Holds>,
    key: K,
}

impl<S, K, B, ResBody> Service<Request<B>> for Hold<S, K>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    K: PartitionKey<B>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResBody>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let partition = self.key.partition(&request);
        let until = partition.and_then(|partition| self.holds.until(partition, Instant::now()));
        // The service made ready for this call goes with it; a clone stays.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let holds = Arc::clone(&self.holds);
        Box::pin(async move {
            if let Some(until) = until {
                tokio::time::sleep_until(until).await;
                poll_fn(|cx| inner.poll_ready(cx)).await?;
            }
            let response = inner.call(request).await?;
            if let Some(partition) = partition
                && let Some(wait) = exhausted_for(response.status(), response.headers())
            {
                let now = Instant::now();
                holds.hold(partition, now + wait, now);
            }
            Ok(response)
        })
    }
}
