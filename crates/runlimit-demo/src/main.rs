//! Runlimit demo: an Axum login API guarded by a client limit and an identity
//! limit, driven by a short simulated credential-stuffing burst over real HTTP.
//!
//! ```text
//! cargo run -p runlimit-demo                      # one replica, memory backend
//! cargo run -p runlimit-demo -- --replicas 3      # three routers sharing one backend
//! ```
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
    routing::post,
};
use http::{StatusCode, request::Parts};
use http_body_util::{BodyExt, Empty};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use runlimit_axum::{MissingMetadata, RateLimitLayer};
use runlimit_core::{
    FixedWindowPolicy, KeyHasher, Lifecycle, Limiter, PolicyId, ScopeId, SubjectKey,
};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};
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
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        replicas: 1,
        database_url: None,
        redis_url: None,
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
            "--redis-url" => {
                options.redis_url = Some(args.next().ok_or("--redis-url needs a Redis URL")?);
            }
            "-h" | "--help" => {
                return Err(
                    "usage: runlimit-demo [--replicas N] [--database-url postgres://...]"
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

fn router<L>(limiter: Arc<L>, hasher: Arc<KeyHasher>) -> Result<Router, Box<dyn Error>>
where
    L: Limiter<Policy = FixedWindowPolicy> + Lifecycle + 'static,
{
    let client_policy = FixedWindowPolicy::new(
        PolicyId::new("auth.login")?,
        ScopeId::new("client")?,
        40,
        Duration::from_secs(60),
    )?;
    let identity_policy = FixedWindowPolicy::new(
        PolicyId::new("auth.login")?,
        ScopeId::new("identity")?,
        8,
        Duration::from_secs(60),
    )?;
    let client_hasher = Arc::clone(&hasher);
    let client_key =
        move |parts: &Parts, policy: &FixedWindowPolicy| -> Result<SubjectKey, MissingMetadata> {
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
        move |parts: &Parts, policy: &FixedWindowPolicy| -> Result<SubjectKey, MissingMetadata> {
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
    Ok(Router::new()
        .route("/login", post(login))
        .layer(limits)
        .layer(middleware::from_fn(resolve_client)))
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

async fn run(options: Options) -> Result<(), Box<dyn Error>> {
    // A real deployment loads this from secret storage; every replica shares it.
    let hasher = Arc::new(KeyHasher::new(
        b"demo secret: use 32+ random bytes from a vault",
    )?);
    if let Some(url) = &options.redis_url {
        // Keys of this run only: a fresh prefix, expiring by themselves.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        let config = RedisConfig::default().with_prefix(format!("runlimit-demo:{nanos}:"))?;
        // A connection built for admission: bounded reconnection delays, and
        // checks refused without being sent while Redis is unreachable.
        let limiter = RedisLimiter::<_, FixedWindowPolicy>::connect(url, config).await?;
        return serve_and_drive(&options, "Redis", Arc::new(limiter), hasher).await;
    }
    match &options.database_url {
        None => {
            // One backend shared by every replica, as PostgreSQL would be.
            let limiter = Arc::new(MemoryStore::new(
                MemoryStoreConfig::new(50_000)?.with_shard_count(16)?,
            ));
            serve_and_drive(&options, "memory", limiter, hasher).await
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
            );
            limiter.migrate().await?;
            serve_and_drive(&options, "PostgreSQL", Arc::new(limiter), hasher).await
        }
    }
}

async fn serve_and_drive<L>(
    options: &Options,
    backend: &str,
    limiter: Arc<L>,
    hasher: Arc<KeyHasher>,
) -> Result<(), Box<dyn Error>>
where
    L: Limiter<Policy = FixedWindowPolicy> + Lifecycle + 'static,
{
    let mut addresses = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..options.replicas {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        addresses.push(listener.local_addr()?);
        let app = router(Arc::clone(&limiter), Arc::clone(&hasher))?;
        servers.push(tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
        }));
    }
    let tally = drive(&addresses).await?;
    for server in servers {
        server.abort();
    }

    println!("Runlimit demo: credential-stuffing burst against POST /login");
    println!(
        "  backend: {backend} (shared by {} router replica(s) on {})",
        options.replicas,
        addresses
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  policies: auth.login/client 40 per 60 s, auth.login/identity 8 per 60 s (one atomic batch, \
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
    if allowed == 0 || denied == 0 {
        return Err("expected both admitted and denied requests".into());
    }
    if succeeded != attempts {
        return Err("the legitimate user was locked out by the rate limit".into());
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
    match run(options).await {
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
