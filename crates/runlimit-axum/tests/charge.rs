//! Charging by outcome: a request counts only when its response says so.

use std::{
    convert::Infallible,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use axum::body::Body;
use http::{Request, Response, StatusCode};
use runlimit_axum::RateLimitLayer;
use runlimit_core::Check;
use tower::{Layer, Service, ServiceExt, service_fn};

mod common;

use common::{client_key, hasher, identity_key, policy, request, store};

/// A login handler: the right password answers 200, any other 401. The
/// password travels in a header only so the test can choose it per request.
fn login(
    calls: Arc<AtomicUsize>,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    service_fn(move |request: Request<Body>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let status = if request
            .headers()
            .get("password")
            .is_some_and(|p| p == "right")
        {
            StatusCode::OK
        } else {
            StatusCode::UNAUTHORIZED
        };
        async move {
            let mut response = Response::new(Body::from("done"));
            *response.status_mut() = status;
            Ok::<_, Infallible>(response)
        }
    })
}

fn attempt(password: &'static str) -> Request<Body> {
    let mut request = request("net-a", "alice");
    request
        .headers_mut()
        .insert("password", password.parse().expect("ascii"));
    request
}

#[tokio::test]
async fn successful_logins_are_refunded_and_failed_ones_keep_their_charge() {
    let hasher = hasher();
    let limiter = store();
    let client = policy("client", 10);
    let identity = policy("identity", 3);
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(client.clone(), client_key(Arc::clone(&hasher)))
        .check(identity.clone(), identity_key(Arc::clone(&hasher)))
        .count_when(|status, _| !status.is_success());
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(login(Arc::clone(&calls)));

    // Successful logins never use up the quota: each is refunded, both checks
    // of the batch.
    for _ in 0..10 {
        let response = service.clone().oneshot(attempt("right")).await.expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let key = |policy: &runlimit_core::FixedWindowPolicy, subject: &str| {
        hasher.hash_for(policy, subject.as_bytes())
    };
    let remaining = |policy: &runlimit_core::FixedWindowPolicy, subject: &'static str| {
        limiter
            .peek(&Check::new(policy, key(policy, subject)))
            .expect("peek")
            .remaining()
    };
    assert_eq!(remaining(&identity, "alice"), Some(3));
    assert_eq!(remaining(&client, "net-a"), Some(10));

    // Failed ones count, until the identity quota denies before the handler.
    for expected in [StatusCode::UNAUTHORIZED; 3] {
        let response = service.clone().oneshot(attempt("wrong")).await.expect("ok");
        assert_eq!(response.status(), expected);
    }
    assert_eq!(
        remaining(&identity, "alice"),
        None,
        "exhausted: a peek is denied"
    );
    let handled = calls.load(Ordering::SeqCst);
    let denied = service.clone().oneshot(attempt("right")).await.expect("ok");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        handled,
        "denied before the handler"
    );
}

#[tokio::test]
async fn a_refund_never_changes_the_response() {
    let hasher = hasher();
    let limiter = store();
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(policy("client", 5), client_key(Arc::clone(&hasher)))
        .count_when(|_, _| false);
    let service = layer.layer(login(Arc::new(AtomicUsize::new(0))));
    let response = service.oneshot(attempt("wrong")).await.expect("ok");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // The fields describe the admission as it was decided, before the refund.
    assert_eq!(
        response.headers()["ratelimit"],
        r#""auth.login/client";r=4;t=60"#
    );
}

#[tokio::test]
async fn nested_layers_refund_by_their_own_rules() {
    let hasher = hasher();
    let limiter = store();
    let client = policy("client", 5);
    let identity = policy("identity", 5);
    // The outer layer counts everything; the inner one only failures.
    let outer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(client.clone(), client_key(Arc::clone(&hasher)));
    let inner = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(identity.clone(), identity_key(Arc::clone(&hasher)))
        .count_when(|status, _| !status.is_success());
    let service = outer.layer(inner.layer(login(Arc::new(AtomicUsize::new(0)))));
    for _ in 0..2 {
        let response = service.clone().oneshot(attempt("right")).await.expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let peek = |policy: &runlimit_core::FixedWindowPolicy, subject: &str| {
        limiter
            .peek(&Check::new(
                policy,
                hasher.hash_for(policy, subject.as_bytes()),
            ))
            .expect("peek")
            .remaining()
    };
    assert_eq!(
        peek(&client, "net-a"),
        Some(3),
        "the outer layer keeps its charge"
    );
    assert_eq!(
        peek(&identity, "alice"),
        Some(5),
        "the inner layer refunded"
    );
}
