//! Which refused requests may be sent again.

use http::{Method, Request};

/// Whether a refused request may be sent again, and the copy to send: a
/// request's body may be a stream that cannot be sent twice, so only a
/// replay can say. Implemented for functions of the request.
pub trait Replay<B>: Clone + Send + Sync + 'static {
    /// A copy of `request` to send if it is refused, or `None` when it must
    /// not be sent again.
    fn replay(&self, request: &Request<B>) -> Option<Request<B>>;
}

/// Never sends a request again (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRetry;

impl<B> Replay<B> for NoRetry {
    fn replay(&self, _request: &Request<B>) -> Option<Request<B>> {
        None
    }
}

/// Sends again requests whose method is idempotent (`GET`, `HEAD`,
/// `OPTIONS`, `TRACE`, `PUT`, `DELETE`), for bodies that can be cloned. The
/// copy keeps the method, URI, version and header fields, not extensions.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdempotentRequests;

impl<B: Clone> Replay<B> for IdempotentRequests {
    fn replay(&self, request: &Request<B>) -> Option<Request<B>> {
        let idempotent = matches!(
            *request.method(),
            Method::GET
                | Method::HEAD
                | Method::OPTIONS
                | Method::TRACE
                | Method::PUT
                | Method::DELETE
        );
        idempotent.then(|| {
            let mut copy = Request::new(request.body().clone());
            *copy.method_mut() = request.method().clone();
            *copy.uri_mut() = request.uri().clone();
            *copy.version_mut() = request.version();
            *copy.headers_mut() = request.headers().clone();
            copy
        })
    }
}

impl<B, F> Replay<B> for F
where
    F: Fn(&Request<B>) -> Option<Request<B>> + Clone + Send + Sync + 'static,
{
    fn replay(&self, request: &Request<B>) -> Option<Request<B>> {
        self(request)
    }
}
