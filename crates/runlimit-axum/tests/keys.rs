//! Keys the caller sends (a header, a form or JSON field) and how the layer
//! answers a request that cannot be keyed: the caller's omission (400, or
//! 401 with a challenge) apart from the service's own missing metadata (500),
//! every answer a problem-details body.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};

use axum::body::Body;
use http::{Request, Response, StatusCode};
use runlimit_axum::{BodyField, Challenge, FromExtension, FromHeader, Provider, RateLimitLayer};
use runlimit_core::{Check, FixedWindowPolicy, KeyHasher, SubjectKey};
use runlimit_memory::MemoryStore;
use tower::{Layer, ServiceExt};

mod common;

use common::{Client, body_text, client_key, handler, hasher, policy, store};

/// The units `key` has left under `policy`: `None` once they are spent.
fn remaining(store: &MemoryStore, policy: &FixedWindowPolicy, key: SubjectKey) -> Option<u64> {
    store
        .peek(&Check::new(policy, key))
        .expect("peek")
        .remaining()
}

/// A request from client network `net` with the given headers.
fn with_headers(net: &'static str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut builder = Request::post("/api");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder.body(Body::empty()).expect("request");
    request.extensions_mut().insert(Client(net));
    request
}

/// A request from `net` with `body` of `content_type`.
fn with_body(net: &'static str, content_type: &str, body: &'static str) -> Request<Body> {
    let mut request = Request::post("/login")
        .header("content-type", content_type)
        .body(Body::from(body))
        .expect("request");
    request.extensions_mut().insert(Client(net));
    request
}

/// The problem-details body of `response`, after checking its content type.
async fn problem(response: Response<Body>) -> serde_json::Value {
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let status = response.status().as_u16();
    let body: serde_json::Value =
        serde_json::from_str(&body_text(response).await).expect("a JSON body");
    assert_eq!(body["status"], status);
    body
}

#[tokio::test]
async fn a_header_key_is_normalized_before_it_is_hashed() {
    let hasher = hasher();
    let limiter = store();
    let tenant = policy("tenant", 2);
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter)).check(
        tenant.clone(),
        FromHeader::new(&hasher, "x-tenant")
            .expect("valid name")
            .normalize(|v| v.trim().to_ascii_lowercase()),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::default()));
    for spelling in ["Acme", "ACME"] {
        let response = service
            .clone()
            .oneshot(with_headers("net-a", &[("x-tenant", spelling)]))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let denied = service
        .clone()
        .oneshot(with_headers("net-a", &[("x-tenant", "acme")]))
        .await
        .expect("ok");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // The key is the normalized value's, as the application would derive it.
    let acme = hasher.hash_for(&tenant, b"acme");
    assert_eq!(remaining(&limiter, &tenant, acme), None, "spent");
    let other = service
        .oneshot(with_headers("net-a", &[("x-tenant", "globex")]))
        .await
        .expect("ok");
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_missing_header_is_the_callers_400_and_consumes_nothing() {
    let hasher = hasher();
    let limiter = store();
    let client = policy("client", 5);
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(client.clone(), client_key(Arc::clone(&hasher)))
        .check(
            policy("tenant", 5),
            FromHeader::new(&hasher, "x-tenant")
                .expect("valid name")
                .normalize(|v| v.trim().to_owned()),
        );
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::default()));
    let unusable: [&[(&str, &str)]; 3] = [
        &[],
        // Twice: the caller must not choose which value counts.
        &[("x-tenant", "acme"), ("x-tenant", "globex")],
        // Nothing left after normalizing.
        &[("x-tenant", "   ")],
    ];
    for headers in unusable {
        let response = service
            .clone()
            .oneshot(with_headers("net-b", headers))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{headers:?}");
        let body = problem(response).await;
        assert_eq!(body["type"], "about:blank");
        assert_eq!(body["title"], "Bad Request");
        assert_eq!(body["detail"], "missing or unusable: x-tenant");
        assert!(!body.to_string().contains("acme"), "no value is echoed");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // The client check of the same batch consumed nothing either.
    let net = hasher.hash_for(&client, b"net-b");
    assert_eq!(remaining(&limiter, &client, net), Some(5));
}

#[tokio::test]
async fn missing_credentials_are_401_with_the_extractors_challenge() {
    let layer = RateLimitLayer::from_shared(store()).check(
        policy("api-key", 5),
        FromHeader::new(&hasher(), "X-Api-Key")
            .expect("valid name")
            .provided_by(Provider::CallerCredentials(Challenge::from_static(
                r#"ApiKey realm="orders""#,
            ))),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::default()));
    let response = service
        .clone()
        .oneshot(with_headers("net-c", &[]))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()["www-authenticate"],
        r#"ApiKey realm="orders""#
    );
    assert_eq!(
        problem(response).await["detail"],
        "missing or unusable: X-Api-Key"
    );
    // The header name matches whatever its case.
    let admitted = service
        .oneshot(with_headers("net-c", &[("x-api-key", "k-1")]))
        .await
        .expect("ok");
    assert_eq!(admitted.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn missing_trusted_metadata_is_a_500_that_keeps_its_reason() {
    #[derive(Clone)]
    struct Resolved(String);
    impl AsRef<[u8]> for Resolved {
        fn as_ref(&self) -> &[u8] {
            self.0.as_bytes()
        }
    }
    let hasher = hasher();
    // An extension an earlier layer should insert, and a header the gateway
    // in front of the service always sets: both the service's to provide.
    let layers = [
        RateLimitLayer::from_shared(store())
            .check(policy("client", 5), FromExtension::<Resolved>::new(&hasher)),
        RateLimitLayer::from_shared(store()).check(
            policy("client", 5),
            FromHeader::new(&hasher, "x-gateway-client")
                .expect("valid name")
                .provided_by(Provider::Service),
        ),
    ];
    for layer in layers {
        let calls = Arc::new(AtomicUsize::new(0));
        let service = layer.layer(handler(Arc::clone(&calls), Arc::default()));
        let response = service
            .oneshot(with_headers("net-d", &[]))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = problem(response).await;
        assert_eq!(body["title"], "Internal Server Error");
        let text = body.to_string();
        assert!(
            !text.contains("gateway") && !text.contains("extension"),
            "{text}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }
}

#[tokio::test]
async fn a_form_field_keys_the_check_and_the_handler_gets_the_body() {
    let hasher = hasher();
    let limiter = store();
    let account = policy("identity", 2);
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(
            account.clone(),
            BodyField::form(&hasher, "account").normalize(|v| v.trim().to_lowercase()),
        )
        .withhold_fields()
        .key_reads_body(1_024);
    let received = Arc::new(Mutex::new(Vec::new()));
    let service = layer.layer(tower::service_fn({
        let received = Arc::clone(&received);
        move |request: Request<Body>| {
            let received = Arc::clone(&received);
            async move {
                let text = body_text_of(request).await;
                received.lock().expect("lock").push(text);
                Ok::<_, std::convert::Infallible>(Response::new(Body::from("ok")))
            }
        }
    }));
    let form = "application/x-www-form-urlencoded";
    for body in [
        "account=Alice%40Example.test&password=a",
        "password=b&account=+alice@example.test",
    ] {
        let response = service
            .clone()
            .oneshot(with_body("net-e", form, body))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(
        *received.lock().expect("lock"),
        [
            "account=Alice%40Example.test&password=a",
            "password=b&account=+alice@example.test"
        ]
    );
    let alice = hasher.hash_for(&account, b"alice@example.test");
    assert_eq!(remaining(&limiter, &account, alice), None, "spent");
    let denied = service
        .clone()
        .oneshot(with_body("net-e", form, "account=ALICE@example.test"))
        .await
        .expect("ok");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);

    for unusable in [
        "password=c",
        "account=&password=c",
        "account=bob@example.test&account=carol@example.test",
    ] {
        let response = service
            .clone()
            .oneshot(with_body("net-e", form, unusable))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{unusable}");
        assert_eq!(
            problem(response).await["detail"],
            "missing or unusable: account"
        );
    }
    assert_eq!(received.lock().expect("lock").len(), 2);
}

#[tokio::test]
async fn a_json_field_keys_the_check_when_it_is_a_top_level_string_named_once() {
    let hasher = hasher();
    let limiter = store();
    let account = policy("identity", 5);
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(
            account.clone(),
            BodyField::json(&hasher, "account").normalize(|v| v.to_lowercase()),
        )
        .key_reads_body(1_024);
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::default()));
    let json = "application/json";
    for body in [
        r#"{"account": "Dana@Example.test", "password": "x"}"#,
        // Escapes and other members of any shape, before and after it.
        r#"{"nested": {"account": "mallory"}, "tags": [1, {"a": null}], "\u0061ccount": "dana@example.TEST"}"#,
    ] {
        let response = service
            .clone()
            .oneshot(with_body("net-f", json, body))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::OK, "{body}");
    }
    let dana = hasher.hash_for(&account, b"dana@example.test");
    assert_eq!(remaining(&limiter, &account, dana), Some(3));

    for unusable in [
        r#"{"password": "x"}"#,
        r#"{"nested": {"account": "mallory"}}"#,
        r#"{"account": 42}"#,
        r#"{"account": ""}"#,
        r#"{"account": "erin", "account": "frank"}"#,
        r#"{"account": "erin"} trailing"#,
        r#"["account", "erin"]"#,
        "account=erin",
    ] {
        let response = service
            .clone()
            .oneshot(with_body("net-f", json, unusable))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{unusable}");
        let body = problem(response).await;
        assert!(!body.to_string().contains("erin"), "no value is echoed");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[test]
#[should_panic(expected = "call key_reads_body")]
fn a_body_field_on_a_layer_that_does_not_buffer_the_body_is_refused_when_built() {
    let layer = RateLimitLayer::from_shared(store())
        .check(policy("identity", 5), BodyField::form(&hasher(), "account"));
    let _service = layer.layer(handler(Arc::default(), Arc::default()));
}

#[test]
fn an_invalid_header_name_is_refused_when_the_extractor_is_built() {
    let hasher = KeyHasher::new(b"test secret that is at least 32 bytes").expect("valid");
    assert!(FromHeader::new(&hasher, "x tenant").is_err());
    assert!(FromHeader::new(&hasher, "").is_err());
}

async fn body_text_of(request: Request<Body>) -> String {
    use http_body_util::BodyExt;
    let bytes = request
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    String::from_utf8(bytes.to_vec()).expect("utf-8")
}
