//! Operations as Redis functions: a server that lost the libraries (a
//! restart, `FUNCTION FLUSH`) gets them loaded again, and a user whose ACL
//! denies functions is served by the scripts. Each test has a
//! `redis-server` of its own, so its command counts and libraries are its
//! own.

mod common;

use std::{sync::Arc, time::Duration};

use redis::aio::MultiplexedConnection;
use runlimit_core::{Check, FixedWindowPolicy, Limiter, PolicyId, ScopeId, SubjectKey};
use runlimit_redis::{RedisConfig, RedisConnection, RedisLimiter};

fn key(n: u8) -> SubjectKey {
    SubjectKey::from_digest([n; 32])
}

fn policy() -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("functions").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(60),
    )
    .expect("valid")
}

/// The names of the Runlimit libraries the server holds.
async fn libraries(admin: &mut MultiplexedConnection) -> Vec<String> {
    let listed: Vec<Vec<redis::Value>> = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("runlimit_*")
        .query_async(admin)
        .await
        .expect("list");
    let mut names: Vec<String> = listed
        .iter()
        .filter_map(|library| match library.as_slice() {
            [_, redis::Value::BulkString(name), ..] => String::from_utf8(name.clone()).ok(),
            _ => None,
        })
        .collect();
    names.sort();
    names
}

/// Checks subjects `subjects` at once (so they share invocations), each
/// expected to be `allowed` or not.
async fn check_at_once(
    limiter: &Arc<RedisLimiter<RedisConnection>>,
    subjects: std::ops::Range<u8>,
    allowed: bool,
) {
    let mut checks = tokio::task::JoinSet::new();
    for n in subjects {
        let limiter = Arc::clone(limiter);
        checks.spawn(async move {
            let policy = policy();
            limiter
                .check(&Check::new(&policy, key(n)))
                .await
                .expect("decided")
                .is_allowed()
        });
    }
    while let Some(decided) = checks.join_next().await {
        assert_eq!(decided.expect("task"), allowed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushed_libraries_are_loaded_again() {
    let Some((_server, url)) = common::private_server().await else {
        return;
    };
    let mut admin = common::admin(&url).await;
    let limiter = Arc::new(
        RedisLimiter::<_, FixedWindowPolicy>::connect(&url, RedisConfig::default())
            .await
            .expect("connect"),
    );
    // A lone check and checks sharing invocations: two libraries.
    check_at_once(&limiter, 0..1, true).await;
    check_at_once(&limiter, 1..33, true).await;
    let loaded = libraries(&mut admin).await;
    assert_eq!(loaded.len(), 2, "{loaded:?}");
    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async::<()>(&mut admin)
        .await
        .expect("flush");
    // Decided exactly after the flush, through the same libraries.
    check_at_once(&limiter, 0..1, false).await;
    check_at_once(&limiter, 1..33, false).await;
    check_at_once(&limiter, 33..65, true).await;
    assert_eq!(libraries(&mut admin).await, loaded);
    let calls = common::calls(&mut admin).await;
    // Both loaded before the flush and again after it.
    assert!(
        calls.get("function|load").is_some_and(|&loads| loads >= 4),
        "{calls:?}"
    );
    assert_eq!(calls.get("evalsha"), None, "no script ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_functions_is_served_by_the_scripts() {
    let Some((_server, url)) = common::private_server().await else {
        return;
    };
    let mut admin = common::admin(&url).await;
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("scripts-only")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("+@all")
        .arg("-fcall")
        .arg("-function")
        .query_async::<()>(&mut admin)
        .await
        .expect("acl");
    let limiter = Arc::new(
        RedisLimiter::<_, FixedWindowPolicy>::connect(
            &url.replacen("://", "://scripts-only:secret@", 1),
            RedisConfig::default(),
        )
        .await
        .expect("connect"),
    );
    check_at_once(&limiter, 0..1, true).await;
    check_at_once(&limiter, 1..33, true).await;
    check_at_once(&limiter, 0..33, false).await;
    assert!(libraries(&mut admin).await.is_empty());
    let calls = common::calls(&mut admin).await;
    assert!(
        calls.get("evalsha").is_some_and(|&calls| calls > 2),
        "{calls:?}"
    );
}
