//! Responses for requests the layer does not admit: owned by the application.

use std::{error::Error, time::Duration};

use http::{Response, StatusCode, header};
use runlimit_core::Denial;
use runlimit_http::{
    draft_11::PolicyName,
    legacy::retry_after_value,
    problem::{self, Problem, QuotaExceededProblem},
};
use serde::Serialize;

use crate::extract::Provider;

/// Why the layer answered a request itself instead of calling the inner service.
#[derive(Debug)]
#[non_exhaustive]
pub enum Rejection<'a> {
    /// A key extractor or policy selector lacked what it needs: trusted
    /// metadata the service should have provided, or a value the caller must
    /// send ([`MissingMetadata::provider`](crate::MissingMetadata::provider)
    /// says which). Never fails open.
    MissingMetadata {
        /// The policy being keyed or selected.
        policy: Option<&'a PolicyName>,
        /// Why.
        missing: crate::MissingMetadata,
    },
    /// An enforced quota denied the request.
    QuotaExceeded {
        /// The denied policy.
        policy: &'a PolicyName,
        /// The denial, with its retry time.
        denial: &'a Denial,
        /// Whether the policy may be disclosed to the client (see
        /// [`RateLimitLayer::withhold_fields`](crate::RateLimitLayer::withhold_fields)):
        /// when not, name neither the policy nor its quota in the response.
        disclosed: bool,
    },
    /// The backend had no room for a new subject. Always fail-closed.
    StorageCapacity {
        /// The policy whose new key did not fit.
        policy: &'a PolicyName,
        /// The earliest known time the request may fit, if known.
        retry_after: Option<Duration>,
    },
    /// The backend could not decide and the layer fails closed.
    BackendFailure {
        /// The backend's error. Do not send its text to clients.
        error: &'a (dyn Error + Send + Sync + 'static),
    },
    /// A layer that keys on the body received one larger than its cap
    /// (declared or read). Never admitted: padding a body must not be a way
    /// out of the limit.
    PayloadTooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// A layer that keys on the body could not read it (the connection
    /// failed, or the body was malformed at the transport level).
    BodyUnreadable,
    /// A layer that keys on the body did not receive it in time.
    BodyTimedOut {
        /// The time limit.
        after: Duration,
    },
}

/// Builds the response for a [`Rejection`]: status, headers and body are the
/// application's choice.
///
/// Closures `Fn(&Rejection<'_>) -> Response<B>` implement it; [`DefaultRejection`]
/// is used when none is set.
pub trait RejectionMapper<B>: Send + Sync + 'static {
    /// The response for `rejection`.
    fn respond(&self, rejection: &Rejection<'_>) -> Response<B>;
}

impl<B, F> RejectionMapper<B> for F
where
    F: Fn(&Rejection<'_>) -> Response<B> + Send + Sync + 'static,
{
    fn respond(&self, rejection: &Rejection<'_>) -> Response<B> {
        self(rejection)
    }
}

/// The default responses, every one an RFC 9457 problem-details body
/// (`application/problem+json`):
///
/// * quota exceeded: `429 Too Many Requests` with `Retry-After`, of the
///   draft's quota-exceeded problem type, naming the policy when it is
///   disclosed (the layer adds its rate-limit fields for a disclosed policy,
///   per its [`ResponseFields`](crate::ResponseFields));
/// * a value the caller must send missing ([`Provider::Caller`]): `400 Bad
///   Request`, naming what is missing; missing credentials
///   ([`Provider::CallerCredentials`]): `401 Unauthorized` with the
///   extractor's `WWW-Authenticate` challenge;
/// * trusted metadata missing ([`Provider::Service`]): `500 Internal Server
///   Error`, since it means the service's own configuration is incomplete;
/// * a body over the cap: `413 Content Too Large`; an unreadable body: `400 Bad
///   Request`; a body not received in time: `408 Request Timeout`;
/// * storage capacity and backend failure: `503 Service Unavailable`, with
///   `Retry-After` when a retry time is known.
///
/// Bodies never contain subjects, keys, backend error text or a reason the
/// service gave for its own missing metadata.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultRejection;

impl<B: From<String> + Send + 'static> RejectionMapper<B> for DefaultRejection {
    fn respond(&self, rejection: &Rejection<'_>) -> Response<B> {
        match rejection {
            Rejection::QuotaExceeded {
                policy,
                denial,
                disclosed,
            } => {
                let named = if *disclosed {
                    vec![(*policy).clone()]
                } else {
                    Vec::new()
                };
                let mut response = problem_response(
                    StatusCode::TOO_MANY_REQUESTS,
                    &QuotaExceededProblem::new(named),
                );
                let retry_after = denial.retry_after().unwrap_or_default();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, retry_after_value(retry_after));
                response
            }
            Rejection::MissingMetadata { missing, .. } => match missing.provider() {
                Provider::Caller => status_problem(
                    StatusCode::BAD_REQUEST,
                    format!("missing or unusable: {}", missing.reason()),
                ),
                Provider::CallerCredentials(challenge) => {
                    let mut response = status_problem(
                        StatusCode::UNAUTHORIZED,
                        format!("missing or unusable: {}", missing.reason()),
                    );
                    response
                        .headers_mut()
                        .insert(header::WWW_AUTHENTICATE, challenge.to_header_value());
                    response
                }
                // The reason describes the service's own configuration: it
                // stays in the service.
                Provider::Service => status_problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "request cannot be attributed for rate limiting",
                ),
            },
            Rejection::PayloadTooLarge { limit } => status_problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body larger than {limit} bytes"),
            ),
            Rejection::BodyUnreadable => {
                status_problem(StatusCode::BAD_REQUEST, "request body unreadable")
            }
            Rejection::BodyTimedOut { .. } => status_problem(
                StatusCode::REQUEST_TIMEOUT,
                "request body not received in time",
            ),
            Rejection::StorageCapacity { retry_after, .. } => {
                let mut response =
                    status_problem(StatusCode::SERVICE_UNAVAILABLE, "rate limiter at capacity");
                if let Some(retry_after) = retry_after {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, retry_after_value(*retry_after));
                }
                response
            }
            Rejection::BackendFailure { .. } => {
                status_problem(StatusCode::SERVICE_UNAVAILABLE, "rate limiter unavailable")
            }
        }
    }
}

/// An `about:blank` problem for `status`, with `detail`.
fn status_problem<B: From<String>>(status: StatusCode, detail: impl Into<String>) -> Response<B> {
    problem_response(status, &Problem::new(status).with_detail(detail))
}

/// A response of `status` whose body is `problem`, as `application/problem+json`.
fn problem_response<B: From<String>>(status: StatusCode, problem: &impl Serialize) -> Response<B> {
    // Serializing these structs of strings and integers cannot fail.
    let body = serde_json::to_string(problem).unwrap_or_default();
    let mut response = Response::new(B::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, problem::CONTENT_TYPE);
    response
}
