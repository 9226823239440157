//! A short Redis outage: while the server is down, checks fail definitely
//! not consumed; once it is back, the limiter admits again within seconds.
//! Runs its own `redis-server` on a free loopback port, never the shared one.

use std::{
    net::TcpListener,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use runlimit_core::{Check, FixedWindowPolicy, Limiter, PolicyId, ScopeId, SubjectKey};
use runlimit_redis::{CheckError, RedisConfig, RedisLimiter};

fn start(port: u16) -> Option<Child> {
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

async fn wait_until_up(url: &str) {
    for _ in 0..100 {
        if let Ok(client) = redis::Client::open(url)
            && let Ok(mut connection) = client.get_multiplexed_async_connection().await
            && redis::cmd("PING")
                .query_async::<String>(&mut connection)
                .await
                .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("redis-server on {url} did not start");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_and_restart_the_limiter_admits_again_within_seconds() {
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("free port")
        .local_addr()
        .expect("addr")
        .port();
    let Some(mut server) = start(port) else {
        if std::env::var("RUNLIMIT_REQUIRE_SERVICES").as_deref() == Ok("1") {
            panic!("redis-server is required (RUNLIMIT_REQUIRE_SERVICES=1) but cannot be started");
        }
        eprintln!("skipping: redis-server is not installed");
        return;
    };
    let url = format!("redis://127.0.0.1:{port}/");
    wait_until_up(&url).await;
    let config = RedisConfig::default()
        .with_max_reconnect_delay(Duration::from_millis(200))
        .expect("valid");
    let limiter = RedisLimiter::<_, FixedWindowPolicy>::connect(&url, config)
        .await
        .expect("connect");
    let policy = FixedWindowPolicy::new(
        PolicyId::new("outage").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1_000,
        Duration::from_secs(3_600),
    )
    .expect("valid");
    let check = Check::new(&policy, SubjectKey::from_digest([5; 32]));
    assert!(limiter.check(&check).await.expect("up").is_allowed());

    server.kill().expect("kill -9");
    server.wait().expect("reaped");
    // The check that finds the connection dead may have been written before
    // the server died, so it may be reported as possibly consumed. Every
    // later one is refused without being sent: definitely not consumed.
    let mut errors = Vec::new();
    for _ in 0..20 {
        errors.push(limiter.check(&check).await.expect_err("the server is down"));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for error in &errors[1..] {
        assert!(
            matches!(error, CheckError::Unreachable(_)) && !error.may_have_consumed_quota(),
            "a check while the server is known to be down: {error:?}"
        );
    }

    let mut server = start(port).expect("restart");
    let restarted = Instant::now();
    wait_until_up(&url).await;
    let recovered = loop {
        if let Ok(decision) = limiter.check(&check).await {
            break decision;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(5),
            "still failing {:?} after the restart",
            restarted.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The server kept nothing, so the quota starts afresh.
    assert_eq!(recovered.remaining(), Some(999));
    server.kill().ok();
    server.wait().ok();
}
