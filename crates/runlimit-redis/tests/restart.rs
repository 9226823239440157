//! A Redis restart during load: classified errors, recovery, and never more
//! admissions than the limit. Runs its own `redis-server` (with an fsync-always
//! append-only file, so counters survive the restart).

use std::{
    net::TcpListener,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use runlimit_core::{Check, FixedWindowPolicy, Limiter, PolicyId, ScopeId, SubjectKey};
use runlimit_redis::{RedisConfig, RedisLimiter};

fn start(port: u16, dir: &std::path::Path) -> Option<Child> {
    Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "yes", "--appendfsync", "always"])
        .arg("--dir")
        .arg(dir)
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
async fn a_restart_during_load_never_admits_more_than_the_limit() {
    restart_during_load("plain", false).await;
}

/// The same restart with a lease in front of the connection: grants fail
/// like checks, and no unit is admitted that Redis did not count first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_under_leases_never_admits_more_than_the_limit() {
    restart_during_load("leased", true).await;
}

/// Four tasks check one key (limit 50) while the server is killed and
/// restarted with its append-only file.
async fn restart_during_load(name: &str, leased: bool) {
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("free port")
        .local_addr()
        .expect("addr")
        .port();
    let dir = std::env::temp_dir().join(format!(
        "runlimit-redis-restart-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let Some(mut server) = start(port, &dir) else {
        if std::env::var("RUNLIMIT_REQUIRE_SERVICES").as_deref() == Ok("1") {
            panic!("redis-server is required (RUNLIMIT_REQUIRE_SERVICES=1) but cannot be started");
        }
        eprintln!("skipping: redis-server is not installed");
        return;
    };
    let url = format!("redis://127.0.0.1:{port}/");
    wait_until_up(&url).await;
    let client = redis::Client::open(url.as_str()).expect("url");
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Duration::from_millis(200))
        .set_response_timeout(Duration::from_millis(500));
    let connection = ConnectionManager::new_with_config(client, manager_config)
        .await
        .expect("connect");
    let shared = RedisLimiter::<_, FixedWindowPolicy>::new(
        connection,
        RedisConfig::default()
            .with_operation_timeout(Duration::from_millis(500))
            .expect("valid"),
    );
    let outcome = if leased {
        let config = runlimit_memory::LeaseConfig::new(64)
            .and_then(|config| config.with_max_grant(8))
            .and_then(|config| config.with_remaining_share(100))
            .expect("valid");
        let limiter = Arc::new(runlimit_memory::Leased::new(shared, config));
        let outcome = check_across_a_restart(&limiter, &mut server, port, &dir, &url).await;
        assert!(
            limiter.stats().local_hits > 0,
            "no check was admitted locally"
        );
        outcome
    } else {
        check_across_a_restart(&Arc::new(shared), &mut server, port, &dir, &url).await
    };
    let (admitted, errors) = outcome;
    assert!(errors > 0, "the restart was observed as errors");
    assert!(admitted <= 50, "admitted {admitted}");
    server.kill().ok();
    server.wait().ok();
    std::fs::remove_dir_all(&dir).ok();
}

/// Checks from four tasks while the server is killed and restarted in place
/// of `server`; returns the admissions seen (the recovered check's
/// included) and the errors.
async fn check_across_a_restart<L>(
    limiter: &Arc<L>,
    server: &mut Child,
    port: u16,
    dir: &std::path::Path,
    url: &str,
) -> (usize, usize)
where
    L: Limiter<Policy = FixedWindowPolicy> + 'static,
    L::Error: runlimit_core::MayHaveConsumed,
{
    use runlimit_core::MayHaveConsumed as _;

    let policy = Arc::new(
        FixedWindowPolicy::new(
            PolicyId::new("restart").expect("valid"),
            ScopeId::new("client").expect("valid"),
            50,
            Duration::from_secs(3_600),
        )
        .expect("valid"),
    );
    let admitted = Arc::new(AtomicUsize::new(0));
    let possibly = Arc::new(AtomicUsize::new(0));
    let definitely_not = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (limiter, policy) = (Arc::clone(limiter), Arc::clone(&policy));
        let (admitted, possibly, definitely_not) = (
            Arc::clone(&admitted),
            Arc::clone(&possibly),
            Arc::clone(&definitely_not),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..60 {
                match limiter
                    .check(&Check::new(&*policy, SubjectKey::from_digest([3; 32])))
                    .await
                {
                    Ok(decision) if decision.is_allowed() => {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(error) if error.may_have_consumed_quota() => {
                        possibly.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(_) => {
                        definitely_not.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(60)).await;
    server.kill().expect("kill");
    server.wait().expect("reaped");
    tokio::time::sleep(Duration::from_millis(150)).await;
    *server = start(port, dir).expect("restart");
    wait_until_up(url).await;
    for task in tasks {
        task.await.expect("task");
    }
    // Recovered: the limiter answers again after the restart.
    let after = limiter
        .check(&Check::new(&*policy, SubjectKey::from_digest([3; 32])))
        .await
        .expect("recovered");
    let admitted = admitted.load(Ordering::SeqCst) + usize::from(after.is_allowed());
    let errors = possibly.load(Ordering::SeqCst) + definitely_not.load(Ordering::SeqCst);
    (admitted, errors)
}
