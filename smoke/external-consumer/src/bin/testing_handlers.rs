//! README "Testing rate-limited handlers": the test, run as a program (its
//! body as written; `main` stands in for `#[tokio::test]`).

use std::{net::SocketAddr, time::Duration};

use axum::{body::Body, extract::connect_info::MockConnectInfo};
use http::{Request, StatusCode};
use runlimit_axum::PeerConnection;
use runlimit_core::KeyHasher;
use runlimit_external_consumer::axum_layer::app;
use runlimit_memory::{ManualClock, MemoryStore, MemoryStoreConfig};
use tower::ServiceExt;

async fn a_ninth_login_waits_for_the_next_window() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    let store = MemoryStore::new(MemoryStoreConfig::new(1_000)?).with_clock(clock.clone());
    let hasher = KeyHasher::new(b"a test secret of at least 32 bytes")?;
    let peer = SocketAddr::from(([192, 0, 2, 1], 40_000));
    let app = app(&hasher, store)?.layer(MockConnectInfo(PeerConnection::new(peer)));
    let login = || {
        Request::post("/login")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from("account=alice%40example.test&password=wrong"))
    };
    for _ in 0..8 {
        assert_eq!(app.clone().oneshot(login()?).await?.status(), StatusCode::OK);
    }
    let refused = app.clone().oneshot(login()?).await?;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "60");
    clock.advance(Duration::from_secs(60));
    assert_eq!(app.oneshot(login()?).await?.status(), StatusCode::OK);
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    a_ninth_login_waits_for_the_next_window().await?;
    println!("README testing section: refused at the limit, admitted once the manual clock passed the window");
    Ok(())
}
