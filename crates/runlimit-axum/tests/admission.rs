//! The complete layer: body-keyed identities, optional checks, mixed quota
//! modes, disclosure, ready-made extractors, the shared-backend guard,
//! legacy fields and consistent fields.

use std::{
    convert::Infallible,
    net::{IpAddr, SocketAddr},
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{body::Body, extract::ConnectInfo};
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, request::Parts};
use http_body::Frame;
use http_body_util::BodyExt;
use runlimit_axum::{
    FromExtension, MissingMetadata, PeerConnection, PeerIp, PrefixError, ProcessLocalStorage,
    RateLimitContext, RateLimitLayer, RequestBody, ResponseFields,
};
use runlimit_core::{
    Backend, BatchDecision, Check, Decision, FixedWindowPolicy, KeyHasher, Limiter, PolicyId,
    QuotaMode, ScopeId, SlidingWindowPolicy, Storage, SubjectKey, TieredPolicy,
};
use runlimit_memory::{ManualClock, MemoryStore, MemoryStoreConfig, SlidingWindowStore, Tiered};
use tower::{Layer, Service, ServiceExt, service_fn};

mod common;

use common::{client_key, handler, hasher, identity_key, policy, request, store, values};

/// A handler that records the body bytes it received.
fn echo(
    calls: Arc<AtomicUsize>,
    received: Arc<Mutex<Vec<u8>>>,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    service_fn(move |request: Request<Body>| {
        let (calls, received) = (Arc::clone(&calls), Arc::clone(&received));
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            let bytes = request
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes();
            *received.lock().expect("lock") = bytes.to_vec();
            Ok::<_, Infallible>(Response::new(Body::from("ok")))
        }
    })
}

/// Keys on the `email` field of a form body, lower-cased.
fn email_key(
    hasher: Arc<KeyHasher>,
) -> impl Fn(&Parts, &FixedWindowPolicy) -> Result<SubjectKey, MissingMetadata> + Send + Sync + 'static
{
    move |parts, policy| {
        let body = parts
            .extensions
            .get::<RequestBody>()
            .ok_or(MissingMetadata::new("request body"))?;
        let email = body
            .form_field("email")
            .ok_or(MissingMetadata::new("email field"))?;
        Ok(hasher.hash_for(policy, email.trim().to_lowercase().as_bytes()))
    }
}

fn form(client: &'static str, body: &'static str) -> Request<Body> {
    let mut request = Request::post("/reset")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .expect("request");
    request.extensions_mut().insert(common::Client(client));
    request
}

fn remaining(store: &MemoryStore, policy: &FixedWindowPolicy, key: SubjectKey) -> Option<u64> {
    store
        .peek(&Check::new(policy, key))
        .expect("peek")
        .remaining()
}

#[tokio::test]
async fn a_body_over_the_cap_is_413_and_consumes_nothing() {
    let hasher = hasher();
    let limiter = store();
    let client = policy("client", 10);
    let recipient = policy("recipient", 3);
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(client.clone(), client_key(Arc::clone(&hasher)))
        .check(recipient.clone(), email_key(Arc::clone(&hasher)))
        .key_reads_body(64);
    let service = layer.layer(echo(Arc::clone(&calls), Arc::default()));

    // Declared over the cap: refused before reading.
    let padded =
        Box::leak(format!("email=victim%40example.test&pad={}", "x".repeat(100)).into_boxed_str());
    let response = service
        .clone()
        .oneshot(form("net-a", padded))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Over the cap without a declared length (streamed): refused once read.
    let mut streamed = Request::post("/reset")
        .body(Body::new(Chunks(vec![
            Bytes::from_static(b"email=victim%40example.test&pad="),
            Bytes::from(vec![b'x'; 100]),
        ])))
        .expect("request");
    streamed.extensions_mut().insert(common::Client("net-a"));
    let response = service.clone().oneshot(streamed).await.expect("ok");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);

    assert_eq!(calls.load(Ordering::SeqCst), 0, "the handler never ran");
    let victim = hasher.hash_for(&recipient, b"victim@example.test");
    assert_eq!(remaining(&limiter, &recipient, victim), Some(3));
    let net = hasher.hash_for(&client, b"net-a");
    assert_eq!(
        remaining(&limiter, &client, net),
        Some(10),
        "nothing consumed"
    );
    assert_eq!(limiter.stats().entries, 0);
}

/// A body of `chunks`, with no declared length.
struct Chunks(Vec<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.0.is_empty() {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Frame::data(self.0.remove(0)))))
    }
}

#[tokio::test]
async fn the_handler_receives_the_exact_body_under_the_cap() {
    let hasher = hasher();
    let limiter = store();
    let recipient = policy("recipient", 3);
    let received = Arc::new(Mutex::new(Vec::new()));
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(recipient.clone(), email_key(Arc::clone(&hasher)))
        .key_reads_body(1_024);
    let service = layer.layer(echo(Arc::clone(&calls), Arc::clone(&received)));
    let body = "email=%20Bob%40Example.test&next=%2Fhome";
    // An exhausted quota peeks as denied: no units remaining to report.
    for expected in [Some(2), Some(1), None] {
        let response = service
            .clone()
            .oneshot(form("net-b", body))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(received.lock().expect("lock").as_slice(), body.as_bytes());
        let bob = hasher.hash_for(&recipient, b"bob@example.test");
        assert_eq!(remaining(&limiter, &recipient, bob), expected);
    }
    // The recipient's limit holds however the address is spelled.
    let response = service
        .oneshot(form("net-c", "email=BOB%40example.TEST"))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

/// A body that errs, or one that never finishes.
struct Broken {
    stall: bool,
}

impl http_body::Body for Broken {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.stall {
            Poll::Pending
        } else {
            Poll::Ready(Some(Err(std::io::Error::other("connection reset"))))
        }
    }
}

#[tokio::test(start_paused = true)]
async fn unreadable_and_stalled_bodies_are_answered_never_admitted() {
    let hasher = hasher();
    let limiter = store();
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(policy("recipient", 3), email_key(Arc::clone(&hasher)))
        .key_reads_body(1_024)
        .body_timeout(Duration::from_secs(2));
    let service = layer.layer(echo(Arc::clone(&calls), Arc::default()));
    for (stall, status) in [
        (false, StatusCode::BAD_REQUEST),
        (true, StatusCode::REQUEST_TIMEOUT),
    ] {
        let request = Request::post("/reset")
            .body(Body::new(Broken { stall }))
            .expect("request");
        let response = service.clone().oneshot(request).await.expect("ok");
        assert_eq!(response.status(), status);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(limiter.stats().entries, 0);
}

#[tokio::test]
async fn a_check_that_does_not_apply_consumes_nothing_while_the_others_do() {
    let hasher = hasher();
    let limiter = store();
    let client = policy("client", 10);
    let recipient = policy("recipient", 3);
    let calls = Arc::new(AtomicUsize::new(0));
    // A password reset counts against the recipient only when it names one.
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(client.clone(), client_key(Arc::clone(&hasher)))
        .check(recipient.clone(), email_key(Arc::clone(&hasher)))
        .only_when(|parts| {
            parts
                .extensions
                .get::<RequestBody>()
                .is_some_and(|body| body.form_field("email").is_some())
        })
        .key_reads_body(1_024);
    let seen = Arc::new(Mutex::new(None));
    let recording = service_fn({
        let (calls, seen) = (Arc::clone(&calls), Arc::clone(&seen));
        move |request: Request<Body>| {
            calls.fetch_add(1, Ordering::SeqCst);
            *seen.lock().expect("lock") = request.extensions().get::<RateLimitContext>().cloned();
            async { Ok::<_, Infallible>(Response::new(Body::from("ok"))) }
        }
    });
    let service = layer.layer(recording);
    let response = service
        .clone()
        .oneshot(form("net-d", "username=dana"))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::OK);
    let context = seen.lock().expect("lock").clone().expect("context");
    assert_eq!(context.policies().len(), 1, "only the client check applied");
    assert_eq!(
        values(response.headers(), "ratelimit"),
        [r#""auth.login/client";r=9;t=60"#]
    );
    assert_eq!(
        values(response.headers(), "ratelimit-policy"),
        [r#""auth.login/client";q=10;w=60"#]
    );
    assert_eq!(
        remaining(&limiter, &client, hasher.hash_for(&client, b"net-d")),
        Some(9)
    );
    assert_eq!(
        limiter.stats().entries,
        1,
        "no recipient counter was stored"
    );

    // A request that names a recipient counts against both.
    let response = service
        .oneshot(form("net-d", "email=erin%40example.test"))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::OK);
    let erin = hasher.hash_for(&recipient, b"erin@example.test");
    assert_eq!(remaining(&limiter, &recipient, erin), Some(2));
    assert_eq!(
        remaining(&limiter, &client, hasher.hash_for(&client, b"net-d")),
        Some(8)
    );
}

#[tokio::test]
async fn a_layer_whose_one_check_does_not_apply_passes_the_request_through_uncounted() {
    let hasher = hasher();
    let limiter = store();
    let client = policy("client", 1);
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(None));
    // Only form posts are limited.
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(client.clone(), client_key(Arc::clone(&hasher)))
        .only_when(|parts| parts.method == http::Method::POST);
    let service = layer.layer(handler(Arc::clone(&calls), Arc::clone(&seen)));
    for _ in 0..3 {
        let response = service
            .clone()
            .oneshot(request("net-u", "uma"))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
        assert!(values(response.headers(), "ratelimit").is_empty());
        assert!(seen.lock().expect("lock").is_none(), "no context");
    }
    assert_eq!(limiter.stats().entries, 0, "nothing was counted");

    // A post is counted, reported, and then denied.
    let post = || {
        let mut post = request("net-u", "uma");
        *post.method_mut() = http::Method::POST;
        post
    };
    let response = service.clone().oneshot(post()).await.expect("ok");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        values(response.headers(), "ratelimit"),
        [r#""auth.login/client";r=0;t=60"#]
    );
    assert!(seen.lock().expect("lock").is_some(), "a context");
    let response = service.oneshot(post()).await.expect("ok");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_shadow_check_beside_enforced_ones_never_denies_and_consumes_nothing_on_their_denial() {
    let hasher = hasher();
    let limiter = store();
    let client = policy("client", 2);
    let warming = policy("identity", 1).with_quota_mode(QuotaMode::Shadow);
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(None));
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(client.clone(), client_key(Arc::clone(&hasher)))
        .check(warming.clone(), identity_key(Arc::clone(&hasher)));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::clone(&seen)));

    // Admitted: the shadow check consumes; over its quota it reports a
    // shadow denial and still admits.
    for shadow_denied in [false, true] {
        let response = service
            .clone()
            .oneshot(request("net-e", "fred"))
            .await
            .expect("ok");
        assert_eq!(response.status(), StatusCode::OK);
        let context = seen.lock().expect("lock").clone().expect("context");
        let names: Vec<&str> = context
            .policies()
            .iter()
            .map(|p| p.name().as_str())
            .collect();
        assert_eq!(names, ["auth.login/client", "auth.login/identity"]);
        assert_eq!(
            context.policies()[1].decision().is_shadow_denied(),
            shadow_denied
        );
        // Both fields describe the same policies, in the same order.
        assert_eq!(values(response.headers(), "ratelimit-policy").len(), 1);
        let policy_field = &values(response.headers(), "ratelimit-policy")[0];
        let status_field = &values(response.headers(), "ratelimit")[0];
        assert!(policy_field.starts_with(r#""auth.login/client";q=2"#));
        assert!(policy_field.contains(r#", "auth.login/identity";q=1"#));
        assert!(status_field.starts_with(r#""auth.login/client";r="#));
        assert!(status_field.contains(r#", "auth.login/identity";r=0"#));
    }
    // The enforced client quota is spent: denied, and the shadow check is not
    // even evaluated, so it consumes nothing (a fresh identity stays full).
    let response = service
        .clone()
        .oneshot(request("net-e", "gina"))
        .await
        .expect("ok");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let gina = hasher.hash_for(&warming, b"gina");
    assert_eq!(remaining(&limiter, &warming, gina), Some(1));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn withheld_policies_never_appear_in_responses() {
    let hasher = hasher();
    let limiter = store();
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(policy("client", 10), client_key(Arc::clone(&hasher)))
        .check(policy("identity", 1), identity_key(Arc::clone(&hasher)))
        .withhold_fields()
        .fields(ResponseFields::DraftAndLegacy);
    let seen = Arc::new(Mutex::new(None));
    let service = layer.layer(handler(Arc::new(AtomicUsize::new(0)), Arc::clone(&seen)));
    let allowed = service
        .clone()
        .oneshot(request("net-f", "hana"))
        .await
        .expect("ok");
    let denied = service.oneshot(request("net-f", "hana")).await.expect("ok");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    for response in [&allowed, &denied] {
        for name in ["ratelimit", "ratelimit-policy"] {
            for value in values(response.headers(), name) {
                assert!(!value.contains("identity"), "{name}: {value}");
            }
        }
    }
    // The allowed response reports the client policy alone, in both shapes.
    assert_eq!(
        values(allowed.headers(), "ratelimit"),
        [r#""auth.login/client";r=9;t=60"#]
    );
    assert_eq!(values(allowed.headers(), "x-ratelimit-remaining"), ["9"]);
    // The identity denial names no policy and no quota: only when to retry.
    assert!(denied.headers().get("ratelimit").is_none());
    assert!(denied.headers().get("x-ratelimit-remaining").is_none());
    assert_eq!(values(denied.headers(), "retry-after"), ["60"]);
    let body = common::body_text(denied).await;
    assert!(!body.contains("identity"), "{body}");
    // Handlers still see every policy.
    let context = seen.lock().expect("lock").clone().expect("context");
    assert_eq!(context.policies().len(), 2);
    assert!(!context.policies()[1].is_disclosed());
}

#[tokio::test]
async fn legacy_fields_report_the_most_restrictive_policy_rounded_up() {
    let hasher = hasher();
    let clock = ManualClock::new();
    let limiter = Arc::new(
        MemoryStore::new(MemoryStoreConfig::new(100).expect("valid")).with_clock(clock.clone()),
    );
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(policy("client", 10), client_key(Arc::clone(&hasher)))
        .check(policy("identity", 2), identity_key(Arc::clone(&hasher)))
        .fields(ResponseFields::Legacy);
    let service = layer.layer(handler(Arc::new(AtomicUsize::new(0)), Arc::default()));
    let unix_now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
    };
    let before = unix_now();
    let first = service
        .clone()
        .oneshot(request("net-g", "ivan"))
        .await
        .expect("ok");
    let after = unix_now();
    assert!(first.headers().get("ratelimit").is_none(), "legacy only");
    // The identity policy has the fewest units left.
    assert_eq!(values(first.headers(), "x-ratelimit-limit"), ["2"]);
    assert_eq!(values(first.headers(), "x-ratelimit-remaining"), ["1"]);
    let reset: u64 = values(first.headers(), "x-ratelimit-reset")[0]
        .parse()
        .expect("unix seconds");
    let window = Duration::from_secs(60);
    assert!(reset >= runlimit_core::ceil_seconds(before + window));
    assert!(reset <= runlimit_core::ceil_seconds(after + window));

    // 1.5 s later the window has 58.5 s left: every field rounds up.
    clock.advance(Duration::from_millis(1_500));
    service
        .clone()
        .oneshot(request("net-g", "ivan"))
        .await
        .expect("ok");
    let before = unix_now();
    let denied = service.oneshot(request("net-g", "ivan")).await.expect("ok");
    let after = unix_now();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(values(denied.headers(), "retry-after"), ["59"]);
    assert_eq!(values(denied.headers(), "x-ratelimit-remaining"), ["0"]);
    let reset: u64 = values(denied.headers(), "x-ratelimit-reset")[0]
        .parse()
        .expect("unix seconds");
    let left = Duration::from_millis(58_500);
    assert!(reset >= runlimit_core::ceil_seconds(before + left));
    assert!(reset <= runlimit_core::ceil_seconds(after + left));
}

#[test]
fn the_peer_ip_extractor_aggregates_ipv6_by_prefix() {
    let hasher = KeyHasher::new(b"test secret that is at least 32 bytes").expect("valid");
    let policy = policy("client", 10);
    let key_of = |extractor: &PeerIp, address: &str| {
        use runlimit_axum::KeyExtractor;
        let mut request = Request::new(());
        let ip: IpAddr = address.parse().expect("address");
        request
            .extensions_mut()
            .insert(ConnectInfo(SocketAddr::new(ip, 443)));
        let (parts, ()) = request.into_parts();
        extractor.extract(&parts, &policy).expect("keyed")
    };
    let mut per_64 = PeerIp::new(&hasher);
    // Prepared for the policy or not, the keys are the same.
    let unprepared = per_64.clone();
    runlimit_axum::KeyExtractor::prepare(&mut per_64, &policy);
    for extractor in [&per_64, &unprepared] {
        assert_eq!(
            key_of(extractor, "2001:db8:1:2::1"),
            key_of(extractor, "2001:db8:1:2:ffff:ffff:ffff:ffff"),
            "one /64, one key"
        );
        assert_ne!(
            key_of(extractor, "2001:db8:1:2::1"),
            key_of(extractor, "2001:db8:1:3::1"),
            "another /64, another key"
        );
        assert_ne!(
            key_of(extractor, "192.0.2.1"),
            key_of(extractor, "192.0.2.2")
        );
        assert_eq!(
            key_of(extractor, "::ffff:192.0.2.1"),
            key_of(extractor, "192.0.2.1"),
            "an IPv4-mapped peer counts as IPv4"
        );
    }
    assert_eq!(
        key_of(&per_64, "2001:db8::1"),
        key_of(&unprepared, "2001:db8::1")
    );
    // Served with `PeerConnection`, a connection keeps each prepared
    // extractor's key apart and derives the same keys as per request.
    let per_56 = {
        let mut per_56 = PeerIp::new(&hasher).with_ipv6_prefix(56).expect("valid");
        runlimit_axum::KeyExtractor::prepare(&mut per_56, &policy);
        per_56
    };
    let other_policy = common::policy("tenant", 10);
    for address in ["2001:db8:1:2::1", "192.0.2.1", "::ffff:192.0.2.1"] {
        let connection = PeerConnection::new(SocketAddr::new(address.parse().expect("ip"), 443));
        let mut request = Request::new(());
        request.extensions_mut().insert(ConnectInfo(connection));
        let (parts, ()) = request.into_parts();
        for _ in 0..2 {
            for extractor in [&per_64, &unprepared, &per_56] {
                assert_eq!(
                    runlimit_axum::KeyExtractor::extract(extractor, &parts, &policy)
                        .expect("keyed"),
                    key_of(extractor, address),
                );
            }
            // Asked for a policy it was not prepared for, it derives that
            // policy's key, not the one it keeps.
            assert_eq!(
                runlimit_axum::KeyExtractor::extract(&per_64, &parts, &other_policy)
                    .expect("keyed"),
                runlimit_axum::KeyExtractor::extract(&unprepared, &parts, &other_policy)
                    .expect("keyed"),
            );
            assert_ne!(
                runlimit_axum::KeyExtractor::extract(&per_64, &parts, &other_policy)
                    .expect("keyed"),
                key_of(&per_64, address),
            );
        }
    }
    // The documented subject, for services in other languages.
    let mut subject = vec![6, 64];
    subject.extend_from_slice(
        &"2001:db8:1:2::"
            .parse::<std::net::Ipv6Addr>()
            .expect("ip")
            .octets(),
    );
    assert_eq!(
        key_of(&per_64, "2001:db8:1:2::9"),
        hasher.hash_for(&policy, &subject)
    );
    let per_48 = PeerIp::new(&hasher).with_ipv6_prefix(48).expect("valid");
    assert_eq!(
        key_of(&per_48, "2001:db8:1:2::1"),
        key_of(&per_48, "2001:db8:1:3::1")
    );
    assert_eq!(
        PeerIp::new(&hasher).with_ipv6_prefix(0).err(),
        Some(PrefixError::OutOfRange(0))
    );
    assert!(PeerIp::new(&hasher).with_ipv6_prefix(129).is_err());
}

#[tokio::test]
async fn a_typed_extension_keys_checks_and_its_absence_rejects() {
    #[derive(Clone)]
    struct Account(String);
    impl AsRef<[u8]> for Account {
        fn as_ref(&self) -> &[u8] {
            self.0.as_bytes()
        }
    }
    let hasher = KeyHasher::new(b"test secret that is at least 32 bytes").expect("valid");
    let limiter = store();
    let identity = policy("identity", 2);
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(identity.clone(), FromExtension::<Account>::new(&hasher));
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::default()));
    let mut named = Request::new(Body::empty());
    named
        .extensions_mut()
        .insert(Account("jo@example.test".to_owned()));
    assert_eq!(
        service.clone().oneshot(named).await.expect("ok").status(),
        StatusCode::OK
    );
    let jo = hasher.hash_for(&identity, b"jo@example.test");
    assert_eq!(remaining(&limiter, &identity, jo), Some(1));
    let anonymous = service
        .oneshot(Request::new(Body::empty()))
        .await
        .expect("ok");
    assert_eq!(anonymous.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A backend stand-in that says its counters are shared.
#[derive(Debug)]
struct SharedFake(MemoryStore);

impl Limiter for SharedFake {
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

impl Backend for SharedFake {
    fn storage(&self, _: &FixedWindowPolicy) -> Storage {
        Storage::Shared
    }
}

#[test]
fn the_guard_refuses_a_process_local_store_for_a_shared_quota() {
    let hasher = hasher();
    let local = RateLimitLayer::from_shared(store())
        .check(policy("identity", 5), identity_key(Arc::clone(&hasher)))
        .require_shared();
    assert_eq!(
        local.err(),
        Some(ProcessLocalStorage {
            policy: "auth.login/identity".to_owned()
        })
    );
    // Declared single-process, the same layer builds.
    assert!(
        RateLimitLayer::from_shared(store())
            .check(policy("identity", 5), identity_key(Arc::clone(&hasher)))
            .allow_process_local()
            .require_shared()
            .is_ok()
    );
    // A shared backend passes.
    let shared = MemoryStore::new(MemoryStoreConfig::new(10).expect("valid"));
    assert!(
        RateLimitLayer::new(SharedFake(shared))
            .check(policy("identity", 5), identity_key(hasher))
            .require_shared()
            .is_ok()
    );
}

#[tokio::test]
async fn the_guard_refuses_selected_policies_kept_in_process_memory_per_request() {
    let hasher = hasher();
    let selected = Arc::new(policy("identity", 5));
    let layer = RateLimitLayer::from_shared(store())
        .check_selected(move |_| Ok(Arc::clone(&selected)), identity_key(hasher))
        .require_shared()
        .expect("no fixed policy to refuse at build time");
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::default()));
    let response = service.oneshot(request("net-h", "kim")).await.expect("ok");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_outer_layer_adds_its_fields_to_an_inner_layers_denial() {
    let hasher = hasher();
    let limiter = store();
    let outer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(policy("client", 5), client_key(Arc::clone(&hasher)));
    let inner = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(policy("identity", 1), identity_key(Arc::clone(&hasher)));
    let service = outer.layer(inner.layer(handler(Arc::new(AtomicUsize::new(0)), Arc::default())));
    service
        .clone()
        .oneshot(request("net-i", "lee"))
        .await
        .expect("ok");
    let denied = service.oneshot(request("net-i", "lee")).await.expect("ok");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // The outer layer's allowed member first, then the inner layer's denial.
    assert_eq!(
        values(denied.headers(), "ratelimit"),
        [
            r#""auth.login/client";r=3;t=60"#,
            r#""auth.login/identity";r=0;t=60"#
        ]
    );
    assert_eq!(
        values(denied.headers(), "ratelimit-policy"),
        [
            r#""auth.login/client";q=5;w=60"#,
            r#""auth.login/identity";q=1;w=60"#
        ]
    );
}

#[test]
fn modifiers_without_a_check_are_a_build_time_panic() {
    let result = std::panic::catch_unwind(|| {
        let _ = RateLimitLayer::from_shared(store()).withhold_fields();
    });
    assert!(result.is_err());
}

fn assert_headers_absent(headers: &HeaderMap, names: &[&str]) {
    for name in names {
        assert!(headers.get(*name).is_none(), "{name} present");
    }
}

#[tokio::test]
async fn no_fields_means_none_on_allowed_responses() {
    let layer = RateLimitLayer::from_shared(store())
        .check(policy("client", 5), client_key(hasher()))
        .fields(ResponseFields::None);
    let service = layer.layer(handler(Arc::new(AtomicUsize::new(0)), Arc::default()));
    let response = service.oneshot(request("net-j", "x")).await.expect("ok");
    assert_headers_absent(
        response.headers(),
        &["ratelimit", "ratelimit-policy", "x-ratelimit-remaining"],
    );
}

#[tokio::test]
async fn sliding_window_policies_are_advertised_and_enforced() {
    let hasher = hasher();
    let clock = ManualClock::new();
    let store = Arc::new(
        SlidingWindowStore::new(MemoryStoreConfig::new(100).expect("valid"))
            .with_clock(clock.clone()),
    );
    let policy = SlidingWindowPolicy::new(
        PolicyId::new("auth.reset").expect("valid"),
        ScopeId::new("client").expect("valid"),
        2,
        Duration::from_secs(80),
    )
    .expect("valid");
    let layer = RateLimitLayer::from_shared(store).check(
        policy,
        move |parts: &Parts, policy: &SlidingWindowPolicy| {
            let common::Client(network) = parts
                .extensions
                .get::<common::Client>()
                .ok_or(MissingMetadata::new("client network"))?;
            Ok(hasher.hash_for(policy, network.as_bytes()))
        },
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::default()));
    let first = service
        .clone()
        .oneshot(request("net-s", "sam"))
        .await
        .expect("ok");
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        values(first.headers(), "ratelimit-policy"),
        [r#""auth.reset/client";q=2;w=80"#]
    );
    // Counted in the eighth 0..10 s, the unit is released at 90 s.
    assert_eq!(
        values(first.headers(), "ratelimit"),
        [r#""auth.reset/client";r=1;t=90"#]
    );
    service
        .clone()
        .oneshot(request("net-s", "sam"))
        .await
        .expect("ok");
    clock.advance(Duration::from_secs(85));
    let denied = service
        .clone()
        .oneshot(request("net-s", "sam"))
        .await
        .expect("ok");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(values(denied.headers(), "retry-after"), ["5"]);
    clock.advance(Duration::from_secs(5));
    let released = service.oneshot(request("net-s", "sam")).await.expect("ok");
    assert_eq!(released.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_tiered_limiter_plugs_in_and_passes_the_shared_guard() {
    type Tiers = TieredPolicy<FixedWindowPolicy, FixedWindowPolicy>;
    let hasher = hasher();
    let gate = MemoryStore::new(MemoryStoreConfig::new(100).expect("valid"));
    let shared = SharedFake(MemoryStore::new(
        MemoryStoreConfig::new(100).expect("valid"),
    ));
    let limiter = Arc::new(Tiered::new(gate, shared));
    let keyed = |hasher: Arc<KeyHasher>, client: bool| {
        move |parts: &Parts, policy: &Tiers| {
            let subject = if client {
                parts.extensions.get::<common::Client>().map(|c| c.0)
            } else {
                parts.extensions.get::<common::Identity>().map(|i| i.0)
            };
            let subject = subject.ok_or(MissingMetadata::new("subject"))?;
            Ok(hasher.hash_for(policy, subject.as_bytes()))
        }
    };
    // The seed's topology: client checks on the gate, identity checks on the
    // shared store, in one layer that requires shared quotas.
    let layer = RateLimitLayer::from_shared(Arc::clone(&limiter))
        .check(
            TieredPolicy::Gate(policy("client", 10)),
            keyed(Arc::clone(&hasher), true),
        )
        .check(
            TieredPolicy::Shared(policy("identity", 1)),
            keyed(Arc::clone(&hasher), false),
        )
        .require_shared()
        .expect("a local gate in front of a shared quota passes");
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(handler(Arc::clone(&calls), Arc::default()));
    let first = service
        .clone()
        .oneshot(request("net-t", "tess"))
        .await
        .expect("ok");
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        values(first.headers(), "ratelimit-policy"),
        [r#""auth.login/client";q=10;w=60, "auth.login/identity";q=1;w=60"#]
    );
    let denied = service.oneshot(request("net-t", "tess")).await.expect("ok");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // The shared denial refunded the gate: one request counted there.
    let client = policy("client", 10);
    let left = limiter
        .gate()
        .peek(&Check::new(
            &client,
            hasher.hash_for(
                &TieredPolicy::<_, FixedWindowPolicy>::Gate(client.clone()),
                b"net-t",
            ),
        ))
        .expect("peek")
        .remaining();
    assert_eq!(left, Some(9));
}
