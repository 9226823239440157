//! The admission layer driven with `tower::ServiceExt::oneshot`.

use std::{
    convert::Infallible,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
};

use axum::body::Body;
use http::{Request, Response, StatusCode, request::Parts};
use http_body::Frame;
use runlimit_axum::{FailureMode, MissingMetadata, RateLimitLayer, Rejection};
use runlimit_core::{BatchDecision, Check, Decision, FixedWindowPolicy, Limiter, QuotaMode};
use runlimit_memory::{ManualClock, MemoryStore, MemoryStoreConfig};
use tower::{Layer, Service, ServiceExt, service_fn};

mod common;

use common::{
    Client, body_text, client_key, counted, handler, hasher, identity_key, policy, request, store,
    values,
};

#[tokio::test]
async fn client_and_identity_are_one_atomic_batch() {
    let hasher = hasher();
    let limiter = store();
    let client = policy("client", 3);
    let identity = policy("identity", 2);
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(client.clone(), client_key(Arc::clone(&hasher)))
        .check(identity.clone(), identity_key(Arc::clone(&hasher)));
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(None));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::clone(&seen)));

    for _ in 0..2 {
        let response = service
            .clone()
            .oneshot(request("net-a", "alice"))
            .await
            .expect("infallible");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let response = service
        .clone()
        .oneshot(request("net-a", "alice"))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "60");
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(
        values(response.headers(), "ratelimit"),
        [r#""auth.login/identity";r=0;t=60"#]
    );
    let body: serde_json::Value = serde_json::from_str(&body_text(response).await).expect("json");
    assert_eq!(body["violated-policies"][0], "auth.login/identity");
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // The denied batch consumed nothing from the client limit: one left.
    let response = service
        .clone()
        .oneshot(request("net-a", "bob"))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        values(response.headers(), "ratelimit"),
        [r#""auth.login/client";r=0;t=60, "auth.login/identity";r=1;t=60"#]
    );
    assert_eq!(
        values(response.headers(), "ratelimit-policy"),
        [r#""auth.login/client";q=3;w=60, "auth.login/identity";q=2;w=60"#]
    );
    let context = seen
        .lock()
        .expect("lock")
        .clone()
        .expect("context inserted");
    let names: Vec<&str> = context
        .policies()
        .iter()
        .map(|p| p.name().as_str())
        .collect();
    assert_eq!(names, ["auth.login/client", "auth.login/identity"]);
    assert_eq!(context.policies()[0].decision().remaining(), Some(0));
    assert!(!context.any_shadow_denied());

    let response = service
        .oneshot(request("net-a", "carol"))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        values(response.headers(), "ratelimit"),
        [r#""auth.login/client";r=0;t=60"#]
    );
}

/// A request body that fails the test if anything reads it.
struct UnreadableBody;

impl http_body::Body for UnreadableBody {
    type Data = bytes::Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        panic!("the request body was read before admission finished");
    }
}

#[tokio::test]
async fn denials_short_circuit_before_the_inner_service_and_the_body() {
    let hasher = hasher();
    let limiter = store();
    let layer = RateLimitLayer::from_shared(limiter).check(policy("client", 1), client_key(hasher));
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let inner = service_fn(move |request: Request<UnreadableBody>| {
        counted.fetch_add(1, Ordering::SeqCst);
        // The handler would read the body; the layer must not get here when denied.
        drop(request);
        async { Ok::<_, Infallible>(Response::new(Body::from("ok"))) }
    });
    let service = layer.layer(inner);
    let make = || {
        let mut request = Request::new(UnreadableBody);
        request.extensions_mut().insert(Client("net-b"));
        request
    };
    assert_eq!(
        service.clone().oneshot(make()).await.expect("ok").status(),
        StatusCode::OK
    );
    let denied = service.oneshot(make()).await.expect("ok");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn missing_metadata_rejects_without_consuming() {
    let hasher = hasher();
    let limiter = store();
    let client = policy("client", 1);
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(client.clone(), client_key(Arc::clone(&hasher)))
        .check(policy("identity", 5), identity_key(Arc::clone(&hasher)));
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::new(Mutex::new(None))));
    let mut no_identity = Request::new(Body::empty());
    no_identity.extensions_mut().insert(Client("net-c"));
    let response = service.clone().oneshot(no_identity).await.expect("ok");
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // The client counter was not consumed by the refused request.
    let key = hasher.hash_for(&client, b"net-c");
    assert_eq!(
        limiter
            .check(&Check::new(&client, key))
            .expect("ok")
            .remaining(),
        Some(0)
    );
}

#[tokio::test]
async fn a_mapper_learns_which_policy_could_not_be_keyed() {
    let named = Arc::new(Mutex::new(None));
    let layer = RateLimitLayer::from_shared(store())
        .check(policy("identity", 5), identity_key(hasher()))
        .rejection_mapper({
            let named = Arc::clone(&named);
            move |rejection: &Rejection<'_>| {
                if let Rejection::MissingMetadata { policy, .. } = rejection {
                    *named.lock().expect("lock") = policy.map(|name| name.as_str().to_owned());
                }
                Response::builder()
                    .status(StatusCode::BAD_REQUEST)
                    .body(Body::empty())
                    .expect("response")
            }
        });
    let service = layer.layer(handler(
        Arc::new(AtomicUsize::new(0)),
        Arc::new(Mutex::new(None)),
    ));
    let mut no_identity = Request::new(Body::empty());
    no_identity.extensions_mut().insert(Client("net-n"));
    let response = service.oneshot(no_identity).await.expect("ok");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        named.lock().expect("lock").as_deref(),
        Some("auth.login/identity")
    );
}

#[tokio::test]
async fn a_layer_of_one_withheld_check_discloses_nothing() {
    let layer = RateLimitLayer::from_shared(store())
        .check(policy("identity", 1), identity_key(hasher()))
        .withhold_fields()
        .fields(runlimit_axum::ResponseFields::DraftAndLegacy);
    let seen = Arc::new(Mutex::new(None));
    let service = layer.layer(handler(Arc::new(AtomicUsize::new(0)), Arc::clone(&seen)));
    let allowed = service
        .clone()
        .oneshot(request("net-w", "wes"))
        .await
        .expect("ok");
    assert_eq!(allowed.status(), StatusCode::OK);
    let denied = service.oneshot(request("net-w", "wes")).await.expect("ok");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    for response in [&allowed, &denied] {
        for name in [
            "ratelimit",
            "ratelimit-policy",
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
        ] {
            assert!(response.headers().get(name).is_none(), "{name}");
        }
    }
    assert_eq!(
        denied
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok()),
        Some("60")
    );
    let body = body_text(denied).await;
    assert!(!body.contains("identity"), "{body}");
    let context = seen.lock().expect("lock").clone().expect("context");
    assert!(!context.policies()[0].is_disclosed());
}

#[tokio::test]
async fn shadow_denials_are_admitted_and_reported() {
    let hasher = hasher();
    let shadow = policy("client", 1).with_quota_mode(QuotaMode::Shadow);
    let layer = RateLimitLayer::from_shared(store()).check(shadow, client_key(hasher));
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(None));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::clone(&seen)));
    service
        .clone()
        .oneshot(request("net-d", "x"))
        .await
        .expect("ok");
    let response = service.oneshot(request("net-d", "x")).await.expect("ok");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let context = seen.lock().expect("lock").clone().expect("context");
    assert!(context.any_shadow_denied());
    assert!(context.policies()[0].decision().is_shadow_denied());
    assert_eq!(
        values(response.headers(), "ratelimit"),
        [r#""auth.login/client";r=0;t=60"#]
    );
}

/// A backend that always fails: in its future, or (`now`) at once, as an
/// in-process store that fails would.
#[derive(Debug)]
struct Broken {
    now: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("backend unreachable")]
struct BrokenError;

impl Limiter for Broken {
    type Policy = FixedWindowPolicy;
    type Error = BrokenError;

    async fn check(&self, _: &Check<'_, FixedWindowPolicy>) -> Result<Decision, BrokenError> {
        Err(BrokenError)
    }

    async fn check_all(
        &self,
        _: &[Check<'_, FixedWindowPolicy>],
    ) -> Result<BatchDecision, BrokenError> {
        Err(BrokenError)
    }

    fn check_now(&self, _: &Check<'_, FixedWindowPolicy>) -> Option<Result<Decision, BrokenError>> {
        self.now.then_some(Err(BrokenError))
    }
}

#[tokio::test]
async fn backend_failures_fail_closed_by_default() {
    for now in [false, true] {
        let layer =
            RateLimitLayer::new(Broken { now }).check(policy("client", 1), client_key(hasher()));
        let calls = Arc::new(AtomicUsize::new(0));
        let service = layer.layer(handler(Arc::clone(&calls), Arc::new(Mutex::new(None))));
        let response = service.oneshot(request("net-e", "x")).await.expect("ok");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            !body_text(response).await.contains("unreachable"),
            "no backend text leaks"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }
}

#[tokio::test]
async fn failing_open_is_explicit_and_observed() {
    for now in [false, true] {
        let observed = Arc::new(AtomicUsize::new(0));
        let hook = Arc::clone(&observed);
        let layer = RateLimitLayer::new(Broken { now })
            .check(policy("client", 1), client_key(hasher()))
            .failure_mode(FailureMode::fail_open(move |error| {
                assert_eq!(error.to_string(), "backend unreachable");
                hook.fetch_add(1, Ordering::SeqCst);
            }));
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(None));
        let service = layer.layer(handler(Arc::clone(&calls), Arc::clone(&seen)));
        let response = service.oneshot(request("net-f", "x")).await.expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(observed.load(Ordering::SeqCst), 1);
        assert!(
            seen.lock().expect("lock").is_none(),
            "no context on fail-open"
        );
        assert!(!response.headers().contains_key("ratelimit"));
    }
}

#[tokio::test]
async fn nested_layers_append_in_composition_order() {
    let hasher = hasher();
    let limiter = store();
    let outer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(policy("client", 5), client_key(Arc::clone(&hasher)));
    let inner = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(policy("identity", 3), identity_key(Arc::clone(&hasher)));
    let seen = Arc::new(Mutex::new(None));
    let service =
        outer.layer(inner.layer(handler(Arc::new(AtomicUsize::new(0)), Arc::clone(&seen))));
    let response = service.oneshot(request("net-g", "dana")).await.expect("ok");
    let context = seen.lock().expect("lock").clone().expect("context");
    let names: Vec<&str> = context
        .policies()
        .iter()
        .map(|p| p.name().as_str())
        .collect();
    assert_eq!(names, ["auth.login/client", "auth.login/identity"]);
    assert_eq!(
        values(response.headers(), "ratelimit"),
        [
            r#""auth.login/client";r=4;t=60"#,
            r#""auth.login/identity";r=2;t=60"#
        ]
    );
    assert_eq!(
        values(response.headers(), "ratelimit-policy"),
        [
            r#""auth.login/client";q=5;w=60"#,
            r#""auth.login/identity";q=3;w=60"#
        ]
    );
}

#[tokio::test]
async fn nested_layers_report_the_legacy_quota_with_fewer_units_left() {
    // Whichever layer, outer or inner, has fewer units left, its quota is the
    // one the single-valued legacy fields report, limit and all.
    for (outer_limit, inner_limit, expected) in [(2, 5, ("2", "1")), (5, 2, ("2", "1"))] {
        let hasher = hasher();
        let limiter = store();
        let outer = RateLimitLayer::from_shared(Arc::clone(&limiter))
            .check(
                policy("client", outer_limit),
                client_key(Arc::clone(&hasher)),
            )
            .fields(runlimit_axum::ResponseFields::Legacy);
        let inner = RateLimitLayer::from_shared(Arc::clone(&limiter))
            .check(
                policy("identity", inner_limit),
                identity_key(Arc::clone(&hasher)),
            )
            .fields(runlimit_axum::ResponseFields::Legacy);
        let service = outer.layer(inner.layer(handler(
            Arc::new(AtomicUsize::new(0)),
            Arc::new(Mutex::new(None)),
        )));
        let response = service.oneshot(request("net-l", "lee")).await.expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
        let (limit, remaining) = expected;
        assert_eq!(values(response.headers(), "x-ratelimit-limit"), [limit]);
        assert_eq!(
            values(response.headers(), "x-ratelimit-remaining"),
            [remaining]
        );
        assert_eq!(values(response.headers(), "x-ratelimit-reset").len(), 1);
        assert!(!response.headers().contains_key("ratelimit"));
    }
}

#[tokio::test]
async fn extending_a_clone_leaves_the_original_layer_alone() {
    let hasher = hasher();
    let limiter = store();
    let base = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(policy("client", 5), client_key(Arc::clone(&hasher)));
    let stricter = base
        .clone()
        .check(policy("identity", 3), identity_key(Arc::clone(&hasher)));
    for (layer, checks, policy_field) in [
        (base, 1, r#""auth.login/client";q=5;w=60"#),
        (
            stricter,
            2,
            r#""auth.login/client";q=5;w=60, "auth.login/identity";q=3;w=60"#,
        ),
    ] {
        let seen = Arc::new(Mutex::new(None));
        let service = layer.layer(handler(Arc::new(AtomicUsize::new(0)), Arc::clone(&seen)));
        let response = service.oneshot(request("net-h", "erin")).await.expect("ok");
        let context = seen.lock().expect("lock").clone().expect("context");
        assert_eq!(context.policies().len(), checks);
        assert_eq!(
            values(response.headers(), "ratelimit-policy"),
            [policy_field]
        );
    }
}

#[tokio::test]
async fn skipped_requests_touch_nothing() {
    let limiter = store();
    let client = policy("client", 1);
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(client.clone(), client_key(hasher()))
        .skip(|parts| parts.uri.path() == "/health");
    let seen = Arc::new(Mutex::new(None));
    let service = layer.layer(handler(Arc::new(AtomicUsize::new(0)), Arc::clone(&seen)));
    for _ in 0..3 {
        let mut health = request("net-h", "x");
        *health.uri_mut() = "/health".parse().expect("uri");
        let response = service.clone().oneshot(health).await.expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
        assert!(!response.headers().contains_key("ratelimit"));
    }
    assert!(seen.lock().expect("lock").is_none());
    assert_eq!(limiter.stats().entries, 0);
}

#[tokio::test]
async fn policies_can_be_selected_per_request_sync_and_async() {
    let hasher = hasher();
    let free = Arc::new(policy("free", 1));
    let paid = Arc::new(policy("paid", 3));
    #[derive(Clone, Copy)]
    enum Tier {
        Free,
        Paid,
    }
    let select = {
        let (free, paid) = (Arc::clone(&free), Arc::clone(&paid));
        move |parts: &Parts| match parts.extensions.get::<Tier>() {
            Some(Tier::Free) => Ok(Arc::clone(&free)),
            Some(Tier::Paid) => Ok(Arc::clone(&paid)),
            None => Err(MissingMetadata::new("tier")),
        }
    };
    let async_select = {
        let select = select.clone();
        move |parts: &Parts| {
            let chosen = select(parts);
            async move {
                tokio::task::yield_now().await;
                chosen
            }
        }
    };
    for layer in [
        RateLimitLayer::from_shared(store())
            .check_selected(select.clone(), client_key(Arc::clone(&hasher))),
        RateLimitLayer::from_shared(store())
            .check_selected_async(async_select, client_key(Arc::clone(&hasher))),
    ] {
        let service = layer.layer(handler(
            Arc::new(AtomicUsize::new(0)),
            Arc::new(Mutex::new(None)),
        ));
        let tiered = |tier: Option<Tier>| {
            let mut request = request("net-i", "x");
            if let Some(tier) = tier {
                request.extensions_mut().insert(tier);
            }
            request
        };
        let statuses = async {
            let mut statuses = Vec::new();
            for tier in [
                Tier::Free,
                Tier::Free,
                Tier::Paid,
                Tier::Paid,
                Tier::Paid,
                Tier::Paid,
            ] {
                statuses.push(
                    service
                        .clone()
                        .oneshot(tiered(Some(tier)))
                        .await
                        .expect("ok")
                        .status(),
                );
            }
            statuses
        }
        .await;
        use StatusCode as S;
        assert_eq!(
            statuses,
            [
                S::OK,
                S::TOO_MANY_REQUESTS,
                S::OK,
                S::OK,
                S::OK,
                S::TOO_MANY_REQUESTS
            ]
        );
        let untiered = service.clone().oneshot(tiered(None)).await.expect("ok");
        assert_eq!(untiered.status(), S::INTERNAL_SERVER_ERROR);
    }
}

#[tokio::test]
async fn capacity_denials_answer_503() {
    let limiter = Arc::new(
        MemoryStore::new(MemoryStoreConfig::new(1).expect("valid")).with_clock(ManualClock::new()),
    );
    let layer =
        RateLimitLayer::from_shared(limiter).check(policy("client", 5), client_key(hasher()));
    let service = layer.layer(handler(
        Arc::new(AtomicUsize::new(0)),
        Arc::new(Mutex::new(None)),
    ));
    assert_eq!(
        service
            .clone()
            .oneshot(request("net-j", "x"))
            .await
            .expect("ok")
            .status(),
        StatusCode::OK
    );
    let full = service.oneshot(request("net-k", "x")).await.expect("ok");
    assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(full.headers()["retry-after"], "60");
}

#[tokio::test]
async fn custom_mappers_own_the_response() {
    let layer = RateLimitLayer::from_shared(store())
        .check(policy("client", 1), client_key(hasher()))
        .rejection_mapper(|rejection: &Rejection<'_>| {
            let status = match rejection {
                Rejection::QuotaExceeded { .. } => StatusCode::IM_A_TEAPOT,
                _ => StatusCode::BAD_GATEWAY,
            };
            Response::builder()
                .status(status)
                .body(Body::from("custom"))
                .expect("response")
        });
    let service = layer.layer(handler(
        Arc::new(AtomicUsize::new(0)),
        Arc::new(Mutex::new(None)),
    ));
    service
        .clone()
        .oneshot(request("net-l", "x"))
        .await
        .expect("ok");
    let denied = service.oneshot(request("net-l", "x")).await.expect("ok");
    assert_eq!(denied.status(), StatusCode::IM_A_TEAPOT);
    assert_eq!(body_text(denied).await, "custom");
}

/// An inner service that panics when called on an instance nobody polled ready.
#[derive(Clone, Default)]
struct ReadinessChecked {
    ready: bool,
}

impl Service<Request<Body>> for ReadinessChecked {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<Body>) -> Self::Future {
        assert!(self.ready, "called an instance that was not polled ready");
        self.ready = false;
        std::future::ready(Ok(Response::new(Body::empty())))
    }
}

#[tokio::test]
async fn the_instance_polled_ready_is_the_one_called() {
    let layer =
        RateLimitLayer::from_shared(store()).check(policy("client", 10), client_key(hasher()));
    let mut service = layer.layer(ReadinessChecked::default());
    for _ in 0..3 {
        let ready = service.ready().await.expect("ready");
        let response = ready.call(request("net-m", "x")).await.expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
    }
}

/// An inner service that counts its clones.
struct CloneCounted {
    clones: Arc<AtomicUsize>,
    inner: ReadinessChecked,
}

impl Clone for CloneCounted {
    fn clone(&self) -> Self {
        self.clones.fetch_add(1, Ordering::SeqCst);
        Self {
            clones: Arc::clone(&self.clones),
            inner: self.inner.clone(),
        }
    }
}

impl Service<Request<Body>> for CloneCounted {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        self.inner.call(request)
    }
}

#[tokio::test]
async fn a_service_cloned_per_request_clones_its_inner_service_once_per_request() {
    let clones = Arc::new(AtomicUsize::new(0));
    let layer =
        RateLimitLayer::from_shared(store()).check(policy("client", 10), client_key(hasher()));
    let service = layer.layer(CloneCounted {
        clones: Arc::clone(&clones),
        inner: ReadinessChecked::default(),
    });
    // As axum and tonic serve: a clone of the service per request.
    for _ in 0..4 {
        let response = service
            .clone()
            .oneshot(request("net-c", "x"))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
    }
    // One clone per request, and one spare kept by the first call.
    assert_eq!(clones.load(Ordering::SeqCst), 5);

    // A service whose instance went to a call is cloned, and polled, from the
    // spare.
    let mut used = service.clone();
    let ready = used.ready().await.expect("ready");
    ready.call(request("net-c", "x")).await.expect("ok");
    let response = used
        .clone()
        .oneshot(request("net-c", "x"))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::OK);
    let ready = used.ready().await.expect("ready");
    let response = ready.call(request("net-c", "x")).await.expect("ok");
    assert_eq!(response.status(), StatusCode::OK);
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn layer_and_service_are_send_and_sync() {
    assert_send_sync::<RateLimitLayer<MemoryStore>>();
    assert_send_sync::<
        runlimit_axum::RateLimitService<
            ReadinessChecked,
            MemoryStore,
            runlimit_axum::DefaultRejection,
        >,
    >();
}

/// The memory store behind the plain async contract, as a networked backend
/// would be: it never decides without waiting, so the layer takes its
/// awaiting path.
#[derive(Debug)]
struct Awaited(Arc<MemoryStore>);

impl Limiter for Awaited {
    type Policy = FixedWindowPolicy;
    type Error = runlimit_memory::MemoryStoreError;

    async fn check(&self, check: &Check<'_, FixedWindowPolicy>) -> Result<Decision, Self::Error> {
        self.0.check(check)
    }

    async fn check_all(
        &self,
        checks: &[Check<'_, FixedWindowPolicy>],
    ) -> Result<BatchDecision, Self::Error> {
        self.0.check_all(checks)
    }
}

#[tokio::test]
async fn awaited_backends_derive_each_key_once_and_keep_readiness() {
    let extractions = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::new(Awaited(store()))
        .check(
            policy("client", 2),
            counted(&extractions, client_key(hasher())),
        )
        .check(
            policy("identity", 5),
            counted(&extractions, identity_key(hasher())),
        );
    let mut service = layer.layer(ReadinessChecked::default());
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let ready = service.ready().await.expect("ready");
        let response = ready.call(request("net-w", "wendy")).await.expect("ok");
        statuses.push(response.status());
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // Two checks per request, each key derived exactly once.
    assert_eq!(extractions.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn a_check_decided_at_once_answers_as_an_awaited_one() {
    // The memory store decides while the layer is called; behind `Awaited`
    // the same store is awaited. Statuses, fields, context and key
    // derivations are the same either way.
    let mut runs = Vec::new();
    for awaited in [false, true] {
        let extractions = Arc::new(AtomicUsize::new(0));
        let checked = (
            policy("client", 2),
            counted(&extractions, client_key(hasher())),
        );
        let seen = Arc::new(Mutex::new(None));
        let inner = handler(Arc::new(AtomicUsize::new(0)), Arc::clone(&seen));
        let mut service = if awaited {
            RateLimitLayer::new(Awaited(store()))
                .check(checked.0, checked.1)
                .fields(runlimit_axum::ResponseFields::DraftAndLegacy)
                .layer(inner)
                .boxed_clone()
        } else {
            RateLimitLayer::from_shared(store())
                .check(checked.0, checked.1)
                .fields(runlimit_axum::ResponseFields::DraftAndLegacy)
                .layer(inner)
                .boxed_clone()
        };
        let mut responses = Vec::new();
        for _ in 0..3 {
            let ready = service.ready().await.expect("ready");
            let response = ready.call(request("net-s", "sam")).await.expect("ok");
            let fields: Vec<(String, Vec<String>)> = [
                "ratelimit",
                "ratelimit-policy",
                "x-ratelimit-limit",
                "x-ratelimit-remaining",
                "retry-after",
            ]
            .into_iter()
            .map(|name| (name.to_owned(), values(response.headers(), name)))
            .collect();
            let context = seen.lock().expect("lock").take().map(|context| {
                context
                    .policies()
                    .iter()
                    .map(|applied| (applied.name().as_str().to_owned(), *applied.decision()))
                    .collect::<Vec<_>>()
            });
            responses.push((response.status(), fields, context));
        }
        runs.push((responses, extractions.load(Ordering::SeqCst)));
    }
    let statuses: Vec<StatusCode> = runs[0].0.iter().map(|(status, ..)| *status).collect();
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    assert_eq!(runs[0].1, 3, "one key derivation per request");
    assert_eq!(runs[0], runs[1]);
}

#[tokio::test]
async fn memory_backends_derive_each_key_once() {
    let extractions = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::from_shared(store()).check(
        policy("client", 1),
        counted(&extractions, client_key(hasher())),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::new(Mutex::new(None))));
    let allowed = service
        .clone()
        .oneshot(request("net-o", "x"))
        .await
        .expect("ok");
    let denied = service.oneshot(request("net-o", "x")).await.expect("ok");
    assert_eq!(allowed.status(), StatusCode::OK);
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(extractions.load(Ordering::SeqCst), 2);
}

/// Layers keep their fixed policies' names and `RateLimit-Policy` values for
/// the life of the process, up to a bound; layers built past it keep counted
/// copies. Both kinds must report exactly what their policies say.
#[tokio::test]
async fn layers_built_past_the_kept_bound_report_the_same() {
    // More distinct policies than the layers keep (1,024): the first layer's
    // are kept, the last one's counted.
    let last = 1_099;
    let layers: Vec<_> = (0..=last)
        .map(|index| {
            RateLimitLayer::from_shared(store())
                .check(policy(&format!("s{index}"), 5), identity_key(hasher()))
        })
        .collect();
    let mut reported = Vec::new();
    for index in [0, last] {
        let seen = Arc::new(Mutex::new(None));
        let service =
            layers[index].layer(handler(Arc::new(AtomicUsize::new(0)), Arc::clone(&seen)));
        let response = service.oneshot(request("net-k", "kim")).await.expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
        let context = seen.lock().expect("lock").clone().expect("context");
        let name = context.policies()[0].name().as_str().to_owned();
        assert!(name.contains(&format!("s{index}")), "{name}");
        reported.push([
            values(response.headers(), "ratelimit-policy"),
            values(response.headers(), "ratelimit"),
            vec![name],
        ]);
    }
    // The last layer reports what the first does, under its own scope.
    assert_eq!(reported[0][0].len(), 1);
    for (first, last_values) in reported[0].iter().zip(&reported[1]) {
        let renamed: Vec<String> = first
            .iter()
            .map(|value| value.replace("s0", &format!("s{last}")))
            .collect();
        assert_eq!(&renamed, last_values);
    }
}
