//! `HoldMiddleware` in front of a real reqwest client, against an axum
//! server limited by Runlimit's own `RateLimitLayer`, over loopback TCP.
#![cfg(feature = "reqwest")]

use std::time::Duration;

use runlimit_client::HoldMiddleware;

mod support;

/// The third response says the window is spent (`r=0`): the fourth request
/// waits for the next window instead of being refused, and so on, so no
/// request of the seven is refused, held or paced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_wait_for_the_next_window_instead_of_being_refused() {
    for paced in [false, true] {
        let address = support::serve(3, Duration::from_secs(2)).await;
        let middleware = HoldMiddleware::new(16).expect("valid");
        let middleware = if paced {
            middleware.pace().expect("valid")
        } else {
            middleware
        };
        let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
            .with(middleware)
            .build();
        for request in 1..=7 {
            let response = client
                .get(format!("http://{address}/items"))
                .send()
                .await
                .expect("sent");
            assert_eq!(response.status(), 200, "request {request}, paced {paced}");
        }
    }

    // Without the middleware, the fourth request of a window is refused.
    let address = support::serve(3, Duration::from_secs(2)).await;
    let bare = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let response = bare
            .get(format!("http://{address}/items"))
            .send()
            .await
            .expect("sent");
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
}

/// A refused idempotent request is sent again after the `Retry-After` and
/// succeeds, with a retry budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_get_is_sent_again_after_the_wait() {
    let address = support::serve(3, Duration::from_secs(2)).await;
    // Spend the window without the middleware, so its first request is
    // refused.
    let bare = reqwest::Client::new();
    for _ in 0..3 {
        bare.get(format!("http://{address}/items"))
            .send()
            .await
            .expect("sent");
    }
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(HoldMiddleware::new(16).expect("valid").retry_idempotent(
            tower::retry::budget::TpsBudget::new(Duration::from_secs(10), 10, 0.2),
        ))
        .build();
    let response = client
        .get(format!("http://{address}/items"))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 200);
}
