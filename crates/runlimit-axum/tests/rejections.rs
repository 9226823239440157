//! Every answer the default rejection gives is RFC 9457 problem details,
//! with the status, title and headers a client acts on, and nothing of the
//! request's subject or the backend's error.

use std::time::Duration;

use axum::body::Body;
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use runlimit_axum::{
    Challenge, DefaultRejection, MissingMetadata, Provider, Rejection, RejectionMapper,
};
use runlimit_core::Denial;
use runlimit_http::draft_11::PolicyName;

/// The response, its body as JSON and a header, for one rejection.
async fn answer(rejection: &Rejection<'_>) -> (StatusCode, serde_json::Value, Response<Body>) {
    let response: Response<Body> = DefaultRejection.respond(rejection);
    let status = response.status();
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json",
        "{status}"
    );
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(json["status"], status.as_u16());
    (status, json, Response::from_parts(parts, Body::empty()))
}

#[tokio::test]
async fn every_default_rejection_is_problem_details() {
    let policy = PolicyName::new("auth.login/identity").expect("valid");
    let denial = Denial::QuotaExceeded {
        capacity: 8,
        retry_after: Duration::from_millis(1_500),
    };
    let backend_error = std::io::Error::other("connection refused by 10.0.0.7");
    let cases: Vec<(Rejection<'_>, StatusCode, &str, Option<&str>)> = vec![
        (
            Rejection::QuotaExceeded {
                policy: &policy,
                denial: &denial,
                disclosed: true,
            },
            StatusCode::TOO_MANY_REQUESTS,
            "https://iana.org/assignments/http-problem-types#quota-exceeded",
            Some("2"),
        ),
        (
            Rejection::MissingMetadata {
                policy: Some(&policy),
                missing: MissingMetadata::from_caller("account"),
            },
            StatusCode::BAD_REQUEST,
            "about:blank",
            None,
        ),
        (
            Rejection::MissingMetadata {
                policy: Some(&policy),
                missing: MissingMetadata::from_caller("x-api-key").with_provider(
                    Provider::CallerCredentials(Challenge::from_static("Bearer")),
                ),
            },
            StatusCode::UNAUTHORIZED,
            "about:blank",
            None,
        ),
        (
            Rejection::MissingMetadata {
                policy: None,
                missing: MissingMetadata::new("resolved client address from the proxy layer"),
            },
            StatusCode::INTERNAL_SERVER_ERROR,
            "about:blank",
            None,
        ),
        (
            Rejection::PayloadTooLarge { limit: 4_096 },
            StatusCode::PAYLOAD_TOO_LARGE,
            "about:blank",
            None,
        ),
        (
            Rejection::BodyUnreadable,
            StatusCode::BAD_REQUEST,
            "about:blank",
            None,
        ),
        (
            Rejection::BodyTimedOut {
                after: Duration::from_secs(10),
            },
            StatusCode::REQUEST_TIMEOUT,
            "about:blank",
            None,
        ),
        (
            Rejection::StorageCapacity {
                policy: &policy,
                retry_after: Some(Duration::from_millis(200)),
            },
            StatusCode::SERVICE_UNAVAILABLE,
            "about:blank",
            Some("1"),
        ),
        (
            Rejection::BackendFailure {
                error: &backend_error,
            },
            StatusCode::SERVICE_UNAVAILABLE,
            "about:blank",
            None,
        ),
    ];
    for (rejection, status, problem_type, retry_after) in &cases {
        let (answered, json, response) = answer(rejection).await;
        assert_eq!(answered, *status, "{rejection:?}");
        assert_eq!(json["type"], *problem_type, "{rejection:?}");
        assert!(json["title"].is_string(), "{rejection:?}");
        assert_eq!(
            response
                .headers()
                .get("retry-after")
                .map(|value| value.to_str().expect("ascii")),
            *retry_after,
            "{rejection:?}"
        );
        let text = json.to_string();
        for secret in ["10.0.0.7", "proxy layer"] {
            assert!(!text.contains(secret), "{text}");
        }
    }
}

#[tokio::test]
async fn a_callers_omission_names_what_to_send_and_credentials_carry_a_challenge() {
    let (status, json, response) = answer(&Rejection::MissingMetadata {
        policy: None,
        missing: MissingMetadata::from_caller("x-api-key").with_provider(
            Provider::CallerCredentials(Challenge::from_static(r#"ApiKey realm="orders""#)),
        ),
    })
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(json["title"], "Unauthorized");
    assert_eq!(json["detail"], "missing or unusable: x-api-key");
    assert_eq!(
        response.headers()["www-authenticate"],
        r#"ApiKey realm="orders""#
    );
    let (status, json, response) = answer(&Rejection::MissingMetadata {
        policy: None,
        missing: MissingMetadata::from_caller("account"),
    })
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(json["detail"], "missing or unusable: account");
    assert!(response.headers().get("www-authenticate").is_none());
}

#[test]
fn who_provides_a_value_is_kept_with_its_reason() {
    let service = MissingMetadata::new("client address");
    assert_eq!(service.provider(), Provider::Service);
    let caller = MissingMetadata::from_caller("account");
    assert_eq!(caller.provider(), Provider::Caller);
    assert_eq!(caller.reason(), "account");
    let challenge = Challenge::from_static("Bearer");
    let credentials = caller.with_provider(Provider::CallerCredentials(challenge));
    assert_eq!(credentials.reason(), "account");
    assert_eq!(
        credentials.provider(),
        Provider::CallerCredentials(challenge)
    );
    assert_eq!(
        service.to_string(),
        "missing trusted request metadata: client address"
    );
    assert_eq!(
        caller.to_string(),
        "missing or unusable caller value: account"
    );
}

#[test]
fn a_challenge_is_checked_when_it_is_built() {
    for valid in [
        "Bearer",
        r#"ApiKey realm="orders", charset="UTF-8""#,
        "Bearer realm=\"api\",\tscope=\"read\"",
    ] {
        assert_eq!(Challenge::from_static(valid).as_str(), valid);
    }
    for invalid in [
        "",
        " Bearer",
        // Only a space separates the scheme from its parameters.
        "Basic\trealm",
        "Bear(er",
        "Bearer realm=\"\n\"",
        "Bearer réalm",
    ] {
        let built = std::panic::catch_unwind(|| Challenge::from_static(invalid));
        assert!(built.is_err(), "{invalid:?}");
    }
}
