//! The HTTP surface over loopback: `/json`, `/healthcheck`, `/metrics`.

mod common;

use common::{http, start};
use runlimit_memory::ManualClock;
use serde_json::{Value, json};

const RULES: &str = "
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: j
    rate_limit: {unit: minute, requests_per_unit: 2, name: jay}
";

#[tokio::test]
async fn json_answers_as_grpc_does_with_http_statuses() {
    let clock = ManualClock::new();
    let server = start(RULES, &clock).await;
    let body = r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]},{"entries":[{"key":"j","value":"v"}],"hits_addend":"1"}],"hitsAddend":1}"#;

    let first = http(server.http, "POST", "/json", body).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.header("content-type"), Some("application/json"));
    let response: Value = serde_json::from_str(&first.body).expect("JSON");
    assert_eq!(
        response,
        json!({
            "overallCode": "OK",
            "statuses": [
                {"code": "OK", "currentLimit": {"requestsPerUnit": 1, "unit": "MINUTE"}, "durationUntilReset": "60s"},
                {"code": "OK", "currentLimit": {"name": "jay", "requestsPerUnit": 2, "unit": "MINUTE"}, "limitRemaining": 1, "durationUntilReset": "60s"},
            ],
        })
    );

    let second = http(server.http, "POST", "/json", body).await;
    assert_eq!(second.status, 429, "{second:?}");
    let response: Value = serde_json::from_str(&second.body).expect("JSON");
    assert_eq!(response["overallCode"], "OVER_LIMIT");
    assert_eq!(response["statuses"][0]["code"], "OVER_LIMIT");
    // The refused request did not count against `j`.
    assert_eq!(response["statuses"][1]["limitRemaining"], 1);
    server.stop().await;
}

#[tokio::test]
async fn json_refuses_what_is_not_a_valid_request_with_400() {
    let clock = ManualClock::new();
    let server = start(RULES, &clock).await;
    for (body, says) in [
        ("not json", "not JSON"),
        (
            r#"{"domain":"d","unknown":"secret-value"}"#,
            "not the message's fields",
        ),
        (
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"secret-value"}]}"#,
            "not the message's fields",
        ),
        (
            r#"{"domain":"","descriptors":[{"entries":[{"key":"k","value":"secret-value"}]}]}"#,
            "domain must not be empty",
        ),
        (
            r#"{"domain":"d","descriptors":[{"entries":[{"key":"","value":"secret-value"}]}]}"#,
            "empty key",
        ),
    ] {
        let response = http(server.http, "POST", "/json", body).await;
        assert_eq!(response.status, 400, "{body}: {response:?}");
        assert!(response.body.contains(says), "{body}: {response:?}");
        assert!(!response.body.contains("secret-value"), "{response:?}");
    }
    let wrong_method = http(server.http, "GET", "/json", "").await;
    assert_eq!(wrong_method.status, 405);
    server.stop().await;
}

#[tokio::test]
async fn healthcheck_and_metrics_answer_over_http() {
    let clock = ManualClock::new();
    let server = start(RULES, &clock).await;
    let health = http(server.http, "GET", "/healthcheck", "").await;
    assert_eq!((health.status, health.body.as_str()), (200, "OK"));

    let body = r#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"203.0.113.9"}]}]}"#;
    assert_eq!(http(server.http, "POST", "/json", body).await.status, 200);
    assert_eq!(http(server.http, "POST", "/json", body).await.status, 429);
    let metrics = http(server.http, "GET", "/metrics", "").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .header("content-type")
            .is_some_and(|value| value.starts_with("text/plain")),
        "{metrics:?}"
    );
    for line in [
        r#"ratelimit_service_rate_limit_total_hits{domain="d",rule="k"} 2"#,
        r#"ratelimit_service_rate_limit_within_limit{domain="d",rule="k"} 1"#,
        r#"ratelimit_service_rate_limit_near_limit{domain="d",rule="k"} 1"#,
        r#"ratelimit_service_rate_limit_over_limit{domain="d",rule="k"} 1"#,
        "ratelimit_service_config_load_success 0",
    ] {
        assert!(metrics.body.contains(line), "{line}\n{}", metrics.body);
    }
    assert!(!metrics.body.contains("203.0.113.9"));
    server.stop().await;
}
