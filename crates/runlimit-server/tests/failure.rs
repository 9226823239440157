//! A backend that fails, or does not answer, makes the server answer
//! `UNAVAILABLE` within its budget: never `OK`, which Envoy would take as
//! allowed.

mod common;

use std::{future::pending, time::Duration};

use common::{decider, descriptor, http, request, serve};
use runlimit_core::{
    Admission, AnyPolicy, BatchDecision, Check, Decision, Lifecycle, Limiter, Receipt, Refunded,
    SubjectKey,
};
use runlimit_server::proto::rate_limit_response::Code;
use tonic::Code as Grpc;

const RULES: &str = "
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: free
    rate_limit: {unlimited: true}
";

/// How a broken backend misbehaves.
#[derive(Debug, Clone, Copy)]
enum Broken {
    /// Every call fails.
    Fails,
    /// No call ever completes.
    Hangs,
}

#[derive(Debug, thiserror::Error)]
#[error("the backend is down")]
struct Down;

impl Broken {
    async fn fail<T>(self) -> Result<T, Down> {
        match self {
            Self::Fails => Err(Down),
            Self::Hangs => pending().await,
        }
    }
}

impl Limiter for Broken {
    type Policy = AnyPolicy;
    type Error = Down;

    async fn check(&self, _: &Check<'_, AnyPolicy>) -> Result<Decision, Down> {
        self.fail().await
    }

    async fn check_all(&self, _: &[Check<'_, AnyPolicy>]) -> Result<BatchDecision, Down> {
        self.fail().await
    }
}

impl Lifecycle for Broken {
    async fn admit(&self, _: &Check<'_, AnyPolicy>) -> Result<Admission, Down> {
        self.fail().await
    }

    async fn admit_all(
        &self,
        _: &[Check<'_, AnyPolicy>],
    ) -> Result<Admission<BatchDecision>, Down> {
        self.fail().await
    }

    async fn refund(&self, _: &[Check<'_, AnyPolicy>], _: Receipt) -> Result<Refunded, Down> {
        self.fail().await
    }

    async fn peek(&self, _: &Check<'_, AnyPolicy>) -> Result<Decision, Down> {
        self.fail().await
    }

    async fn reset(&self, _: &AnyPolicy, _: &SubjectKey) -> Result<bool, Down> {
        self.fail().await
    }
}

async fn unavailable_over_grpc_and_json(broken: Broken, reason: &str) {
    let budget = Duration::from_millis(50);
    let mut server = serve(decider(broken, RULES).with_budget(budget)).await;
    for hits in [1, 0] {
        let status = server
            .ask(request("d", vec![common::costing(hits, &[("user", "u")])]))
            .await
            .expect_err("no decision");
        assert_eq!(status.code(), Grpc::Unavailable, "{broken:?}");
    }
    let json = http(
        server.http,
        "POST",
        "/json",
        r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}"#,
    )
    .await;
    assert_eq!(json.status, 503, "{json:?}");
    assert!(!json.body.contains("\"u\""), "{json:?}");

    // What needs no backend is still answered.
    let response = server
        .decide(request(
            "d",
            vec![descriptor(&[("free", "x")]), descriptor(&[("none", "x")])],
        ))
        .await;
    assert_eq!(response.overall_code(), Code::Ok);
    // And malformed requests are still malformed.
    let status = server.ask(request("", vec![])).await.expect_err("invalid");
    assert_eq!(status.code(), Grpc::InvalidArgument);

    let metrics = server.metrics.render();
    let line = format!(r#"ratelimit_service_should_rate_limit_error{{err_type="{reason}"}} 3"#);
    assert!(metrics.contains(&line), "{metrics}");
    server.stop().await;
}

#[tokio::test]
async fn a_failing_backend_answers_unavailable() {
    unavailable_over_grpc_and_json(Broken::Fails, "backend_error").await;
}

#[tokio::test]
async fn a_backend_that_never_answers_is_cut_off_at_the_budget() {
    unavailable_over_grpc_and_json(Broken::Hangs, "budget_exceeded").await;
}
