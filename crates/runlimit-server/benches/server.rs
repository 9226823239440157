//! `ShouldRateLimit` over gRPC on loopback: checks per second and p50/p99 at
//! 32 concurrent streams for the memory, Redis and PostgreSQL backends, each
//! with fixed-window, sliding-window and GCRA rules, beside floors measured
//! in the same run behind the same gRPC front end (one tonic server of the
//! same service trait, `TCP_NODELAY`):
//!
//! * the front end answering OK without a check;
//! * the reference service's Redis design: per descriptor one pipelined
//!   `INCRBY key hits` + `EXPIRE key ttl`, not atomic across descriptors,
//!   denied hits counted;
//! * the `limitador` crate's in-memory limiter, a peer.
//!
//! Then one hot descriptor on Redis: the reference design against
//! `runlimit_memory::Leased` around the Redis limiter (a bench service
//! calling the leased limiter, since `AnyPolicy` has no leases yet).
//!
//! Run with `cargo bench -p runlimit-server --bench server`. `BENCH_ROUNDS`
//! (default 5) rounds of `BENCH_SECONDS` (default 2) per workload, the order
//! reversed every other round; medians, with the range of the rounds.
//! Redis at `RUNLIMIT_REDIS_TEST_URL` and PostgreSQL at
//! `RUNLIMIT_POSTGRES_TEST_DATABASE_URL` (the local test services by
//! default); a backend that does not answer is skipped, with the reason
//! printed. The bench uses its own Redis key prefix and PostgreSQL schema and
//! removes both when it ends. Results are recorded in BENCHMARKS.md.
#![allow(
    missing_docs,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use redis::aio::ConnectionManager;
use runlimit_core::{
    AnyPolicy, Check, FixedWindowPolicy, KeyHasher, Lifecycle, Limiter, MAX_LIMIT, PolicyId,
    ScopeId,
};
use runlimit_memory::{AnyStore, LeaseConfig, Leased, MemoryStoreConfig};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};
use runlimit_redis::{RedisConfig, RedisLimiter};
use runlimit_server::{
    config::Config,
    metrics::Metrics,
    proto::{
        RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitService,
        RateLimitServiceClient, RateLimitServiceServer,
        rate_limit_descriptor::Entry,
        rate_limit_response::{Code, DescriptorStatus},
    },
    reload::SharedConfig,
    service::Decider,
};
use tokio::net::TcpListener;
use tonic::{
    Request, Response, Status,
    transport::{Channel, server::TcpIncoming},
};

const STREAMS: usize = 32;
/// Client connections the streams share (as an Envoy's few workers would).
const CONNECTIONS: usize = 4;
const KEYS: u64 = 10_000;
const SECRET: &[u8] = b"the bench's secret, thirty-two bytes or more";
const DOMAIN: &str = "bench";
/// An hour's window; every check is allowed.
const TTL_SECONDS: u64 = 3_600;

const ALGORITHMS: [(&str, &str); 3] = [
    ("fixed window", ""),
    (
        "sliding window",
        "\n      runlimit: {algorithm: sliding_window}",
    ),
    ("GCRA", "\n      runlimit: {algorithm: gcra}"),
];

fn yaml(extension: &str) -> String {
    format!(
        "domain: {DOMAIN}\ndescriptors:\n  - key: client\n    rate_limit:\n      unit: hour\n      \
         requests_per_unit: {MAX_LIMIT}{extension}\n  - key: hot\n    rate_limit:\n      unit: hour\n      \
         requests_per_unit: {MAX_LIMIT}{extension}\n"
    )
}

fn decider<L>(limiter: L, extension: &str) -> Decider<L>
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle,
{
    let config = Config::from_sources([("bench.yaml", yaml(extension).as_str())]).expect("valid");
    Decider::new(
        limiter,
        Arc::new(SharedConfig::new(config)),
        KeyHasher::new(SECRET).expect("long"),
        Metrics::new(),
    )
    // A decision late on this shared machine still counts; failures are
    // counted apart.
    .with_budget(Duration::from_secs(2))
}

fn statuses(codes: impl Iterator<Item = Code>) -> RateLimitResponse {
    let statuses: Vec<DescriptorStatus> = codes
        .map(|code| DescriptorStatus {
            code: code as i32,
            ..DescriptorStatus::default()
        })
        .collect();
    let over = statuses.iter().any(|s| s.code == Code::OverLimit as i32);
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        ..RateLimitResponse::default()
    }
}

/// The front end alone: OK for every descriptor, nothing checked.
struct Floor;

impl RateLimitService for Floor {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let n = request.get_ref().descriptors.len();
        Ok(Response::new(statuses((0..n).map(|_| Code::Ok))))
    }
}

/// The reference service's Redis design: per descriptor `INCRBY` and
/// `EXPIRE`, pipelined, then each count compared with the limit.
struct Reference {
    connection: ConnectionManager,
    prefix: String,
}

impl RateLimitService for Reference {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        let hits = u64::from(request.hits_addend.max(1));
        let window = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / TTL_SECONDS * TTL_SECONDS);
        let mut pipe = redis::pipe();
        for descriptor in &request.descriptors {
            let mut key = format!("{}{}_", self.prefix, request.domain);
            for entry in &descriptor.entries {
                key.push_str(&entry.key);
                key.push('_');
                key.push_str(&entry.value);
                key.push('_');
            }
            key.push_str(&window.to_string());
            pipe.cmd("INCRBY").arg(&key).arg(hits);
            pipe.cmd("EXPIRE").arg(&key).arg(TTL_SECONDS).ignore();
        }
        let counts: Vec<u64> = pipe
            .query_async(&mut self.connection.clone())
            .await
            .map_err(|_| Status::unavailable("redis"))?;
        Ok(Response::new(statuses(counts.into_iter().map(|count| {
            if count > MAX_LIMIT {
                Code::OverLimit
            } else {
                Code::Ok
            }
        }))))
    }
}

/// Kuadrant's limitador (in-memory storage): a limit per value of the
/// descriptor's entry.
struct Limitador {
    limiter: limitador::RateLimiter,
}

impl Limitador {
    fn new() -> Self {
        let limiter = limitador::RateLimiter::new(100_000);
        limiter.add_limit(limitador::limit::Limit::new(
            DOMAIN,
            MAX_LIMIT,
            TTL_SECONDS,
            [],
            [limitador::limit::Expression::parse("client").expect("an expression")],
        ));
        Self { limiter }
    }
}

impl RateLimitService for Limitador {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        let hits = u64::from(request.hits_addend.max(1));
        let namespace = limitador::limit::Namespace::from(request.domain.as_str());
        let values: HashMap<String, String> = request
            .descriptors
            .iter()
            .flat_map(|d| &d.entries)
            .map(|entry| (entry.key.clone(), entry.value.clone()))
            .collect();
        let context = limitador::limit::Context::from(values);
        let result = self
            .limiter
            .check_rate_limited_and_update(&namespace, &context, hits)
            .map_err(|_| Status::unavailable("limitador"))?;
        let code = if result.limited {
            Code::OverLimit
        } else {
            Code::Ok
        };
        Ok(Response::new(statuses(
            request.descriptors.iter().map(|_| code),
        )))
    }
}

/// One hot descriptor through leases of the Redis limiter.
struct LeasedHot {
    limiter: Leased<RedisLimiter<ConnectionManager, FixedWindowPolicy>>,
    policy: FixedWindowPolicy,
    hasher: KeyHasher,
}

impl RateLimitService for LeasedHot {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        let mut codes = Vec::with_capacity(request.descriptors.len());
        for descriptor in &request.descriptors {
            let value = descriptor.entries.first().map_or("", |e| e.value.as_str());
            let subject = self.hasher.hash_for(&self.policy, value.as_bytes());
            let decision = self
                .limiter
                .check(&Check::new(&self.policy, subject))
                .await
                .map_err(|_| Status::unavailable("redis"))?;
            codes.push(if decision.is_allowed() {
                Code::Ok
            } else {
                Code::OverLimit
            });
        }
        Ok(Response::new(statuses(codes.into_iter())))
    }
}

/// Serves `service` on a loopback port of the server runtime.
fn serve<S: RateLimitService>(runtime: &tokio::runtime::Runtime, service: S) -> String {
    let listener = runtime
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let address = listener.local_addr().expect("address");
    runtime.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(service))
            .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true)))
            .await
            .expect("serve");
    });
    format!("http://{address}")
}

#[derive(Clone, Copy)]
enum Keys {
    /// 10,000 client values, drawn at random.
    Spread,
    /// One value.
    Hot,
}

struct Workload {
    name: String,
    group: &'static str,
    address: String,
    keys: Keys,
}

#[derive(Clone, Copy)]
struct Measured {
    rate: f64,
    p50: Duration,
    p99: Duration,
    failed: usize,
}

async fn run(channels: &[Channel], workload: &Workload, seconds: f64) -> Measured {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..STREAMS)
        .map(|stream| {
            let mut client = RateLimitServiceClient::new(channels[stream % channels.len()].clone());
            let keys = workload.keys;
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut failed = 0;
                let mut state = 0x2545_F491_4F6C_DD1Du64 ^ (stream as u64 + 1);
                while Instant::now() < deadline {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let entry = match keys {
                        Keys::Spread => Entry {
                            key: "client".to_owned(),
                            value: format!("c{}", state % KEYS),
                        },
                        Keys::Hot => Entry {
                            key: "hot".to_owned(),
                            value: "h".to_owned(),
                        },
                    };
                    let request = RateLimitRequest {
                        domain: DOMAIN.to_owned(),
                        descriptors: vec![RateLimitDescriptor {
                            entries: vec![entry],
                            ..RateLimitDescriptor::default()
                        }],
                        hits_addend: 1,
                    };
                    let started = Instant::now();
                    match client.should_rate_limit(request).await {
                        Ok(response) if response.get_ref().overall_code == Code::Ok as i32 => {
                            latencies.push(started.elapsed());
                        }
                        _ => failed += 1,
                    }
                }
                (latencies, failed)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut failed = 0;
    for task in tasks {
        let (mine, lost) = task.await.expect("stream");
        latencies.extend(mine);
        failed += lost;
    }
    latencies.sort_unstable();
    let at = |per_mille: usize| {
        latencies
            .get(latencies.len().saturating_sub(1) * per_mille / 1_000)
            .copied()
            .unwrap_or_default()
    };
    Measured {
        rate: latencies.len() as f64 / seconds,
        p50: at(500),
        p99: at(990),
        failed,
    }
}

fn env(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

async fn redis_connection(url: &str) -> Result<ConnectionManager, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let connecting = ConnectionManager::new(client);
    match tokio::time::timeout(Duration::from_secs(3), connecting).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("no answer within 3 s".to_owned()),
    }
}

struct Postgres {
    admin: sqlx::PgPool,
    schema: String,
    pool: sqlx::PgPool,
}

async fn postgres(url: &str) -> Result<Postgres, String> {
    use sqlx::postgres::PgConnectOptions;
    let connecting = sqlx::PgPool::connect(url);
    let admin = match tokio::time::timeout(Duration::from_secs(3), connecting).await {
        Ok(Ok(pool)) => pool,
        Ok(Err(error)) => return Err(error.to_string()),
        Err(_) => return Err("no answer within 3 s".to_owned()),
    };
    let schema = format!("runlimit_server_bench_{}", std::process::id());
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&admin)
        .await
        .map_err(|e| e.to_string())?;
    let options = url
        .parse::<PgConnectOptions>()
        .map_err(|e| e.to_string())?
        .options([("search_path", schema.as_str())]);
    let pool = runlimit_postgres::pool_options()
        .max_connections(8)
        .connect_with(options)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Postgres {
        admin,
        schema,
        pool,
    })
}

fn main() {
    let seconds = env("BENCH_SECONDS", 2.0);
    let rounds = (env("BENCH_ROUNDS", 5.0) as usize).max(1);
    let redis_url = std::env::var("RUNLIMIT_REDIS_TEST_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    let postgres_url = std::env::var("RUNLIMIT_POSTGRES_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let prefix = format!("rl-bench-server:{}:", std::process::id());

    // The servers on a runtime of their own, the clients on another.
    let servers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("server")
        .enable_all()
        .build()
        .expect("runtime");
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("client")
        .enable_all()
        .build()
        .expect("runtime");

    let mut workloads = Vec::new();
    let mut add = |name: String, group: &'static str, address: String, keys: Keys| {
        workloads.push(Workload {
            name,
            group,
            address,
            keys,
        });
    };
    add(
        "gRPC floor (OK, no check)".to_owned(),
        "floor",
        serve(&servers, Floor),
        Keys::Spread,
    );
    add(
        "limitador 0.14, in memory (peer)".to_owned(),
        "peer",
        serve(&servers, Limitador::new()),
        Keys::Spread,
    );
    for (algorithm, extension) in ALGORITHMS {
        let store = AnyStore::new(MemoryStoreConfig::new(100_000).expect("valid"));
        add(
            format!("memory, {algorithm}"),
            "memory",
            serve(&servers, decider(store, extension)),
            Keys::Spread,
        );
    }

    let redis = servers.block_on(redis_connection(&redis_url));
    match &redis {
        Err(reason) => println!("Redis skipped ({redis_url}): {reason}"),
        Ok(connection) => {
            add(
                "reference design: INCRBY + EXPIRE pipeline".to_owned(),
                "reference",
                serve(
                    &servers,
                    Reference {
                        connection: connection.clone(),
                        prefix: format!("{prefix}reference:"),
                    },
                ),
                Keys::Spread,
            );
            let config = RedisConfig::default()
                .with_prefix(format!("{prefix}runlimit:"))
                .expect("valid");
            for (algorithm, extension) in ALGORITHMS {
                let limiter: RedisLimiter<_, AnyPolicy> =
                    RedisLimiter::new(connection.clone(), config.clone());
                add(
                    format!("Redis, {algorithm}"),
                    "redis",
                    serve(&servers, decider(limiter, extension)),
                    Keys::Spread,
                );
            }
            add(
                "hot descriptor: reference design".to_owned(),
                "hot reference",
                serve(
                    &servers,
                    Reference {
                        connection: connection.clone(),
                        prefix: format!("{prefix}reference-hot:"),
                    },
                ),
                Keys::Hot,
            );
            let shared: RedisLimiter<_, FixedWindowPolicy> =
                RedisLimiter::new(connection.clone(), config.clone());
            let leases = LeaseConfig::new(16)
                .expect("valid")
                .with_max_grant(1_000)
                .expect("valid");
            add(
                "hot descriptor: Redis with leases".to_owned(),
                "hot leased",
                serve(
                    &servers,
                    LeasedHot {
                        limiter: Leased::new(shared, leases),
                        policy: FixedWindowPolicy::new(
                            PolicyId::new("hot").expect("valid"),
                            ScopeId::new("hot").expect("valid"),
                            MAX_LIMIT,
                            Duration::from_secs(TTL_SECONDS),
                        )
                        .expect("valid"),
                        hasher: KeyHasher::new(SECRET).expect("long"),
                    },
                ),
                Keys::Hot,
            );
        }
    }

    let postgres = servers.block_on(postgres(&postgres_url));
    match &postgres {
        Err(reason) => println!("PostgreSQL skipped: {reason}"),
        Ok(postgres) => {
            let limiter: PostgresLimiter<AnyPolicy> =
                PostgresLimiter::new(postgres.pool.clone(), PostgresConfig::default());
            servers.block_on(limiter.migrate()).expect("migrate");
            for (algorithm, extension) in ALGORITHMS {
                add(
                    format!("PostgreSQL, {algorithm}"),
                    "postgres",
                    serve(&servers, decider(limiter.clone(), extension)),
                    Keys::Spread,
                );
            }
        }
    }

    let results = clients.block_on(async {
        let mut channels = Vec::new();
        for workload in &workloads {
            let mut mine = Vec::new();
            for _ in 0..CONNECTIONS {
                mine.push(
                    Channel::from_shared(workload.address.clone())
                        .expect("address")
                        .tcp_nodelay(true)
                        .connect()
                        .await
                        .expect("connect"),
                );
            }
            channels.push(mine);
        }
        // Warm-up: connections, stored keys, prepared statements.
        for (workload, channels) in workloads.iter().zip(&channels) {
            run(channels, workload, 0.5).await;
        }
        let mut results: Vec<Vec<Measured>> = vec![Vec::new(); workloads.len()];
        for round in 1..=rounds {
            let mut order: Vec<usize> = (0..workloads.len()).collect();
            if round % 2 == 0 {
                order.reverse();
            }
            for index in order {
                let measured = run(&channels[index], &workloads[index], seconds).await;
                println!(
                    "round {round}: {}: {:.0} checks/s, p50 {:.3} ms, p99 {:.3} ms{}",
                    workloads[index].name,
                    measured.rate,
                    measured.p50.as_secs_f64() * 1e3,
                    measured.p99.as_secs_f64() * 1e3,
                    if measured.failed > 0 {
                        format!(", {} failed", measured.failed)
                    } else {
                        String::new()
                    }
                );
                results[index].push(measured);
            }
        }
        results
    });

    report(&workloads, &results);

    servers.block_on(async {
        if let Ok(connection) = &redis {
            let mut connection = connection.clone();
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{prefix}*"))
                .query_async(&mut connection)
                .await
                .unwrap_or_default();
            for chunk in keys.chunks(500) {
                let _: Result<(), _> = redis::cmd("DEL")
                    .arg(chunk)
                    .query_async(&mut connection)
                    .await;
            }
        }
        if let Ok(postgres) = &postgres {
            postgres.pool.close().await;
            let _ = sqlx::query(&format!("DROP SCHEMA {} CASCADE", postgres.schema))
                .execute(&postgres.admin)
                .await;
        }
    });
    servers.shutdown_timeout(Duration::from_secs(1));
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn report(workloads: &[Workload], results: &[Vec<Measured>]) {
    let rates = |index: usize| results[index].iter().map(|m| m.rate).collect::<Vec<_>>();
    let of_group = |group: &str| workloads.iter().position(|w| w.group == group);
    // Each round's ratio to the floor measured in the same round, which a
    // slow round moves less than the ratio of medians.
    let ratio = |index: usize, base: usize| {
        median(
            results[index]
                .iter()
                .zip(&results[base])
                .map(|(m, b)| m.rate / b.rate)
                .collect(),
        )
    };
    let floor = of_group("floor").expect("the floor");
    let reference = of_group("reference");
    println!();
    println!(
        "| workload, {STREAMS} streams | checks/s | % of gRPC floor | vs reference design | p50 | p99 |"
    );
    println!("|---|---|---|---|---|---|");
    for (index, workload) in workloads.iter().enumerate() {
        let mut all = rates(index);
        all.sort_by(f64::total_cmp);
        let p50 = median(
            results[index]
                .iter()
                .map(|m| m.p50.as_secs_f64() * 1e3)
                .collect(),
        );
        let p99 = median(
            results[index]
                .iter()
                .map(|m| m.p99.as_secs_f64() * 1e3)
                .collect(),
        );
        let base = match workload.group {
            "hot leased" => of_group("hot reference"),
            "hot reference" => None,
            _ => reference,
        };
        let versus = base
            .filter(|&base| base != index)
            .map(|base| format!("{:.2}×", ratio(index, base)))
            .unwrap_or_default();
        let failed: usize = results[index].iter().map(|m| m.failed).sum();
        println!(
            "| {}{} | {:.0} ({:.0}–{:.0}) | {:.0}% | {versus} | {p50:.3} ms | {p99:.3} ms |",
            workload.name,
            if failed > 0 {
                format!(" ({failed} failed)")
            } else {
                String::new()
            },
            median(all.clone()),
            all[0],
            all[all.len() - 1],
            100.0 * ratio(index, floor),
        );
    }
    println!();
    println!("targets:");
    for (index, workload) in workloads.iter().enumerate() {
        let p99 = median(
            results[index]
                .iter()
                .map(|m| m.p99.as_secs_f64() * 1e3)
                .collect(),
        );
        let met = |ok: bool| if ok { "met" } else { "NOT met" };
        match workload.group {
            "memory" => {
                let share = ratio(index, floor);
                println!(
                    "  {}: {:.0}% of the gRPC floor (≥ 80%: {}), p99 {p99:.3} ms (< 2 ms: {})",
                    workload.name,
                    100.0 * share,
                    met(share >= 0.8),
                    met(p99 < 2.0)
                );
            }
            "redis" => {
                let versus = reference.map_or(0.0, |base| ratio(index, base));
                println!(
                    "  {}: {versus:.2}× the reference design (≥ 1×: {}), p99 {p99:.3} ms (< 2 ms: {})",
                    workload.name,
                    met(versus >= 1.0),
                    met(p99 < 2.0)
                );
            }
            "hot leased" => {
                let versus = of_group("hot reference").map_or(0.0, |base| ratio(index, base));
                println!(
                    "  {}: {versus:.2}× the reference design on the same hot descriptor (≥ 5×: {})",
                    workload.name,
                    met(versus >= 5.0)
                );
            }
            _ => {}
        }
    }
}
