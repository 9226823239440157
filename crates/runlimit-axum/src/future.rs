//! The response future.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use http::Response;
use pin_project_lite::pin_project;

use crate::fields::{Fields, prepend};

type Boxed<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

pin_project! {
    /// The future [`RateLimitService`](crate::RateLimitService) returns for
    /// an inner service whose future is `F`: admission, then the inner
    /// service's response (or a rejection).
    ///
    /// A request the layer decided while it was called (a limiter that
    /// decides at once, and no body to read) holds the inner service's future
    /// itself, unboxed; one whose admission waits (on a backend, or the body)
    /// holds that admission in a box.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
        // The fields the inner service's response gets (`Called` only).
        fields: Fields,
    }
}

pin_project! {
    #[project = StateProjection]
    enum State<F, B, E> {
        /// Admitted: the inner service's response gets the future's fields.
        Called {
            #[pin]
            future: F,
        },
        /// Admission under way.
        Admitting { future: Boxed<Response<B>, E> },
        /// Answered by the layer; `None` once taken.
        Answered { response: Option<Response<B>> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    /// The inner service's `future`, whose response gets `fields`.
    pub(crate) fn called(future: F, fields: Fields) -> Self {
        Self {
            state: State::Called { future },
            fields,
        }
    }

    /// An admission that has yet to decide.
    pub(crate) fn admitting(future: Boxed<Response<B>, E>) -> Self {
        Self {
            state: State::Admitting { future },
            fields: Fields::new(),
        }
    }

    /// The layer's own `response`: a rejection.
    pub(crate) fn answered(response: Response<B>) -> Self {
        Self {
            state: State::Answered {
                response: Some(response),
            },
            fields: Fields::new(),
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.state.project() {
            StateProjection::Called { future } => {
                let mut response = std::task::ready!(future.poll(cx))?;
                prepend(response.headers_mut(), std::mem::take(this.fields));
                Poll::Ready(Ok(response))
            }
            StateProjection::Admitting { future } => future.as_mut().poll(cx),
            StateProjection::Answered { response } => Poll::Ready(Ok(response
                .take()
                .expect("a response future is not polled after it completed"))),
        }
    }
}

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
