//! The Redis limiter.

use std::{
    fmt,
    marker::PhantomData,
    sync::{Arc, LazyLock},
    time::Duration,
};

use redis::{
    Script, aio::ConnectionLike, cluster::ClusterClientBuilder, cluster_async::ClusterConnection,
};
use runlimit_core::{
    AdmissionReporter, BatchDecision, Check, Decision, Denial, FixedWindowPolicy, GcraPolicy,
    Limiter, Observer, Policy,
    gcra::{ExactMicros, GcraMicros},
    validate_batch,
};

use crate::{
    config::RedisConfig,
    connection::{ConnectError, RedisConnection},
    error::{CheckError, classify},
    keys::{hash_slot, redis_key},
};

static FIXED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("fixed_window.lua")));
static GCRA: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("gcra.lua")));

mod sealed {
    pub trait Sealed {}
    impl Sealed for runlimit_core::FixedWindowPolicy {}
    impl Sealed for runlimit_core::GcraPolicy {}
}

/// The policies Redis can evaluate: [`FixedWindowPolicy`] and [`GcraPolicy`].
/// Sealed.
pub trait RedisPolicy: Policy + sealed::Sealed + 'static {
    /// The script and its arguments for `checks`, and how to read its reply.
    #[doc(hidden)]
    fn script() -> &'static Script;
    #[doc(hidden)]
    fn arguments(checks: &[Check<'_, Self>]) -> Vec<i64>;
    #[doc(hidden)]
    fn decisions(checks: &[Check<'_, Self>], reply: &[i64]) -> Option<Vec<Decision>>;
}

/// A quota shared through Redis or Redis Cluster.
///
/// Each check or batch is one atomic Lua script (`EVALSHA`, reloaded on
/// `NOSCRIPT`): it reads Redis's clock (`TIME`), decides every check, and
/// writes only if all are allowed, setting each key to expire when its state
/// becomes worthless. `C` is any `redis` async connection: a reconnecting
/// `ConnectionManager` for one server, a `ClusterConnection` for a cluster.
pub struct RedisLimiter<C, P = FixedWindowPolicy> {
    connection: C,
    config: RedisConfig,
    cluster: bool,
    observer: Option<Arc<dyn Observer>>,
    policy: PhantomData<fn() -> P>,
}

impl<C, P> fmt::Debug for RedisLimiter<C, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("policy", &std::any::type_name::<P>())
            .field("config", &self.config)
            .field("cluster", &self.cluster)
            .field("observer", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

impl<C, P> RedisLimiter<C, P>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    P: RedisPolicy,
{
    /// A limiter for one Redis server (use a `ConnectionManager`, which
    /// reconnects by itself).
    #[must_use]
    pub fn new(connection: C, config: RedisConfig) -> Self {
        Self {
            connection,
            config,
            cluster: false,
            observer: None,
            policy: PhantomData,
        }
    }

    /// A limiter for a Redis Cluster: batches whose keys span slots are refused
    /// with [`CheckError::CrossSlot`] before anything is sent.
    #[must_use]
    pub fn cluster(connection: C, config: RedisConfig) -> Self {
        Self {
            cluster: true,
            ..Self::new(connection, config)
        }
    }

    /// Installs an observer for admission observations.
    #[must_use]
    pub fn with_observer(mut self, observer: impl Observer + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    async fn decide(&self, checks: &[Check<'_, P>]) -> Result<Vec<Decision>, CheckError> {
        let keys: Vec<String> = checks
            .iter()
            .map(|check| redis_key(&self.config, &check.counter_key()))
            .collect();
        if self.cluster {
            let mut slots: Vec<u16> = keys.iter().map(|key| hash_slot(key)).collect();
            slots.sort_unstable();
            slots.dedup();
            if slots.len() > 1 {
                return Err(CheckError::CrossSlot { slots: slots.len() });
            }
        }
        let mut invocation = P::script().prepare_invoke();
        for key in &keys {
            invocation.key(key);
        }
        for argument in P::arguments(checks) {
            invocation.arg(argument);
        }
        let mut connection = self.connection.clone();
        let deadline = tokio::time::Instant::now() + self.config.operation_timeout();
        // `invoke_async` answers NOSCRIPT by loading the script and retrying once;
        // a flush racing that reload yields NOSCRIPT again. The script did not run,
        // so trying again is safe.
        let mut attempts = 0;
        let reply: Vec<i64> = loop {
            attempts += 1;
            match tokio::time::timeout_at(deadline, invocation.invoke_async(&mut connection)).await
            {
                Err(_) => return Err(CheckError::OperationTimeout),
                Ok(Err(error))
                    if error.kind() == redis::ErrorKind::NoScriptError && attempts < 3 => {}
                Ok(Err(error)) => return Err(classify(error)),
                Ok(Ok(reply)) => break reply,
            }
        };
        P::decisions(checks, &reply).ok_or(CheckError::UnexpectedReply)
    }

    async fn check_one(&self, check: &Check<'_, P>) -> Result<Decision, CheckError> {
        let decide = async {
            let mut decisions = self.decide(std::slice::from_ref(check)).await?;
            decisions.pop().ok_or(CheckError::UnexpectedReply)
        };
        AdmissionReporter::observe_check(
            self.observer.as_deref(),
            check,
            decide,
            CheckError::may_have_consumed_quota,
        )
        .await
    }

    async fn check_batch(&self, checks: &[Check<'_, P>]) -> Result<BatchDecision, CheckError> {
        let decide = async {
            validate_batch(checks, self.config.max_batch_size())
                .map_err(CheckError::InvalidBatch)?;
            self.decide(checks).await.map(BatchDecision::from_decisions)
        };
        AdmissionReporter::observe_batch(
            self.observer.as_deref(),
            checks,
            decide,
            CheckError::may_have_consumed_quota,
        )
        .await
    }
}

impl<P: RedisPolicy> RedisLimiter<RedisConnection, P> {
    /// Connects to the Redis server at `url` with a [`RedisConnection`] built
    /// for admission: each connection attempt bounded by
    /// [`connect_timeout`](RedisConfig::with_connect_timeout), reconnection
    /// attempts at most
    /// [`max_reconnect_delay`](RedisConfig::with_max_reconnect_delay) apart,
    /// and checks failing at once, definitely not consumed, while the server
    /// is unreachable.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] for an invalid URL or an unreachable server.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use runlimit_core::FixedWindowPolicy;
    /// use runlimit_redis::{RedisConfig, RedisLimiter};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter =
    ///     RedisLimiter::<_, FixedWindowPolicy>::connect("redis://cache.internal:6379/", RedisConfig::default())
    ///         .await?;
    /// # let _ = limiter;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str, config: RedisConfig) -> Result<Self, ConnectError> {
        let connection =
            RedisConnection::connect(url, config.connect_timeout(), config.max_reconnect_delay())
                .await?;
        Ok(Self::new(connection, config))
    }
}

impl<P: RedisPolicy> RedisLimiter<ClusterConnection, P> {
    /// Connects to a Redis Cluster through `nodes` (any reachable subset of
    /// its nodes), with redis-rs's cluster client set for admission: each
    /// connection attempt bounded by
    /// [`connect_timeout`](RedisConfig::with_connect_timeout), at most two
    /// retries of a failed request, and retry waits of at most
    /// [`max_reconnect_delay`](RedisConfig::with_max_reconnect_delay) (the
    /// client's defaults, sixteen retries and waits growing to minutes, would
    /// turn a node restart into minutes of failed checks).
    ///
    /// A request the cluster client retried may have run on the server before
    /// the failure, so a retried script can consume twice: the error
    /// direction is denial, never an extra admission.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] for an invalid node URL or when no node answers.
    pub async fn connect_cluster(
        nodes: impl IntoIterator<Item = &str>,
        config: RedisConfig,
    ) -> Result<Self, ConnectError> {
        let max_wait = u64::try_from(config.max_reconnect_delay().as_millis()).unwrap_or(u64::MAX);
        let client = ClusterClientBuilder::new(nodes.into_iter().collect::<Vec<_>>())
            .connection_timeout(config.connect_timeout())
            .retries(2)
            .min_retry_wait(max_wait.min(10))
            .max_retry_wait(max_wait)
            .build()
            .map_err(ConnectError::InvalidUrl)?;
        let connection = tokio::time::timeout(
            config.connect_timeout().saturating_mul(4),
            client.get_async_connection(),
        )
        .await
        .map_err(|_| {
            ConnectError::Unreachable(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connecting to the Redis Cluster timed out",
            )))
        })?
        .map_err(ConnectError::Unreachable)?;
        Ok(Self::cluster(connection, config))
    }
}

macro_rules! limiter_for {
    ($policy:ty) => {
        impl<C> Limiter for RedisLimiter<C, $policy>
        where
            C: ConnectionLike + Clone + Send + Sync + 'static,
        {
            type Policy = $policy;
            type Error = CheckError;

            async fn check(&self, check: &Check<'_, $policy>) -> Result<Decision, CheckError> {
                self.check_one(check).await
            }

            async fn check_all(
                &self,
                checks: &[Check<'_, $policy>],
            ) -> Result<BatchDecision, CheckError> {
                self.check_batch(checks).await
            }
        }
    };
}

limiter_for!(FixedWindowPolicy);
limiter_for!(GcraPolicy);

fn as_i64(value: u64) -> i64 {
    // Every value is bounded by MAX_LIMIT or MAX_WINDOW in microseconds.
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn as_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl RedisPolicy for FixedWindowPolicy {
    fn script() -> &'static Script {
        &FIXED_WINDOW
    }

    fn arguments(checks: &[Check<'_, Self>]) -> Vec<i64> {
        checks
            .iter()
            .flat_map(|check| {
                let policy = check.policy();
                [
                    as_i64(policy.limit()),
                    as_i64(policy.window_millis().saturating_mul(1_000)),
                    as_i64(check.cost()),
                ]
            })
            .collect()
    }

    fn decisions(checks: &[Check<'_, Self>], reply: &[i64]) -> Option<Vec<Decision>> {
        let now = *reply.last()?;
        if reply.len() != checks.len() * 3 + 1 {
            return None;
        }
        checks
            .iter()
            .zip(reply.chunks_exact(3))
            .map(|(check, values)| {
                let policy = check.policy();
                let left = Duration::from_micros(as_u64(values[2] - now));
                match values[0] {
                    0 => Decision::allowed(
                        policy.limit(),
                        policy.limit().saturating_sub(as_u64(values[1])),
                        left,
                    )
                    .ok(),
                    1 => Some(Decision::for_mode(
                        policy.quota_mode(),
                        Denial::QuotaExceeded {
                            capacity: policy.limit(),
                            retry_after: left,
                        },
                    )),
                    _ => None,
                }
            })
            .collect()
    }
}

impl RedisPolicy for GcraPolicy {
    fn script() -> &'static Script {
        &GCRA
    }

    fn arguments(checks: &[Check<'_, Self>]) -> Vec<i64> {
        checks
            .iter()
            .flat_map(|check| {
                let exact = GcraMicros::new(check.policy(), check.cost());
                [
                    exact.quota,
                    exact.increment.whole,
                    exact.increment.remainder,
                    exact.tolerance.whole,
                    exact.tolerance.remainder,
                ]
                .map(as_i64)
            })
            .collect()
    }

    fn decisions(checks: &[Check<'_, Self>], reply: &[i64]) -> Option<Vec<Decision>> {
        if reply.len() != checks.len() * 3 {
            return None;
        }
        checks
            .iter()
            .zip(reply.chunks_exact(3))
            .map(|(check, values)| {
                let exact = GcraMicros::new(check.policy(), check.cost());
                let ahead = ExactMicros {
                    whole: as_u64(values[1]),
                    remainder: as_u64(values[2]),
                };
                matches!(values[0], 0 | 1).then(|| exact.decision(check.policy(), ahead))
            })
            .collect()
    }
}
