//! Rate-limited APIs of every field shape the client reads, and many
//! callers sending to one of them on the fields alone or paced: over
//! loopback TCP in real time, through `HoldLayer` in front of hyper-util's
//! client or `HoldMiddleware` in front of reqwest, or in process on Tokio's
//! paused clock, through `HoldLayer` in front of the server's own router.
//! Shared by the `field_shapes` tests and the bench of the same name.
//!
//! Each server allows [`LIMIT`] requests per one-second fixed window, keeps
//! the count itself and logs every request with the window it fell in, so
//! what is asserted is what the server saw. Windows are placed as the real
//! servers place them: from a window's first request (express-rate-limit,
//! GitHub, Laravel, Discord, Runlimit's own `RateLimitLayer`), or on whole
//! epoch seconds (Flask-Limiter, GitLab). A server reads the time from its
//! [`Clock`]: the system's over TCP (no paused clock can drive a TCP peer),
//! Tokio's in process, where a run of ten seconds takes milliseconds and
//! comes out the same every time.
#![allow(dead_code, unreachable_pub)]

use std::{
    collections::HashMap,
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::{HeaderValue, Response, StatusCode},
    middleware::{self, Next},
    routing::get,
};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::{client::legacy::Client as HyperClient, rt::TokioExecutor};
use runlimit_axum::{
    DefaultRejection, MissingMetadata, RateLimitContext, RateLimitLayer, Rejection, RejectionMapper,
};
use runlimit_client::{ByOrigin, HoldLayer, Partition, PartitionKey};
use runlimit_core::{FixedWindowPolicy, PolicyId, ScopeId, SubjectKey};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

/// Requests each server allows per window.
pub const LIMIT: u64 = 20;
/// Each server's window.
pub const WINDOW: Duration = Duration::from_secs(1);
/// The minute quota of [`Shape::TwoQuotas`]: spent in the third second.
pub const MINUTE_QUOTA: u64 = 50;

/// What a server sends, as the server it stands for sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Runlimit's own `RateLimitLayer`: draft-11 `RateLimit` and
    /// `RateLimit-Policy`, 429 with `Retry-After`.
    Ours,
    /// `RateLimitLayer` with a per-second and a per-minute policy: two
    /// members in each field.
    TwoQuotas,
    /// `RateLimitLayer` with a quota per token, two tokens behind one
    /// origin; the client partitions by token.
    PerToken,
    /// express-rate-limit's `draft-8`: `RateLimit: "20-in-1sec"; r=19; t=1`
    /// (spaces after `;`) and a policy with a partition key.
    Draft8,
    /// express-rate-limit's `draft-7`: `RateLimit: limit=20, remaining=19,
    /// reset=1` and `RateLimit-Policy: 20;w=1`.
    Draft7,
    /// express-rate-limit's `draft-6`: `RateLimit-Limit`, `-Remaining`,
    /// `-Reset` (delta-seconds) and `RateLimit-Policy: 20;w=1`.
    Draft6,
    /// express-rate-limit's legacy headers: `X-RateLimit-Reset` in epoch
    /// seconds rounded up, with `Date`.
    ExpressLegacy,
    /// GitHub's REST API: `X-RateLimit-Limit`, `-Remaining`, `-Used`,
    /// `-Reset` (epoch seconds), 403 once spent, no `Retry-After`.
    GitHub,
    /// `X-RateLimit-*` with a delta-seconds reset, 429 with `Retry-After`.
    XRateLimitDelta,
    /// Flask-Limiter: `X-RateLimit-Reset` at the window's end plus one
    /// second, truncated (`int(reset + 1)`), `Retry-After` truncated too.
    Flask,
    /// Laravel's `ThrottleRequests`: `X-RateLimit-Limit` and `-Remaining`
    /// only, until a 429 adds `Retry-After` (whole seconds, rounded down)
    /// and an epoch `X-RateLimit-Reset`.
    Laravel,
    /// GitLab: `RateLimit-Limit`, `-Observed`, `-Remaining`, `-Reset`
    /// (epoch), `-ResetTime` (an HTTP-date), 429 with `Retry-After`.
    GitLab,
    /// Discord: `X-RateLimit-Reset-After` in fractional seconds beside an
    /// epoch `X-RateLimit-Reset` with milliseconds, 429 with `Retry-After`.
    Discord,
    /// Nothing but `Retry-After` in seconds on a 429.
    RetryAfterSeconds,
    /// Nothing but `Retry-After` as an HTTP-date on a 429, with `Date`.
    RetryAfterDate,
    /// gRPC: `grpc-status: 8` (`RESOURCE_EXHAUSTED`) with
    /// `grpc-retry-pushback-ms` in the headers (Trailers-Only).
    GrpcPushback,
}

/// How a server places its windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    /// From the window's first request.
    FirstHit,
    /// On whole epoch seconds.
    Epoch,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Self; 16] = [
        Self::Ours,
        Self::TwoQuotas,
        Self::PerToken,
        Self::Draft8,
        Self::Draft7,
        Self::Draft6,
        Self::ExpressLegacy,
        Self::GitHub,
        Self::XRateLimitDelta,
        Self::Flask,
        Self::Laravel,
        Self::GitLab,
        Self::Discord,
        Self::RetryAfterSeconds,
        Self::RetryAfterDate,
        Self::GrpcPushback,
    ];

    /// The server it stands for.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ours => "RateLimitLayer (draft-11)",
            Self::TwoQuotas => "RateLimitLayer, per-second + per-minute",
            Self::PerToken => "RateLimitLayer, per token (2 tokens)",
            Self::Draft8 => "express-rate-limit draft-8",
            Self::Draft7 => "express-rate-limit draft-7",
            Self::Draft6 => "express-rate-limit draft-6",
            Self::ExpressLegacy => "express-rate-limit legacy",
            Self::GitHub => "GitHub",
            Self::XRateLimitDelta => "X-RateLimit-* (delta reset)",
            Self::Flask => "Flask-Limiter",
            Self::Laravel => "Laravel",
            Self::GitLab => "GitLab",
            Self::Discord => "Discord",
            Self::RetryAfterSeconds => "Retry-After (seconds) alone",
            Self::RetryAfterDate => "Retry-After (date) alone",
            Self::GrpcPushback => "gRPC pushback alone",
        }
    }

    fn anchor(self) -> Anchor {
        match self {
            Self::Flask | Self::GitLab | Self::RetryAfterDate => Anchor::Epoch,
            _ => Anchor::FirstHit,
        }
    }

    /// Whether the server reports a count: if not, the client learns only
    /// from its first refusal, and every request sent before that is part
    /// of its first window.
    fn counts(self) -> bool {
        !matches!(
            self,
            Self::RetryAfterSeconds | Self::RetryAfterDate | Self::GrpcPushback
        )
    }

    /// How many tokens (partitions) the callers use.
    fn tokens(self) -> u8 {
        if self == Self::PerToken { 2 } else { 1 }
    }

    /// What the server allows in `seconds`: [`LIMIT`] a second per token,
    /// and at most [`MINUTE_QUOTA`] in a minute for [`Shape::TwoQuotas`].
    pub fn allowed(self, seconds: u64) -> u64 {
        let per_second = LIMIT * seconds * u64::from(self.tokens());
        if self == Self::TwoQuotas {
            per_second.min(MINUTE_QUOTA)
        } else {
            per_second
        }
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// The token's partition (0 unless [`Shape::PerToken`]).
    key: u8,
    /// The end of the window it fell in, since the epoch.
    window_end: Duration,
    admitted: bool,
    /// Refused by the per-minute quota of [`Shape::TwoQuotas`].
    by_minute: bool,
    /// Issued before any caller received a refusal: of a server that
    /// reports no count, the client knew nothing when it went.
    unchecked: bool,
    at: Instant,
}

type Log = Arc<Mutex<Vec<Entry>>>;

/// Where a server reads the time.
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    /// The system's.
    System,
    /// Tokio's (paused in the in-process runs), from an epoch time.
    Tokio {
        /// The epoch time at `start`.
        epoch: SystemTime,
        start: Instant,
    },
}

impl Clock {
    /// Tokio's clock, from now, which it takes to be `epoch`.
    fn tokio(epoch: SystemTime) -> Self {
        Self::Tokio {
            epoch,
            start: Instant::now(),
        }
    }

    fn now(self) -> SystemTime {
        match self {
            Self::System => SystemTime::now(),
            Self::Tokio { epoch, start } => epoch + start.elapsed(),
        }
    }
}

/// Tokio's clock for Runlimit's memory store.
#[derive(Debug)]
struct StoreClock(Instant);

impl runlimit_memory::Clock for StoreClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

fn since_epoch(time: SystemTime) -> Duration {
    time.duration_since(UNIX_EPOCH).expect("after the epoch")
}

/// Whole seconds, rounded up.
fn ceil_secs(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000_000)).expect("fits")
}

fn header(value: impl ToString) -> HeaderValue {
    HeaderValue::from_str(&value.to_string()).expect("a header value")
}

/// `shape`'s server, reading `clock`, logging to `log`.
fn app(shape: Shape, clock: Clock, log: &Log) -> Router {
    match shape {
        Shape::Ours | Shape::TwoQuotas | Shape::PerToken => ours(shape, clock, log),
        _ => Router::new()
            .route("/items", get(written))
            .with_state(Arc::new(Written {
                shape,
                clock,
                windows: Mutex::default(),
                log: Arc::clone(log),
            })),
    }
}

/// Serves `shape` on a loopback port: the address and the server's log.
pub async fn serve(shape: Shape) -> (SocketAddr, Log) {
    let log = Log::default();
    let app = app(shape, Clock::System, &log);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, log)
}

/// The token a request carries: 0 or 1.
fn token(headers: &http::HeaderMap) -> u8 {
    u8::from(
        headers
            .get("authorization")
            .is_some_and(|token| token == "token-2"),
    )
}

/// A server written here for `shape`: its windows per token and its log.
struct Written {
    shape: Shape,
    clock: Clock,
    windows: Mutex<HashMap<u8, Window>>,
    log: Log,
}

/// A window: when it began and ends, and the requests it admitted.
#[derive(Debug, Clone, Copy)]
struct Window {
    began: SystemTime,
    end: SystemTime,
    admitted: u64,
    /// Every request of the window, admitted or not (GitLab's `Observed`).
    observed: u64,
}

/// What one request's answer is built from.
struct Answer {
    now: SystemTime,
    window: Window,
    admitted: bool,
}

impl Answer {
    fn remaining(&self) -> u64 {
        LIMIT - self.window.admitted
    }

    /// The time left in the window.
    fn left(&self) -> Duration {
        self.window.end.duration_since(self.now).unwrap_or_default()
    }

    fn date(&self) -> HeaderValue {
        header(httpdate::fmt_http_date(self.now))
    }
}

async fn written(State(server): State<Arc<Written>>, request: Request) -> Response<Body> {
    let key = token(request.headers());
    let unchecked = !request.headers().contains_key(AFTER_REFUSAL);
    let answer = {
        let mut windows = server.windows.lock().expect("lock");
        let now = server.clock.now();
        let window = windows.entry(key).or_insert(Window {
            began: UNIX_EPOCH,
            end: UNIX_EPOCH,
            admitted: 0,
            observed: 0,
        });
        if now >= window.end {
            let began = match server.shape.anchor() {
                Anchor::FirstHit => now,
                Anchor::Epoch => UNIX_EPOCH + Duration::from_secs(since_epoch(now).as_secs()),
            };
            *window = Window {
                began,
                end: began + WINDOW,
                admitted: 0,
                observed: 0,
            };
        }
        let admitted = window.admitted < LIMIT;
        window.admitted += u64::from(admitted);
        window.observed += 1;
        server.log.lock().expect("lock").push(Entry {
            key,
            window_end: since_epoch(window.end),
            admitted,
            by_minute: false,
            unchecked,
            at: Instant::now(),
        });
        Answer {
            now,
            window: *window,
            admitted,
        }
    };
    respond(server.shape, &answer)
}

/// The response `shape`'s server sends for `answer`.
fn respond(shape: Shape, answer: &Answer) -> Response<Body> {
    let mut response = Response::new(Body::from("ok"));
    let refused = !answer.admitted;
    if refused {
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    }
    let remaining = answer.remaining();
    let left = answer.left();
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: HeaderValue| {
        headers.insert(name, value);
    };
    let epoch_end = since_epoch(answer.window.end);
    match shape {
        Shape::Draft8 => {
            set(
                "ratelimit-policy",
                HeaderValue::from_static(r#""20-in-1sec"; q=20; w=1; pk=:ZTNiMGM0NDI5OGZj:"#),
            );
            set(
                "ratelimit",
                header(format!(
                    r#""20-in-1sec"; r={remaining}; t={}"#,
                    ceil_secs(left)
                )),
            );
        }
        Shape::Draft7 => {
            set("ratelimit-policy", HeaderValue::from_static("20;w=1"));
            set(
                "ratelimit",
                header(format!(
                    "limit={LIMIT}, remaining={remaining}, reset={}",
                    ceil_secs(left)
                )),
            );
        }
        Shape::Draft6 => {
            set("ratelimit-policy", HeaderValue::from_static("20;w=1"));
            set("ratelimit-limit", header(LIMIT));
            set("ratelimit-remaining", header(remaining));
            if ceil_secs(left) > 0 {
                set("ratelimit-reset", header(ceil_secs(left)));
            }
        }
        Shape::ExpressLegacy => {
            set("x-ratelimit-limit", header(LIMIT));
            set("x-ratelimit-remaining", header(remaining));
            set("date", answer.date());
            set("x-ratelimit-reset", header(ceil_secs(epoch_end)));
        }
        Shape::GitHub => {
            set("x-ratelimit-limit", header(LIMIT));
            set("x-ratelimit-remaining", header(remaining));
            set("x-ratelimit-used", header(answer.window.admitted));
            set("x-ratelimit-reset", header(ceil_secs(epoch_end)));
            set("x-ratelimit-resource", HeaderValue::from_static("core"));
            set("date", answer.date());
        }
        Shape::XRateLimitDelta => {
            set("x-ratelimit-limit", header(LIMIT));
            set("x-ratelimit-remaining", header(remaining));
            set("x-ratelimit-reset", header(ceil_secs(left)));
        }
        Shape::Flask => {
            // `int(reset + 1)`, and `Retry-After` as `int(reset_at - now)`.
            let reset_at = epoch_end.as_secs() + 1;
            set("x-ratelimit-limit", header(LIMIT));
            set("x-ratelimit-remaining", header(remaining));
            set("x-ratelimit-reset", header(reset_at));
            set("date", answer.date());
            if refused {
                let now = since_epoch(answer.now);
                set(
                    "retry-after",
                    header((Duration::from_secs(reset_at) - now).as_secs()),
                );
            }
        }
        Shape::Laravel => {
            set("x-ratelimit-limit", header(LIMIT));
            set("x-ratelimit-remaining", header(remaining));
            set("date", answer.date());
            if refused {
                // The timer is the window's first second plus the decay, in
                // whole seconds; the window itself ends a second after its
                // first request.
                let timer = since_epoch(answer.window.began).as_secs() + 1;
                let now = since_epoch(answer.now).as_secs();
                let retry_after = timer.saturating_sub(now);
                set("retry-after", header(retry_after));
                set("x-ratelimit-reset", header(now + retry_after));
            }
        }
        Shape::GitLab => {
            set("ratelimit-limit", header(LIMIT));
            set("ratelimit-observed", header(answer.window.observed));
            set(
                "ratelimit-remaining",
                header(LIMIT.saturating_sub(answer.window.observed)),
            );
            set("ratelimit-reset", header(epoch_end.as_secs()));
            set(
                "ratelimit-resettime",
                header(httpdate::fmt_http_date(answer.window.end)),
            );
            set("date", answer.date());
            if refused {
                set("retry-after", header(1));
            }
        }
        Shape::Discord => {
            let millis = |duration: Duration| {
                let millis = duration.as_nanos().div_ceil(1_000_000);
                format!("{}.{:03}", millis / 1_000, millis % 1_000)
            };
            set("x-ratelimit-limit", header(LIMIT));
            set("x-ratelimit-remaining", header(remaining));
            set("x-ratelimit-reset", header(millis(epoch_end)));
            set("x-ratelimit-reset-after", header(millis(left)));
            set("x-ratelimit-bucket", HeaderValue::from_static("abcd1234"));
            set("date", answer.date());
            if refused {
                set("retry-after", header(ceil_secs(left)));
                set("x-ratelimit-scope", HeaderValue::from_static("user"));
            }
        }
        Shape::RetryAfterSeconds => {
            if refused {
                set("retry-after", header(ceil_secs(left)));
            }
        }
        Shape::RetryAfterDate => {
            set("date", answer.date());
            if refused {
                set(
                    "retry-after",
                    header(httpdate::fmt_http_date(answer.window.end)),
                );
            }
        }
        Shape::GrpcPushback => {
            *response.status_mut() = StatusCode::OK;
            let headers = response.headers_mut();
            headers.insert("content-type", HeaderValue::from_static("application/grpc"));
            if refused {
                headers.insert("grpc-status", HeaderValue::from_static("8"));
                headers.insert("grpc-message", HeaderValue::from_static("quota exhausted"));
                headers.insert(
                    "grpc-retry-pushback-ms",
                    header(left.as_nanos().div_ceil(1_000_000)),
                );
            } else {
                headers.insert("grpc-status", HeaderValue::from_static("0"));
            }
        }
        Shape::Ours | Shape::TwoQuotas | Shape::PerToken => {
            unreachable!("served by RateLimitLayer")
        }
    }
    response
}

/// Where a `RateLimitLayer` decision's window ends, carried from the
/// handler or the rejection to the logging middleware.
#[derive(Debug, Clone, Copy)]
struct Decided {
    window_end: Duration,
    by_minute: bool,
}

/// Runlimit's own layer: a per-second policy (and a per-minute one for
/// [`Shape::TwoQuotas`]), for everyone or per token.
fn ours(shape: Shape, clock: Clock, log: &Log) -> Router {
    let policy = |id: &str, limit: u64, window: Duration| {
        FixedWindowPolicy::new(
            PolicyId::new(id).expect("valid"),
            ScopeId::new("caller").expect("valid"),
            limit,
            window,
        )
        .expect("valid")
    };
    let store = MemoryStore::new(MemoryStoreConfig::new(16).expect("valid"));
    let store = Arc::new(match clock {
        Clock::System => store,
        Clock::Tokio { start, .. } => store.with_clock(StoreClock(start)),
    });
    let by_token = |parts: &http::request::Parts,
                    _: &FixedWindowPolicy|
     -> Result<SubjectKey, MissingMetadata> {
        Ok(SubjectKey::from_digest([token(&parts.headers); 32]))
    };
    let mut layer =
        RateLimitLayer::from_shared(store).check(policy("per-second", LIMIT, WINDOW), by_token);
    if shape == Shape::TwoQuotas {
        layer = layer.check(
            policy("per-minute", MINUTE_QUOTA, Duration::from_secs(60)),
            by_token,
        );
    }
    let rejections = move |rejection: &Rejection<'_>| {
        let mut response: Response<Body> = DefaultRejection.respond(rejection);
        if let Rejection::QuotaExceeded { policy, denial, .. } = rejection {
            response.extensions_mut().insert(Decided {
                window_end: since_epoch(clock.now())
                    + denial.retry_after().expect("a quota denial says when"),
                by_minute: policy.as_str().starts_with("per-minute"),
            });
        }
        response
    };
    let log = Arc::clone(log);
    Router::new()
        .route(
            "/items",
            get(move |context: axum::Extension<RateLimitContext>| admitted(clock, context)),
        )
        .layer(layer.rejection_mapper(rejections))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            let log = Arc::clone(&log);
            async move {
                let key = token(request.headers());
                let response = next.run(request).await;
                let decided = *response
                    .extensions()
                    .get::<Decided>()
                    .expect("every answer says its window");
                log.lock().expect("lock").push(Entry {
                    key,
                    window_end: decided.window_end,
                    admitted: response.status().is_success(),
                    by_minute: decided.by_minute,
                    // A server that counts: the first window is its own.
                    unchecked: false,
                    at: Instant::now(),
                });
                response
            }
        }))
}

/// The handler behind `RateLimitLayer`: notes where its per-second window
/// ends.
async fn admitted(clock: Clock, context: axum::Extension<RateLimitContext>) -> Response<Body> {
    let per_second = &context.policies()[0];
    let mut response = Response::new(Body::from("ok"));
    response.extensions_mut().insert(Decided {
        window_end: since_epoch(clock.now())
            + per_second
                .decision()
                .reset_after()
                .expect("an admitted check says when"),
        by_minute: false,
    });
    response
}

/// Which client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// `HoldLayer` straight in front of the server's router, in process.
    InProcess,
    /// hyper-util's client behind `HoldLayer`.
    Hyper,
    /// reqwest behind `HoldMiddleware`.
    #[cfg(feature = "reqwest")]
    Reqwest,
}

impl Client {
    /// Every client this build has.
    pub const ALL: &[Self] = &[
        Self::Hyper,
        #[cfg(feature = "reqwest")]
        Self::Reqwest,
    ];
}

/// Whether the client paces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The fields alone.
    Fields,
    /// `.pace()` too.
    Paced,
}

/// Sends one request through the client, with the token given, marked as
/// issued after a caller received a refusal or not; the answer says whether
/// it was refused.
type Sender = Arc<dyn Fn(u8, bool) -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// Marks a request issued after a caller received a refusal.
const AFTER_REFUSAL: &str = "x-issued-after-refusal";

/// Whether a response refused its request (429, or gRPC's
/// `RESOURCE_EXHAUSTED`; GitHub's 403s come from a server that counts).
fn refused(status: StatusCode, headers: &http::HeaderMap) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || headers.get("grpc-status").is_some_and(|code| code == "8")
}

/// The partition of a request: its token.
fn partition_of_token(headers: &http::HeaderMap) -> Option<Partition> {
    Some(Partition::of(headers.get("authorization")?.as_bytes()))
}

fn token_value(token: u8) -> &'static str {
    if token == 1 { "token-2" } else { "token-1" }
}

/// `HoldLayer` in `mode`, partitioned by origin, or by token for
/// [`Shape::PerToken`].
fn hold_layer<B>(mode: Mode, shape: Shape) -> HoldLayer<impl PartitionKey<B>> {
    let layer = HoldLayer::new(16).expect("valid");
    let layer = match mode {
        Mode::Fields => layer,
        Mode::Paced => layer.pace().expect("valid"),
    };
    let per_token = shape == Shape::PerToken;
    layer.partition_by(move |request: &http::Request<B>| {
        if per_token {
            partition_of_token(request.headers())
        } else {
            ByOrigin.partition(request)
        }
    })
}

/// Sends through `service` (a client behind `HoldLayer`) to `url`, each
/// request's body from `body`.
fn through_layer<S, B, ResBody>(service: S, url: String, body: fn() -> B) -> Sender
where
    S: tower::Service<http::Request<B>, Response = http::Response<ResBody>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug,
    B: Send + 'static,
    ResBody: axum::body::HttpBody + Send,
    ResBody::Data: Send,
    ResBody::Error: std::fmt::Debug,
{
    Arc::new(move |token, after_refusal| {
        let mut request = http::Request::get(url.as_str())
            .header("authorization", token_value(token))
            .body(body())
            .expect("request");
        if after_refusal {
            request
                .headers_mut()
                .insert(AFTER_REFUSAL, HeaderValue::from_static("1"));
        }
        let service = service.clone();
        Box::pin(async move {
            let response = service.oneshot(request).await.expect("sent");
            let refused = refused(response.status(), response.headers());
            response.into_body().collect().await.expect("body");
            refused
        })
    })
}

/// `client` in `mode`, sending to `address` (partitioned by token for
/// [`Shape::PerToken`]).
fn sender(client: Client, mode: Mode, shape: Shape, address: SocketAddr) -> Sender {
    let url = format!("http://{address}/items");
    let per_token = shape == Shape::PerToken;
    match client {
        Client::InProcess => unreachable!("an in-process run calls the router"),
        Client::Hyper => through_layer(
            hold_layer(mode, shape)
                .layer(HyperClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>()),
            url,
            Empty::new,
        ),
        #[cfg(feature = "reqwest")]
        Client::Reqwest => {
            let middleware = runlimit_client::HoldMiddleware::new(16).expect("valid");
            let middleware = match mode {
                Mode::Fields => middleware,
                Mode::Paced => middleware.pace().expect("valid"),
            };
            let middleware = if per_token {
                middleware.partition_by(|request: &reqwest::Request| {
                    partition_of_token(request.headers())
                })
            } else {
                middleware
            };
            let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                .with(middleware)
                .build();
            Arc::new(move |token, after_refusal| {
                let mut request = client
                    .get(url.as_str())
                    .header("authorization", token_value(token));
                if after_refusal {
                    request = request.header(AFTER_REFUSAL, "1");
                }
                Box::pin(async move {
                    let response = request.send().await.expect("sent");
                    let refused = refused(response.status(), response.headers());
                    response.bytes().await.expect("body");
                    refused
                })
            })
        }
    }
}

/// What one run measured, from the server's log.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub shape: Shape,
    pub client: Client,
    pub mode: Mode,
    /// Requests admitted within the run.
    pub admitted: u64,
    /// What the server allows in the run.
    pub allowed: u64,
    /// Refusals in each window after each token's first.
    pub refused_per_window: Vec<u64>,
    /// Requests admitted after each token's first window.
    pub admitted_after_first: u64,
    /// What the server allows in the whole windows from the start of each
    /// token's second window to the end of the run.
    pub allowed_after_first: u64,
    /// Each token's windows, as "admitted/refused", the first ones (where
    /// the client learns) in brackets.
    pub windows: String,
    /// Refusals by the per-minute quota of [`Shape::TwoQuotas`].
    pub refused_by_minute: u64,
}

impl Outcome {
    /// The most refusals in one window after the first.
    pub fn most_refused_in_a_window(&self) -> u64 {
        self.refused_per_window.iter().copied().max().unwrap_or(0)
    }

    /// The refusals after each token's first window.
    pub fn refused_after_first(&self) -> u64 {
        self.refused_per_window.iter().sum::<u64>() + self.refused_by_minute
    }

    /// At most one refusal per window after the first, none by the minute
    /// quota, and at least 90% of what the server allowed admitted.
    pub fn holds(&self) -> bool {
        self.refused_at_most_once_a_window() && self.admitted * 10 >= self.allowed * 9
    }

    /// The same after the first window: at most one refusal per window, and
    /// at least 90% of what the server allowed from the second window on
    /// admitted. For short runs, where what the client pays to learn a
    /// server (its first window; for a server that reports no count, its
    /// refusals' holds too) is a large share of the whole.
    pub fn holds_after_the_first_window(&self) -> bool {
        self.refused_at_most_once_a_window()
            && self.admitted_after_first * 10 >= self.allowed_after_first * 9
    }

    fn refused_at_most_once_a_window(&self) -> bool {
        self.most_refused_in_a_window() <= 1 && self.refused_by_minute == 0
    }
}

/// `callers` callers sending through `client` in `mode` to a server of
/// `shape` for `seconds`: what the server saw.
pub async fn run(shape: Shape, client: Client, mode: Mode, callers: u8, seconds: u64) -> Outcome {
    let (address, log) = serve(shape).await;
    let send = sender(client, mode, shape, address);
    let end_epoch = since_epoch(SystemTime::now()) + Duration::from_secs(seconds);
    let end = drive(send, shape, callers, seconds).await;
    let log = log.lock().expect("lock").clone();
    outcome(shape, client, mode, seconds, &log, (end, end_epoch))
}

/// `callers` callers sending through `send` for `seconds`, each with its
/// token, marking what they issue once one has received a refusal: when
/// they stopped.
async fn drive(send: Sender, shape: Shape, callers: u8, seconds: u64) -> Instant {
    let end = Instant::now() + Duration::from_secs(seconds);
    let refused = Refused::default();
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let (send, refused) = (Arc::clone(&send), refused.clone());
            let token = caller % shape.tokens();
            tokio::spawn(async move {
                // A caller still held at the end gives up.
                while let Ok(answer) =
                    tokio::time::timeout_at(end, send(token, refused.yet())).await
                {
                    refused.note(answer);
                    if Instant::now() >= end {
                        return;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("caller");
    }
    end
}

/// Whether a caller has received a refusal.
#[derive(Debug, Clone, Default)]
struct Refused(Arc<AtomicBool>);

impl Refused {
    fn note(&self, refused: bool) {
        if refused {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    fn yet(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What the server's `log` says of a run that ended at `end` (`end_epoch`
/// on the server's clock).
fn outcome(
    shape: Shape,
    client: Client,
    mode: Mode,
    seconds: u64,
    log: &[Entry],
    (end, end_epoch): (Instant, Duration),
) -> Outcome {
    let within: Vec<Entry> = log.iter().copied().filter(|entry| entry.at < end).collect();
    let mut refused_per_window = Vec::new();
    let (mut admitted_after_first, mut allowed_after_first, mut admitted_in_first) = (0, 0, 0);
    let mut shown = String::new();
    for key in 0..shape.tokens() {
        // Windows by their ends (consecutive windows end at least a second
        // apart; one window's entries within microseconds).
        let mut entries: Vec<Entry> = within
            .iter()
            .copied()
            .filter(|entry| entry.key == key && !entry.by_minute)
            .collect();
        entries.sort_by_key(|entry| entry.window_end);
        // (end, admitted, refused, whether a request of it came before the
        // client learned anything) of each window.
        let mut windows: Vec<(Duration, u64, u64, bool)> = Vec::new();
        for entry in entries {
            match windows.last_mut() {
                Some((last, ..)) if entry.window_end - *last < Duration::from_millis(100) => {}
                _ => windows.push((entry.window_end, 0, 0, false)),
            }
            let window = windows.last_mut().expect("pushed");
            window.1 += u64::from(entry.admitted);
            window.2 += u64::from(!entry.admitted);
            window.3 |= !shape.counts() && entry.unchecked;
        }
        // The client's first window is where it learns: up to the first
        // window the server filled (a probe sent just before an epoch
        // second may leave one of its own before it), and for a server that
        // reports no count, every window a request issued before the first
        // refusal reached (they go unchecked, and may span two windows
        // aligned to the epoch).
        let filled = windows
            .iter()
            .position(|&(_, admitted, ..)| admitted == LIMIT)
            .unwrap_or(0);
        let unchecked = windows
            .iter()
            .rposition(|&(.., unchecked)| unchecked)
            .unwrap_or(0);
        let first = filled.max(unchecked);
        refused_per_window.extend(
            windows
                .iter()
                .skip(first + 1)
                .map(|&(_, _, refused, _)| refused),
        );
        admitted_in_first += windows
            .iter()
            .take(first + 1)
            .map(|&(_, admitted, ..)| admitted)
            .sum::<u64>();
        admitted_after_first += windows
            .iter()
            .skip(first + 1)
            .map(|&(_, admitted, ..)| admitted)
            .sum::<u64>();
        if let Some(&(second_end, ..)) = windows.get(first + 1) {
            let from_second = end_epoch.saturating_sub(second_end - WINDOW);
            // Whole windows: one the run ends in allows its quota at any
            // moment, which a client may not have reached.
            let windows = from_second.as_millis() / WINDOW.as_millis();
            allowed_after_first += LIMIT * u64::try_from(windows).expect("a few seconds' worth");
        }
        for (index, &(_, admitted, refused, _)) in windows.iter().enumerate() {
            let window = format!("{admitted}/{refused}");
            shown.push_str(&if index <= first {
                format!("[{window}] ")
            } else {
                format!("{window} ")
            });
        }
        shown.push_str("; ");
    }
    Outcome {
        shape,
        client,
        mode,
        admitted: within.iter().filter(|entry| entry.admitted).count() as u64,
        allowed: shape.allowed(seconds),
        refused_per_window,
        admitted_after_first,
        allowed_after_first: if shape == Shape::TwoQuotas {
            allowed_after_first.min(MINUTE_QUOTA.saturating_sub(admitted_in_first))
        } else {
            allowed_after_first
        },
        windows: shown.trim_end_matches("; ").trim_end().to_owned(),
        refused_by_minute: within.iter().filter(|entry| entry.by_minute).count() as u64,
    }
}

/// `callers` callers sending through `HoldLayer` in `mode` straight into
/// `shape`'s router, each answer a millisecond after its request, for
/// `seconds` of Tokio's clock starting `phase` into an epoch second: what
/// the server saw. Run it on a paused clock.
pub async fn run_in_process(
    shape: Shape,
    mode: Mode,
    phase: Duration,
    callers: u8,
    seconds: u64,
) -> Outcome {
    let log = Log::default();
    let epoch = UNIX_EPOCH + Duration::from_secs(1_767_225_600) + phase;
    let end_epoch = since_epoch(epoch) + Duration::from_secs(seconds);
    let router = app(shape, Clock::tokio(epoch), &log).layer(middleware::from_fn(
        |request: Request, next: Next| async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            next.run(request).await
        },
    ));
    let send = through_layer(
        hold_layer(mode, shape).layer(router),
        "http://api.example/items".to_owned(),
        Body::empty,
    );
    let end = drive(send, shape, callers, seconds).await;
    let log = log.lock().expect("lock").clone();
    outcome(
        shape,
        Client::InProcess,
        mode,
        seconds,
        &log,
        (end, end_epoch),
    )
}

/// Every shape through each of `clients` in each of `modes`, all at once on
/// their own ports: each outcome, in order.
pub async fn run_all(
    clients: &[Client],
    modes: &[Mode],
    callers: u8,
    seconds: u64,
) -> Vec<Outcome> {
    let mut runs = Vec::new();
    for &client in clients {
        for &mode in modes {
            for shape in Shape::ALL {
                runs.push(tokio::spawn(run(shape, client, mode, callers, seconds)));
            }
        }
    }
    let mut outcomes = Vec::new();
    for run in runs {
        outcomes.push(run.await.expect("run"));
    }
    outcomes
}

/// `outcomes` as a Markdown table.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut table = String::from(
        "| server | client | mode | most refused in a window after the first | refused after the first window | admitted / allowed | after the first window | windows (admitted/refused) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for outcome in outcomes {
        table.push_str(&format!(
            "| {} | {:?} | {:?} | {} | {} | {} / {} | {} / {} | {} |\n",
            outcome.shape.name(),
            outcome.client,
            outcome.mode,
            outcome.most_refused_in_a_window(),
            outcome.refused_after_first(),
            outcome.admitted,
            outcome.allowed,
            outcome.admitted_after_first,
            outcome.allowed_after_first,
            outcome.windows,
        ));
    }
    table
}
