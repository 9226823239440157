//! Reserving a cost up front and settling it to what the handler used.

use std::{convert::Infallible, sync::Arc};

use axum::body::Body;
use http::{Request, Response, StatusCode};
use runlimit_axum::{RateLimitLayer, ReserveError, Used};
use runlimit_core::{Check, FixedWindowPolicy};
use tower::{Layer, Service, ServiceExt, service_fn};

mod common;

use common::{client_key, hasher, identity_key, policy, request, store};

/// A completion handler: reports the units named in the `used` header (none
/// without it), and answers with the status in the `status` header.
fn complete()
-> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    service_fn(|request: Request<Body>| {
        let used = request.headers().get("used").map(|value| {
            value
                .to_str()
                .expect("ascii")
                .parse::<u64>()
                .expect("a number")
        });
        let status = request
            .headers()
            .get("status")
            .map_or(StatusCode::OK, |value| {
                StatusCode::from_bytes(value.as_bytes()).expect("a status")
            });
        async move {
            let mut response = Response::new(Body::from("done"));
            *response.status_mut() = status;
            if let Some(used) = used {
                response.extensions_mut().insert(Used(used));
            }
            Ok::<_, Infallible>(response)
        }
    })
}

fn completion(used: Option<&'static str>, status: Option<&'static str>) -> Request<Body> {
    let mut request = request("net-a", "alice");
    if let Some(used) = used {
        request
            .headers_mut()
            .insert("used", used.parse().expect("ascii"));
    }
    if let Some(status) = status {
        request
            .headers_mut()
            .insert("status", status.parse().expect("ascii"));
    }
    request
}

struct Fixture {
    limiter: Arc<runlimit_memory::MemoryStore>,
    hasher: Arc<runlimit_core::KeyHasher>,
    client: FixedWindowPolicy,
    identity: FixedWindowPolicy,
}

impl Fixture {
    fn new() -> Self {
        Self {
            limiter: store(),
            hasher: hasher(),
            client: policy("client", 100),
            identity: policy("identity", 40),
        }
    }

    fn layer(&self) -> RateLimitLayer<runlimit_memory::MemoryStore> {
        RateLimitLayer::from_shared(Arc::clone(&self.limiter))
            .check(self.client.clone(), client_key(Arc::clone(&self.hasher)))
            .check(
                self.identity.clone(),
                identity_key(Arc::clone(&self.hasher)),
            )
    }

    fn remaining(&self, policy: &FixedWindowPolicy, subject: &str) -> Option<u64> {
        let key = self.hasher.hash_for(policy, subject.as_bytes());
        self.limiter
            .peek(&Check::new(policy, key))
            .expect("no error")
            .remaining()
    }
}

#[tokio::test]
async fn a_reservation_is_settled_to_what_the_handler_used() {
    let fixture = Fixture::new();
    let layer = fixture.layer().reserve(10).expect("both policies hold 10");
    let service = layer.layer(complete());

    let response = service
        .clone()
        .oneshot(completion(Some("3"), None))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::OK);
    // Every check of the batch keeps 3 of its 10.
    assert_eq!(fixture.remaining(&fixture.client, "net-a"), Some(97));
    assert_eq!(fixture.remaining(&fixture.identity, "alice"), Some(37));

    // Reported as nothing used: the whole reservation comes back.
    service
        .clone()
        .oneshot(completion(Some("0"), None))
        .await
        .expect("ok");
    assert_eq!(fixture.remaining(&fixture.identity, "alice"), Some(37));
}

#[tokio::test]
async fn a_response_without_used_or_above_the_reservation_keeps_all_of_it() {
    let fixture = Fixture::new();
    let service = fixture
        .layer()
        .reserve(10)
        .expect("valid")
        .layer(complete());
    service
        .clone()
        .oneshot(completion(None, None))
        .await
        .expect("ok");
    assert_eq!(fixture.remaining(&fixture.identity, "alice"), Some(30));
    service
        .clone()
        .oneshot(completion(Some("25"), None))
        .await
        .expect("ok");
    assert_eq!(fixture.remaining(&fixture.identity, "alice"), Some(20));
}

#[tokio::test]
async fn a_request_is_admitted_only_if_its_whole_reservation_fits() {
    let fixture = Fixture::new();
    let service = fixture
        .layer()
        .reserve(15)
        .expect("valid")
        .layer(complete());
    // 40 on the identity: two reservations of 15 fit, a third does not,
    // though each of the first two used only 1 in the end.
    for _ in 0..2 {
        let response = service
            .clone()
            .oneshot(completion(None, None))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let response = service
        .clone()
        .oneshot(completion(Some("1"), None))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(fixture.remaining(&fixture.identity, "alice"), Some(10));
}

#[tokio::test]
async fn with_count_when_a_response_that_does_not_count_is_refunded_whole() {
    let fixture = Fixture::new();
    // The order of the two calls does not matter.
    for layer in [
        fixture
            .layer()
            .reserve(10)
            .expect("valid")
            .count_when(|status, _| status != StatusCode::BAD_GATEWAY),
        fixture
            .layer()
            .count_when(|status, _| status != StatusCode::BAD_GATEWAY)
            .reserve(10)
            .expect("valid"),
    ] {
        let service = layer.layer(complete());
        let before = fixture.remaining(&fixture.identity, "alice").unwrap_or(40);
        service
            .clone()
            .oneshot(completion(Some("4"), Some("502")))
            .await
            .expect("ok");
        assert_eq!(fixture.remaining(&fixture.identity, "alice"), Some(before));
        service
            .clone()
            .oneshot(completion(Some("4"), None))
            .await
            .expect("ok");
        assert_eq!(
            fixture.remaining(&fixture.identity, "alice"),
            Some(before - 4)
        );
    }
}

#[test]
fn a_reservation_no_policy_can_hold_is_refused_when_the_layer_is_built() {
    let fixture = Fixture::new();
    match fixture.layer().reserve(41) {
        Err(ReserveError::Cost { policy, source }) => {
            assert!(policy.contains("identity"), "{policy}");
            assert_eq!(
                source,
                runlimit_core::CostError::OutOfRange {
                    cost: 41,
                    capacity: 40
                }
            );
        }
        other => panic!("expected a cost error, got {:?}", other.err()),
    }
    assert!(matches!(
        fixture.layer().reserve(0),
        Err(ReserveError::Cost { .. })
    ));
    let selected = RateLimitLayer::from_shared(Arc::clone(&fixture.limiter)).check_selected(
        {
            let policy = Arc::new(fixture.client.clone());
            move |_: &http::request::Parts| Ok(Arc::clone(&policy))
        },
        client_key(Arc::clone(&fixture.hasher)),
    );
    assert!(matches!(
        selected.reserve(1),
        Err(ReserveError::SelectedPolicy)
    ));
}
