//! Fifty callers behind `HoldLayer` over hyper-util's client, against an
//! axum API limited to 20 requests a second by Runlimit's own
//! `RateLimitLayer`, over loopback TCP, for ten seconds of real time.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use runlimit_client::HoldLayer;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

mod support;

/// (admitted, refused) of fifty callers sending through `layer` for ten
/// seconds, counting the requests answered within them.
async fn fifty_callers(layer: HoldLayer) -> (u64, u64) {
    let address = support::serve(20, Duration::from_secs(1)).await;
    let client = layer.layer(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());
    let (admitted, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let end = start + Duration::from_secs(10);
    let callers: Vec<_> = (0..50)
        .map(|_| {
            let client = client.clone();
            let (admitted, refused) = (Arc::clone(&admitted), Arc::clone(&refused));
            tokio::spawn(async move {
                loop {
                    let request = Request::get(format!("http://{address}/items"))
                        .body(Empty::new())
                        .expect("request");
                    // A caller still held at the end gives up: its request
                    // would be answered after the ten seconds.
                    let Ok(response) =
                        tokio::time::timeout_at(end, client.clone().oneshot(request)).await
                    else {
                        return;
                    };
                    let response = response.expect("sent");
                    let status = response.status();
                    response.into_body().collect().await.expect("body");
                    if Instant::now() > end {
                        return;
                    }
                    match status {
                        StatusCode::OK => admitted.fetch_add(1, Ordering::Relaxed),
                        StatusCode::TOO_MANY_REQUESTS => refused.fetch_add(1, Ordering::Relaxed),
                        other => panic!("unexpected {other}"),
                    };
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("caller");
    }
    (
        admitted.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    )
}

/// Paced to the advertised policy: never refused, and at least 95% of the
/// 200 requests the server allows in ten seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_paced_callers_over_tcp_are_never_refused() {
    let (admitted, refused) =
        fifty_callers(HoldLayer::new(16).expect("valid").pace().expect("valid")).await;
    assert_eq!(refused, 0, "{admitted} admitted");
    assert!(admitted >= 190, "{admitted} admitted of the 200 allowed");
}

/// On the fields alone (no pacing): at most one refusal per window (ten
/// windows), and the quota used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_callers_over_tcp_on_fields_alone_are_refused_at_most_once_a_window() {
    let (admitted, refused) = fifty_callers(HoldLayer::new(16).expect("valid")).await;
    assert!(
        refused <= 10,
        "{refused} refused in ten windows, {admitted} admitted"
    );
    assert!(admitted >= 190, "{admitted} admitted of the 200 allowed");
}
