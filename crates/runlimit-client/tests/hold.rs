//! The hold layer on Tokio's paused clock: requests wait exactly as long as
//! the server said, per partition, within the bound, and a dropped request
//! is never sent.

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use http::{HeaderValue, Request, Response, StatusCode};
use runlimit_client::{HoldLayer, HoldLayerError, IdempotentRequests, Partition};
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

/// What the fake server saw: each request's path and when it arrived, in
/// seconds since the test started.
type Seen = Arc<Mutex<Vec<(String, f64)>>>;

/// A fake API: a service the hold layer can wrap, clone and spawn.
trait FakeApi:
    tower::Service<Request<()>, Response = Response<()>, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}

impl<S> FakeApi for S where
    S: tower::Service<
            Request<()>,
            Response = Response<()>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// A server that answers a path ending in `/exhausted` with `headers` and
/// `status`, and anything else with 200 and no fields.
fn server(
    start: Instant,
    seen: &Seen,
    status: StatusCode,
    headers: &'static [(&'static str, &'static str)],
) -> impl FakeApi {
    let seen = Arc::clone(seen);
    service_fn(move |request: Request<()>| {
        let seen = Arc::clone(&seen);
        async move {
            let path = request.uri().to_string();
            seen.lock()
                .expect("lock")
                .push((path.clone(), start.elapsed().as_secs_f64()));
            let mut response = Response::new(());
            if path.ends_with("/exhausted") {
                *response.status_mut() = status;
                for (name, value) in headers {
                    response
                        .headers_mut()
                        .insert(*name, HeaderValue::from_static(value));
                }
            }
            Ok::<_, Infallible>(response)
        }
    })
}

fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).expect("request")
}

fn arrivals(seen: &Seen) -> Vec<(String, f64)> {
    seen.lock().expect("lock").clone()
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_holds_the_next_request_to_its_origin() {
    let (start, seen) = (Instant::now(), Seen::default());
    let client = HoldLayer::new(16).expect("valid").layer(server(
        start,
        &seen,
        StatusCode::TOO_MANY_REQUESTS,
        &[("retry-after", "2")],
    ));
    let refused = client
        .clone()
        .oneshot(get("https://api.example/exhausted"))
        .await
        .expect("sent");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another origin is not held; the same origin waits the two seconds.
    client
        .clone()
        .oneshot(get("https://other.example/a"))
        .await
        .expect("sent");
    client
        .clone()
        .oneshot(get("https://API.example/b"))
        .await
        .expect("sent");
    assert_eq!(
        arrivals(&seen),
        [
            ("https://api.example/exhausted".to_owned(), 0.0),
            ("https://other.example/a".to_owned(), 0.0),
            ("https://API.example/b".to_owned(), 2.0),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_ratelimit_member_or_legacy_quota_holds_until_its_reset() {
    for (headers, held) in [
        (
            &[("ratelimit", r#""api";r=0;t=5, "other";r=9;t=60"#)][..],
            5.0,
        ),
        (
            &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "3")][..],
            3.0,
        ),
        (
            &[("ratelimit-remaining", "0"), ("ratelimit-reset", "7")][..],
            7.0,
        ),
        (
            &[("grpc-status", "8"), ("grpc-retry-pushback-ms", "1500")][..],
            1.5,
        ),
    ] {
        let (start, seen) = (Instant::now(), Seen::default());
        let client =
            HoldLayer::new(16)
                .expect("valid")
                .layer(server(start, &seen, StatusCode::OK, headers));
        client
            .clone()
            .oneshot(get("https://api.example/exhausted"))
            .await
            .expect("sent");
        client
            .clone()
            .oneshot(get("https://api.example/next"))
            .await
            .expect("sent");
        let seen = arrivals(&seen);
        assert!(
            (seen[1].1 - held).abs() < 1e-6,
            "{headers:?}: sent at {}",
            seen[1].1
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_quota_with_units_left_holds_nothing() {
    let (start, seen) = (Instant::now(), Seen::default());
    let layer = HoldLayer::new(16).expect("valid");
    let client = layer.layer(server(
        start,
        &seen,
        StatusCode::OK,
        &[
            ("ratelimit", r#""api";r=3;t=5"#),
            ("x-ratelimit-remaining", "3"),
            ("x-ratelimit-reset", "5"),
            ("retry-after", "5"),
        ],
    ));
    for _ in 0..2 {
        client
            .clone()
            .oneshot(get("https://api.example/exhausted"))
            .await
            .expect("sent");
    }
    assert_eq!(arrivals(&seen)[1].1, 0.0);
    assert_eq!(layer.held_partitions(), 0);
}

#[tokio::test(start_paused = true)]
async fn partitions_beyond_the_bound_are_not_held_and_active_holds_stay() {
    let (start, seen) = (Instant::now(), Seen::default());
    let layer = HoldLayer::new(1).expect("valid");
    let client = layer.layer(server(
        start,
        &seen,
        StatusCode::TOO_MANY_REQUESTS,
        &[("retry-after", "10")],
    ));
    for origin in ["https://a.example", "https://b.example"] {
        client
            .clone()
            .oneshot(get(&format!("{origin}/exhausted")))
            .await
            .expect("sent");
    }
    assert_eq!(layer.held_partitions(), 1);
    client
        .clone()
        .oneshot(get("https://b.example/next"))
        .await
        .expect("sent");
    client
        .clone()
        .oneshot(get("https://a.example/next"))
        .await
        .expect("sent");
    let seen = arrivals(&seen);
    assert_eq!(seen[2], ("https://b.example/next".to_owned(), 0.0));
    assert_eq!(seen[3], ("https://a.example/next".to_owned(), 10.0));
    assert_eq!(
        HoldLayer::new(0).map(|_| ()),
        Err(HoldLayerError::NoPartitions)
    );
}

#[tokio::test(start_paused = true)]
async fn a_custom_partition_holds_per_token_and_a_dropped_request_is_never_sent() {
    let (start, seen) = (Instant::now(), Seen::default());
    let by_token = |request: &Request<()>| {
        request
            .headers()
            .get("authorization")
            .map(|token| Partition::of(token.as_bytes()))
    };
    let client = HoldLayer::new(16)
        .expect("valid")
        .partition_by(by_token)
        .layer(server(
            start,
            &seen,
            StatusCode::TOO_MANY_REQUESTS,
            &[("retry-after", "4")],
        ));
    let with_token = |path: &str, token: &'static str| {
        let mut request = get(path);
        request
            .headers_mut()
            .insert("authorization", HeaderValue::from_static(token));
        request
    };
    client
        .clone()
        .oneshot(with_token("https://api.example/exhausted", "token-1"))
        .await
        .expect("sent");
    // A held request dropped before its hold ends is never sent.
    let held = client
        .clone()
        .oneshot(with_token("https://api.example/dropped", "token-1"));
    assert!(
        tokio::time::timeout(Duration::from_secs(1), held)
            .await
            .is_err()
    );
    client
        .clone()
        .oneshot(with_token("https://api.example/other-token", "token-2"))
        .await
        .expect("sent");
    let seen = arrivals(&seen);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1], ("https://api.example/other-token".to_owned(), 1.0));
}

/// A server that refuses the first `refusals` requests with 429 and
/// `Retry-After: 2`, then answers 200.
fn refusing(start: Instant, seen: &Seen, refusals: usize) -> impl FakeApi {
    let seen = Arc::clone(seen);
    service_fn(move |request: Request<()>| {
        let seen = Arc::clone(&seen);
        async move {
            let mut seen = seen.lock().expect("lock");
            seen.push((request.method().to_string(), start.elapsed().as_secs_f64()));
            let mut response = Response::new(());
            if seen.len() <= refusals {
                *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                response
                    .headers_mut()
                    .insert("retry-after", HeaderValue::from_static("2"));
            }
            Ok::<_, Infallible>(response)
        }
    })
}

fn budget() -> tower::retry::budget::TpsBudget {
    tower::retry::budget::TpsBudget::new(Duration::from_secs(10), 10, 0.2)
}

#[tokio::test(start_paused = true)]
async fn a_refused_idempotent_request_is_sent_again_after_the_wait() {
    let (start, seen) = (Instant::now(), Seen::default());
    let client = HoldLayer::new(16)
        .expect("valid")
        .retry(IdempotentRequests, budget())
        .layer(refusing(start, &seen, 1));
    let response = client
        .oneshot(get("https://api.example/flaky"))
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::OK);
    let seen = arrivals(&seen);
    assert_eq!(seen.len(), 2);
    // After the two seconds, spread by up to a fifth of a second (a draw of
    // exactly zero has a chance of one in 2 × 10⁸).
    assert!(seen[1].1 > 2.0 && seen[1].1 <= 2.2, "{seen:?}");
}

#[tokio::test(start_paused = true)]
async fn requests_that_must_not_be_sent_twice_or_beyond_the_budget_are_not() {
    // A POST is not idempotent.
    let (start, seen) = (Instant::now(), Seen::default());
    let client = HoldLayer::new(16)
        .expect("valid")
        .retry(IdempotentRequests, budget())
        .layer(refusing(start, &seen, 1));
    let post = Request::post("https://api.example/flaky")
        .body(())
        .expect("request");
    let response = client.oneshot(post).await.expect("sent");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(arrivals(&seen).len(), 1);

    // A budget with nothing to withdraw.
    let (start, seen) = (Instant::now(), Seen::default());
    let empty = tower::retry::budget::TpsBudget::new(Duration::from_secs(1), 0, 0.0);
    let client = HoldLayer::new(16)
        .expect("valid")
        .retry(IdempotentRequests, empty)
        .layer(refusing(start, &seen, 1));
    let response = client
        .oneshot(get("https://api.example/flaky"))
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(arrivals(&seen).len(), 1);

    // At most two retries, then the refusal reaches the caller.
    let (start, seen) = (Instant::now(), Seen::default());
    let client = HoldLayer::new(16)
        .expect("valid")
        .retry(IdempotentRequests, budget())
        .layer(refusing(start, &seen, 10));
    let response = client
        .oneshot(get("https://api.example/flaky"))
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(arrivals(&seen).len(), 3);
}

/// A `Retry-After` no clock can add is held for `MAX_HOLD`, never a panic,
/// and not retried.
#[tokio::test(start_paused = true)]
async fn a_huge_retry_after_is_held_for_the_longest_hold_and_not_retried() {
    let (start, seen) = (Instant::now(), Seen::default());
    let client = HoldLayer::new(16)
        .expect("valid")
        .retry(IdempotentRequests, budget())
        .layer(server(
            start,
            &seen,
            StatusCode::TOO_MANY_REQUESTS,
            &[("retry-after", "99999999999999999999")],
        ));
    let refused = client
        .clone()
        .oneshot(get("https://api.example/exhausted"))
        .await
        .expect("sent");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    client
        .clone()
        .oneshot(get("https://api.example/next"))
        .await
        .expect("sent");
    let seen = arrivals(&seen);
    assert_eq!(seen.len(), 2, "not retried: {seen:?}");
    assert_eq!(seen[1].1, runlimit_client::MAX_HOLD.as_secs_f64());
}

/// When the partition cannot be held (the bound is full of active holds),
/// a retry still waits the whole `Retry-After`.
#[tokio::test(start_paused = true)]
async fn a_retry_whose_partition_is_not_held_still_waits() {
    let (start, seen) = (Instant::now(), Seen::default());
    let layer = HoldLayer::new(1)
        .expect("valid")
        .retry(IdempotentRequests, budget());
    let client = layer.layer(refusing(start, &seen, 2));
    // The first refusal holds a.example, filling the bound.
    let _ = client
        .clone()
        .oneshot(
            Request::post("https://a.example/x")
                .body(())
                .expect("request"),
        )
        .await
        .expect("sent");
    let response = client
        .clone()
        .oneshot(get("https://b.example/flaky"))
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::OK);
    let seen = arrivals(&seen);
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen[2].1 > 2.0, "retried after the wait: {seen:?}");
}

/// An inner service that must be polled ready before each call, as a
/// buffer is: each clone starts unready.
#[derive(Clone)]
struct Strict {
    ready: bool,
    inner: tower::util::BoxCloneSyncService<Request<()>, Response<()>, Infallible>,
}

impl tower::Service<Request<()>> for Strict {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response<()>, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        self.ready = true;
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<()>) -> Self::Future {
        assert!(self.ready, "called without poll_ready");
        self.ready = false;
        self.inner.call(request)
    }
}

fn strict<S>(inner: S) -> Strict
where
    S: tower::Service<Request<()>, Response = Response<()>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    Strict {
        ready: false,
        inner: tower::util::BoxCloneSyncService::new(inner),
    }
}

#[tokio::test(start_paused = true)]
async fn held_and_retried_requests_are_made_ready_before_they_are_sent() {
    let (start, seen) = (Instant::now(), Seen::default());
    let client = HoldLayer::new(16)
        .expect("valid")
        .retry(IdempotentRequests, budget())
        .layer(strict(refusing(start, &seen, 1)));
    // Refused, then retried after the wait; then one held behind a fresh
    // refusal of another path.
    let response = client
        .clone()
        .oneshot(get("https://api.example/flaky"))
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::OK);
    let client = HoldLayer::new(16).expect("valid").layer(strict(server(
        start,
        &seen,
        StatusCode::TOO_MANY_REQUESTS,
        &[("retry-after", "1")],
    )));
    client
        .clone()
        .oneshot(get("https://api.example/exhausted"))
        .await
        .expect("sent");
    client
        .clone()
        .oneshot(get("https://api.example/next"))
        .await
        .expect("sent");
    assert_eq!(arrivals(&seen).len(), 4);
}

/// A server allowing 20 requests per 1 s fixed window (anchored at a
/// window's first request), answering after 2 ms with the draft fields, and
/// 429 with `Retry-After` beyond the quota: what `RateLimitLayer` sends.
#[derive(Clone, Default)]
struct FixedWindowServer {
    state: Arc<Mutex<(Option<Instant>, u64)>>,
    /// Each request's arrival since `start`, and whether it was admitted.
    log: Arc<Mutex<Vec<(f64, bool)>>>,
}

impl FixedWindowServer {
    fn service(&self, start: Instant) -> impl FakeApi + Sync {
        let server = self.clone();
        service_fn(move |_request: Request<()>| {
            let server = server.clone();
            async move {
                let now = Instant::now();
                let (admitted, remaining, reset) = {
                    let mut state = server.state.lock().expect("lock");
                    if state
                        .0
                        .is_none_or(|began| now >= began + Duration::from_secs(1))
                    {
                        *state = (Some(now), 0);
                    }
                    let began = state.0.expect("a window");
                    let admitted = state.1 < 20;
                    if admitted {
                        state.1 += 1;
                    }
                    let reset = (began + Duration::from_secs(1)) - now;
                    (admitted, 20 - state.1, reset.as_millis().div_ceil(1_000))
                };
                server
                    .log
                    .lock()
                    .expect("lock")
                    .push((start.elapsed().as_secs_f64(), admitted));
                tokio::time::sleep(Duration::from_millis(2)).await;
                let mut response = Response::new(());
                let headers = response.headers_mut();
                headers.insert(
                    "ratelimit-policy",
                    HeaderValue::from_static(r#""api";q=20;w=1"#),
                );
                headers.insert(
                    "ratelimit",
                    HeaderValue::from_str(&format!(r#""api";r={remaining};t={reset}"#))
                        .expect("value"),
                );
                if !admitted {
                    headers.insert(
                        "retry-after",
                        HeaderValue::from_str(&reset.to_string()).expect("value"),
                    );
                    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                }
                Ok::<_, Infallible>(response)
            }
        })
    }
}

/// Fifty callers for ten seconds behind `layer` against a limit of 20 a
/// second: the server's log of (arrival, admitted).
async fn fifty_callers(layer: HoldLayer) -> Vec<(f64, bool)> {
    let start = Instant::now();
    let server = FixedWindowServer::default();
    let client = layer.layer(server.service(start));
    let callers: Vec<_> = (0..50)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                while start.elapsed() < Duration::from_secs(10) {
                    client
                        .clone()
                        .oneshot(get("https://api.example/items"))
                        .await
                        .expect("sent");
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("caller");
    }
    server.log.lock().expect("lock").clone()
}

/// Fifty callers behind a pacing layer against a limit of 20 a second for
/// ten seconds: the first request goes alone and teaches the pace, no
/// request is refused, and at least 95% of what the server allows gets
/// through.
#[tokio::test(start_paused = true)]
async fn fifty_paced_callers_are_never_refused_and_use_the_quota() {
    let log = fifty_callers(HoldLayer::new(16).expect("valid").pace().expect("valid")).await;
    let refused = log.iter().filter(|&&(_, admitted)| !admitted).count();
    let admitted = log
        .iter()
        .filter(|&&(at, admitted)| at < 10.0 && admitted)
        .count();
    assert_eq!(refused, 0, "refused");
    assert!(admitted >= 190, "{admitted} admitted of the 200 allowed");
}

/// Without pacing, the fields alone: the first request goes alone, then as
/// many as the answer says are left, then the partition waits for the
/// reset. At most one refusal per window.
#[tokio::test(start_paused = true)]
async fn fifty_callers_on_fields_alone_are_refused_at_most_once_a_window() {
    let log = fifty_callers(HoldLayer::new(16).expect("valid")).await;
    let mut refused_per_window = std::collections::BTreeMap::new();
    for &(at, admitted) in &log {
        if !admitted {
            // The server's windows are anchored at the first request, at 0.
            *refused_per_window
                .entry(Duration::from_secs_f64(at).as_secs())
                .or_insert(0) += 1;
        }
    }
    assert!(
        refused_per_window.values().all(|&refused| refused <= 1),
        "refusals per window: {refused_per_window:?}"
    );
    let admitted = log
        .iter()
        .filter(|&&(at, admitted)| at < 10.0 && admitted)
        .count();
    assert!(admitted >= 190, "{admitted} admitted of the 200 allowed");
}

/// What an observer was told.
#[derive(Clone, Default)]
struct Told {
    waits: Vec<Duration>,
    retries: usize,
    refused: Vec<StatusCode>,
}

/// Counts what the layer tells its observer.
#[derive(Clone, Default)]
struct Counted(Arc<Mutex<Told>>);

impl runlimit_client::HoldObserver for Counted {
    fn on_wait(&self, waited: Duration) {
        self.0.lock().expect("lock").waits.push(waited);
    }

    fn on_retry(&self) {
        self.0.lock().expect("lock").retries += 1;
    }

    fn on_refused(&self, status: StatusCode) {
        self.0.lock().expect("lock").refused.push(status);
    }
}

#[tokio::test(start_paused = true)]
async fn the_observer_is_told_of_waits_retries_and_refusals() {
    let (start, seen) = (Instant::now(), Seen::default());
    let counted = Counted::default();
    let client = HoldLayer::new(16)
        .expect("valid")
        .retry(IdempotentRequests, budget())
        .with_observer(counted.clone())
        .layer(refusing(start, &seen, 1));
    // Refused once, then sent again after the two seconds.
    client
        .clone()
        .oneshot(get("https://api.example/flaky"))
        .await
        .expect("sent");
    // A POST refused (the server refuses again after a fresh start) is returned.
    let client = HoldLayer::new(16)
        .expect("valid")
        .with_observer(counted.clone())
        .layer(refusing(start, &Seen::default(), 1));
    client
        .oneshot(
            Request::post("https://api.example/x")
                .body(())
                .expect("request"),
        )
        .await
        .expect("sent");
    let Told {
        waits,
        retries,
        refused,
    } = counted.0.lock().expect("lock").clone();
    assert_eq!(retries, 1);
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert!(waits[0] >= Duration::from_secs(2), "{waits:?}");
    assert_eq!(refused, [StatusCode::TOO_MANY_REQUESTS]);
}

/// A server that answers each request after `delay`, logging arrivals.
fn slow_server(start: Instant, seen: &Seen, delay: Duration) -> impl FakeApi {
    let seen = Arc::clone(seen);
    service_fn(move |request: Request<()>| {
        let seen = Arc::clone(&seen);
        async move {
            seen.lock()
                .expect("lock")
                .push((request.uri().to_string(), start.elapsed().as_secs_f64()));
            tokio::time::sleep(delay).await;
            Ok::<_, Infallible>(Response::new(()))
        }
    })
}

/// While nothing is known of a partition, its first request goes alone and
/// the others wait for its answer; a probe dropped unanswered lets the next
/// request probe; a probe slower than `MAX_PROBE_WAIT` (2 s) does not
/// serialize the rest.
#[tokio::test(start_paused = true)]
async fn the_first_request_to_a_partition_goes_alone() {
    let start = Instant::now();
    let seen = Seen::default();
    let client = HoldLayer::new(16).expect("valid").layer(slow_server(
        start,
        &seen,
        Duration::from_millis(100),
    ));
    let calls: Vec<_> = (0..5)
        .map(|_| tokio::spawn(client.clone().oneshot(get("https://a.example/x"))))
        .collect();
    for call in calls {
        call.await.expect("joined").expect("sent");
    }
    let at: Vec<f64> = arrivals(&seen).into_iter().map(|(_, at)| at).collect();
    assert_eq!(
        at,
        [0.0, 0.1, 0.1, 0.1, 0.1],
        "the rest after the probe's answer"
    );

    // A dropped probe: the next request probes in its place at once.
    let seen = Seen::default();
    let begun = Instant::now();
    let client = HoldLayer::new(16).expect("valid").layer(slow_server(
        begun,
        &seen,
        Duration::from_millis(100),
    ));
    let probe = tokio::spawn(client.clone().oneshot(get("https://b.example/probe")));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let waiting = tokio::spawn(client.clone().oneshot(get("https://b.example/next")));
    tokio::time::sleep(Duration::from_millis(10)).await;
    probe.abort();
    waiting.await.expect("joined").expect("sent");
    let paths: Vec<(String, f64)> = arrivals(&seen);
    assert_eq!(paths.len(), 2);
    assert_eq!(paths[1].0, "https://b.example/next");
    assert!(
        (paths[1].1 - 0.02).abs() < 1e-9,
        "sent when the probe was dropped (0.02 s), not {} s",
        paths[1].1
    );

    // A probe whose future is dropped before it is first polled: released
    // all the same, so the next request probes at once.
    let seen = Seen::default();
    let begun = Instant::now();
    let mut client = HoldLayer::new(16).expect("valid").layer(slow_server(
        begun,
        &seen,
        Duration::from_millis(100),
    ));
    tower::ServiceExt::<Request<()>>::ready(&mut client)
        .await
        .expect("ready");
    drop(tower::Service::call(
        &mut client,
        get("https://d.example/never"),
    ));
    client
        .clone()
        .oneshot(get("https://d.example/next"))
        .await
        .expect("sent");
    assert_eq!(
        arrivals(&seen),
        [("https://d.example/next".to_owned(), 0.0)]
    );

    // A probe that takes 10 s: the others go after 2 s.
    let seen = Seen::default();
    let begun = Instant::now();
    let client = HoldLayer::new(16).expect("valid").layer(slow_server(
        begun,
        &seen,
        Duration::from_secs(10),
    ));
    let calls: Vec<_> = (0..3)
        .map(|_| tokio::spawn(client.clone().oneshot(get("https://c.example/poll"))))
        .collect();
    for call in calls {
        call.await.expect("joined").expect("sent");
    }
    let at: Vec<f64> = arrivals(&seen).into_iter().map(|(_, at)| at).collect();
    assert_eq!(at, [0.0, 2.0, 2.0]);
}
