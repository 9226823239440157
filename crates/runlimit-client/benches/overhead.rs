//! The hold layer's socket-free overhead per request: a client stack that
//! answers at once (200 with the draft `RateLimit` and `RateLimit-Policy`
//! fields, quota left, so nothing is held) called through
//! `tower::ServiceExt::oneshot`, bare and behind `HoldLayer`, in alternating
//! rounds of 200,000 requests each; the median over nine rounds of the time
//! per request the layer adds.
//!
//! Run with `cargo bench -p runlimit-client --bench overhead` (`ROUNDS=N`).
#![allow(missing_docs, clippy::cast_precision_loss)]

use std::{convert::Infallible, hint::black_box, time::Instant};

use http::{HeaderValue, Request, Response};
use runlimit_client::HoldLayer;
use tower::{Layer, Service, ServiceExt, service_fn};

const CALLS: u32 = 200_000;

fn answer()
-> impl Service<Request<()>, Response = Response<()>, Error = Infallible, Future = impl Send>
+ Clone
+ Send
+ 'static {
    service_fn(|_request: Request<()>| async {
        let mut response = Response::new(());
        let headers = response.headers_mut();
        headers.insert(
            "ratelimit-policy",
            HeaderValue::from_static(r#""api";q=5000;w=3600"#),
        );
        headers.insert(
            "ratelimit",
            HeaderValue::from_static(r#""api";r=4999;t=3600"#),
        );
        Ok::<_, Infallible>(response)
    })
}

/// Nanoseconds per request of `CALLS` requests through `client`.
fn per_request<S>(runtime: &tokio::runtime::Runtime, client: &S) -> f64
where
    S: Service<Request<()>, Response = Response<()>, Error = Infallible> + Clone,
{
    runtime.block_on(async {
        let started = Instant::now();
        for _ in 0..CALLS {
            let request = Request::get("https://api.example/v1/items")
                .body(())
                .expect("request");
            let response = client.clone().oneshot(request).await.expect("answered");
            black_box(response);
        }
        started.elapsed().as_nanos() as f64 / f64::from(CALLS)
    })
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(9);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let bare = answer();
    let held = HoldLayer::new(10_000).expect("valid").layer(answer());
    let mut overheads = Vec::new();
    for round in 0..rounds {
        let (bare_ns, held_ns) = if round % 2 == 0 {
            let bare_ns = per_request(&runtime, &bare);
            (bare_ns, per_request(&runtime, &held))
        } else {
            let held_ns = per_request(&runtime, &held);
            (per_request(&runtime, &bare), held_ns)
        };
        println!("round {round}: bare {bare_ns:.0} ns, behind HoldLayer {held_ns:.0} ns");
        overheads.push(held_ns - bare_ns);
    }
    overheads.sort_by(f64::total_cmp);
    println!(
        "HoldLayer's overhead per request: median {:.0} ns ({:.0}–{:.0}) over {rounds} rounds",
        overheads[overheads.len() / 2],
        overheads[0],
        overheads[overheads.len() - 1]
    );
}
