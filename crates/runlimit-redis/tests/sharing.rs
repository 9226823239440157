//! One connection for every policy type ([`RedisLimiter::for_policy`]), and
//! constructors whose policy type follows from the checks: the limiters
//! here are built without naming a policy type, so this file compiles only
//! while that inference works.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use redis::{Cmd, Pipeline, RedisFuture, Value, aio::ConnectionLike};
use runlimit_core::{
    AdmissionObservation, Check, FixedWindowPolicy, GcraPolicy, Limiter, Observer, PolicyId,
    ScopeId, SlidingWindowPolicy, SubjectKey,
};
use runlimit_redis::{RedisConfig, RedisLimiter};

fn key(n: u8) -> SubjectKey {
    SubjectKey::from_digest([n; 32])
}

fn window(id: &str, limit: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new(id).expect("valid"),
        ScopeId::new("client").expect("valid"),
        limit,
        Duration::from_secs(60),
    )
    .expect("valid")
}

fn rate(id: &str, burst: u64) -> GcraPolicy {
    GcraPolicy::new(
        PolicyId::new(id).expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(60),
        burst,
    )
    .expect("valid")
}

fn sliding(id: &str, limit: u64) -> SlidingWindowPolicy {
    SlidingWindowPolicy::new(
        PolicyId::new(id).expect("valid"),
        ScopeId::new("client").expect("valid"),
        limit,
        Duration::from_secs(60),
    )
    .expect("valid")
}

/// Whether each of `checks` of one subject is allowed, in order.
async fn allowed<L: Limiter>(limiter: &L, check: &Check<'_, L::Policy>, times: usize) -> Vec<bool> {
    let mut allowed = Vec::with_capacity(times);
    for _ in 0..times {
        allowed.push(limiter.check(check).await.expect("decided").is_allowed());
    }
    allowed
}

#[tokio::test]
async fn new_and_connect_take_the_policy_type_from_the_checks() {
    let Some(connection) = common::connect("inferred").await else {
        return;
    };
    let limiter = RedisLimiter::new(connection, common::config("inferred-new"));
    let policy = window("inferred", 2);
    assert_eq!(
        allowed(&limiter, &Check::new(&policy, key(1)), 3).await,
        [true, true, false]
    );

    let limiter = RedisLimiter::connect(&common::url(), common::config("inferred-connect"))
        .await
        .expect("connect");
    let policy = rate("inferred", 1);
    assert_eq!(
        allowed(&limiter, &Check::new(&policy, key(1)), 2).await,
        [true, false]
    );
}

/// Counts the commands sent on the connection it wraps.
#[derive(Clone)]
struct Counted<C> {
    connection: C,
    sent: Arc<AtomicUsize>,
}

impl<C: ConnectionLike + Send> ConnectionLike for Counted<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        self.connection.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        self.connection.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.connection.get_db()
    }
}

/// Counts admission observations.
#[derive(Debug, Clone, Default)]
struct Observed(Arc<AtomicUsize>);

impl Observer for Observed {
    fn on_admission(&self, _: &AdmissionObservation<'_>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn for_policy_shares_the_connection_configuration_and_observer() {
    let Some(connection) = common::connect("for-policy").await else {
        return;
    };
    let mut admin = common::admin(&common::url()).await;
    let sent = Arc::new(AtomicUsize::new(0));
    let observed = Observed::default();
    let config = common::config("for-policy");
    let prefix = config.prefix().to_owned();
    let windows = RedisLimiter::new(
        Counted {
            connection,
            sent: Arc::clone(&sent),
        },
        config,
    )
    .with_observer(observed.clone());
    let rates: RedisLimiter<_, GcraPolicy> = windows.for_policy();
    let slides: RedisLimiter<_, SlidingWindowPolicy> = rates.for_policy();
    let (window, rate, slide) = (window("shared", 1), rate("shared", 1), sliding("shared", 1));

    // Each policy type keeps counters of its own for one subject.
    assert_eq!(
        allowed(&windows, &Check::new(&window, key(1)), 2).await,
        [true, false]
    );
    let before = sent.load(Ordering::SeqCst);
    assert_eq!(
        allowed(&rates, &Check::new(&rate, key(1)), 2).await,
        [true, false]
    );
    assert_eq!(
        allowed(&slides, &Check::new(&slide, key(1)), 2).await,
        [true, false]
    );
    // Through the first limiter's connection, observed by its observer,
    // under its prefix.
    assert!(sent.load(Ordering::SeqCst) >= before + 4);
    assert_eq!(observed.0.load(Ordering::SeqCst), 6);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut admin)
        .await
        .expect("keys");
    assert_eq!(keys.len(), 3, "{keys:?}");
}

/// How often the server refused `command` before running it.
async fn rejected(admin: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .expect("info");
    info.lines()
        .filter_map(|line| line.strip_prefix(&format!("cmdstat_{command}:")))
        .flat_map(|stats| stats.split(','))
        .filter_map(|field| field.strip_prefix("rejected_calls="))
        .map(|calls| calls.parse::<u64>().expect("a count"))
        .sum()
}

/// What one limiter learns of the server (here: that this user may not call
/// functions) every limiter of the connection knows: the server refuses one
/// `FCALL`, not one per policy type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiters_of_one_connection_learn_together_that_functions_are_refused() {
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
    let windows = RedisLimiter::connect(
        &url.replacen("://", "://scripts-only:secret@", 1),
        RedisConfig::default(),
    )
    .await
    .expect("connect");
    let window = window("learnt", 1);
    assert_eq!(
        allowed(&windows, &Check::new(&window, key(1)), 1).await,
        [true]
    );
    assert_eq!(rejected(&mut admin, "fcall").await, 1);
    let rates: RedisLimiter<_, GcraPolicy> = windows.for_policy();
    let rate = rate("learnt", 1);
    assert_eq!(
        allowed(&rates, &Check::new(&rate, key(1)), 2).await,
        [true, false]
    );
    assert_eq!(rejected(&mut admin, "fcall").await, 1);
}
