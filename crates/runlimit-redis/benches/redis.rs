//! Throughput and latency of RedisLimiter against a `PING` floor on the same
//! connections, in one run.
//!
//! Run with `cargo bench -p runlimit-redis --bench redis` (`BENCH_SECONDS`
//! sets seconds per cell; `BENCH_ROUNDS` the rounds of `-- coalescing`).
//! Results are recorded in BENCHMARKS.md.
//!
//! On a machine with at least two cores and `redis-server` and `taskset`
//! installed, the bench starts its own `redis-server` pinned to the last core
//! and runs its own threads on the first, so that the server's time per
//! operation is not the client's contention (it says so when it starts).
//! Otherwise, or with `BENCH_SHARED_SERVER=1`, it uses the server at
//! `RUNLIMIT_REDIS_TEST_URL`. `-- sliding` instead alternates fixed-window and
//! sliding-window checks at 32 tasks over rounds and reports the median ratio;
//! `-- carry` alternates checks of a policy that continues from another (its
//! subjects carried already) with the same checks of the policy alone, at 32
//! tasks and at one, over `BENCH_ROUNDS` rounds, and reports the medians;
//! `-- topology` runs the credential-stuffing burst with and without the
//! denial cache, and the tiered admission against the shared check alone.
#![allow(missing_docs, clippy::cast_precision_loss)]

#[path = "../../runlimit-memory/benches/shared/topology.rs"]
mod topology;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use redis::aio::ConnectionManager;
use runlimit_core::{
    Check, FixedWindowPolicy, Lifecycle, Limiter, MAX_LIMIT, MAX_WINDOW, PolicyId, ScopeId,
    SlidingWindowPolicy, SubjectKey,
};
use runlimit_redis::{RedisConfig, RedisLimiter};

const KEYS: u64 = 10_000;

#[derive(Clone, Copy, Debug)]
enum Workload {
    Ping,
    /// The cheapest script an admission could be: read the clock, read one
    /// key, write it back with an expiry. A floor for any script-based design.
    MinimalScript,
    Check,
    BatchOfTwo,
    /// An admission with a receipt, then its refund: what a request that does
    /// not count costs (counting only failed logins, say).
    CheckAndRefund,
    /// A sliding-window check of the same limit and window.
    SlidingCheck,
    /// `Check` through a limiter with coalescing off.
    CheckUncoalesced,
    /// `BatchOfTwo` through a limiter with coalescing off.
    BatchOfTwoUncoalesced,
    /// `Check` of the same policy continuing from another: the same
    /// counters, each carried already (the checks are marked).
    CarriedCheck,
}

fn subject(n: u64) -> SubjectKey {
    let mut digest = [0u8; 32];
    let mut state = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    for chunk in digest.chunks_mut(8) {
        state ^= state >> 31;
        state = state.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

/// See [`Workload::MinimalScript`]; its keys expire by themselves a minute later.
static MINIMAL_SCRIPT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "local now = redis.call('TIME') \
         local state = redis.call('GET', KEYS[1]) \
         redis.call('SET', KEYS[1], '1:1', 'PX', 60000) \
         return 0",
    )
});

type Shared = Arc<
    Vec<(
        ConnectionManager,
        RedisLimiter<ConnectionManager, FixedWindowPolicy>,
        RedisLimiter<ConnectionManager, SlidingWindowPolicy>,
        RedisLimiter<ConnectionManager, FixedWindowPolicy>,
    )>,
>;

/// Script and function invocations the server has run (`EVALSHA`, `EVAL`
/// and `FCALL` calls).
async fn server_scripts(connection: &mut ConnectionManager) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(connection)
        .await
        .expect("info");
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.strip_prefix("calls=")?.split(',').next()?;
            matches!(name, "evalsha" | "eval" | "fcall").then(|| calls.parse::<f64>().ok())?
        })
        .sum()
}

/// Seconds of CPU this process has used (user and system), from
/// `/proc/self/stat`; 0 where that is not readable.
fn client_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are the 14th and 15th fields of the whole line; the
    // kernel counts them in USER_HZ, 100 per second on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

/// Seconds of CPU the server has used (`INFO cpu`, user and system).
async fn server_cpu(connection: &mut ConnectionManager) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(connection)
        .await
        .expect("info");
    info.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            matches!(name, "used_cpu_user" | "used_cpu_sys")
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

fn sliding_policy() -> SlidingWindowPolicy {
    SlidingWindowPolicy::new(
        PolicyId::new("bench").expect("valid"),
        ScopeId::new("client").expect("valid"),
        MAX_LIMIT,
        MAX_WINDOW,
    )
    .expect("valid")
}

async fn run(
    workload: Workload,
    tasks: usize,
    seconds: f64,
    shared: &Shared,
    policies: &Arc<[FixedWindowPolicy; 3]>,
) -> (f64, Duration, Duration) {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (shared, policies) = (Arc::clone(shared), Arc::clone(policies));
            tokio::spawn(async move {
                let (connection, limiter, sliding, uncoalesced) = &shared[task % shared.len()];
                let sliding_policy = sliding_policy();
                let mut connection = connection.clone();
                let mut latencies = Vec::new();
                let mut state = 0x2545_F491_4F6C_DD1Du64 ^ (task as u64 + 1);
                while Instant::now() < deadline {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let key = subject(state % KEYS);
                    let started = Instant::now();
                    match workload {
                        Workload::Ping => {
                            redis::cmd("PING")
                                .query_async::<String>(&mut connection)
                                .await
                                .expect("ping");
                        }
                        Workload::MinimalScript => {
                            MINIMAL_SCRIPT
                                .key(format!("rl-bench-minimal:{}", state % KEYS))
                                .invoke_async::<()>(&mut connection)
                                .await
                                .expect("minimal script");
                        }
                        Workload::CheckUncoalesced => {
                            let decision = uncoalesced
                                .check(&Check::new(&policies[0], key))
                                .await
                                .expect("check");
                            assert!(decision.is_allowed());
                        }
                        Workload::BatchOfTwoUncoalesced => {
                            let checks =
                                [Check::new(&policies[0], key), Check::new(&policies[1], key)];
                            assert!(
                                uncoalesced
                                    .check_all(&checks)
                                    .await
                                    .expect("batch")
                                    .is_allowed()
                            );
                        }
                        Workload::Check | Workload::CarriedCheck => {
                            let policy = match workload {
                                Workload::CarriedCheck => &policies[2],
                                _ => &policies[0],
                            };
                            let decision = limiter
                                .check(&Check::new(policy, key))
                                .await
                                .expect("check");
                            assert!(decision.is_allowed());
                        }
                        Workload::CheckAndRefund => {
                            let check = Check::new(&policies[0], key);
                            let (decision, receipt) =
                                limiter.admit(&check).await.expect("admit").into_parts();
                            assert!(decision.is_allowed());
                            let refunded = limiter
                                .refund(&[check], receipt.expect("allowed"))
                                .await
                                .expect("refund");
                            assert_eq!(refunded.credited(), 1);
                        }
                        Workload::SlidingCheck => {
                            let decision = sliding
                                .check(&Check::new(&sliding_policy, key))
                                .await
                                .expect("check");
                            assert!(decision.is_allowed());
                        }
                        Workload::BatchOfTwo => {
                            let checks =
                                [Check::new(&policies[0], key), Check::new(&policies[1], key)];
                            assert!(
                                limiter
                                    .check_all(&checks)
                                    .await
                                    .expect("batch")
                                    .is_allowed()
                            );
                        }
                    }
                    latencies.push(started.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for handle in handles {
        latencies.extend(handle.await.expect("task"));
    }
    latencies.sort_unstable();
    let percentile = |per_mille: usize| latencies[(latencies.len() - 1) * per_mille / 1_000];
    (
        latencies.len() as f64 / seconds,
        percentile(500),
        percentile(990),
    )
}

fn main() {
    let server = PinnedServer::start();
    // Threads inherit their creator's cores: pin before the runtime starts
    // its workers.
    if let Some(server) = &server
        && !core_affinity::set_for_current(server.client_core)
    {
        eprintln!("could not pin the bench's threads; the comparison is not isolated");
    }
    let url = server.as_ref().map_or_else(
        || {
            std::env::var("RUNLIMIT_REDIS_TEST_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned())
        },
        |server| server.url.clone(),
    );
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(bench(url));
    drop(server);
}

/// A `redis-server` of the bench's own, on its own core.
struct PinnedServer {
    child: std::process::Child,
    url: String,
    client_core: core_affinity::CoreId,
}

impl PinnedServer {
    /// Starts the server on the last core when the machine has two or more
    /// and the tools are there; `None` (with the reason printed) otherwise.
    fn start() -> Option<Self> {
        if std::env::var("BENCH_SHARED_SERVER").as_deref() == Ok("1") {
            println!("server: RUNLIMIT_REDIS_TEST_URL's (BENCH_SHARED_SERVER=1), not pinned");
            return None;
        }
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let (Some(&client_core), Some(&server_core)) = (cores.first(), cores.last()) else {
            println!("server: RUNLIMIT_REDIS_TEST_URL's, not pinned (cores unknown)");
            return None;
        };
        if cores.len() < 2 {
            println!("server: RUNLIMIT_REDIS_TEST_URL's, not pinned (one core)");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|address| address.port())
            .ok()?;
        let child = std::process::Command::new("taskset")
            .args(["-c", &server_core.id.to_string(), "redis-server"])
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        let Ok(child) = child else {
            println!(
                "server: RUNLIMIT_REDIS_TEST_URL's, not pinned (taskset or redis-server missing)"
            );
            return None;
        };
        let url = format!("redis://127.0.0.1:{port}/");
        let client = redis::Client::open(url.as_str()).ok()?;
        let started = Instant::now();
        while client
            .get_connection()
            .and_then(|mut connection| redis::cmd("PING").query::<String>(&mut connection))
            .is_err()
        {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the bench's redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        println!(
            "server: the bench's own redis-server on core {}, the bench on core {}",
            server_core.id, client_core.id
        );
        Some(Self {
            child,
            url,
            client_core,
        })
    }
}

impl Drop for PinnedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn bench(url: String) {
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let config = RedisConfig::default()
        .with_prefix(format!("rl-bench:{}:", std::process::id()))
        .expect("valid");
    let connections: usize = std::env::var("BENCH_CONNECTIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let mut shared = Vec::new();
    for _ in 0..connections {
        let client = redis::Client::open(url.as_str()).expect("url");
        let connection = ConnectionManager::new(client).await.expect("connect");
        shared.push((
            connection.clone(),
            RedisLimiter::new(connection.clone(), config.clone()),
            RedisLimiter::new(connection.clone(), config.clone()),
            RedisLimiter::new(
                connection,
                config.clone().with_coalescing(1).expect("valid"),
            ),
        ));
    }
    let shared: Shared = Arc::new(shared);
    let policy = |scope: &str| {
        FixedWindowPolicy::new(
            PolicyId::new("bench").expect("valid"),
            ScopeId::new(scope).expect("valid"),
            MAX_LIMIT,
            MAX_WINDOW,
        )
        .expect("valid")
    };
    // The third is the first continuing from a policy of a lower limit: the
    // same counters, its checks marked as checks that carry.
    let predecessor = FixedWindowPolicy::new(
        PolicyId::new("bench").expect("valid"),
        ScopeId::new("client").expect("valid"),
        MAX_LIMIT - 1,
        MAX_WINDOW,
    )
    .expect("valid");
    let carried = policy("client")
        .continuing(&predecessor)
        .expect("one id and scope");
    let policies = Arc::new([policy("client"), policy("identity"), carried]);
    run(Workload::BatchOfTwo, 32, 1.0, &shared, &policies).await;
    run(Workload::SlidingCheck, 32, 1.0, &shared, &policies).await;
    if std::env::args().any(|arg| arg == "coalescing") {
        coalescing(seconds, &shared, &policies).await;
    } else if std::env::args().any(|arg| arg == "topology") {
        let (_, limiter, ..) = &shared[0];
        let trips = topology::RoundTrips::default();
        topology::burst(
            "Redis",
            limiter.clone().with_observer(trips.clone()),
            trips,
            seconds,
        )
        .await;
        topology::tiered_overhead("Redis", limiter.clone(), seconds).await;
    } else if std::env::args().any(|arg| arg == "carry") {
        carry(seconds, &shared, &policies).await;
    } else if std::env::args().any(|arg| arg == "sliding") {
        let mut ratios = Vec::new();
        for round in 1..=5 {
            let (fixed, ..) = run(Workload::Check, 32, seconds, &shared, &policies).await;
            let (sliding, ..) = run(Workload::SlidingCheck, 32, seconds, &shared, &policies).await;
            ratios.push(sliding / fixed);
            println!(
                "round {round}: fixed window {fixed:.0} checks/s, sliding window {sliding:.0} \
                 checks/s, {:.0}%",
                100.0 * sliding / fixed
            );
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "median over 5 rounds at 32 tasks: sliding / fixed window {:.0}%",
            100.0 * ratios[2]
        );
    } else {
        table(seconds, &shared, &policies).await;
    }
    // Leave nothing behind: the benchmark's keys would otherwise live a year.
    let (connection, ..) = &shared[0];
    let mut connection = connection.clone();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", config.prefix()))
        .query_async(&mut connection)
        .await
        .expect("keys");
    for chunk in keys.chunks(500) {
        redis::cmd("DEL")
            .arg(chunk)
            .query_async::<()>(&mut connection)
            .await
            .expect("del");
    }
}

async fn table(seconds: f64, shared: &Shared, policies: &Arc<[FixedWindowPolicy; 3]>) {
    let mut admin = shared[0].0.clone();
    println!(
        "| tasks | workload | ops/s | p50 | p99 | vs PING floor | server CPU per 100k | ops per script |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for tasks in [1usize, 8, 32] {
        let mut floor = 0.0;
        for workload in [
            Workload::Ping,
            Workload::MinimalScript,
            Workload::CheckUncoalesced,
            Workload::Check,
            Workload::BatchOfTwoUncoalesced,
            Workload::BatchOfTwo,
            Workload::CheckAndRefund,
            Workload::SlidingCheck,
        ] {
            let (cpu, invoked) = (
                server_cpu(&mut admin).await,
                server_scripts(&mut admin).await,
            );
            let (rate, p50, p99) = run(workload, tasks, seconds, shared, policies).await;
            let cpu = (server_cpu(&mut admin).await - cpu) / (rate * seconds) * 1e5;
            let invoked = server_scripts(&mut admin).await - invoked;
            let per_script = if invoked > 0.0 {
                format!("{:.1}", rate * seconds / invoked)
            } else {
                String::new()
            };
            if matches!(workload, Workload::Ping) {
                floor = rate;
            }
            let relative = if matches!(workload, Workload::Ping) {
                String::new()
            } else {
                format!("{:.0}%", 100.0 * rate / floor)
            };
            println!(
                "| {tasks} | {workload:?} | {rate:.0} | {:.3} ms | {:.3} ms | {relative} | {cpu:.2} s | {per_script} |",
                p50.as_secs_f64() * 1e3,
                p99.as_secs_f64() * 1e3
            );
        }
    }
}

/// Checks and batches of two at 32 tasks with coalescing on and off,
/// alternating over rounds: rates, p99 and server CPU, with medians.
async fn coalescing(seconds: f64, shared: &Shared, policies: &Arc<[FixedWindowPolicy; 3]>) {
    let mut admin = shared[0].0.clone();
    let workloads = [
        Workload::Ping,
        Workload::MinimalScript,
        Workload::CheckUncoalesced,
        Workload::Check,
        Workload::BatchOfTwoUncoalesced,
        Workload::BatchOfTwo,
    ];
    let round_count: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(1);
    let mut results: Vec<Vec<(f64, f64, f64, f64)>> = vec![Vec::new(); workloads.len()];
    for round in 1..=round_count {
        for (index, workload) in workloads.iter().enumerate() {
            let (cpu, scripts, client) = (
                server_cpu(&mut admin).await,
                server_scripts(&mut admin).await,
                client_cpu(),
            );
            let (rate, _, p99) = run(*workload, 32, seconds, shared, policies).await;
            let client = (client_cpu() - client) / (rate * seconds) * 1e5;
            let cpu = (server_cpu(&mut admin).await - cpu) / (rate * seconds) * 1e5;
            let scripts = server_scripts(&mut admin).await - scripts;
            let per_script = if scripts >= 1.0 {
                format!("{:.1}", rate * seconds / scripts)
            } else {
                "no".to_owned()
            };
            println!(
                "round {round}: {workload:?} {rate:.0}/s, p99 {:.3} ms, server CPU {cpu:.2} s per 100k, \
                 {per_script} operations per script, the bench's own CPU {client:.2} s per 100k",
                p99.as_secs_f64() * 1e3
            );
            results[index].push((rate, p99.as_secs_f64() * 1e3, cpu, client));
        }
    }
    let median = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let ping = median(&mut results[0].iter().map(|r| r.0).collect());
    for (workload, rounds) in workloads.iter().zip(&results) {
        let mut rates: Vec<f64> = rounds.iter().map(|r| r.0).collect();
        let rate = median(&mut rates);
        let (low, high) = (rates[0], rates[rates.len() - 1]);
        println!(
            "median over {round_count} rounds at 32 tasks, {workload:?}: {rate:.0}/s ({low:.0}–{high:.0}; {:.0}% of PING), \
             p99 {:.3} ms, server CPU {:.2} s per 100k, the bench's own CPU {:.2} s per 100k",
            100.0 * rate / ping,
            median(&mut rounds.iter().map(|r| r.1).collect()),
            median(&mut rounds.iter().map(|r| r.2).collect()),
            median(&mut rounds.iter().map(|r| r.3).collect()),
        );
    }
    // On a shared machine a slow round slows every workload in it, so each
    // round's ratio to the PING measured just before it is steadier than
    // the ratio of medians. Each is also taken to the minimal script
    // measured just before it: the floor of any design that admits with one
    // script invocation per check.
    for (base, name) in [(0, "PING"), (1, "minimal script")] {
        for (workload, rounds) in workloads.iter().zip(&results).skip(base + 1) {
            let mut rates: Vec<f64> = rounds
                .iter()
                .zip(&results[base])
                .map(|(r, base)| r.0 / base.0)
                .collect();
            let mut cpus: Vec<f64> = rounds
                .iter()
                .zip(&results[base])
                .map(|(r, base)| r.2 / base.2)
                .collect();
            println!(
                "median of the rounds' ratios to their {name}, {workload:?}: {:.0}% of its rate \
                 ({:.0}–{:.0}%), {:.2}× its server CPU per operation ({:.2}–{:.2}×)",
                100.0 * median(&mut rates),
                100.0 * rates[0],
                100.0 * rates[rates.len() - 1],
                median(&mut cpus),
                cpus[0],
                cpus[cpus.len() - 1],
            );
        }
    }
}

/// Checks of a policy continuing from another, its subjects carried already,
/// against the same checks of the policy alone (the same counters), at 32
/// tasks (coalesced) and at one (lone checks), alternating round by round.
async fn carry(seconds: f64, shared: &Shared, policies: &Arc<[FixedWindowPolicy; 3]>) {
    // Every counter stored (and so carried) before anything is measured.
    run(Workload::Check, 32, 2.0 * seconds, shared, policies).await;
    let round_count: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(1);
    for tasks in [32, 1] {
        let (mut plain, mut carried, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 1..=round_count {
            let (alone, ..) = run(Workload::Check, tasks, seconds, shared, policies).await;
            let (marked, ..) = run(Workload::CarriedCheck, tasks, seconds, shared, policies).await;
            println!(
                "round {round}, {tasks} task(s): policy alone {alone:.0} checks/s, continuing \
                 (carried) {marked:.0} checks/s, {:.1}%",
                100.0 * marked / alone
            );
            plain.push(alone);
            carried.push(marked);
            ratios.push(marked / alone);
        }
        let median = |values: &mut Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        println!(
            "median over {round_count} rounds at {tasks} task(s): policy alone {:.0} checks/s, \
             continuing (carried) {:.0} checks/s, the rounds' ratio {:.1}%",
            median(&mut plain),
            median(&mut carried),
            100.0 * median(&mut ratios)
        );
    }
}
