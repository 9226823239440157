//! Choosing and building the limiter the server decides on.
//!
//! [`with_backend`] builds the limiter [`BackendArgs`] name and hands it to
//! a [`WithLimiter`], generic over the limiter's type, so each backend is
//! one match arm and the server is built once per backend type:
//!
//! * `memory`: an [`AnyStore`] in this process (all three algorithms).
//!   Its quotas are this process's own: with several replicas, each
//!   counts alone.
//! * `redis`: one Redis server (`--redis-url`), through
//!   [`RedisLimiter`] with a
//!   [`RedisConnection`](runlimit_redis::RedisConnection) that reconnects
//!   in the background.
//! * `redis-cluster`: a Redis Cluster (`--redis-cluster-nodes`, any
//!   reachable subset of its nodes). A request's descriptors cost one
//!   round trip per hash slot, in parallel: see [`SlotBatches`] for the
//!   all-or-nothing rule across slots.
//! * `postgres`: a PostgreSQL database (`--postgres-url`), through
//!   [`PostgresLimiter`] on a pool of
//!   its own; the schema is migrated when the database is first reached.
//!
//! A shared backend (every one but `memory`) is built like this:
//!
//! * **Denial cache in front.** A
//!   [`DenialCache`]
//!   (`cache.in_front_of(limiter)`) answers a key known to be over its
//!   limit without a round trip, until the store said it could retry.
//! * **Leases for hot rules.** Rules with `rate_limit.runlimit.lease: true`
//!   are admitted from leases of the shared quota ([`LeaseRouted`]): a
//!   replica takes a block of units in one round trip and admits from it
//!   locally. Exact: a lease admits only units the store consumed first, so
//!   the replicas together never admit more than the limit; the cost is that
//!   units one replica holds (at most `--lease-max-grant` per key) are
//!   denied to the others until spent, given back (after a second idle,
//!   and at shutdown) or their window ends.
//! * **Timeouts under the budget.** Every store operation is bounded by the
//!   request budget (`--budget`), and a Redis connection attempt by
//!   250 ms in the background, so that a stopped store answers
//!   `UNAVAILABLE` within the budget instead of holding requests. A
//!   budget must leave room for the store's answer: on PostgreSQL a durable
//!   commit waits for the disk, often longer than the default 10 ms
//!   (`--postgres-relaxed-durability` shortens it).
//! * **Started while the store is down.** The server starts whether or not
//!   the store answers ([`Connecting`]), answers `UNAVAILABLE` until it
//!   does, and admits again within about half a second of the store's
//!   recovery, then and after later outages (the Redis connection
//!   reconnects with pauses of at most 500 ms; PostgreSQL connections are
//!   replaced by the pool as they fail).

mod connecting;
mod leases;
mod slots;

use std::{fmt, future::Future, str::FromStr, sync::Arc, time::Duration};

use runlimit_core::{AnyPolicy, Backend, Grant, Lifecycle, Limiter};
use runlimit_memory::{
    AnyStore, ConfigError as MemoryConfigError, DenialCache, LeaseConfig, LeaseConfigError,
    MemoryStoreConfig,
};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};
use runlimit_redis::{KeyRouting, RedisConfig, RedisLimiter};
use zeroize::Zeroizing;

pub use connecting::{Connecting, ConnectingError, MAX_RETRY_DELAY};
pub use leases::LeaseRouted;
pub use slots::SlotBatches;

use crate::reload::SharedConfig;

/// The backends the server can decide on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
#[non_exhaustive]
pub enum BackendKind {
    /// In this process's memory.
    Memory,
    /// One Redis server.
    Redis,
    /// A Redis Cluster.
    RedisCluster,
    /// A PostgreSQL database.
    Postgres,
}

impl BackendKind {
    /// Whether its counters live in this process only: a restart forgets
    /// them, and replicas count apart.
    #[must_use]
    pub fn is_process_local(self) -> bool {
        matches!(self, Self::Memory)
    }

    /// Its name on the command line: `memory`, `redis`, `redis-cluster`,
    /// `postgres`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Redis => "redis",
            Self::RedisCluster => "redis-cluster",
            Self::Postgres => "postgres",
        }
    }
}

/// A URL that may hold a password: never shown by `Debug`.
#[derive(Clone)]
pub struct SecretUrl(Arc<Zeroizing<String>>);

impl SecretUrl {
    /// The URL.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretUrl(..)")
    }
}

impl FromStr for SecretUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.is_empty() {
            return Err("the URL is empty".to_owned());
        }
        Ok(Self(Arc::new(Zeroizing::new(text.to_owned()))))
    }
}

/// The backend's settings, as flags and environment variables.
#[derive(Debug, Clone, clap::Args)]
#[non_exhaustive]
pub struct BackendArgs {
    /// Where counters are kept: memory, redis, redis-cluster or postgres.
    #[arg(long, env = "RUNLIMIT_SERVER_BACKEND", value_enum, default_value_t = BackendKind::Memory)]
    pub backend: BackendKind,
    /// memory: the most counters kept at once; a new counter beyond them is
    /// over its limit until others expire.
    #[arg(
        long,
        env = "RUNLIMIT_SERVER_MEMORY_MAX_KEYS",
        default_value_t = 1_000_000
    )]
    pub memory_max_keys: usize,
    /// memory: the store's shards, each behind its own lock; the counters
    /// are divided evenly among them.
    #[arg(long, env = "RUNLIMIT_SERVER_MEMORY_SHARDS", default_value_t = 16)]
    pub memory_shards: usize,
    /// redis: the server's URL (`redis://host:6379/0`, `rediss://…`). Give
    /// a password in the environment variable rather than as a flag.
    #[arg(long, env = "RUNLIMIT_SERVER_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<SecretUrl>,
    /// redis-cluster: node URLs, comma-separated (any reachable subset of
    /// the cluster's nodes).
    #[arg(
        long,
        env = "RUNLIMIT_SERVER_REDIS_CLUSTER_NODES",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redis_cluster_nodes: Vec<SecretUrl>,
    /// redis, redis-cluster: the prefix of every key.
    #[arg(
        long,
        env = "RUNLIMIT_SERVER_REDIS_PREFIX",
        default_value = "runlimit:"
    )]
    pub redis_prefix: String,
    /// postgres: the database's URL (`postgres://user@host/db`; a schema
    /// with `?options=-csearch_path%3Dname`). Give a password in the
    /// environment variable rather than as a flag.
    #[arg(long, env = "RUNLIMIT_SERVER_POSTGRES_URL", hide_env_values = true)]
    pub postgres_url: Option<SecretUrl>,
    /// postgres: the most connections to the database.
    #[arg(
        long,
        env = "RUNLIMIT_SERVER_POSTGRES_MAX_CONNECTIONS",
        default_value_t = 16
    )]
    pub postgres_max_connections: u32,
    /// postgres: commit without waiting for the write-ahead log to reach
    /// disk (`synchronous_commit = off`): faster commits, but a database
    /// crash can forget the last few hundred milliseconds of admissions.
    #[arg(long, env = "RUNLIMIT_SERVER_POSTGRES_RELAXED_DURABILITY")]
    pub postgres_relaxed_durability: bool,
    /// Shared backends: the most keys the denial cache remembers as over
    /// their limit.
    #[arg(
        long,
        env = "RUNLIMIT_SERVER_DENIAL_CACHE_KEYS",
        default_value_t = 100_000
    )]
    pub denial_cache_keys: usize,
    /// Shared backends: the most keys of lease rules holding a lease at
    /// once; others are checked at the store, one round trip each.
    #[arg(long, env = "RUNLIMIT_SERVER_LEASE_KEYS", default_value_t = 10_000)]
    pub lease_keys: usize,
    /// Shared backends: the most units one replica holds unspent per key of
    /// a lease rule, so the most the others may be denied early.
    #[arg(long, env = "RUNLIMIT_SERVER_LEASE_MAX_GRANT", default_value_t = 64)]
    pub lease_max_grant: u64,
}

/// Why a backend could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The memory store's or the denial cache's settings are invalid.
    #[error("invalid memory store settings")]
    Memory(#[source] MemoryConfigError),
    /// The lease settings are invalid.
    #[error("invalid lease settings")]
    Lease(#[source] LeaseConfigError),
    /// The Redis settings are invalid.
    #[error("invalid Redis settings")]
    Redis(#[source] runlimit_redis::ConfigError),
    /// The PostgreSQL settings are invalid.
    #[error("invalid PostgreSQL settings")]
    Postgres(#[source] runlimit_postgres::ConfigError),
    /// A setting the backend needs is missing.
    #[error("the {backend} backend needs {flag}")]
    Missing {
        /// The backend.
        backend: &'static str,
        /// The flag that gives the setting.
        flag: &'static str,
    },
}

/// Why a store could not be reached, for logs: never the URL.
#[derive(Debug, thiserror::Error)]
enum Unreached {
    #[error("{0}")]
    Redis(#[source] runlimit_redis::ConnectError),
    #[error("cannot open the PostgreSQL pool")]
    Pool(#[source] sqlx::Error),
    #[error("cannot apply the PostgreSQL schema")]
    Migrate(#[source] runlimit_postgres::MaintenanceError),
    #[error("PostgreSQL did not answer in time")]
    Timeout,
}

/// What runs with the limiter [`with_backend`] built, whatever its type.
pub trait WithLimiter {
    /// What it returns.
    type Output;

    /// Runs with `limiter`.
    fn with<L>(self, limiter: L) -> impl Future<Output = Self::Output>
    where
        L: Limiter<Policy = AnyPolicy> + Lifecycle + Backend + 'static;
}

/// What a backend needs besides its own settings.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BackendNeeds {
    /// The most descriptors of a request: the limiter accepts batches of
    /// that many checks.
    pub max_descriptors: usize,
    /// The request budget: no store operation waits longer.
    pub budget: Duration,
    /// The configuration in use, whose lease rules are leased.
    pub config: Arc<SharedConfig>,
}

impl BackendNeeds {
    /// Batches of up to `max_descriptors`, operations within `budget`,
    /// leases for the lease rules of `config`.
    #[must_use]
    pub fn new(max_descriptors: usize, budget: Duration, config: Arc<SharedConfig>) -> Self {
        Self {
            max_descriptors,
            budget,
            config,
        }
    }
}

/// Builds the limiter `args` choose and runs `user` with it.
///
/// A shared store that does not answer does not stop the server: the
/// limiter answers errors until the store is reached (see the
/// [module documentation](self)).
///
/// # Errors
///
/// [`BackendError`] when the backend's settings are invalid or missing.
///
/// # Panics
///
/// For a shared backend, outside a Tokio runtime.
pub async fn with_backend<W: WithLimiter>(
    args: &BackendArgs,
    needs: &BackendNeeds,
    user: W,
) -> Result<W::Output, BackendError> {
    // Operations bounded by the budget; at least the least each store
    // accepts.
    let timeout = needs.budget.max(Duration::from_millis(1));
    match args.backend {
        BackendKind::Memory => {
            let store = memory(args, needs.max_descriptors).map_err(BackendError::Memory)?;
            Ok(user.with(store).await)
        }
        BackendKind::Redis => {
            let url = args.redis_url.clone().ok_or(BackendError::Missing {
                backend: "redis",
                flag: "--redis-url",
            })?;
            let config = redis_config(args, needs, timeout)?;
            let limiter = Connecting::start("redis", move || {
                let url = url.clone();
                let config = config.clone();
                async move {
                    RedisLimiter::<_, AnyPolicy>::connect(url.expose(), config)
                        .await
                        .map_err(Unreached::Redis)
                }
            })
            .await;
            shared(args, needs, limiter, user).await
        }
        BackendKind::RedisCluster => {
            if args.redis_cluster_nodes.is_empty() {
                return Err(BackendError::Missing {
                    backend: "redis-cluster",
                    flag: "--redis-cluster-nodes",
                });
            }
            let nodes = args.redis_cluster_nodes.clone();
            let config = redis_config(args, needs, timeout)?;
            let limiter = Connecting::start("redis-cluster", move || {
                let nodes = nodes.clone();
                let config = config.clone();
                async move {
                    RedisLimiter::<_, AnyPolicy>::connect_cluster(
                        nodes.iter().map(SecretUrl::expose),
                        config,
                    )
                    .await
                    .map(SlotBatches::new)
                    .map_err(Unreached::Redis)
                }
            })
            .await;
            shared(args, needs, limiter, user).await
        }
        BackendKind::Postgres => {
            let url = args.postgres_url.clone().ok_or(BackendError::Missing {
                backend: "postgres",
                flag: "--postgres-url",
            })?;
            let config = PostgresConfig::default()
                .with_pool_acquire_timeout(timeout)
                .and_then(|config| config.with_operation_timeout(timeout))
                .and_then(|config| config.with_max_batch_size(needs.max_descriptors))
                .map_err(BackendError::Postgres)?
                .with_relaxed_durability(args.postgres_relaxed_durability);
            let connections = args.postgres_max_connections.max(1);
            let limiter = Connecting::start("postgres", move || {
                let url = url.clone();
                async move { postgres(url.expose(), connections, config).await }
            })
            .await;
            shared(args, needs, limiter, user).await
        }
    }
}

/// The memory store `args` describe.
fn memory(args: &BackendArgs, max_descriptors: usize) -> Result<AnyStore, MemoryConfigError> {
    let config = MemoryStoreConfig::new(args.memory_max_keys)?
        .with_shard_count(args.memory_shards)?
        .with_max_batch_size(max_descriptors)?;
    Ok(AnyStore::new(config))
}

fn redis_config(
    args: &BackendArgs,
    needs: &BackendNeeds,
    timeout: Duration,
) -> Result<RedisConfig, BackendError> {
    RedisConfig::default()
        .with_prefix(args.redis_prefix.clone())
        .and_then(|config| config.with_operation_timeout(timeout))
        .and_then(|config| config.with_max_batch_size(needs.max_descriptors))
        .and_then(|config| config.with_routing(KeyRouting::PerSubject))
        .map_err(BackendError::Redis)
}

/// A limiter on a pool of its own, once the schema is applied.
async fn postgres(
    url: &str,
    connections: u32,
    config: PostgresConfig,
) -> Result<PostgresLimiter<AnyPolicy>, Unreached> {
    /// Applying the schema takes a few statements, and may wait for another
    /// replica applying it.
    const MIGRATION: Duration = Duration::from_secs(10);
    let pool = runlimit_postgres::pool_options()
        .max_connections(connections)
        // Connections are opened in the background, ahead of requests: one
        // opened for a request would have to fit in the request's budget.
        .min_connections(connections)
        .acquire_timeout(MIGRATION)
        .connect_lazy(url)
        .map_err(Unreached::Pool)?;
    let limiter = PostgresLimiter::<AnyPolicy>::with_dedicated_pool(pool, config);
    tokio::time::timeout(MIGRATION, limiter.migrate())
        .await
        .map_err(|_| Unreached::Timeout)?
        .map_err(Unreached::Migrate)?;
    Ok(limiter)
}

/// Runs `user` with `limiter` behind leases for lease rules and the denial
/// cache.
async fn shared<S, W>(
    args: &BackendArgs,
    needs: &BackendNeeds,
    limiter: S,
    user: W,
) -> Result<W::Output, BackendError>
where
    S: Grant<Policy = AnyPolicy> + Backend + 'static,
    W: WithLimiter,
{
    let leases = LeaseConfig::new(args.lease_keys)
        .and_then(|config| config.with_max_grant(args.lease_max_grant))
        .map_err(BackendError::Lease)?;
    let cache = Arc::new(DenialCache::new(
        MemoryStoreConfig::new(args.denial_cache_keys).map_err(BackendError::Memory)?,
    ));
    let routed = LeaseRouted::new(limiter, leases, Arc::clone(&needs.config));
    let limiter = cache
        .in_front_of(routed)
        .with_max_batch_size(needs.max_descriptors);
    Ok(user.with(limiter).await)
}
