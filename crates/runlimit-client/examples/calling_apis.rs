//! Calling two rate-limited APIs through `HoldLayer`, twenty callers at once:
//!
//! * one limited by Runlimit's own `RateLimitLayer` (10 requests a second,
//!   advertised with the draft `RateLimit` and `RateLimit-Policy` fields),
//!   with pacing;
//! * one that answers like GitHub's REST API (`X-RateLimit-Limit`,
//!   `-Remaining`, `-Used` and `-Reset` in Unix epoch seconds; 403 with
//!   `X-RateLimit-Remaining: 0` once the window is spent), 6 requests per
//!   two-second window.
//!
//! Both run on loopback for three seconds. Without the layer most of those
//! requests are refused; with it none is, and the program fails if one is.
//!
//! ```text
//! cargo run -p runlimit-client --example calling_apis
//! ```

use std::{
    net::SocketAddr,
    process::ExitCode,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{Router, http::HeaderValue, response::IntoResponse, routing::get};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use runlimit_axum::{MissingMetadata, RateLimitLayer};
use runlimit_client::HoldLayer;
use runlimit_core::{FixedWindowPolicy, PolicyId, ScopeId, SubjectKey};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

/// An API behind our own layer: 10 requests a second for everyone together.
async fn our_api() -> Result<SocketAddr, Box<dyn std::error::Error>> {
    let policy = FixedWindowPolicy::new(
        PolicyId::new("api")?,
        ScopeId::new("everyone")?,
        10,
        Duration::from_secs(1),
    )?;
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::new(16)?));
    let everyone =
        |_: &http::request::Parts, _: &FixedWindowPolicy| -> Result<SubjectKey, MissingMetadata> {
            Ok(SubjectKey::from_digest([1; 32]))
        };
    let app = Router::new()
        .route("/items", get(|| async { "ok" }))
        .route_layer(RateLimitLayer::from_shared(store).check(policy, everyone));
    serve(app).await
}

/// An API that answers like GitHub's: windows of two seconds from their
/// first request, 6 requests each, and the reset as Unix epoch seconds
/// (rounded up), read against the response's `Date`.
async fn github_style_api() -> Result<SocketAddr, Box<dyn std::error::Error>> {
    const LIMIT: u64 = 6;
    const WINDOW: Duration = Duration::from_secs(2);
    // The window's end (since the epoch) and the requests it admitted.
    let used: Arc<Mutex<(Duration, u64)>> = Arc::default();
    let app = Router::new().route(
        "/repos",
        get(move || {
            let used = Arc::clone(&used);
            async move {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default();
                let (admitted, count, end) = {
                    let mut used = used
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if now >= used.0 {
                        *used = (now + WINDOW, 0);
                    }
                    let admitted = used.1 < LIMIT;
                    used.1 += u64::from(admitted);
                    (admitted, used.1, used.0)
                };
                let status = if admitted {
                    StatusCode::OK
                } else {
                    StatusCode::FORBIDDEN
                };
                let header = |value: u64| HeaderValue::from(value);
                let reset = end.as_secs() + u64::from(end.subsec_nanos() > 0);
                (
                    status,
                    [
                        ("x-ratelimit-limit", header(LIMIT)),
                        ("x-ratelimit-remaining", header(LIMIT - count)),
                        ("x-ratelimit-used", header(count)),
                        ("x-ratelimit-reset", header(reset)),
                    ],
                    "[]",
                )
                    .into_response()
            }
        }),
    );
    serve(app).await
}

async fn serve(app: Router) -> Result<SocketAddr, Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(address)
}

/// Twenty callers sending to `url` through `layer` for three seconds:
/// (admitted, refused).
async fn twenty_callers(layer: &HoldLayer, url: &str) -> (u64, u64) {
    let client = layer
        .clone()
        .layer(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());
    let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let end = Instant::now() + Duration::from_secs(3);
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let (client, counts, url) = (client.clone(), Arc::clone(&counts), url.to_owned());
            tokio::spawn(async move {
                loop {
                    let Ok(request) = Request::get(url.as_str()).body(Empty::new()) else {
                        return;
                    };
                    // A caller held past the end stops waiting.
                    let Ok(Ok(response)) =
                        tokio::time::timeout_at(end, client.clone().oneshot(request)).await
                    else {
                        return;
                    };
                    let status = response.status();
                    let _ = response.into_body().collect().await;
                    if Instant::now() > end {
                        return;
                    }
                    let counter = if status.is_success() {
                        &counts.0
                    } else {
                        &counts.1
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for caller in callers {
        let _ = caller.await;
    }
    (
        counts.0.load(Ordering::Relaxed),
        counts.1.load(Ordering::Relaxed),
    )
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let ours = our_api().await?;
    let github = github_style_api().await?;

    // One layer for every API a service calls: partitions are origins.
    let paced = HoldLayer::new(1_000)?.pace()?;
    let (admitted, refused) = twenty_callers(&paced, &format!("http://{ours}/items")).await;
    println!("our RateLimitLayer, 10/s, paced:        {admitted:>3} admitted, {refused} refused");
    let ours_refused = refused;

    let layer = HoldLayer::new(1_000)?;
    let (admitted, refused) = twenty_callers(&layer, &format!("http://{github}/repos")).await;
    println!("GitHub-style X-RateLimit-*, 6 per 2 s:  {admitted:>3} admitted, {refused} refused");
    Ok(if ours_refused + refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
