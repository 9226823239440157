//! Shared helpers: connections, per-test key prefixes, time shifting.
#![allow(dead_code)]

use std::{
    collections::HashMap,
    net::TcpListener,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use redis::aio::ConnectionManager;
use runlimit_conformance::TimeControl;
use runlimit_core::{CarriedFrom, CarryObservation, CounterKey, Observer};
use runlimit_redis::RedisConfig;

pub(crate) fn url() -> String {
    std::env::var("RUNLIMIT_REDIS_TEST_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned())
}

/// A connection manager, or `None` (with a printed reason) when Redis is absent
/// and `RUNLIMIT_REQUIRE_SERVICES` is not `1`.
pub(crate) async fn connect(test: &str) -> Option<ConnectionManager> {
    let url = url();
    let attempt = async {
        let client = redis::Client::open(url.as_str())?;
        let mut connection =
            tokio::time::timeout(Duration::from_secs(3), ConnectionManager::new(client))
                .await
                .map_err(|_| {
                    redis::RedisError::from((redis::ErrorKind::IoError, "connect timed out"))
                })??;
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await?;
        Ok::<_, redis::RedisError>(connection)
    };
    match attempt.await {
        Ok(connection) => Some(connection),
        Err(error) => {
            if std::env::var("RUNLIMIT_REQUIRE_SERVICES").as_deref() == Ok("1") {
                panic!(
                    "Redis is required (RUNLIMIT_REQUIRE_SERVICES=1) but unreachable at {url}: {error}"
                );
            }
            eprintln!("skipping {test}: Redis unreachable at {url}: {error}");
            None
        }
    }
}

/// A configuration whose prefix no other test or process uses.
pub(crate) fn config(test: &str) -> RedisConfig {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    RedisConfig::default()
        .with_prefix(format!("rl-test:{test}:{}:{nanos}:", std::process::id()))
        .expect("valid prefix")
}

/// The Redis key of `counter` under `config`'s prefix with the default
/// routing, as the crate documents it: the policy fingerprint's hex digits,
/// then the subject key's in braces, the key's hash tag.
pub(crate) fn redis_key(config: &RedisConfig, counter: &CounterKey) -> String {
    let hex = |bytes: &[u8]| -> String { bytes.iter().map(|byte| format!("{byte:02x}")).collect() };
    format!(
        "{}{}{{{}}}",
        config.prefix(),
        hex(counter.fingerprint().as_bytes()),
        hex(counter.subject().as_bytes())
    )
}

/// An observer that records what each carried counter carried from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Carries(Arc<Mutex<Vec<CarriedFrom>>>);

impl Carries {
    /// What the counters carried from, in order, since the last call.
    pub(crate) fn take(&self) -> Vec<CarriedFrom> {
        std::mem::take(&mut *self.0.lock().expect("not poisoned"))
    }
}

impl Observer for Carries {
    fn on_carry(&self, observation: &CarryObservation<'_>) {
        self.0
            .lock()
            .expect("not poisoned")
            .push(observation.from());
    }
}

/// A connection that records the name of every command sent through it:
/// each is one round trip (a cluster connection sends a multi-slot `MGET`
/// or `DEL` to each slot's node in parallel).
#[derive(Clone)]
pub(crate) struct Counting<C> {
    pub(crate) inner: C,
    pub(crate) sent: Arc<Mutex<Vec<String>>>,
}

impl<C> Counting<C> {
    pub(crate) fn new(inner: C) -> Self {
        Self {
            inner,
            sent: Arc::default(),
        }
    }

    /// The commands sent since the last call, in order.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.sent.lock().expect("not poisoned"))
    }
}

impl<C: redis::aio::ConnectionLike + Send> redis::aio::ConnectionLike for Counting<C> {
    fn req_packed_command<'a>(
        &'a mut self,
        command: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let name = match command.args_iter().next() {
            Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).to_uppercase(),
            _ => String::new(),
        };
        self.sent.lock().expect("not poisoned").push(name);
        self.inner.req_packed_command(command)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        self.sent
            .lock()
            .expect("not poisoned")
            .push("PIPELINE".to_owned());
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// Moves time forward for every key under one prefix by shifting its state
/// into the past.
pub(crate) struct ShiftTime {
    pub(crate) connection: ConnectionManager,
    pub(crate) prefix: String,
    /// What the keys hold.
    pub(crate) layout: Layout,
}

/// Which field of a stored state is a time to shift.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Layout {
    /// `used:expires_us`: the second.
    FixedWindow,
    /// `tat_us:remainder:version`: the first.
    Gcra,
    /// `expires_us:version:counts…`: the first. Its eighth follows from it,
    /// so only shifts by whole eighths of a policy's window are exact.
    SlidingWindow,
}

const SHIFT: &str = r"
local shift = tonumber(ARGV[2])
local cursor = '0'
repeat
    local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1] .. '*', 'COUNT', 1000)
    cursor = page[1]
    for _, key in ipairs(page[2]) do
        local state = redis.call('GET', key)
        local ttl = redis.call('PTTL', key)
        if state and ttl > 0 then
            local first, second, rest = string.match(state, '^(%d+):(%d+)(.*)$')
            -- Fixed windows store used:expires_us; GCRA stores
            -- tat_us:remainder:version, sliding windows expires_us:version:counts.
            if ARGV[3] == 'fixed' then
                second = tonumber(second) - shift
            else
                first = tonumber(first) - shift
            end
            redis.call('SET', key, string.format('%d:%d', first, second) .. rest, 'PX', ttl)
        end
    end
until cursor == '0'
return 0
";

/// Shifts the state of every key under `prefix` that `connection`'s server
/// holds `by` into the past.
pub(crate) async fn shift(
    connection: &mut impl redis::aio::ConnectionLike,
    prefix: &str,
    by: Duration,
    layout: Layout,
) {
    let micros = i64::try_from(by.as_micros()).expect("small");
    redis::Script::new(SHIFT)
        .arg(prefix)
        .arg(micros)
        .arg(match layout {
            Layout::FixedWindow => "fixed",
            Layout::Gcra | Layout::SlidingWindow => "first",
        })
        .invoke_async::<i64>(connection)
        .await
        .expect("shift");
}

impl TimeControl for ShiftTime {
    async fn advance(&self, by: Duration) {
        shift(&mut self.connection.clone(), &self.prefix, by, self.layout).await;
    }

    async fn elapse(&self, by: Duration) {
        // Receipts carry Redis's own times, which no shift can move.
        tokio::time::sleep(by).await;
    }

    fn receipts_survive_advance(&self) -> bool {
        false
    }

    fn drift(&self) -> Duration {
        Duration::from_millis(250)
    }
}

/// A `redis-server` of a test's own, killed when dropped.
pub(crate) struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// Starts a `redis-server` of the test's own on a free port, so server-wide
/// statistics count that test's commands alone; `None` (with a printed
/// reason) when `redis-server` is not installed and services are optional.
pub(crate) async fn private_server() -> Option<(Server, String)> {
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("free port")
        .local_addr()
        .expect("addr")
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        if std::env::var("RUNLIMIT_REQUIRE_SERVICES").as_deref() == Ok("1") {
            panic!("redis-server is required (RUNLIMIT_REQUIRE_SERVICES=1) but cannot be started");
        }
        eprintln!("skipping: redis-server is not installed");
        return None;
    };
    let server = Server(child);
    let url = format!("redis://127.0.0.1:{port}/");
    for _ in 0..100 {
        if let Ok(client) = redis::Client::open(url.as_str())
            && let Ok(mut connection) = client.get_multiplexed_async_connection().await
            && redis::cmd("PING")
                .query_async::<String>(&mut connection)
                .await
                .is_ok()
        {
            return Some((server, url));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("redis-server on {url} did not start");
}

/// The calls of each command the server has processed so far.
pub(crate) async fn calls(admin: &mut redis::aio::MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .expect("info");
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// A plain connection to `url` for a test's own commands.
pub(crate) async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("admin")
}

/// Leased replicas in front of limiters on `connection` (a cluster's when
/// `cluster`), held to the ledger of `runlimit_conformance::leased` for
/// every algorithm: the weighted case, then 32 random traces.
pub(crate) fn leased_suites<C>(
    runtime: &tokio::runtime::Runtime,
    connection: C,
    config: RedisConfig,
    cluster: bool,
) where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    use runlimit_conformance::{Shared, leased_trace, leased_weighted_suite, run_leased_trace};
    use runlimit_core::{FixedWindowPolicy, GcraPolicy, SlidingWindowPolicy};
    use runlimit_redis::{RedisLimiter, RedisPolicy};

    fn shared<C, P>(connection: C, config: RedisConfig, cluster: bool) -> Shared<RedisLimiter<C, P>>
    where
        C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
        P: RedisPolicy,
    {
        Shared(Arc::new(if cluster {
            RedisLimiter::cluster(connection, config)
        } else {
            RedisLimiter::new(connection, config)
        }))
    }

    let fixed = shared::<_, FixedWindowPolicy>(connection.clone(), config.clone(), cluster);
    let sliding = shared::<_, SlidingWindowPolicy>(connection.clone(), config.clone(), cluster);
    let gcra = shared::<_, GcraPolicy>(connection, config, cluster);
    runtime.block_on(async {
        leased_weighted_suite(&fixed).await;
        leased_weighted_suite(&sliding).await;
        leased_weighted_suite(&gcra).await;
    });
    TestRunner::new(Config::with_cases(32))
        .run(&leased_trace(), |trace| {
            runtime
                .block_on(async {
                    run_leased_trace(&fixed, &trace).await?;
                    run_leased_trace(&sliding, &trace).await?;
                    run_leased_trace(&gcra, &trace).await
                })
                .map_err(TestCaseError::fail)?;
            Ok(())
        })
        .expect("every trace");
}
