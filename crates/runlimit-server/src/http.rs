//! The HTTP surface: `POST /json`, `GET /healthcheck` and `GET /metrics`.
//!
//! | route | answers |
//! |---|---|
//! | `POST /json` | a `RateLimitRequest` in proto3 JSON (see below), decided as over gRPC: 200 with the `RateLimitResponse` in proto3 JSON, 429 with it when `OVER_LIMIT`; 400 for a body that is not a request or an invalid request; 503 when the backend failed or did not decide in time |
//! | `GET /healthcheck` | 200 `OK` while serving; 500 while shutting down or without a domain (see [`Health`]) |
//! | `GET /metrics` | the [counters](crate::metrics) in Prometheus' text format |
//!
//! `/json` reads field names in lowerCamelCase or as the `.proto` file
//! writes them (`hitsAddend` or `hits_addend`), enums by name or number,
//! integers as numbers or decimal strings, and refuses unknown fields. Its
//! response leaves out fields at their default value and writes durations
//! as `"42s"`. Error bodies are plain text naming descriptors by index,
//! never by value.

mod json;

use std::sync::Arc;

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use runlimit_core::{AnyPolicy, Lifecycle, Limiter};

use crate::{
    health::Health,
    proto::rate_limit_response::Code,
    service::{Decider, ServiceError},
};

/// The router of the HTTP surface for `decider`, reporting `health`.
pub fn router<L>(decider: Arc<Decider<L>>, health: Health) -> Router
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle + 'static,
{
    Router::new()
        .route("/json", post(json::<L>))
        .route("/healthcheck", get(healthcheck::<L>))
        .route("/metrics", get(metrics::<L>))
        .with_state(HttpState { decider, health })
}

struct HttpState<L> {
    decider: Arc<Decider<L>>,
    health: Health,
}

impl<L> Clone for HttpState<L> {
    fn clone(&self) -> Self {
        Self {
            decider: Arc::clone(&self.decider),
            health: self.health.clone(),
        }
    }
}

async fn json<L>(State(state): State<HttpState<L>>, body: Bytes) -> Response
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle + 'static,
{
    let request = match json::parse_request(&body) {
        Ok(request) => request,
        Err(error) => return text(StatusCode::BAD_REQUEST, &error.to_string()),
    };
    match state.decider.should_rate_limit(&request).await {
        Ok(response) => {
            let status = match response.overall_code() {
                Code::Ok => StatusCode::OK,
                Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
                Code::Unknown => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                json::write_response(&response),
            )
                .into_response()
        }
        Err(error @ ServiceError::InvalidRequest(_)) => {
            text(StatusCode::BAD_REQUEST, &error.to_string())
        }
        Err(error) => text(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
    }
}

async fn healthcheck<L>(State(state): State<HttpState<L>>) -> Response {
    if state.health.is_serving() {
        ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "OK").into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}

async fn metrics<L>(State(state): State<HttpState<L>>) -> Response
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle + 'static,
{
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.decider.metrics().render(),
    )
        .into_response()
}

fn text(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{message}\n"),
    )
        .into_response()
}
