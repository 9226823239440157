//! Runlimit demo: an Axum login API guarded by a client limit and an identity
//! limit, driven by a short simulated credential-stuffing burst over real HTTP.
//!
//! ```text
//! cargo run -p runlimit-demo                      # one replica, memory backend
//! cargo run -p runlimit-demo -- --replicas 3      # three routers sharing one backend
//! cargo run -p runlimit-demo -- --replicas 3 --database-url postgres://postgres@127.0.0.1/test
//! cargo run -p runlimit-demo -- --metrics 127.0.0.1:9100   # Prometheus metrics while it runs
//! cargo run -p runlimit-demo -- --replicas 3 --leased --redis-url redis://127.0.0.1:6379/
//! cargo run --release -p runlimit-demo -- --flood   # an IPv6 /48 floods the login form
//! ```
//!
//! With a shared backend (`--database-url` or `--redis-url`) each replica runs
//! the production topology: a memory gate per replica for the client limit,
//! in front of the shared identity limit behind a denial cache, as one
//! admission (`runlimit_memory::Tiered`); the summary reports the round trips
//! the gate and the cache saved.
//!
//! With `--leased` the demo shows the other main job: a hot tenant's API
//! quota shared by every replica, each admitting from an exact lease
//! (`runlimit_memory::Leased`) instead of a round trip per request; the
//! summary reports admitted, denied, shared round trips and the units the
//! leases gave back.
//!
//! With `--flood` the demo shows a flood of distinct keys instead: an IPv6 /48
//! spread over its 65,536 /64s, each sending 40 logins a minute that name
//! fresh accounts, against the README's login layer on a store of 50,000
//! keys, beside 1,000 new legitimate users a minute; once without the IPv6
//! network levels and once with them (`runlimit_demo::flood`).
//!
//! The load generator plays the role of a trusted reverse proxy: it connects
//! from loopback and names the attacking network in `X-Forwarded-For`. The
//! service trusts that header *only* because the peer is loopback, which is the
//! application-owned trusted-proxy decision Runlimit deliberately leaves to
//! applications (see `resolve_client`).

use std::{
    collections::BTreeMap,
    error::Error,
    net::{IpAddr, SocketAddr},
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use axum::{
    Router,
    extract::{ConnectInfo, Request},
    middleware::{self, Next},
    response::Response,
    routing::{get, post},
};
use http::{StatusCode, request::Parts};
use http_body_util::{BodyExt, Empty};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use runlimit_axum::{FromHeader, MissingMetadata, RateLimitLayer};
use runlimit_core::{
    AdmissionObservation, Backend, FixedWindowPolicy, Grant, KeyHasher, Lifecycle, Limiter,
    Observer, PolicyId, ScopeId, Shared, SubjectKey, TieredPolicy, observers::MetricsObserver,
};
use runlimit_demo::flood;
use runlimit_http::draft_11::Advertise;
use runlimit_memory::{DenialCache, LeaseConfig, Leased, MemoryStore, MemoryStoreConfig, Tiered};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};
use runlimit_redis::{RedisConfig, RedisLimiter};

/// The schema the PostgreSQL demo owns (and resets on every run).
const DEMO_SCHEMA: &str = "runlimit_demo";

/// The client address the trusted-proxy middleware established.
#[derive(Debug, Clone, Copy)]
struct ClientAddress(IpAddr);

/// The normalized account a login request names.
#[derive(Debug, Clone)]
struct LoginAccount(String);

struct Options {
    replicas: usize,
    database_url: Option<String>,
    redis_url: Option<String>,
    metrics: Option<SocketAddr>,
    leased: bool,
    flood: bool,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        replicas: 1,
        database_url: None,
        redis_url: None,
        metrics: None,
        leased: false,
        flood: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--replicas" => {
                options.replicas = args
                    .next()
                    .and_then(|value| value.parse().ok())
                    .filter(|replicas| (1..=16).contains(replicas))
                    .ok_or("--replicas needs a number from 1 to 16")?;
            }
            "--database-url" => {
                options.database_url =
                    Some(args.next().ok_or("--database-url needs a PostgreSQL URL")?);
            }
            "--metrics" => {
                options.metrics = Some(
                    args.next()
                        .and_then(|address| address.parse().ok())
                        .ok_or("--metrics needs an address such as 127.0.0.1:9100")?,
                );
            }
            "--leased" => options.leased = true,
            "--flood" => options.flood = true,
            "--redis-url" => {
                options.redis_url = Some(args.next().ok_or("--redis-url needs a Redis URL")?);
            }
            "-h" | "--help" => {
                return Err(
                    "usage: runlimit-demo [--replicas N] [--database-url postgres://... | \
                     --redis-url redis://...] [--metrics ADDRESS] [--leased] | --flood"
                        .to_owned(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(options)
}

/// Trusted-proxy handling, owned by the application: believe `X-Forwarded-For`
/// only from a peer we know is our proxy (here: loopback), otherwise use the TCP
/// peer. The rate-limit layer then keys on the extension, never on the header.
async fn resolve_client(mut request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip());
    if let Some(peer) = peer {
        let forwarded = request
            .headers()
            .get("x-forwarded-for")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(',').next_back())
            .and_then(|value| value.trim().parse::<IpAddr>().ok());
        let client = match forwarded {
            Some(forwarded) if peer.is_loopback() => forwarded,
            _ => peer,
        };
        request.extensions_mut().insert(ClientAddress(client));
    }
    // Identity normalization is application-owned too: trim and lowercase.
    if let Some(account) = request.uri().query().and_then(|query| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix("account="))
    }) {
        let account = account.trim().to_lowercase();
        request.extensions_mut().insert(LoginAccount(account));
    }
    next.run(request).await
}

/// The demo's two limits: per client network, and per account.
fn policies() -> Result<(FixedWindowPolicy, FixedWindowPolicy), Box<dyn Error>> {
    let client = FixedWindowPolicy::new(
        PolicyId::new("auth.login")?,
        ScopeId::new("client")?,
        40,
        Duration::from_secs(60),
    )?;
    let identity = FixedWindowPolicy::new(
        PolicyId::new("auth.login")?,
        ScopeId::new("identity")?,
        8,
        Duration::from_secs(60),
    )?;
    Ok((client, identity))
}

fn router<L>(
    limiter: Arc<L>,
    hasher: Arc<KeyHasher>,
    (client_policy, identity_policy): (L::Policy, L::Policy),
) -> Router
where
    L: Limiter + Lifecycle + 'static,
    L::Policy: Advertise + 'static,
{
    let client_hasher = Arc::clone(&hasher);
    let client_key =
        move |parts: &Parts, policy: &L::Policy| -> Result<SubjectKey, MissingMetadata> {
            let ClientAddress(address) = parts
                .extensions
                .get::<ClientAddress>()
                .ok_or(MissingMetadata::new("client address"))?;
            // Aggregate IPv6 clients by /64, the smallest block one subscriber gets.
            let subject = match address {
                IpAddr::V4(v4) => format!("client-network:{v4}"),
                IpAddr::V6(v6) => {
                    let s = v6.segments();
                    format!(
                        "client-network:{:x}:{:x}:{:x}:{:x}::/64",
                        s[0], s[1], s[2], s[3]
                    )
                }
            };
            Ok(client_hasher.hash_for(policy, subject.as_bytes()))
        };
    let identity_key =
        move |parts: &Parts, policy: &L::Policy| -> Result<SubjectKey, MissingMetadata> {
            let LoginAccount(account) = parts
                .extensions
                .get::<LoginAccount>()
                .ok_or(MissingMetadata::new("login account"))?;
            Ok(hasher.hash_for(policy, account.as_bytes()))
        };
    // Only failed logins count: a successful login is refunded after the
    // handler answers, so the account's owner never locks themselves out.
    let limits = RateLimitLayer::from_shared(limiter)
        .check(client_policy, client_key)
        .check(identity_policy, identity_key)
        // A caller must not learn how many attempts remain on an account.
        .withhold_fields()
        .count_when(|status, _| !status.is_success());
    // `route_layer`: only /login is limited, and other paths are still
    // answered 404 rather than refused for lacking a login's account.
    Router::new()
        .route("/login", post(login))
        .route_layer(limits)
        .layer(middleware::from_fn(resolve_client))
}

/// The one account whose password the demo knows.
const LEGITIMATE_ACCOUNT: &str = "carol@example.test";
const LEGITIMATE_PASSWORD: &str = "correct-horse";
/// Carol's own network, where she logs in from.
const LEGITIMATE_NETWORK: &str = "198.18.0.1";

async fn login(request: Request) -> (StatusCode, &'static str) {
    let account = request.extensions().get::<LoginAccount>();
    let password = request.uri().query().and_then(|query| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix("password="))
    });
    match (account, password) {
        (Some(LoginAccount(account)), Some(LEGITIMATE_PASSWORD))
            if account == LEGITIMATE_ACCOUNT =>
        {
            (StatusCode::OK, "welcome")
        }
        _ => (StatusCode::UNAUTHORIZED, "invalid credentials"),
    }
}

struct Tally {
    addresses: Vec<SocketAddr>,
    requests: usize,
    denied_by: BTreeMap<String, usize>,
    by_status: BTreeMap<u16, usize>,
    samples: BTreeMap<u16, Vec<String>>,
    /// The legitimate user's logins, and how many succeeded.
    legitimate: (usize, usize),
}

async fn drive(addresses: &[SocketAddr]) -> Result<Tally, Box<dyn Error>> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<axum::body::Bytes>>();
    let attackers = [
        "198.51.100.7",
        "203.0.113.9",
        "192.0.2.44",
        "2001:db8:7:1::5",
    ];
    let mut tally = Tally {
        addresses: Vec::new(),
        requests: 0,
        denied_by: BTreeMap::new(),
        by_status: BTreeMap::new(),
        samples: BTreeMap::new(),
        legitimate: (0, 0),
    };
    for round in 0..50 {
        // Carol logs in successfully every fourth round: 13 times in all,
        // more than the identity limit, and none of them counts.
        if round % 4 == 0 {
            let address = addresses[round % addresses.len()];
            let request = http::Request::post(format!(
                "http://{address}/login?account={LEGITIMATE_ACCOUNT}&password={LEGITIMATE_PASSWORD}"
            ))
            .header("x-forwarded-for", LEGITIMATE_NETWORK)
            .body(Empty::new())?;
            let response = client.request(request).await?;
            tally.legitimate.0 += 1;
            if response.status() == StatusCode::OK {
                tally.legitimate.1 += 1;
            }
            response.into_body().collect().await?;
        }
        for (index, network) in attackers.iter().enumerate() {
            // Three networks spray thirty accounts (the client limit catches
            // them); the fourth hammers one account with rotating capitalization
            // (the identity limit catches it after normalization).
            let account = if index == 3 {
                if round % 2 == 0 {
                    "Alice@Example.test".to_owned()
                } else {
                    "alice@example.test".to_owned()
                }
            } else {
                format!("user{}@example.test", (round * 3 + index) % 30)
            };
            let address = addresses[(round * attackers.len() + index) % addresses.len()];
            let request = http::Request::post(format!("http://{address}/login?account={account}"))
                .header("x-forwarded-for", *network)
                .body(Empty::new())?;
            let response = client.request(request).await?;
            let status = response.status().as_u16();
            tally.requests += 1;
            *tally.by_status.entry(status).or_default() += 1;
            if status == 429 {
                // A 429 names the denied policy in its RateLimit field, unless
                // the policy is withheld from responses: only the identity
                // policy is.
                let policy = response
                    .headers()
                    .get("ratelimit")
                    .and_then(|value| value.to_str().ok())
                    .and_then(|value| value.split('"').nth(1))
                    .unwrap_or("auth.login/identity (withheld from responses)")
                    .to_owned();
                *tally.denied_by.entry(policy).or_default() += 1;
            }
            let samples = tally.samples.entry(status).or_default();
            if samples.is_empty() {
                for name in ["ratelimit-policy", "ratelimit", "retry-after"] {
                    if let Some(value) = response.headers().get(name).and_then(|v| v.to_str().ok())
                    {
                        samples.push(format!("{name}: {value}"));
                    }
                }
            }
            response.into_body().collect().await?;
        }
    }
    Ok(tally)
}

/// Counts the operations that reach the shared backend.
#[derive(Debug, Clone, Default)]
struct RoundTrips(Arc<std::sync::atomic::AtomicUsize>);

impl Observer for RoundTrips {
    fn on_admission(&self, _: &AdmissionObservation<'_>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl RoundTrips {
    fn count(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Serves Prometheus metrics at `address` while the demo runs, when asked.
fn install_metrics(
    address: Option<SocketAddr>,
) -> Result<Option<PrometheusHandle>, Box<dyn Error>> {
    let Some(address) = address else {
        return Ok(None);
    };
    let (recorder, exporter) = PrometheusBuilder::new()
        .with_http_listener(address)
        .build()?;
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    tokio::spawn(exporter);
    println!("metrics: serving Prometheus text at http://{address}/metrics while the demo runs");
    Ok(Some(handle))
}

async fn run(options: Options) -> Result<(), Box<dyn Error>> {
    // A real deployment loads this from secret storage; every replica shares it.
    let hasher = Arc::new(KeyHasher::new(
        b"demo secret: use 32+ random bytes from a vault",
    )?);
    let metrics = install_metrics(options.metrics)?;
    let trips = RoundTrips::default();
    let observer = (MetricsObserver::new(), trips.clone());
    if let Some(url) = &options.redis_url {
        // Keys of this run only: a fresh prefix, expiring by themselves.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        let config = RedisConfig::default().with_prefix(format!("runlimit-demo:{nanos}:"))?;
        // A connection built for admission: bounded reconnection delays, and
        // checks refused without being sent while Redis is unreachable.
        let limiter = RedisLimiter::<_, FixedWindowPolicy>::connect(url, config)
            .await?
            .with_observer(observer);
        if options.leased {
            return serve_leased(&options, "Redis", limiter, &hasher, &trips).await;
        }
        return serve_tiered(&options, "Redis", limiter, hasher, &trips, metrics).await;
    }
    match &options.database_url {
        None if options.leased => {
            // A store every replica reaches, standing in for PostgreSQL or
            // Redis: each replica's lease holds units it granted.
            let shared = Shared(Arc::new(
                MemoryStore::new(MemoryStoreConfig::new(50_000)?).with_observer(observer),
            ));
            serve_leased(&options, "memory", shared, &hasher, &trips).await
        }
        None => {
            // One backend shared by every replica, as PostgreSQL would be.
            let limiter = Arc::new(
                MemoryStore::new(MemoryStoreConfig::new(50_000)?.with_shard_count(16)?)
                    .with_observer(observer),
            );
            let mut replicas = Vec::new();
            for _ in 0..options.replicas {
                replicas.push(router(
                    Arc::clone(&limiter),
                    Arc::clone(&hasher),
                    policies()?,
                ));
            }
            let tally = serve_and_drive(replicas).await?;
            report(&options, "memory", &tally, None, metrics.as_ref())
        }
        Some(url) => {
            // The demo keeps its tables in a schema of its own and starts it
            // afresh, so it never touches application tables or stale state.
            let mut admin = <sqlx::PgConnection as sqlx::Connection>::connect(url).await?;
            sqlx::raw_sql(&format!(
                "DROP SCHEMA IF EXISTS {DEMO_SCHEMA} CASCADE; CREATE SCHEMA {DEMO_SCHEMA}"
            ))
            .execute(&mut admin)
            .await?;
            // A pool of the limiter's own, so every check is one round trip.
            let pool = runlimit_postgres::pool_options()
                .after_connect(|connection, _| {
                    Box::pin(async move {
                        use sqlx::Executor;
                        connection
                            .execute(format!("SET search_path TO {DEMO_SCHEMA}").as_str())
                            .await
                            .map(|_| ())
                    })
                })
                .connect(url)
                .await?;
            let limiter = PostgresLimiter::<FixedWindowPolicy>::with_dedicated_pool(
                pool,
                PostgresConfig::default(),
            )
            .with_observer(observer);
            limiter.migrate().await?;
            if options.leased {
                return serve_leased(&options, "PostgreSQL", limiter, &hasher, &trips).await;
            }
            serve_tiered(&options, "PostgreSQL", limiter, hasher, &trips, metrics).await
        }
    }
}

/// What the gate and the denial cache saved the shared backend.
struct Saved {
    /// Operations that reached the shared backend.
    round_trips: usize,
    /// Checks the replicas' denial caches answered.
    cached: u64,
    /// Requests the replicas' gates turned away.
    gated: usize,
}

/// Every replica runs the production topology against the shared backend:
/// its own memory gate for the client limit, in front of the shared identity
/// limit behind its own denial cache, as one admission.
async fn serve_tiered<S>(
    options: &Options,
    backend: &str,
    shared: S,
    hasher: Arc<KeyHasher>,
    trips: &RoundTrips,
    metrics: Option<PrometheusHandle>,
) -> Result<(), Box<dyn Error>>
where
    S: Lifecycle<Policy = FixedWindowPolicy> + Backend + Clone + 'static,
{
    let (client, identity) = policies()?;
    // Distinct policy ids for the two tiers, as the topology asks. Each
    // replica's gate admits its share of the client limit, so the fleet
    // admits about the same per network as one shared client limit would.
    let client = FixedWindowPolicy::new(
        PolicyId::new("auth.login.local")?,
        client.scope().clone(),
        client.limit().div_ceil(options.replicas as u64),
        client.window(),
    )?;
    let mut replicas = Vec::new();
    let mut caches = Vec::new();
    for _ in 0..options.replicas {
        let cache = Arc::new(DenialCache::new(MemoryStoreConfig::new(10_000)?));
        let gate =
            MemoryStore::new(MemoryStoreConfig::new(10_000)?).with_observer(MetricsObserver::new());
        let limiter = Arc::new(Tiered::new(
            gate,
            cache
                .in_front_of(shared.clone())
                .with_observer(MetricsObserver::new()),
        ));
        replicas.push(router(
            limiter,
            Arc::clone(&hasher),
            (
                TieredPolicy::Gate(client.clone()),
                TieredPolicy::Shared(identity.clone()),
            ),
        ));
        caches.push(cache);
    }
    let tally = serve_and_drive(replicas).await?;
    let saved = Saved {
        round_trips: trips.count(),
        cached: caches.iter().map(|cache| cache.stats().hits).sum(),
        gated: tally
            .denied_by
            .iter()
            .filter(|(policy, _)| policy.starts_with("auth.login.local"))
            .map(|(_, count)| count)
            .sum(),
    };
    report(options, backend, &tally, Some(&saved), metrics.as_ref())
}

/// The leased mode's quota: one tenant's API requests, across every replica.
const TENANT_LIMIT: u64 = 1_000;
/// The most units a replica's lease takes for one key in one grant.
const MAX_GRANT: u64 = 50;
/// Requests sent in all, and how many at once: every fourth from a quieter
/// tenant that stays under its limit, the rest from a hot one that exceeds it.
const REQUESTS: usize = 1_600;
const HOT_TENANT: &str = "acme";
const QUIET_TENANT: &str = "globex";
const IN_FLIGHT: usize = 24;

/// Every replica admits the hot tenant's requests from its own lease in front
/// of the shared backend, and gives back what it did not spend.
async fn serve_leased<S>(
    options: &Options,
    backend: &str,
    shared: S,
    hasher: &Arc<KeyHasher>,
    trips: &RoundTrips,
) -> Result<(), Box<dyn Error>>
where
    S: Grant<Policy = FixedWindowPolicy> + Clone + 'static,
{
    let policy = FixedWindowPolicy::new(
        PolicyId::new("api.requests")?,
        ScopeId::new("tenant")?,
        TENANT_LIMIT,
        Duration::from_secs(60),
    )?;
    let config = LeaseConfig::new(10_000)?.with_max_grant(MAX_GRANT)?;
    let mut replicas = Vec::new();
    let mut apps = Vec::new();
    for _ in 0..options.replicas {
        let leased = Arc::new(Leased::new(shared.clone(), config));
        // The tenant the caller names; a request without it is answered 400.
        let tenant_key = FromHeader::new(hasher, "x-tenant")?;
        apps.push(
            Router::new()
                .route("/api", get(|| async { "ok" }))
                .route_layer(
                    RateLimitLayer::from_shared(Arc::clone(&leased))
                        .check(policy.clone(), tenant_key),
                ),
        );
        replicas.push(leased);
    }
    let mut servers = Vec::new();
    let mut addresses = Vec::new();
    for app in apps {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        addresses.push(listener.local_addr()?);
        servers.push(tokio::spawn(
            async move { axum::serve(listener, app).await },
        ));
    }
    let by_status = drive_tenants(&addresses).await;
    for server in servers {
        server.abort();
    }
    let by_status = by_status?;
    let count = |tenant: &str, status: u16| {
        by_status
            .get(&(tenant.to_owned(), status))
            .copied()
            .unwrap_or_default()
    };
    let held: u64 = replicas
        .iter()
        .map(|leased| leased.stats().units_held)
        .sum();
    for leased in &replicas {
        leased.flush().await?;
    }
    let stats = replicas.iter().map(|leased| leased.stats()).fold(
        (0, 0, 0),
        |(grants, local, returned), stats| {
            (
                grants + stats.grants,
                local + stats.local_hits,
                returned + stats.units_returned,
            )
        },
    );
    let (grants, local_hits, returned) = stats;
    let admitted = count(HOT_TENANT, 200) + count(QUIET_TENANT, 200);
    println!("Runlimit demo: a hot tenant's API quota across replicas, admitted from exact leases");
    println!(
        "  backend: {backend} ({} router replica(s), each with a lease per hot key in front of \
         one {backend} quota, on {})",
        options.replicas,
        addresses
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  policy: {TENANT_LIMIT} per 60 s per tenant; leases of at most {MAX_GRANT} units per \
         key per replica"
    );
    println!("  requests: {REQUESTS}, {IN_FLIGHT} at a time");
    for tenant in [HOT_TENANT, QUIET_TENANT] {
        println!(
            "  tenant {tenant}: {} admitted, {} denied",
            count(tenant, 200),
            count(tenant, 429)
        );
    }
    let round_trips = trips.count();
    #[allow(clippy::cast_precision_loss)]
    let per_admitted = round_trips as f64 / admitted.max(1) as f64;
    println!(
        "  shared backend: {round_trips} operations reached {backend} ({per_admitted:.3} per \
         admitted request): {grants} grants; {local_hits} requests admitted from a lease without \
         a round trip"
    );
    println!(
        "  leases: {held} units held when the requests stopped, {returned} given back on flush"
    );
    let hot = count(HOT_TENANT, 200) as u64;
    if hot > TENANT_LIMIT {
        return Err(format!("admitted {hot}, over the limit of {TENANT_LIMIT}").into());
    }
    // A replica may be denied while units sit in another's lease: at most
    // one grant per replica.
    let bound = options.replicas as u64 * MAX_GRANT;
    if hot + bound < TENANT_LIMIT {
        return Err(format!("admitted {hot}, more than {bound} under the limit").into());
    }
    if count(QUIET_TENANT, 429) > 0 {
        return Err("the quiet tenant was denied under its limit".into());
    }
    if round_trips * 2 > REQUESTS {
        return Err(format!("{round_trips} round trips for {REQUESTS} requests").into());
    }
    Ok(())
}

/// The tenants' requests, `IN_FLIGHT` at a time, spread over the replicas;
/// counts the responses by tenant and status.
async fn drive_tenants(
    addresses: &[SocketAddr],
) -> Result<BTreeMap<(String, u16), usize>, Box<dyn Error>> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<axum::body::Bytes>>();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..IN_FLIGHT {
        let (client, next, addresses) = (client.clone(), Arc::clone(&next), addresses.to_vec());
        tasks.push(tokio::spawn(async move {
            let mut by_status = BTreeMap::<(String, u16), usize>::new();
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= REQUESTS {
                    break;
                }
                let address = addresses[n % addresses.len()];
                let tenant = if n % 4 == 3 { QUIET_TENANT } else { HOT_TENANT };
                let request = http::Request::get(format!("http://{address}/api"))
                    .header("x-tenant", tenant)
                    .body(Empty::new())?;
                let response = client.request(request).await?;
                *by_status
                    .entry((tenant.to_owned(), response.status().as_u16()))
                    .or_default() += 1;
                response.into_body().collect().await?;
            }
            Ok::<_, Box<dyn Error + Send + Sync>>(by_status)
        }));
    }
    let mut by_status = BTreeMap::new();
    for task in tasks {
        for (status, count) in task.await?.map_err(|error| error.to_string())? {
            *by_status.entry(status).or_default() += count;
        }
    }
    Ok(by_status)
}

async fn serve_and_drive(replicas: Vec<Router>) -> Result<Tally, Box<dyn Error>> {
    let mut addresses = Vec::new();
    let mut servers = Vec::new();
    for app in replicas {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        addresses.push(listener.local_addr()?);
        servers.push(tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
        }));
    }
    let tally = drive(&addresses).await;
    for server in servers {
        server.abort();
    }
    let mut tally = tally?;
    tally.addresses = addresses;
    Ok(tally)
}

fn report(
    options: &Options,
    backend: &str,
    tally: &Tally,
    saved: Option<&Saved>,
    metrics: Option<&PrometheusHandle>,
) -> Result<(), Box<dyn Error>> {
    println!("Runlimit demo: credential-stuffing burst against POST /login");
    let topology = if saved.is_some() {
        "each with a memory gate for the client limit and a denial cache, in front of"
    } else {
        "sharing"
    };
    println!(
        "  backend: {backend} ({} router replica(s) {topology} one {backend} quota, on {})",
        options.replicas,
        tally
            .addresses
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let client = if saved.is_some() {
        format!(
            "client {} per 60 s per replica (the gate)",
            40_u64.div_ceil(options.replicas as u64)
        )
    } else {
        "client 40 per 60 s".to_owned()
    };
    println!(
        "  policies: {client}, identity 8 per 60 s (one atomic admission, \
         counting failed logins only)"
    );
    println!("  requests: {}", tally.requests);
    for (status, count) in &tally.by_status {
        let meaning = match *status {
            200 => "logged in",
            401 => "reached the handler (wrong password)",
            429 => "denied by a rate limit before the handler",
            503 => "refused: limiter unavailable or at capacity",
            _ => "other",
        };
        let reason = StatusCode::from_u16(*status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        println!("  {status} {reason}: {count} ({meaning})");
        if *status == 429 {
            for (policy, count) in &tally.denied_by {
                println!("      {count} by {policy}");
            }
        }
        for sample in tally.samples.get(status).into_iter().flatten() {
            println!("      sample {sample}");
        }
    }
    let allowed = tally.by_status.get(&401).copied().unwrap_or_default();
    let denied = tally.by_status.get(&429).copied().unwrap_or_default();
    let (attempts, succeeded) = tally.legitimate;
    println!(
        "  legitimate user: {succeeded} of {attempts} logins by {LEGITIMATE_ACCOUNT} succeeded, \
         more than the identity limit of 8: only failed logins count, successful ones are refunded"
    );
    println!("  summary: {allowed} attacker attempts reached the handler, {denied} denied");
    if let Some(saved) = saved {
        println!(
            "  shared backend: {} operations reached {backend}; the gates turned away {} \
             requests and the denial caches answered {} identity checks without a round trip",
            saved.round_trips, saved.gated, saved.cached
        );
    }
    if let Some(handle) = metrics {
        println!("  metrics excerpt (Prometheus text):");
        let rendered = handle.render();
        let excerpt: Vec<&str> = rendered
            .lines()
            .filter(|line| line.starts_with("runlimit_denials_total"))
            .collect();
        for line in &excerpt {
            println!("      {line}");
        }
        if excerpt.is_empty() {
            return Err("expected denials in the metrics".into());
        }
    }
    if allowed == 0 || denied == 0 {
        return Err("expected both admitted and denied requests".into());
    }
    if succeeded != attempts {
        return Err("the legitimate user was locked out by the rate limit".into());
    }
    if saved.is_some_and(|saved| saved.cached == 0) {
        return Err("expected the denial cache to answer some checks".into());
    }
    Ok(())
}

/// An IPv6 /48 floods the README's login layer for a minute, without and
/// then with the network levels; what legitimate users and the attacker got.
async fn run_flood() -> Result<(), Box<dyn Error>> {
    let flood = flood::Flood {
        windows: 1,
        ..flood::Flood::readme_ipv6()
    };
    println!(
        "an IPv6 /48 sends {} logins a minute from 65,536 /64s, each naming a fresh account, \
         to a store of {} keys; {} new users a minute log in from elsewhere",
        flood.attack.per_window(),
        flood.max_keys,
        flood.legitimate_per_window
    );
    for (label, protection) in [
        ("without network levels", flood::Protection::OFF),
        (
            "with network levels and the overflow tier",
            flood::Protection::ON,
        ),
    ] {
        let report = flood
            .with_protection(protection)
            .run()
            .await
            .map_err(|error| error.to_string())?;
        println!(
            "{label}: legitimate users {} of {} admitted ({:.1}%), {} answered 503 at capacity; \
             the attacker {} of {} admitted; the store peaked at {} of {} keys",
            report.legitimate.admitted,
            report.legitimate.sent,
            report.legitimate.admitted_share() * 100.0,
            report.legitimate.at_capacity,
            report.attack.admitted,
            report.attack.sent,
            report.peak_keys,
            report.capacity,
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let outcome = if options.flood {
        run_flood().await
    } else {
        run(options).await
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let mut message = error.to_string();
            let mut source = error.source();
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("demo failed: {message}");
            ExitCode::FAILURE
        }
    }
}
