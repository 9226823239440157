//! The response future.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

type Boxed<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

/// The future [`RateLimitService`](crate::RateLimitService) returns: admission,
/// then the inner service's response (or a rejection).
pub struct ResponseFuture<R, E> {
    inner: Boxed<R, E>,
}

impl<R, E> ResponseFuture<R, E> {
    pub(crate) fn new(inner: Boxed<R, E>) -> Self {
        Self { inner }
    }
}

impl<R, E> Future for ResponseFuture<R, E> {
    type Output = Result<R, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<R, E> fmt::Debug for ResponseFuture<R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
