//! What a response carries besides statuses, when asked: rate-limit
//! headers and dynamic metadata.

mod common;

use std::collections::BTreeMap;

use common::{decider, descriptor, request, serve, store};
use runlimit_memory::ManualClock;
use runlimit_server::{
    proto::{RateLimitResponse, rate_limit_response::Code},
    service::ResponseHeaders,
};

const RULES: &str = "
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: api
    rate_limit:
      unit: second
      requests_per_unit: 10
      runlimit: {algorithm: gcra, burst: 20}
  - key: meta
    metadata: {team: a, nested: {x: 1}}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: also
    metadata: {team: b, nested: {y: true}}
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
";

fn headers(response: &RateLimitResponse) -> BTreeMap<String, String> {
    response
        .response_headers_to_add
        .iter()
        .map(|header| (header.key.clone(), header.value.clone()))
        .collect()
}

#[tokio::test]
async fn headers_describe_the_limits_when_asked() {
    let clock = ManualClock::new();
    let mut server =
        serve(decider(store(&clock), RULES).with_response_headers(ResponseHeaders::Both)).await;
    let both = || {
        request(
            "d",
            vec![descriptor(&[("user", "u")]), descriptor(&[("ip", "i")])],
        )
    };
    let response = server.decide(both()).await;
    let expected = |limit: &str, remaining: &str, draft: &str| {
        BTreeMap::from([
            ("RateLimit-Limit".to_owned(), limit.to_owned()),
            ("RateLimit-Remaining".to_owned(), remaining.to_owned()),
            ("RateLimit-Reset".to_owned(), "60".to_owned()),
            (
                "ratelimit-policy".to_owned(),
                r#""per-user";q=3;w=60, "ip";q=2;w=60"#.to_owned(),
            ),
            ("ratelimit".to_owned(), draft.to_owned()),
        ])
    };
    // The legacy fields describe the descriptor with the fewest units left.
    assert_eq!(
        headers(&response),
        expected("2", "1", r#""per-user";r=2;t=60, "ip";r=1;t=60"#)
    );
    server.decide(both()).await;
    // The one over its limit.
    let over = server.decide(both()).await;
    assert_eq!(over.overall_code(), Code::OverLimit);
    assert_eq!(
        headers(&over),
        expected("2", "0", r#""per-user";r=1;t=60, "ip";r=0;t=60"#)
    );

    // A GCRA rule advertises its quota per period.
    let gcra = server
        .decide(request("d", vec![descriptor(&[("api", "key")])]))
        .await;
    let fields = headers(&gcra);
    assert_eq!(fields["ratelimit-policy"], r#""api";q=10;w=1"#);
    assert_eq!(fields["RateLimit-Remaining"], "19");
    server.stop().await;
}

#[tokio::test]
async fn without_headers_asked_none_are_added() {
    let clock = ManualClock::new();
    let mut server = serve(decider(store(&clock), RULES)).await;
    let response = server
        .decide(request("d", vec![descriptor(&[("user", "u")])]))
        .await;
    assert!(response.response_headers_to_add.is_empty());
    assert!(response.dynamic_metadata.is_none());
    server.stop().await;
}

#[tokio::test]
async fn dynamic_metadata_carries_the_descriptors_and_the_metadata_of_those_within_limits() {
    let clock = ManualClock::new();
    let mut server = serve(decider(store(&clock), RULES).with_dynamic_metadata(true)).await;
    let mixed = || {
        request(
            "d",
            vec![
                descriptor(&[("meta", "m")]),
                descriptor(&[("also", "m")]),
                descriptor(&[("quota", "q")]),
            ],
        )
    };
    let json = |response: &RateLimitResponse| {
        let metadata = response.dynamic_metadata.as_ref().expect("metadata");
        serde_json::to_value(
            metadata
                .fields
                .iter()
                .map(|(key, value)| (key.clone(), to_json(value)))
                .collect::<serde_json::Map<_, _>>(),
        )
        .expect("JSON")
    };
    let response = server.decide(mixed()).await;
    assert_eq!(
        json(&response),
        serde_json::json!({
            "domain": "d",
            "descriptors": [
                {"entries": ["meta=m"]},
                {"entries": ["also=m"]},
                {"entries": ["quota=q"]},
            ],
            "quotaModeEnabled": true,
            "quotaModeViolations": [],
            "metadata": {"team": "a", "nested": {"x": 1.0, "y": true}},
        })
    );
    let over = server.decide(mixed()).await;
    assert_eq!(over.overall_code(), Code::OverLimit);
    let metadata = json(&over);
    assert_eq!(metadata["quotaModeViolations"], serde_json::json!([2.0]));
    // Values stay out of the response's Debug output.
    assert!(!format!("{over:?}").contains("meta=m"));
    server.stop().await;
}

fn to_json(value: &prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match &value.kind {
        Some(Kind::StringValue(text)) => text.clone().into(),
        Some(Kind::NumberValue(number)) => (*number).into(),
        Some(Kind::BoolValue(value)) => (*value).into(),
        Some(Kind::ListValue(list)) => list.values.iter().map(to_json).collect(),
        Some(Kind::StructValue(fields)) => fields
            .fields
            .iter()
            .map(|(key, value)| (key.clone(), to_json(value)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        Some(Kind::NullValue(_)) | None => serde_json::Value::Null,
    }
}
