//! The Redis limiter.

use std::{
    fmt,
    marker::PhantomData,
    sync::{
        Arc, LazyLock,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    time::Duration,
};

use redis::{
    FromRedisValue, Script, ToRedisArgs, aio::ConnectionLike, cluster::ClusterClientBuilder,
    cluster_async::ClusterConnection,
};
use runlimit_core::{
    Admission, AdmissionOutcome, AdmissionReporter, Admitted, Backend, BatchDecision,
    CarryObservation, Check, Credits, Decision, Denial, FixedWindowPolicy, GcraPolicy, Grant,
    Granted, Lifecycle, Limiter, Maintain, MaintenanceReport, Observer, Operation, Policy,
    PolicyLabel, Receipt, Refunded, Settle, SlidingWindowPolicy, Stamp, Storage, SubjectKey,
    gcra::{ExactMicros, GcraMicros},
    grant::grant_bound,
    notify,
    sliding::{Buckets, COUNTED, SlidingMicros, SlidingOutcome},
    validate_batch,
};

use crate::{
    carry::{self, Sources},
    coalesce::{Coalescer, Member},
    config::RedisConfig,
    connection::{ConnectError, RedisConnection},
    error::{CheckError, classify},
    keys::{hash_slot, redis_key},
};

/// A Lua script, with its source for `EVAL` when `EVALSHA` keeps missing,
/// and the same code as a function library.
#[doc(hidden)]
#[derive(Debug)]
pub struct Lua {
    script: Script,
    code: &'static str,
    library: Library,
}

/// A function library (`FUNCTION LOAD`) holding one function, named after
/// the library; the name carries a digest of the code, so Runlimit versions
/// sharing a server never replace each other's functions.
#[derive(Debug)]
struct Library {
    function: String,
    code: String,
}

impl Lua {
    /// `code` as a script, and `library` (the same code with the library's
    /// prelude and entry) as a function named after a digest of it.
    fn new(code: &'static str, library: &'static str) -> Self {
        let digest = Script::new(library).get_hash().to_owned();
        let function = format!("runlimit_{}", &digest[..16]);
        Self {
            script: Script::new(code),
            code,
            library: Library {
                code: format!(
                    "#!lua name={function}\n{}",
                    library.replace("RUNLIMIT_FUNCTION", &function)
                ),
                function,
            },
        }
    }
}

/// A script and its function library: the prelude of a script
/// (`script.lua`: the clock and the Lua libraries used) or of a library
/// (`library.lua`), the prelude every script shares (`common.lua`: state
/// reading and writing, the batch rule), the algorithm's own body, and the
/// entry point after `=>`: one check or batch (`single.lua`), several
/// coalesced into one invocation (`coalesced_script.lua`, after the
/// algorithm's `*_coalesced.lua` and `coalesced.lua`), a refund, a grant or
/// a peek. A library wraps the entry point in a function that
/// `library_entry.lua` registers.
macro_rules! script {
    ($($part:literal),* => $entry:literal) => {
        LazyLock::new(|| Lua::new(
            concat!(
                include_str!("script.lua"),
                include_str!("common.lua"),
                $(include_str!($part),)*
                include_str!($entry)
            ),
            concat!(
                include_str!("library.lua"),
                include_str!("common.lua"),
                $(include_str!($part),)*
                "\nlocal function entry()\n",
                include_str!($entry),
                "end\n",
                include_str!("library_entry.lua")
            ),
        ))
    };
}

mod any;

/// Invocations of one group (the server, or a cluster slot) sent before later
/// checks queue to be coalesced: two keep the connection's pipeline busy, so
/// coalescing starts only where the server, not the round trip, is the limit.
/// At 32 tasks, two let about fifteen members gather per invocation (with
/// the leader's yield in `coalesce`; ten without it) where three let ten and
/// four five or six, so each check bears a small share of an invocation's
/// fixed cost; at 8 tasks coalesced checks still keep up with uncoalesced
/// ones.
const IN_FLIGHT: usize = 2;

static FIXED_WINDOW: LazyLock<Lua> = script!("fixed_window.lua" => "single.lua");
static SLIDING_WINDOW: LazyLock<Lua> = script!("eighths.lua", "sliding_window.lua" => "single.lua");
static GCRA: LazyLock<Lua> = script!("exact_division.lua", "gcra.lua" => "single.lua");
static FIXED_WINDOW_COALESCED: LazyLock<Lua> = script!(
    "fixed_window.lua",
    "fixed_window_coalesced.lua",
    "coalesced.lua" => "coalesced_script.lua"
);
static SLIDING_WINDOW_COALESCED: LazyLock<Lua> = script!(
    "eighths.lua",
    "sliding_window.lua",
    "sliding_window_coalesced.lua",
    "coalesced.lua" => "coalesced_script.lua"
);
static GCRA_COALESCED: LazyLock<Lua> = script!(
    "exact_division.lua",
    "gcra.lua",
    "gcra_coalesced.lua",
    "coalesced.lua" => "coalesced_script.lua"
);
static FIXED_WINDOW_REFUND: LazyLock<Lua> =
    script!("fixed_window_refund.lua" => "refund_entry.lua");
static SLIDING_WINDOW_REFUND: LazyLock<Lua> =
    script!("sliding_window_refund.lua" => "refund_entry.lua");
static GCRA_REFUND: LazyLock<Lua> = script!("gcra_refund.lua" => "refund_entry.lua");
static PEEK: LazyLock<Lua> = script!(=> "peek.lua");
static PEEK_CARRYING: LazyLock<Lua> = script!(=> "peek_carrying.lua");
static FIXED_WINDOW_GRANT: LazyLock<Lua> =
    script!("fixed_window.lua", "grant.lua" => "grant_entry.lua");
static SLIDING_WINDOW_GRANT: LazyLock<Lua> =
    script!("eighths.lua", "sliding_window.lua", "grant.lua" => "grant_entry.lua");
static GCRA_GRANT: LazyLock<Lua> =
    script!("exact_division.lua", "gcra.lua", "grant.lua" => "grant_entry.lua");
// The same admissions and grants carrying state into their counters first
// (`carry.lua`, which reads states of every algorithm).
static FIXED_WINDOW_CARRYING: LazyLock<Lua> = script!(
    "exact_division.lua",
    "eighths.lua",
    "fixed_window.lua",
    "carry.lua" => "carrying.lua"
);
static SLIDING_WINDOW_CARRYING: LazyLock<Lua> = script!(
    "exact_division.lua",
    "eighths.lua",
    "sliding_window.lua",
    "carry.lua" => "carrying.lua"
);
static GCRA_CARRYING: LazyLock<Lua> = script!(
    "exact_division.lua",
    "eighths.lua",
    "gcra.lua",
    "carry.lua" => "carrying.lua"
);
static FIXED_WINDOW_CARRYING_GRANT: LazyLock<Lua> = script!(
    "exact_division.lua",
    "eighths.lua",
    "fixed_window.lua",
    "grant.lua",
    "carry.lua" => "carrying_grant.lua"
);
static SLIDING_WINDOW_CARRYING_GRANT: LazyLock<Lua> = script!(
    "exact_division.lua",
    "eighths.lua",
    "sliding_window.lua",
    "grant.lua",
    "carry.lua" => "carrying_grant.lua"
);
static GCRA_CARRYING_GRANT: LazyLock<Lua> = script!(
    "exact_division.lua",
    "eighths.lua",
    "gcra.lua",
    "grant.lua",
    "carry.lua" => "carrying_grant.lua"
);

// Policies of any algorithm (`any.lua`, after each algorithm's own).
static ANY: LazyLock<Lua> = script!(
    "exact_division.lua",
    "eighths.lua",
    "fixed_window.lua",
    "any_fixed_window.lua",
    "sliding_window.lua",
    "any_sliding_window.lua",
    "gcra.lua",
    "any.lua" => "single.lua"
);
static ANY_COALESCED: LazyLock<Lua> = script!(
    "exact_division.lua",
    "eighths.lua",
    "fixed_window.lua",
    "fixed_window_coalesced.lua",
    "any_fixed_window.lua",
    "any_fixed_window_lones.lua",
    "sliding_window.lua",
    "sliding_window_coalesced.lua",
    "any_sliding_window.lua",
    "any_sliding_window_lones.lua",
    "gcra.lua",
    "any.lua",
    "any_coalesced.lua",
    "coalesced.lua" => "coalesced_script.lua"
);
static ANY_CARRYING: LazyLock<Lua> = script!(
    "exact_division.lua",
    "eighths.lua",
    "fixed_window.lua",
    "any_fixed_window.lua",
    "sliding_window.lua",
    "any_sliding_window.lua",
    "gcra.lua",
    "any.lua",
    "carry.lua" => "carrying.lua"
);
static ANY_GRANT: LazyLock<Lua> = script!(
    "exact_division.lua",
    "eighths.lua",
    "fixed_window.lua",
    "any_fixed_window.lua",
    "sliding_window.lua",
    "any_sliding_window.lua",
    "gcra.lua",
    "any.lua",
    "grant.lua" => "grant_entry.lua"
);
static ANY_CARRYING_GRANT: LazyLock<Lua> = script!(
    "exact_division.lua",
    "eighths.lua",
    "fixed_window.lua",
    "any_fixed_window.lua",
    "sliding_window.lua",
    "any_sliding_window.lua",
    "gcra.lua",
    "any.lua",
    "grant.lua",
    "carry.lua" => "carrying_grant.lua"
);
static ANY_REFUND: LazyLock<Lua> = script!(
    "fixed_window_refund.lua",
    "sliding_window_refund.lua",
    "gcra_refund.lua",
    "any_refund.lua" => "refund_entry.lua"
);

mod sealed {
    pub trait Sealed {}
    impl Sealed for runlimit_core::FixedWindowPolicy {}
    impl Sealed for runlimit_core::GcraPolicy {}
    impl Sealed for runlimit_core::SlidingWindowPolicy {}
    impl Sealed for runlimit_core::AnyPolicy {}
}

/// Whether an admission's arguments mark the checks that carry (see
/// `carry.lua`): a first invocation's do, so that a marked check whose
/// counter holds no live state writes nothing and answers that it must carry
/// first; a carrying invocation's do not, since it carries before deciding.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marking {
    /// Checks that carry are marked.
    Marked,
    /// No check is marked.
    Unmarked,
}

impl Marking {
    /// Whether `check`'s arguments carry the mark.
    fn marks<P: Policy + ?Sized>(self, check: &Check<'_, P>) -> bool {
        self == Self::Marked && check.carries()
    }
}

/// The policies Redis can evaluate: [`FixedWindowPolicy`],
/// [`SlidingWindowPolicy`], [`GcraPolicy`] and
/// [`AnyPolicy`](runlimit_core::AnyPolicy) (any of the three, in batches
/// that may mix them). Sealed.
pub trait RedisPolicy: Policy + sealed::Sealed + 'static {
    /// The issuer name on this policy type's receipts.
    #[doc(hidden)]
    const ISSUER: &'static str;
    /// Which of a connection's coalescers decides this policy type's checks.
    #[doc(hidden)]
    const COALESCER: usize;
    /// The admission script and its arguments for `checks`, and how to read
    /// its reply: a decision and a receipt stamp per check.
    #[doc(hidden)]
    fn script() -> &'static Lua;
    /// The same admission for several independent members at once.
    #[doc(hidden)]
    fn coalesced_script() -> &'static Lua;
    /// The same admission carrying state into its counters first, with
    /// unmarked arguments.
    #[doc(hidden)]
    fn carrying_script() -> &'static Lua;
    #[doc(hidden)]
    fn arguments(checks: &[Check<'_, Self>], marking: Marking) -> Vec<i64>;
    #[doc(hidden)]
    fn decisions(checks: &[Check<'_, Self>], reply: &[i64]) -> Option<Vec<(Decision, Stamp)>>;
    /// The grant script, and its arguments for a grant of `check` of at most
    /// `up_to` units: the check's own arguments (for GCRA, those of one
    /// unit), then its cost and the bound.
    #[doc(hidden)]
    fn grant_script() -> &'static Lua;
    /// The same grant carrying state into its counter first.
    #[doc(hidden)]
    fn carrying_grant_script() -> &'static Lua;
    #[doc(hidden)]
    fn grant_arguments(check: &Check<'_, Self>, up_to: u64, marking: Marking) -> Vec<i64> {
        let mut arguments = Self::arguments(std::slice::from_ref(check), marking);
        arguments.extend([as_i64(check.cost()), as_i64(up_to)]);
        arguments
    }
    /// The refund script and its arguments crediting `units` (one amount per
    /// check, none zero) under a receipt's `admitted` stamps.
    #[doc(hidden)]
    fn refund_script() -> &'static Lua;
    #[doc(hidden)]
    fn refund_arguments(
        checks: &[Check<'_, Self>],
        admitted: &[Admitted],
        units: &[u64],
    ) -> Vec<i64>;
    /// What a peek of `check` reports for the state read at `now_us`.
    #[doc(hidden)]
    fn peek_decision(check: &Check<'_, Self>, now_us: i64, state: Option<&str>) -> Decision;
    /// The reply a single invocation would give a lone check with these
    /// `arguments` at `now`, from the state a coalesced invocation decided
    /// it on (its algorithm's `admit_lones`); `None` where the policy type
    /// has no such path or the reply is not one.
    #[doc(hidden)]
    fn lone_reply(state: &[u8], now: i64, arguments: &[i64]) -> Option<Vec<i64>> {
        let _ = (state, now, arguments);
        None
    }
    /// Whether a lone check with these `arguments`, sent alone, costs the
    /// server less through the coalesced script than through the single
    /// one (sliding windows: 69,000 instructions against 103,000).
    #[doc(hidden)]
    fn lone_is_cheaper_coalesced(arguments: &[i64]) -> bool {
        let _ = arguments;
        false
    }
}

/// A quota shared through Redis or Redis Cluster.
///
/// Each check or batch is one atomic Lua script, called as a Redis function
/// (`FCALL`, loaded where missing), or with `EVALSHA` (reloaded on
/// `NOSCRIPT`) where the server has no functions: it reads Redis's clock
/// (`TIME`), decides every check, and writes only if all are allowed,
/// setting each key to expire when its state becomes worthless.
///
/// `C` is any `redis` async connection: a reconnecting `ConnectionManager`
/// for one server, a `ClusterConnection` for a cluster.
///
/// The policy type `P` follows from the checks the limiter is given, so
/// `RedisLimiter::new(connection, config)` needs no annotation once the
/// limiter checks a policy; [`for_policy`](Self::for_policy) gives a limiter
/// of another policy type the same connection.
pub struct RedisLimiter<C, P = FixedWindowPolicy> {
    connection: C,
    config: RedisConfig,
    cluster: bool,
    observer: Option<Arc<dyn Observer>>,
    shared: Arc<Shared>,
    policy: PhantomData<fn() -> P>,
}

/// What the limiters of one connection share, whatever their policy type:
/// their clones and the limiters [`RedisLimiter::for_policy`] makes.
struct Shared {
    /// One coalescer per policy type, at [`RedisPolicy::COALESCER`]: a
    /// coalesced invocation runs one algorithm's script, so only checks of
    /// one policy type can be members of it.
    coalescers: [Coalescer; 4],
    /// Whether invocations call the scripts' function libraries; cleared
    /// for good when the server has no functions (before Redis 7.0) or the
    /// user may not call or load them.
    functions: AtomicBool,
}

impl Shared {
    fn new(config: &RedisConfig) -> Self {
        Self {
            coalescers: std::array::from_fn(|_| Coalescer::new(config.max_coalesced(), IN_FLIGHT)),
            functions: AtomicBool::new(true),
        }
    }
}

/// A clone shares the connection (Redis connections and managers are cheap
/// handles), the configuration, the observer and the coalescing.
impl<C: Clone, P> Clone for RedisLimiter<C, P> {
    fn clone(&self) -> Self {
        Self {
            connection: self.connection.clone(),
            config: self.config.clone(),
            cluster: self.cluster,
            observer: self.observer.clone(),
            shared: Arc::clone(&self.shared),
            policy: PhantomData,
        }
    }
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
    ///
    /// # Examples
    ///
    /// The policy type follows from the checks:
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// use runlimit_core::{Check, FixedWindowPolicy, Limiter, PolicyId, ScopeId, SubjectKey};
    /// use runlimit_redis::{RedisConfig, RedisLimiter};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://cache.internal:6379/")?;
    /// let connection = redis::aio::ConnectionManager::new(client).await?;
    /// let limiter = RedisLimiter::new(connection, RedisConfig::default());
    /// let policy = FixedWindowPolicy::new(
    ///     PolicyId::new("api.requests")?,
    ///     ScopeId::new("client")?,
    ///     100,
    ///     Duration::from_secs(60),
    /// )?;
    /// let decision = limiter.check(&Check::new(&policy, SubjectKey::from_digest([7; 32]))).await?;
    /// # let _ = decision;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn new(connection: C, config: RedisConfig) -> Self {
        Self {
            shared: Arc::new(Shared::new(&config)),
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

    /// A limiter for policy type `Q` on this one's connection, sharing its
    /// configuration, observer and what it learnt of the server: the
    /// fixed-window and GCRA limiters of one server or cluster. Checks are
    /// coalesced with checks of the same policy type only (a coalesced
    /// invocation runs one algorithm's script), across every limiter of the
    /// connection.
    ///
    /// ```no_run
    /// # use runlimit_core::{FixedWindowPolicy, GcraPolicy};
    /// # use runlimit_redis::{RedisConnection, RedisLimiter};
    /// # fn run(windows: RedisLimiter<RedisConnection, FixedWindowPolicy>) {
    /// let rates: RedisLimiter<_, GcraPolicy> = windows.for_policy();
    /// # let _ = rates;
    /// # }
    /// ```
    #[must_use]
    pub fn for_policy<Q: RedisPolicy>(&self) -> RedisLimiter<C, Q> {
        RedisLimiter {
            connection: self.connection.clone(),
            config: self.config.clone(),
            cluster: self.cluster,
            observer: self.observer.clone(),
            shared: Arc::clone(&self.shared),
            policy: PhantomData,
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

    /// The coalescer of this policy type's checks.
    fn coalescer(&self) -> &Coalescer {
        &self.shared.coalescers[P::COALESCER]
    }

    /// The Redis keys of `checks`; on a cluster, refused unless they share
    /// one hash slot.
    fn keys(&self, checks: &[Check<'_, P>]) -> Result<Vec<String>, CheckError> {
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
        Ok(keys)
    }

    /// Runs `lua` as a script on `keys` with `arguments` by `deadline`.
    async fn invoke_script<T: FromRedisValue, A: ToRedisArgs>(
        &self,
        lua: &Lua,
        keys: &[String],
        arguments: &[A],
        deadline: tokio::time::Instant,
    ) -> Result<T, CheckError> {
        let mut invocation = lua.script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for argument in arguments {
            invocation.arg(argument);
        }
        let mut connection = self.connection.clone();
        // `invoke_async` sends EVALSHA and answers NOSCRIPT by loading the
        // script and sending EVALSHA again; a SCRIPT FLUSH racing that reload
        // yields NOSCRIPT once more. The script did not run, so sending it
        // whole with EVAL, which cannot miss, is safe.
        let reply =
            match tokio::time::timeout_at(deadline, invocation.invoke_async::<T>(&mut connection))
                .await
            {
                Err(_) => return Err(CheckError::OperationTimeout),
                Ok(Err(error)) if error.kind() == redis::ErrorKind::NoScriptError => {
                    let mut eval = redis::cmd("EVAL");
                    eval.arg(lua.code).arg(keys.len()).arg(keys).arg(arguments);
                    tokio::time::timeout_at(deadline, eval.query_async::<T>(&mut connection)).await
                }
                Ok(result) => Ok(result),
            };
        match reply {
            Err(_) => Err(CheckError::OperationTimeout),
            Ok(Err(error)) => Err(classify(error)),
            Ok(Ok(reply)) => Ok(reply),
        }
    }

    /// Runs `lua` on `keys` with `arguments` within the operation timeout:
    /// through its function library when the server has functions, loading
    /// the library where it is missing (a new server, a restart,
    /// `FUNCTION FLUSH`); otherwise as a script.
    async fn invoke<T: FromRedisValue, A: ToRedisArgs>(
        &self,
        lua: &Lua,
        keys: &[String],
        arguments: &[A],
    ) -> Result<T, CheckError> {
        let deadline = tokio::time::Instant::now() + self.config.operation_timeout();
        if !self.shared.functions.load(Relaxed) {
            return self.invoke_script(lua, keys, arguments, deadline).await;
        }
        let library = &lua.library;
        let mut call = redis::cmd("FCALL");
        call.arg(&library.function)
            .arg(keys.len())
            .arg(keys)
            .arg(arguments);
        let mut connection = self.connection.clone();
        let mut reply =
            tokio::time::timeout_at(deadline, call.query_async::<T>(&mut connection)).await;
        if let Ok(Err(error)) = &reply
            && function_missing(error)
        {
            // The function did not run. Load it (REPLACE: another client may
            // be loading it too) and call it again; where loading is refused,
            // the script decides instead.
            let mut load = redis::cmd("FUNCTION");
            load.arg("LOAD").arg("REPLACE").arg(&library.code);
            reply = match tokio::time::timeout_at(deadline, load.query_async::<()>(&mut connection))
                .await
            {
                Ok(Ok(())) => {
                    let again =
                        tokio::time::timeout_at(deadline, call.query_async::<T>(&mut connection))
                            .await;
                    if let Ok(Err(error)) = &again
                        && function_missing(error)
                    {
                        // Flushed again between loading and calling; nothing
                        // ran, and the script cannot miss.
                        return self.invoke_script(lua, keys, arguments, deadline).await;
                    }
                    again
                }
                Ok(Err(error)) => {
                    if functions_unavailable(&error) {
                        self.shared.functions.store(false, Relaxed);
                    }
                    return self.invoke_script(lua, keys, arguments, deadline).await;
                }
                Err(elapsed) => Err(elapsed),
            };
        }
        match reply {
            Ok(Err(error)) if functions_unavailable(&error) => {
                self.shared.functions.store(false, Relaxed);
                self.invoke_script(lua, keys, arguments, deadline).await
            }
            Err(_) => Err(CheckError::OperationTimeout),
            Ok(Err(error)) => Err(classify(error)),
            Ok(Ok(reply)) => Ok(reply),
        }
    }

    /// Decides `checks` (one check or a batch) in one invocation, coalesced
    /// with others where it can be; a marked check whose counter holds no
    /// live state makes it write nothing and answer that it must carry, and
    /// a carrying invocation decides instead. Sources in another slot are
    /// read alongside the first invocation, so a carry costs one more round
    /// trip, never two.
    async fn decide(&self, checks: &[Check<'_, P>]) -> Result<Vec<(Decision, Stamp)>, CheckError> {
        let deadline = tokio::time::Instant::now() + self.config.operation_timeout();
        let keys = self.keys(checks)?;
        let arguments = P::arguments(checks, Marking::Marked);
        // On a cluster a member's keys share one slot (checked above).
        let slot = self.cluster.then(|| hash_slot(&keys[0]));
        let first = async {
            if self.config.max_coalesced() > 1 {
                self.coalescer()
                    .decide(
                        slot.unwrap_or(0),
                        Member { keys, arguments },
                        self.config.operation_timeout(),
                        async |members| self.send(members).await,
                    )
                    .await
            } else {
                self.invoke(P::script(), &keys, &arguments).await
            }
        };
        let (reply, prefetched) = self
            .with_remote_sources(checks, slot, first, |reply: &Vec<i64>| must_carry(reply))
            .await;
        let reply: Vec<i64> = reply?;
        let reply = if must_carry(&reply) {
            let keys = self.keys(checks)?;
            let arguments = P::arguments(checks, Marking::Unmarked);
            self.invoke_carrying(
                P::carrying_script(),
                checks,
                keys,
                &arguments,
                prefetched,
                deadline,
            )
            .await?
        } else {
            reply
        };
        P::decisions(checks, &reply).ok_or(CheckError::UnexpectedReply)
    }

    /// Runs `first`, the marked invocation for `checks` on a counter in
    /// `slot` (`None`: one server). On a cluster, when a check may carry
    /// from a key in another slot (a previous secret's), reads those
    /// sources' states in parallel with it, for a carrying invocation to be
    /// handed without another round trip; where that read fails, the states
    /// are `None` and a carry reads them again.
    async fn with_remote_sources<T>(
        &self,
        checks: &[Check<'_, P>],
        slot: Option<u16>,
        first: impl Future<Output = Result<T, CheckError>>,
        must_carry: impl Fn(&T) -> bool,
    ) -> (Result<T, CheckError>, Option<Vec<Option<String>>>) {
        let Some(slot) = slot else {
            return (first.await, None);
        };
        if !checks
            .iter()
            .any(|check| check.carry_sources().next().is_some())
        {
            return (first.await, None);
        }
        let sources = Sources::new(checks, &self.config, Some(slot));
        let remote = sources.remote_keys();
        if remote.is_empty() {
            return (first.await, None);
        }
        // The read runs beside the invocation; a check that need not carry
        // answers as soon as its invocation does, dropping the read, so a
        // slow node holding the previous keys delays only carries.
        let read = self.read_states(&remote);
        tokio::pin!(first, read);
        let mut states = None;
        let reply = loop {
            tokio::select! {
                biased;
                reply = &mut first => break reply,
                read = &mut read, if states.is_none() => states = Some(read.ok()),
            }
        };
        if states.is_none() && reply.as_ref().is_ok_and(must_carry) {
            states = Some(read.await.ok());
        }
        (reply, states.flatten())
    }

    /// Runs `lua`, a carrying script, for `checks` on `keys` with their
    /// (unmarked) `arguments`, by the operation's `deadline`: the sources in
    /// the counters' slot are read by the script, any other is handed over:
    /// `prefetched`, their states read beside the marked invocation, or
    /// else read first with one `MGET` (on a cluster, in parallel per slot).
    /// Reports each counter that carried to the observer; returns the reply
    /// of the invocation it wraps.
    async fn invoke_carrying<T: FromRedisValue>(
        &self,
        lua: &Lua,
        checks: &[Check<'_, P>],
        keys: Vec<String>,
        arguments: &[i64],
        prefetched: Option<Vec<Option<String>>>,
        deadline: tokio::time::Instant,
    ) -> Result<T, CheckError> {
        let carrying = async {
            let slot = self.cluster.then(|| hash_slot(&keys[0]));
            let sources = Sources::new(checks, &self.config, slot);
            let remote = match prefetched {
                Some(states) => states,
                None => self.read_states(&sources.remote_keys()).await?,
            };
            let (keys, arguments) = sources.invocation(keys, arguments, &remote);
            self.invoke::<(Vec<i64>, T), _>(lua, &keys, &arguments)
                .await
        };
        let (carried, reply) = tokio::time::timeout_at(deadline, carrying)
            .await
            .map_err(|_| CheckError::OperationTimeout)??;
        if carried.len() != checks.len() {
            return Err(CheckError::UnexpectedReply);
        }
        self.report_carries(checks, &carried);
        Ok(reply)
    }

    /// The states stored at `keys` (none for no keys), with one `MGET`,
    /// which a cluster connection splits by slot and sends in parallel.
    async fn read_states(&self, keys: &[&str]) -> Result<Vec<Option<String>>, CheckError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut command = redis::cmd("MGET");
        command.arg(keys);
        let mut connection = self.connection.clone();
        let states: Vec<Option<String>> = match tokio::time::timeout(
            self.config.operation_timeout(),
            command.query_async(&mut connection),
        )
        .await
        {
            Err(_) => return Err(CheckError::OperationTimeout),
            Ok(Err(error)) => return Err(classify(error)),
            Ok(Ok(states)) => states,
        };
        if states.len() != keys.len() {
            return Err(CheckError::UnexpectedReply);
        }
        Ok(states)
    }

    /// Tells the observer which of `checks`' counters carried a source's
    /// state (`carried`: per check, the source's ordinal from 1, or 0).
    fn report_carries(&self, checks: &[Check<'_, P>], carried: &[i64]) {
        let Some(observer) = &self.observer else {
            return;
        };
        for (check, &ordinal) in checks.iter().zip(carried) {
            let source = usize::try_from(ordinal)
                .ok()
                .and_then(|ordinal| ordinal.checked_sub(1))
                .and_then(|index| check.carry_sources().nth(index));
            if let Some(source) = source {
                let observation = CarryObservation::new(PolicyLabel::of(check), source.from());
                notify(&**observer, |observer| observer.on_carry(&observation));
            }
        }
    }

    /// One invocation for `members`: the single-member script for one
    /// (but a lone check its algorithm decides more cheaply through the
    /// coalesced script), the coalesced script for several (one reply per
    /// member).
    async fn send(&self, members: Vec<Member>) -> Result<Vec<Vec<i64>>, CheckError> {
        if let [member] = members.as_slice()
            && !(member.keys.len() == 1 && P::lone_is_cheaper_coalesced(&member.arguments))
        {
            let reply = self
                .invoke(P::script(), &member.keys, &member.arguments)
                .await?;
            return Ok(vec![reply]);
        }
        let arguments = coalesced_arguments(&members);
        let mut keys = Vec::with_capacity(members.len());
        let mut own_arguments = Vec::with_capacity(members.len());
        for member in members {
            keys.extend(member.keys);
            own_arguments.push(member.arguments);
        }
        let reply: Vec<redis::Value> = self
            .invoke(P::coalesced_script(), &keys, &arguments)
            .await?;
        split_coalesced(&reply, &own_arguments, P::lone_reply).ok_or(CheckError::UnexpectedReply)
    }

    async fn check_one(&self, check: &Check<'_, P>) -> Result<(Decision, Stamp), CheckError> {
        let decide = async {
            let mut decisions = self.decide(std::slice::from_ref(check)).await?;
            decisions.pop().ok_or(CheckError::UnexpectedReply)
        };
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Check,
            std::slice::from_ref(check),
            decide,
            |(decision, _)| AdmissionOutcome::of_decision(decision),
            CheckError::may_have_consumed_quota,
        )
        .await
    }

    async fn check_batch(
        &self,
        checks: &[Check<'_, P>],
    ) -> Result<(BatchDecision, Vec<Stamp>), CheckError> {
        let decide = async {
            validate_batch(checks, self.config.max_batch_size())
                .map_err(CheckError::InvalidBatch)?;
            let (decisions, stamps) = self.decide(checks).await?.into_iter().unzip();
            Ok((BatchDecision::from_decisions(decisions), stamps))
        };
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Batch,
            checks,
            decide,
            |(batch, _)| AdmissionOutcome::of_batch(batch),
            CheckError::may_have_consumed_quota,
        )
        .await
    }

    async fn admit_one(&self, check: &Check<'_, P>) -> Result<Admission<Decision>, CheckError> {
        let (decision, stamp) = self.check_one(check).await?;
        let receipt = decision
            .is_allowed()
            .then(|| Receipt::new(P::ISSUER, [Admitted::new(check, stamp)]));
        Ok(Admission::new(decision, receipt))
    }

    async fn admit_batch(
        &self,
        checks: &[Check<'_, P>],
    ) -> Result<Admission<BatchDecision>, CheckError> {
        let (batch, stamps) = self.check_batch(checks).await?;
        let receipt = batch.is_allowed().then(|| {
            Receipt::new(
                P::ISSUER,
                checks
                    .iter()
                    .zip(stamps)
                    .map(|(check, stamp)| Admitted::new(check, stamp)),
            )
        });
        Ok(Admission::new(batch, receipt))
    }

    async fn grant_units(&self, check: &Check<'_, P>, up_to: u64) -> Result<Granted, CheckError> {
        let up_to = grant_bound(check, up_to);
        let grant = async {
            let deadline = tokio::time::Instant::now() + self.config.operation_timeout();
            let keys = self.keys(std::slice::from_ref(check))?;
            let arguments = P::grant_arguments(check, up_to, Marking::Marked);
            let slot = self.cluster.then(|| hash_slot(&keys[0]));
            let first = self.invoke(P::grant_script(), &keys, &arguments);
            let (first, prefetched) = self
                .with_remote_sources(
                    std::slice::from_ref(check),
                    slot,
                    first,
                    |(_, reply): &(i64, Vec<i64>)| must_carry(reply),
                )
                .await;
            let (mut units, mut reply): (i64, Vec<i64>) = first?;
            if must_carry(&reply) {
                let arguments = P::grant_arguments(check, up_to, Marking::Unmarked);
                (units, reply) = self
                    .invoke_carrying(
                        P::carrying_grant_script(),
                        std::slice::from_ref(check),
                        keys,
                        &arguments,
                        prefetched,
                        deadline,
                    )
                    .await?;
            }
            let units = u64::try_from(units).map_err(|_| CheckError::UnexpectedReply)?;
            // Decided as the check of the units granted (of its cost when denied).
            let decided_as =
                Check::weighted(check.policy(), *check.subject(), units.max(check.cost()))
                    .map_err(|_| CheckError::UnexpectedReply)?;
            let (decision, stamp) = P::decisions(std::slice::from_ref(&decided_as), &reply)
                .and_then(|mut decided| decided.pop())
                .ok_or(CheckError::UnexpectedReply)?;
            if !decision.is_allowed() {
                return Ok(Granted::new(decision, 0, None));
            }
            let receipt = Receipt::new(P::ISSUER, [Admitted::new(&decided_as, stamp)]);
            Ok(Granted::new(decision, units, Some(receipt)))
        };
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Check,
            std::slice::from_ref(check),
            grant,
            |granted| AdmissionOutcome::of_decision(granted.decision()),
            CheckError::may_have_consumed_quota,
        )
        .await
    }

    /// Gives back `used` (one amount per check; `None` for a whole refund)
    /// of what `receipt` records for `checks`, in one script; checks that
    /// keep their whole cost are not sent, and nothing is sent when none
    /// gives anything back.
    async fn refund_receipt(
        &self,
        checks: &[Check<'_, P>],
        receipt: Receipt,
        used: Option<&[u64]>,
    ) -> Result<Refunded, CheckError> {
        let refund = async {
            let Credits {
                checks: sent,
                admitted,
                units,
            } = receipt.credits(P::ISSUER, checks, used)?;
            if sent.is_empty() {
                return Ok(Refunded::new(0, checks.len()));
            }
            let keys = self.keys(&sent)?;
            let arguments = P::refund_arguments(&sent, &admitted, &units);
            let credited: Vec<i64> = self.invoke(P::refund_script(), &keys, &arguments).await?;
            if credited.len() != sent.len() {
                return Err(CheckError::UnexpectedReply);
            }
            let count = credited.iter().filter(|&&credited| credited == 1).count();
            Ok(Refunded::new(count, checks.len()))
        };
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Refund,
            checks,
            refund,
            AdmissionOutcome::of_refund,
            CheckError::may_have_consumed_quota,
        )
        .await
    }

    async fn peek_check(&self, check: &Check<'_, P>) -> Result<Decision, CheckError> {
        let peek = async {
            let keys = self.keys(std::slice::from_ref(check))?;
            if check.carries() {
                let deadline = tokio::time::Instant::now() + self.config.operation_timeout();
                return tokio::time::timeout_at(deadline, self.peek_carrying(check, keys))
                    .await
                    .map_err(|_| CheckError::OperationTimeout)?;
            }
            let (now_us, state): (i64, Option<String>) =
                self.invoke(&PEEK, &keys, &[] as &[i64]).await?;
            Ok(P::peek_decision(check, now_us, state.as_deref()))
        };
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Peek,
            std::slice::from_ref(check),
            peek,
            AdmissionOutcome::of_peek,
            // A read-only script changes nothing, whatever became of it.
            |_| false,
        )
        .await
    }

    /// A peek of a counter that may carry: its own state when live, else the
    /// state it would carry, translated by core's `carry` at the time the
    /// counter was read. One read-only script reads the counter and its
    /// sources in its slot; sources in other slots are read after it, with
    /// one `MGET`, only when the counter holds no live state.
    async fn peek_carrying(
        &self,
        check: &Check<'_, P>,
        mut keys: Vec<String>,
    ) -> Result<Decision, CheckError> {
        let slot = self.cluster.then(|| hash_slot(&keys[0]));
        let sources = Sources::new(std::slice::from_ref(check), &self.config, slot);
        let local = sources.local_keys();
        keys.extend(local.iter().map(|&key| key.to_owned()));
        let (now_us, mut states): (i64, Vec<Option<String>>) =
            self.invoke(&PEEK_CARRYING, &keys, &[] as &[i64]).await?;
        if states.len() != keys.len() {
            return Err(CheckError::UnexpectedReply);
        }
        let now = as_u64(now_us);
        let to = check.policy().kind();
        let own = states.remove(0);
        if own
            .as_deref()
            .and_then(|own| carry::parse(to, own))
            .is_some_and(|state| carry::is_live(to, &state, now))
        {
            return Ok(P::peek_decision(check, now_us, own.as_deref()));
        }
        let remote = self.read_states(&sources.remote_keys()).await?;
        let carried = sources
            .states(states, remote)
            .into_iter()
            .find_map(|(from, state)| {
                let state = carry::parse(from, state.as_deref()?)?;
                runlimit_core::carry::carry(from, &state, to, now)
            })
            .map(|state| carry::to_text(to, &state, now));
        Ok(P::peek_decision(check, now_us, carried.as_deref()))
    }

    async fn reset_counter(&self, policy: &P, subject: &SubjectKey) -> Result<bool, CheckError> {
        let check = Check::new(policy, *subject);
        let reset = async {
            // A reset counter must not carry its sources' state again: they
            // go too (on a cluster the connection sends a `DEL` per slot).
            let keys: Vec<String> = std::iter::once(check.counter_key())
                .chain(check.carry_sources().map(|source| *source.counter()))
                .map(|counter| redis_key(&self.config, &counter))
                .collect();
            let mut connection = self.connection.clone();
            let mut command = redis::cmd("DEL");
            command.arg(&keys);
            match tokio::time::timeout(
                self.config.operation_timeout(),
                command.query_async::<i64>(&mut connection),
            )
            .await
            {
                Err(_) => Err(CheckError::OperationTimeout),
                Ok(Err(error)) => Err(classify(error)),
                // Counters expire with their state, so a stored one is live.
                Ok(Ok(deleted)) => Ok(deleted > 0),
            }
        };
        AdmissionReporter::observe(
            self.observer.as_deref(),
            Operation::Reset,
            std::slice::from_ref(&check),
            reset,
            |existed| AdmissionOutcome::of_reset(*existed),
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

impl<C, P> Limiter for RedisLimiter<C, P>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    P: RedisPolicy,
{
    type Policy = P;
    type Error = CheckError;

    async fn check(&self, check: &Check<'_, P>) -> Result<Decision, CheckError> {
        self.check_one(check).await.map(|(decision, _)| decision)
    }

    async fn check_all(&self, checks: &[Check<'_, P>]) -> Result<BatchDecision, CheckError> {
        self.check_batch(checks).await.map(|(batch, _)| batch)
    }
}

/// Shared by every replica connected to the server or cluster.
impl<C, P> Backend for RedisLimiter<C, P>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    P: RedisPolicy,
{
    fn storage(&self, _policy: &P) -> Storage {
        Storage::Shared
    }
}

/// Each refund and peek is one atomic script on Redis's clock, a
/// reset one `DEL`; on a cluster they work for any key (a batch's
/// refund, like the batch, for keys of one slot). See [`Lifecycle`]
/// and the algorithm's refund rule.
impl<C, P> Lifecycle for RedisLimiter<C, P>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    P: RedisPolicy,
{
    async fn admit(&self, check: &Check<'_, P>) -> Result<Admission<Decision>, CheckError> {
        self.admit_one(check).await
    }

    async fn admit_all(
        &self,
        checks: &[Check<'_, P>],
    ) -> Result<Admission<BatchDecision>, CheckError> {
        self.admit_batch(checks).await
    }

    async fn refund(
        &self,
        checks: &[Check<'_, P>],
        receipt: Receipt,
    ) -> Result<Refunded, CheckError> {
        self.refund_receipt(checks, receipt, None).await
    }

    async fn peek(&self, check: &Check<'_, P>) -> Result<Decision, CheckError> {
        self.peek_check(check).await
    }

    async fn reset(&self, policy: &P, subject: &SubjectKey) -> Result<bool, CheckError> {
        self.reset_counter(policy, subject).await
    }
}

/// A grant is one atomic script on Redis's clock: the counter's room
/// measured, then that many units admitted.
impl<C, P> Grant for RedisLimiter<C, P>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    P: RedisPolicy,
{
    async fn grant(&self, check: &Check<'_, P>, up_to: u64) -> Result<Granted, CheckError> {
        self.grant_units(check, up_to).await
    }
}

/// A settlement is a refund of the unused units: one script, or none
/// when every check keeps its whole cost.
impl<C, P> Settle for RedisLimiter<C, P>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    P: RedisPolicy,
{
    async fn settle(
        &self,
        checks: &[Check<'_, P>],
        receipt: Receipt,
        used: &[u64],
    ) -> Result<Refunded, CheckError> {
        self.refund_receipt(checks, receipt, Some(used)).await
    }
}

/// Nothing to do: every key expires by itself when its state becomes
/// worthless (`SET … PX`), so Redis needs no cleanup and a round removes
/// nothing. Implemented so that wrappers in front of Redis (a lease, say)
/// run their own upkeep through [`Maintain`].
impl<C, P> Maintain for RedisLimiter<C, P>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    P: RedisPolicy,
{
    async fn maintain(&self) -> MaintenanceReport {
        MaintenanceReport::new()
    }
}

/// The arguments of a coalesced invocation of `members` (see
/// `coalesced.lua`): whether a key occurs more than once, then per member a
/// header and its arguments. Consecutive lone checks with the same arguments
/// (members mostly share a policy and a cost) are one run, `-r` followed by
/// their arguments once; a batch is its number of keys followed by its
/// arguments.
fn coalesced_arguments(members: &[Member]) -> Vec<i64> {
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let mut keys = std::collections::HashSet::new();
    let repeats = !members
        .iter()
        .flat_map(|member| &member.keys)
        .all(|key| keys.insert(key.as_str()));
    let mut arguments = Vec::with_capacity(1 + members.len() * 4);
    arguments.push(i64::from(repeats));
    // Where the current run's header is, and its arguments.
    let mut run: Option<(usize, &[i64])> = None;
    for member in members {
        if member.keys.len() == 1 {
            if let Some((header, lone)) = run
                && lone == member.arguments.as_slice()
            {
                arguments[header] -= 1;
                continue;
            }
            run = Some((arguments.len(), &member.arguments));
            arguments.push(-1);
        } else {
            run = None;
            arguments.push(count(member.keys.len()));
        }
        arguments.extend_from_slice(&member.arguments);
    }
    arguments
}

/// Reads a lone check's reply from the state it was decided on, its time
/// and its arguments (see [`RedisPolicy::lone_reply`]).
type LoneReply = fn(&[u8], i64, &[i64]) -> Option<Vec<i64>>;

/// Splits a coalesced invocation's flat reply into the replies single
/// invocations of members with these `arguments` would have given (each
/// ending with `now`); `None` if it is not one. The reply is `now`, then per
/// member either the length of its reply and the values, or, for a lone
/// check its algorithm decided without the batch machinery, the state it
/// was decided on (a string, empty for none), from which `lone` (such as
/// [`fixed_window_reply`]) decides as the script did.
fn split_coalesced(
    reply: &[redis::Value],
    arguments: &[Vec<i64>],
    lone: LoneReply,
) -> Option<Vec<Vec<i64>>> {
    let integer = |value: &redis::Value| match value {
        redis::Value::Int(value) => Some(*value),
        _ => None,
    };
    let (now, mut rest) = reply.split_first()?;
    let now = integer(now)?;
    let mut replies = Vec::with_capacity(arguments.len());
    for arguments in arguments {
        let (first, tail) = rest.split_first()?;
        if let redis::Value::BulkString(state) = first {
            replies.push(lone(state, now, arguments)?);
            rest = tail;
            continue;
        }
        let length = usize::try_from(integer(first)?)
            .ok()
            .filter(|&n| n <= tail.len())?;
        let (values, tail) = tail.split_at(length);
        let mut member = Vec::with_capacity(length + 1);
        for value in values {
            member.push(integer(value)?);
        }
        member.push(now);
        replies.push(member);
        rest = tail;
    }
    rest.is_empty().then_some(replies)
}

/// A lone fixed-window check's reply (`[outcome, used, expires, now]`) from
/// the state `fixed_window_coalesced.lua` decided it on, `used:expires` or
/// empty for none, and its arguments (limit, window, cost): the script's
/// decision, made again from the same values. `None` for anything else.
fn fixed_window_reply(state: &[u8], now: i64, arguments: &[i64]) -> Option<Vec<i64>> {
    let &[limit, window, cost] = arguments else {
        return None;
    };
    let live = if state.is_empty() {
        None
    } else {
        let colon = state.iter().position(|&byte| byte == b':')?;
        let (used, expires) = (digits(&state[..colon])?, digits(&state[colon + 1..])?);
        (expires > now).then_some((used, expires))
    };
    Some(match live {
        Some((used, expires)) if used.saturating_add(cost) > limit => vec![1, used, expires, now],
        Some((used, expires)) => vec![0, used + cost, expires, now],
        // Marked (a negative window) without a live window: it must carry,
        // and the script wrote nothing.
        None if window < 0 => vec![-1, now],
        None if cost > limit => vec![1, 0, now.saturating_add(window), now],
        None => vec![0, cost, now.saturating_add(window), now],
    })
}

/// Digits only (at least one), as the scripts' `%d+` admits them;
/// saturating where a Lua number would lose precision, which changes no
/// comparison.
fn digits(text: &[u8]) -> Option<i64> {
    (!text.is_empty()).then_some(())?;
    text.iter().try_fold(0i64, |value, &byte| {
        byte.is_ascii_digit().then(|| {
            value
                .saturating_mul(10)
                .saturating_add(i64::from(byte - b'0'))
        })
    })
}

/// A lone sliding-window check's reply (outcome, eighth, version, the
/// number of counts sent and the counts, `now`: as `sliding_window.lua`'s
/// `admit` gives it) from the state `sliding_window_coalesced.lua` decided
/// it on, `expires:version:c1[:c2…]` of the current eighth or empty for
/// none, and its arguments (limit, an eighth of the window in
/// microseconds, cost): the script's decision, made again from the same
/// values. `None` for anything else.
fn sliding_window_reply(state: &[u8], now: i64, arguments: &[i64]) -> Option<Vec<i64>> {
    let &[limit, eighth, cost] = arguments else {
        return None;
    };
    if eighth <= 0 || now < 0 {
        return None;
    }
    let latest = now / eighth;
    if state.is_empty() {
        // A marked check (a negative limit) without state must carry; the
        // script sends such a check through `admit`, never here.
        if limit < 0 {
            return Some(vec![-1, now]);
        }
        return Some(vec![i64::from(cost > limit), latest, now, 0, now]);
    }
    let limit = limit.checked_abs()?;
    let mut fields = state.split(|&byte| byte == b':');
    let expires = digits(fields.next()?)?;
    if Some(expires) != latest.checked_add(9)?.checked_mul(eighth) {
        return None;
    }
    let version = digits(fields.next()?)?;
    let mut counts = [0i64; COUNTED];
    let mut stored = 0;
    for field in fields {
        *counts.get_mut(stored)? = digits(field)?;
        stored += 1;
    }
    if stored == 0 {
        return None;
    }
    let total = counts.iter().fold(0i64, |sum, &c| sum.saturating_add(c));
    let sent = counts
        .iter()
        .rposition(|&c| c > 0)
        .map_or(0, |last| last + 1);
    let mut reply = Vec::with_capacity(5 + sent);
    reply.extend([
        i64::from(total.saturating_add(cost) > limit),
        latest,
        version,
        i64::try_from(sent).ok()?,
    ]);
    reply.extend_from_slice(&counts[..sent]);
    reply.push(now);
    Some(reply)
}

/// Whether an admission's reply says that a marked check must carry first:
/// `[-1, now]`, which no decision's reply is.
fn must_carry(reply: &[i64]) -> bool {
    matches!(reply, [-1, _])
}

/// `FCALL` of a function the server does not hold: nothing ran.
fn function_missing(error: &redis::RedisError) -> bool {
    error.kind() == redis::ErrorKind::ResponseError
        && error
            .detail()
            .is_some_and(|detail| detail.starts_with("Function not found"))
}

/// A server without functions (before Redis 7.0: an unknown command) or a
/// user whose ACL denies them: nothing ran, and scripts will do.
fn functions_unavailable(error: &redis::RedisError) -> bool {
    error.code() == Some("NOPERM")
        || (error.kind() == redis::ErrorKind::ResponseError
            && error
                .detail()
                .is_some_and(|detail| detail.starts_with("unknown command")))
}

fn as_i64(value: u64) -> i64 {
    // Every value is bounded by MAX_LIMIT or MAX_WINDOW in microseconds.
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn as_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A stamp word as the signed integer a script handles (and back): the bit
/// pattern is kept, so every value round-trips.
fn word_to_i64(word: u64) -> i64 {
    i64::from_ne_bytes(word.to_ne_bytes())
}

fn i64_to_word(value: i64) -> u64 {
    u64::from_ne_bytes(value.to_ne_bytes())
}

/// The two or three integers of a stored state, `first:second[:third]`.
fn parse_state(state: &str) -> Option<(i64, i64, i64)> {
    let mut fields = state.split(':').map(str::parse::<i64>);
    let first = fields.next()?.ok()?;
    let second = fields.next()?.ok()?;
    let third = fields.next().transpose().ok()?.unwrap_or(0);
    Some((first, second, third))
}

impl RedisPolicy for FixedWindowPolicy {
    const ISSUER: &'static str = "runlimit-redis/fixed_window";
    const COALESCER: usize = 0;

    fn script() -> &'static Lua {
        &FIXED_WINDOW
    }

    fn coalesced_script() -> &'static Lua {
        &FIXED_WINDOW_COALESCED
    }

    fn lone_reply(state: &[u8], now: i64, arguments: &[i64]) -> Option<Vec<i64>> {
        fixed_window_reply(state, now, arguments)
    }

    fn carrying_script() -> &'static Lua {
        &FIXED_WINDOW_CARRYING
    }

    /// A marked check's window is negative.
    fn arguments(checks: &[Check<'_, Self>], marking: Marking) -> Vec<i64> {
        checks
            .iter()
            .flat_map(|check| {
                let policy = check.policy();
                let window = as_i64(policy.window_millis().saturating_mul(1_000));
                [
                    as_i64(policy.limit()),
                    if marking.marks(check) {
                        -window
                    } else {
                        window
                    },
                    as_i64(check.cost()),
                ]
            })
            .collect()
    }

    fn decisions(checks: &[Check<'_, Self>], reply: &[i64]) -> Option<Vec<(Decision, Stamp)>> {
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
                let decision = match values[0] {
                    0 => Decision::allowed(
                        policy.limit(),
                        policy.limit().saturating_sub(as_u64(values[1])),
                        left,
                    )
                    .ok()?,
                    1 => Decision::for_mode(
                        policy.quota_mode(),
                        Denial::QuotaExceeded {
                            capacity: policy.limit(),
                            retry_after: left,
                        },
                    ),
                    _ => return None,
                };
                // The window the admission counts in, and the count it left.
                let stamp = Stamp::new([i64_to_word(values[2]), as_u64(values[1]), 0]);
                Some((decision, stamp))
            })
            .collect()
    }

    fn grant_script() -> &'static Lua {
        &FIXED_WINDOW_GRANT
    }

    fn carrying_grant_script() -> &'static Lua {
        &FIXED_WINDOW_CARRYING_GRANT
    }

    fn refund_script() -> &'static Lua {
        &FIXED_WINDOW_REFUND
    }

    fn refund_arguments(
        checks: &[Check<'_, Self>],
        admitted: &[Admitted],
        units: &[u64],
    ) -> Vec<i64> {
        checks
            .iter()
            .zip(admitted)
            .zip(units)
            .flat_map(|((check, admitted), &units)| {
                let [expires, used_after, _] = admitted.stamp().words();
                [
                    as_i64(units),
                    word_to_i64(expires),
                    word_to_i64(used_after),
                    as_i64(check.policy().window_millis().saturating_mul(1_000)),
                ]
            })
            .collect()
    }

    fn peek_decision(check: &Check<'_, Self>, now_us: i64, state: Option<&str>) -> Decision {
        let (used, left) = match state.and_then(parse_state) {
            Some((used, expires, _)) if expires > now_us && used > 0 => (
                as_u64(used),
                Duration::from_micros(as_u64(expires - now_us)),
            ),
            // No live window: the whole quota is free now.
            _ => (0, Duration::ZERO),
        };
        check.policy().peek_decision(used, left, check.cost())
    }
}

impl RedisPolicy for GcraPolicy {
    const ISSUER: &'static str = "runlimit-redis/gcra";
    const COALESCER: usize = 1;

    fn script() -> &'static Lua {
        &GCRA
    }

    fn coalesced_script() -> &'static Lua {
        &GCRA_COALESCED
    }

    fn carrying_script() -> &'static Lua {
        &GCRA_CARRYING
    }

    /// A marked check's quota is negative.
    fn arguments(checks: &[Check<'_, Self>], marking: Marking) -> Vec<i64> {
        checks
            .iter()
            .flat_map(|check| {
                let exact = GcraMicros::new(check.policy(), check.cost());
                let quota = as_i64(exact.quota);
                [
                    if marking.marks(check) { -quota } else { quota },
                    as_i64(exact.increment.whole),
                    as_i64(exact.increment.remainder),
                    as_i64(exact.tolerance.whole),
                    as_i64(exact.tolerance.remainder),
                ]
            })
            .collect()
    }

    fn decisions(checks: &[Check<'_, Self>], reply: &[i64]) -> Option<Vec<(Decision, Stamp)>> {
        let now = *reply.last()?;
        if reply.len() != checks.len() * 4 + 1 {
            return None;
        }
        checks
            .iter()
            .zip(reply.chunks_exact(4))
            .map(|(check, values)| {
                let exact = GcraMicros::new(check.policy(), check.cost());
                let ahead = ExactMicros {
                    whole: as_u64(values[1]),
                    remainder: as_u64(values[2]),
                };
                if !matches!(values[0], 0 | 1) {
                    return None;
                }
                // The arrival time the admission left, and the counter's version.
                let stamp = Stamp::new([
                    i64_to_word(now.saturating_add(values[1])),
                    ahead.remainder,
                    i64_to_word(values[3]),
                ]);
                Some((exact.decision(check.policy(), ahead), stamp))
            })
            .collect()
    }

    fn grant_script() -> &'static Lua {
        &GCRA_GRANT
    }

    fn carrying_grant_script() -> &'static Lua {
        &GCRA_CARRYING_GRANT
    }

    /// The script computes the increment of the units it grants from the
    /// increment of one unit.
    fn grant_arguments(check: &Check<'_, Self>, up_to: u64, marking: Marking) -> Vec<i64> {
        let mut arguments =
            Self::arguments(&[Check::new(check.policy(), *check.subject())], marking);
        arguments.extend([as_i64(check.cost()), as_i64(up_to)]);
        arguments
    }

    fn refund_script() -> &'static Lua {
        &GCRA_REFUND
    }

    fn refund_arguments(
        checks: &[Check<'_, Self>],
        admitted: &[Admitted],
        units: &[u64],
    ) -> Vec<i64> {
        checks
            .iter()
            .zip(admitted)
            .zip(units)
            .flat_map(|((check, admitted), &units)| {
                // The increment of the units given back, not of the whole cost.
                let exact = GcraMicros::new(check.policy(), units);
                let [admitted_us, admitted_rem, version] = admitted.stamp().words();
                [
                    as_i64(exact.quota),
                    as_i64(exact.increment.whole),
                    as_i64(exact.increment.remainder),
                    word_to_i64(admitted_us),
                    word_to_i64(admitted_rem),
                    word_to_i64(version),
                ]
            })
            .collect()
    }

    fn peek_decision(check: &Check<'_, Self>, now_us: i64, state: Option<&str>) -> Decision {
        let exact = GcraMicros::new(check.policy(), check.cost());
        let now = ExactMicros::from_whole(as_u64(now_us));
        let ahead = match state.and_then(parse_state) {
            Some((tat_us, tat_rem, _)) => ExactMicros {
                whole: as_u64(tat_us),
                remainder: as_u64(tat_rem),
            }
            .saturating_sub(now, exact.quota),
            None => ExactMicros::from_whole(0),
        };
        exact.peek_decision(check.policy(), ahead)
    }
}

/// Sliding-window state as the scripts store it: the expiry (microseconds),
/// the version and up to nine counts (trailing zeros left out).
fn parse_sliding(state: &str) -> Option<(u64, i64, [u64; COUNTED])> {
    let mut fields = state.split(':').map(str::parse::<i64>);
    let expires = as_u64(fields.next()?.ok()?);
    let version = fields.next()?.ok()?;
    let mut counts = [0; COUNTED];
    let mut sent = 0;
    for field in fields {
        *counts.get_mut(sent)? = as_u64(field.ok()?);
        sent += 1;
    }
    (sent > 0).then_some((expires, version, counts))
}

impl RedisPolicy for SlidingWindowPolicy {
    const ISSUER: &'static str = "runlimit-redis/sliding_window";
    const COALESCER: usize = 2;

    fn script() -> &'static Lua {
        &SLIDING_WINDOW
    }

    fn coalesced_script() -> &'static Lua {
        &SLIDING_WINDOW_COALESCED
    }

    fn lone_reply(state: &[u8], now: i64, arguments: &[i64]) -> Option<Vec<i64>> {
        sliding_window_reply(state, now, arguments)
    }

    fn lone_is_cheaper_coalesced(_: &[i64]) -> bool {
        true
    }

    fn carrying_script() -> &'static Lua {
        &SLIDING_WINDOW_CARRYING
    }

    /// A marked check's limit is negative.
    fn arguments(checks: &[Check<'_, Self>], marking: Marking) -> Vec<i64> {
        checks
            .iter()
            .flat_map(|check| {
                let exact = SlidingMicros::new(check.policy());
                let limit = as_i64(check.policy().limit());
                [
                    if marking.marks(check) { -limit } else { limit },
                    as_i64(exact.sub_window),
                    as_i64(check.cost()),
                ]
            })
            .collect()
    }

    /// The script counts and decides; the reported quantities come from the
    /// counts it judged, through the arithmetic the memory store shares. The
    /// two must agree on the outcome, or the reply is refused.
    fn decisions(checks: &[Check<'_, Self>], reply: &[i64]) -> Option<Vec<(Decision, Stamp)>> {
        let (&now, mut rest) = reply.split_last()?;
        let now = as_u64(now);
        let decided = checks
            .iter()
            .map(|check| {
                // outcome, eighth, version, k, then the first k counts.
                let (head, tail) = rest.split_at_checked(4)?;
                let sent = usize::try_from(head[3]).ok().filter(|&k| k <= COUNTED)?;
                let (sent_counts, tail) = tail.split_at_checked(sent)?;
                rest = tail;
                let mut counts = [0; COUNTED];
                for (count, value) in counts.iter_mut().zip(sent_counts) {
                    *count = as_u64(*value);
                }
                let exact = SlidingMicros::new(check.policy());
                let judged = Buckets {
                    latest_start: exact.start_of(as_u64(head[1])),
                    counts,
                };
                let decision = match (head[0], exact.admit(Some(judged), check.cost(), now)) {
                    (0, SlidingOutcome::Allowed { decision, .. }) => decision,
                    (1, SlidingOutcome::Denied(denial)) => {
                        Decision::for_mode(check.policy().quota_mode(), denial)
                    }
                    _ => return None,
                };
                // The number of the eighth the admission counted in, and the
                // counter's version.
                let stamp = Stamp::new([as_u64(head[1]), i64_to_word(head[2]), 0]);
                Some((decision, stamp))
            })
            .collect::<Option<Vec<_>>>()?;
        rest.is_empty().then_some(decided)
    }

    fn grant_script() -> &'static Lua {
        &SLIDING_WINDOW_GRANT
    }

    fn carrying_grant_script() -> &'static Lua {
        &SLIDING_WINDOW_CARRYING_GRANT
    }

    fn refund_script() -> &'static Lua {
        &SLIDING_WINDOW_REFUND
    }

    fn refund_arguments(
        checks: &[Check<'_, Self>],
        admitted: &[Admitted],
        units: &[u64],
    ) -> Vec<i64> {
        checks
            .iter()
            .zip(admitted)
            .zip(units)
            .flat_map(|((check, admitted), &units)| {
                let [admitted_in, version, _] = admitted.stamp().words();
                [
                    as_i64(SlidingMicros::new(check.policy()).sub_window),
                    as_i64(units),
                    word_to_i64(admitted_in),
                    word_to_i64(version),
                ]
            })
            .collect()
    }

    fn peek_decision(check: &Check<'_, Self>, now_us: i64, state: Option<&str>) -> Decision {
        let exact = SlidingMicros::new(check.policy());
        let stored = state
            .and_then(parse_sliding)
            .map(|(expires, _, counts)| Buckets {
                latest_start: exact.latest_start_of(expires),
                counts,
            });
        exact.peek_decision(check.policy(), stored, check.cost(), as_u64(now_us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::server;
    use proptest::prelude::*;
    use runlimit_core::{AnyPolicy, PolicyId, ScopeId};

    fn member(keys: usize, arguments: &[i64]) -> Member {
        Member {
            keys: (0..keys).map(|n| format!("key{n}")).collect(),
            arguments: arguments.to_vec(),
        }
    }

    #[test]
    fn consecutive_lone_checks_with_the_same_arguments_are_sent_as_one_run() {
        let members = [
            member(1, &[5, 60, 1]),
            member(1, &[5, 60, 1]),
            member(1, &[5, 60, 1]),
            // A batch ends a run, and is never part of one.
            member(2, &[5, 60, 1, 5, 60, 1]),
            member(1, &[5, 60, 1]),
            member(1, &[5, 60, 2]),
            member(2, &[5, 60, 1, 5, 60, 1]),
        ];
        // Whether a key repeats (each member's keys are key0, key1...), then
        // member by member.
        let expected = [
            &[1][..],
            &[-3, 5, 60, 1],
            &[2, 5, 60, 1, 5, 60, 1],
            &[-1, 5, 60, 1],
            &[-1, 5, 60, 2],
            &[2, 5, 60, 1, 5, 60, 1],
        ]
        .concat();
        assert_eq!(coalesced_arguments(&members), expected);
    }

    #[test]
    fn the_arguments_say_whether_a_key_occurs_twice() {
        let distinct = [
            Member {
                keys: vec!["a".to_owned()],
                arguments: vec![5, 60, 1],
            },
            Member {
                keys: vec!["b".to_owned(), "c".to_owned()],
                arguments: vec![5, 60, 1, 5, 60, 1],
            },
        ];
        assert_eq!(coalesced_arguments(&distinct)[0], 0);
        let shared = [
            Member {
                keys: vec!["a".to_owned()],
                arguments: vec![5, 60, 1],
            },
            Member {
                keys: vec!["b".to_owned(), "a".to_owned()],
                arguments: vec![5, 60, 1, 5, 60, 1],
            },
        ];
        assert_eq!(coalesced_arguments(&shared)[0], 1);
    }

    #[test]
    fn a_flat_reply_splits_into_single_replies_or_is_refused() {
        use redis::Value::{BulkString, Int};
        let state = |text: &str| BulkString(text.as_bytes().to_vec());
        let split = |reply: &[redis::Value], arguments: &[Vec<i64>]| {
            split_coalesced(reply, arguments, fixed_window_reply)
        };
        let fixed = vec![5, 60, 2];
        let three = [fixed.clone(), vec![1], fixed.clone()];
        assert_eq!(
            split(
                &[99, 3, 0, 1, 7, 0, 2, 1, 2].map(Int),
                &[vec![], vec![], vec![]]
            ),
            Some(vec![vec![0, 1, 7, 99], vec![99], vec![1, 2, 99]])
        );
        // A lone fixed-window check's state, decided again: a live window
        // with room, a live window without, and no state (a new window).
        assert_eq!(
            split(
                &[Int(99), state("3:120"), Int(1), Int(5), state("4:130")],
                &three
            ),
            Some(vec![vec![0, 5, 120, 99], vec![5, 99], vec![1, 4, 130, 99]])
        );
        assert_eq!(
            split(
                &[Int(99), state(""), state("3:99")],
                &[fixed.clone(), fixed.clone()]
            ),
            Some(vec![vec![0, 2, 159, 99], vec![0, 2, 159, 99]])
        );
        // A cost above the limit in a new window is denied.
        assert_eq!(
            split(&[Int(99), state("")], &[vec![1, 60, 2]]),
            Some(vec![vec![1, 0, 159, 99]])
        );
        // Too short, too long, no `now`, a state that is not two numbers,
        // a state for a member that is not a lone fixed-window check.
        assert_eq!(split(&[99, 3, 0, 1].map(Int), &[vec![]]), None);
        assert_eq!(split(&[99, 1, 0, 5].map(Int), &[vec![]]), None);
        assert_eq!(split(&[], &[vec![]]), None);
        for bad in ["3", "3:", ":120", "3:1x0", "-3:120", "3:120:1"] {
            assert_eq!(
                split(&[Int(99), state(bad)], std::slice::from_ref(&fixed)),
                None,
                "{bad}"
            );
        }
        assert_eq!(split(&[Int(99), state("3:120")], &[vec![1]]), None);
    }

    #[test]
    fn a_lone_sliding_window_state_is_decided_again_as_admit_decides_it() {
        // An eighth of 10 µs; now 95 is in eighth 9, whose state expires at
        // (9 + 9) × 10 = 180. Arguments: limit, eighth, cost.
        let (now, arguments) = (95, [5, 10, 2]);
        let reply = |state: &str| sliding_window_reply(state.as_bytes(), now, &arguments);
        // No state: a new counter, created now.
        assert_eq!(reply(""), Some(vec![0, 9, 95, 0, 95]));
        assert_eq!(
            sliding_window_reply(b"", now, &[1, 10, 2]),
            Some(vec![1, 9, 95, 0, 95])
        );
        // A marked check without state carries.
        assert_eq!(
            sliding_window_reply(b"", now, &[-5, 10, 2]),
            Some(vec![-1, 95])
        );
        // The current eighth's counts, trailing zeros left out of the reply.
        assert_eq!(reply("180:7:3"), Some(vec![0, 9, 7, 1, 3, 95]));
        assert_eq!(reply("180:7:1:0:2"), Some(vec![0, 9, 7, 3, 1, 0, 2, 95]));
        assert_eq!(reply("180:7:0"), Some(vec![0, 9, 7, 0, 95]));
        // Over the limit counted across the eighths: denied.
        assert_eq!(reply("180:7:3:1"), Some(vec![1, 9, 7, 2, 3, 1, 95]));
        // A marked check on live state is decided on its limit.
        assert_eq!(
            sliding_window_reply(b"180:7:3", now, &[-5, 10, 2]),
            Some(vec![0, 9, 7, 1, 3, 95])
        );
        // An earlier eighth's state, more than nine counts, or anything
        // that is not digits between colons is not a lone reply.
        for bad in [
            "170:7:3",
            "180:7",
            "180:7:",
            "180::3",
            "180:7:1:1:1:1:1:1:1:1:1:1",
            "180:7:3x",
            "180:-7:3",
            "180:7:1:1:1:1:1:1:1:1:0:",
        ] {
            assert_eq!(reply(bad), None, "{bad}");
        }
        assert_eq!(sliding_window_reply(b"180:7:3", now, &[5, 10]), None);
        assert_eq!(sliding_window_reply(b"180:7:3", now, &[5, 0, 1]), None);
    }

    fn subject(n: usize) -> SubjectKey {
        let mut digest = [0xC0; 32];
        digest[0] = u8::try_from(n).expect("small");
        SubjectKey::from_digest(digest)
    }

    /// Four policies of one algorithm, limits 1, 2, 5 and 12 (a seeded nine
    /// gains a digit), each with an id of its own.
    fn four<P>(policy: impl Fn(PolicyId, u64) -> Result<P, runlimit_core::PolicyError>) -> Vec<P> {
        [1, 2, 5, 12]
            .into_iter()
            .enumerate()
            .map(|(n, limit)| {
                policy(PolicyId::new(format!("policy{n}")).expect("valid"), limit).expect("valid")
            })
            .collect()
    }

    /// A state stored before the members are sent, on both sides alike:
    /// what a fixed window's count may meet besides its own writes.
    #[derive(Clone, Copy, Debug)]
    enum Seed {
        /// Nine used in a live window: the next admission gains a digit.
        Nine,
        /// Eight used in a live window, under the limit of twelve: an
        /// admission of one changes the last digit, one of two carries.
        Eight,
        /// A count that is not whole.
        Fraction,
        /// Not a state at all.
        Garbage,
        /// A window that ended long ago, its key still stored.
        Ended,
        /// A live window with a field after its two.
        ExtraField,
    }

    impl Seed {
        fn text(self, now_us: i64) -> String {
            let live = now_us + 60_000_000;
            match self {
                Self::Nine => format!("9:{live}"),
                Self::Eight => format!("8:{live}"),
                Self::Fraction => format!("1.5:{live}"),
                Self::Garbage => "garbage".to_owned(),
                Self::Ended => "3:1".to_owned(),
                Self::ExtraField => format!("2:{live}:7"),
            }
        }
    }

    /// Members sent as one coalesced invocation get, check by check, the
    /// decisions the same members get sent one invocation each, in order, on
    /// keys of their own, and leave the same states behind (`counted`: the
    /// part of a state that does not depend on the clock).
    async fn decide_alike<P: RedisPolicy>(
        url: &str,
        policies: &[P],
        members: &[Vec<Drawn>],
        seeds: &[(usize, usize, Seed)],
        counted: fn(&str) -> &str,
    ) {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        let limiter = |side: &str| {
            let config = RedisConfig::default()
                .with_prefix(format!("rl-test:coalesced-script:{nanos}:{side}:"))
                .expect("valid prefix");
            RedisLimiter::<_, P>::connect(url, config)
        };
        let (coalesced, single) = (
            limiter("coalesced").await.expect("connect"),
            limiter("single").await.expect("connect"),
        );
        let mut admin = redis::Client::open(url)
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("admin");
        let (seconds, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut admin)
            .await
            .expect("time");
        let key_of = |limiter: &RedisLimiter<_, P>, key: usize, policy: usize| {
            limiter
                .keys(&[Check::new(&policies[policy], subject(key))])
                .expect("key")
                .remove(0)
        };
        for &(key, policy, seed) in seeds {
            for side in [&coalesced, &single] {
                let _: () = redis::cmd("SET")
                    .arg(key_of(side, key, policy))
                    .arg(seed.text(seconds * 1_000_000 + micros))
                    .arg("PX")
                    .arg(60_000)
                    .query_async(&mut admin)
                    .await
                    .expect("seed");
            }
        }
        let checks: Vec<Vec<Check<'_, P>>> = members
            .iter()
            .map(|drawn| {
                drawn
                    .iter()
                    .map(|&(key, policy, cost)| {
                        let (policy, subject) = (&policies[policy], subject(key));
                        // A cost above the capacity is a caller error.
                        Check::weighted(policy, subject, cost)
                            .unwrap_or_else(|_| Check::new(policy, subject))
                    })
                    .collect()
            })
            .collect();
        let sent = checks
            .iter()
            .map(|checks| Member {
                keys: coalesced.keys(checks).expect("keys"),
                arguments: P::arguments(checks, Marking::Marked),
            })
            .collect();
        let replies = coalesced.send(sent).await.expect("coalesced");
        assert_eq!(replies.len(), checks.len());
        for (checks, reply) in checks.iter().zip(&replies) {
            let alone: Vec<i64> = single
                .invoke(
                    P::script(),
                    &single.keys(checks).expect("keys"),
                    &P::arguments(checks, Marking::Marked),
                )
                .await
                .expect("single");
            let decide = |reply: &[i64]| -> Vec<(bool, Option<u64>)> {
                P::decisions(checks, reply)
                    .expect("a reply of the member's shape")
                    .iter()
                    .map(|(decision, _)| (decision.is_allowed(), decision.remaining()))
                    .collect()
            };
            assert_eq!(decide(reply), decide(&alone));
        }
        let touched = members
            .iter()
            .flatten()
            .map(|&(key, policy, _)| (key, policy))
            .chain(seeds.iter().map(|&(key, policy, _)| (key, policy)));
        for (key, policy) in touched {
            let mut states = Vec::new();
            for side in [&coalesced, &single] {
                let state: Option<String> = redis::cmd("GET")
                    .arg(key_of(side, key, policy))
                    .query_async(&mut admin)
                    .await
                    .expect("state");
                states.push(state);
            }
            let counted: Vec<Option<&str>> = states
                .iter()
                .map(|state| state.as_deref().map(counted))
                .collect();
            assert_eq!(counted[0], counted[1], "key {key}, policy {policy}");
        }
    }

    /// A check drawn for a member: key, policy and cost.
    type Drawn = (usize, usize, u64);

    /// Two to twelve members of one to three checks each, over four keys and
    /// four policies, so that members share keys, arguments and denials.
    fn members() -> impl Strategy<Value = Vec<Vec<Drawn>>> {
        let check = (0..4usize, 0..4usize, 1..=2u64);
        let member = prop::collection::vec(check, 1..=3).prop_map(|mut checks| {
            // A batch names each counter once.
            let mut seen = std::collections::HashSet::new();
            checks.retain(|&(key, policy, _)| seen.insert((key, policy)));
            checks
        });
        prop::collection::vec(member, 2..=12)
    }

    /// Up to three counters stored beforehand.
    fn seeds() -> impl Strategy<Value = Vec<(usize, usize, Seed)>> {
        let seed = prop_oneof![
            Just(Seed::Nine),
            Just(Seed::Eight),
            Just(Seed::Fraction),
            Just(Seed::Garbage),
            Just(Seed::Ended),
            Just(Seed::ExtraField),
        ];
        let counter = (0..4usize, 0..4usize, seed).prop_map(|(key, policy, seed)| match seed {
            // The policy whose limit is twelve.
            Seed::Eight => (key, 3, seed),
            _ => (key, policy, seed),
        });
        prop::collection::vec(counter, 0..=3)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn coalesced_members_decide_as_single_invocations(
            members in members(),
            seeds in seeds(),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let Some(url) = server(&runtime) else {
                return Ok(());
            };
            let scope = || ScopeId::new("client").expect("valid");
            let (minute, hour) = (Duration::from_secs(60), Duration::from_secs(3_600));
            let fixed = four(|id, limit| FixedWindowPolicy::new(id, scope(), limit, minute));
            let gcra = four(|id, limit| GcraPolicy::new(id, scope(), limit, hour, limit));
            let sliding = four(|id, limit| SlidingWindowPolicy::new(id, scope(), limit, minute));
            // A fixed window's count is the state's text before its first
            // colon; the other states carry times.
            fn count(state: &str) -> &str {
                state.split(':').next().unwrap_or_default()
            }
            fn present(_: &str) -> &str {
                ""
            }
            runtime.block_on(async {
                decide_alike(&url, &fixed, &members, &seeds, count).await;
                decide_alike(&url, &gcra, &members, &seeds, present).await;
                decide_alike(&url, &sliding, &members, &seeds, present).await;
            });
        }
    }

    /// A key of another Redis type fails the invocation, as it fails a
    /// single one, before any member has written: it is left as it was, and
    /// so are the counters of the members sent before it.
    #[test]
    fn a_key_of_another_type_fails_the_invocation_and_nothing_is_written() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let Some(url) = server(&runtime) else {
            return;
        };
        let policy = FixedWindowPolicy::new(
            PolicyId::new("other-type").expect("valid"),
            ScopeId::new("client").expect("valid"),
            5,
            Duration::from_secs(60),
        )
        .expect("valid");
        runtime.block_on(async {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_nanos());
            let config = RedisConfig::default()
                .with_prefix(format!("rl-test:coalesced-other-type:{nanos}:"))
                .expect("valid prefix");
            let limiter = RedisLimiter::<_, FixedWindowPolicy>::connect(&url, config)
                .await
                .expect("connect");
            // A counter not stored yet, one stored, and a key of another type.
            let checks = [
                Check::new(&policy, subject(0)),
                Check::new(&policy, subject(2)),
                Check::new(&policy, subject(1)),
            ];
            assert!(limiter.check(&checks[1]).await.expect("check").is_allowed());
            let hash = limiter.keys(&checks[2..]).expect("key").remove(0);
            let mut admin = redis::Client::open(url.as_str())
                .expect("url")
                .get_multiplexed_async_connection()
                .await
                .expect("admin");
            let _: () = redis::cmd("HSET")
                .arg(&hash)
                .arg("field")
                .arg("value")
                .query_async(&mut admin)
                .await
                .expect("hset");
            let members = checks
                .iter()
                .map(|check| Member {
                    keys: limiter.keys(std::slice::from_ref(check)).expect("key"),
                    arguments: FixedWindowPolicy::arguments(
                        std::slice::from_ref(check),
                        Marking::Marked,
                    ),
                })
                .collect();
            assert!(limiter.send(members).await.is_err());
            let kind: String = redis::cmd("TYPE")
                .arg(&hash)
                .query_async(&mut admin)
                .await
                .expect("type");
            assert_eq!(kind, "hash");
            let mut counts = Vec::new();
            for check in &checks[..2] {
                let state: Option<String> = redis::cmd("GET")
                    .arg(limiter.keys(std::slice::from_ref(check)).expect("key"))
                    .query_async(&mut admin)
                    .await
                    .expect("state");
                counts.push(
                    state.map(|state| state.split(':').next().unwrap_or_default().to_owned()),
                );
            }
            assert_eq!(counts, [None, Some("1".to_owned())]);
            let _: () = redis::cmd("DEL")
                .arg(&hash)
                .query_async(&mut admin)
                .await
                .expect("del");
        });
    }

    /// Every script compiles, and loads as a function library (whose code
    /// runs when loaded, without Lua's libraries).
    #[test]
    fn every_script_loads_as_a_script_and_as_a_function_library() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let Some(url) = server(&runtime) else {
            return;
        };
        let scripts: [&Lua; 26] = [
            &FIXED_WINDOW,
            &SLIDING_WINDOW,
            &GCRA,
            &FIXED_WINDOW_COALESCED,
            &SLIDING_WINDOW_COALESCED,
            &GCRA_COALESCED,
            &FIXED_WINDOW_REFUND,
            &SLIDING_WINDOW_REFUND,
            &GCRA_REFUND,
            &PEEK,
            &PEEK_CARRYING,
            &FIXED_WINDOW_GRANT,
            &SLIDING_WINDOW_GRANT,
            &GCRA_GRANT,
            &FIXED_WINDOW_CARRYING,
            &SLIDING_WINDOW_CARRYING,
            &GCRA_CARRYING,
            &FIXED_WINDOW_CARRYING_GRANT,
            &SLIDING_WINDOW_CARRYING_GRANT,
            &GCRA_CARRYING_GRANT,
            &ANY,
            &ANY_COALESCED,
            &ANY_CARRYING,
            &ANY_GRANT,
            &ANY_CARRYING_GRANT,
            &ANY_REFUND,
        ];
        runtime.block_on(async {
            let mut connection = redis::Client::open(url.as_str())
                .expect("url")
                .get_multiplexed_async_connection()
                .await
                .expect("connect");
            for lua in scripts {
                let loaded: Result<String, _> = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(lua.code)
                    .query_async(&mut connection)
                    .await;
                assert!(loaded.is_ok(), "{}: {loaded:?}", lua.library.function);
                let loaded: Result<String, _> = redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg("REPLACE")
                    .arg(&lua.library.code)
                    .query_async(&mut connection)
                    .await;
                assert!(loaded.is_ok(), "{}: {loaded:?}", lua.library.function);
            }
        });
    }

    /// Checks of `policy` (marked where they carry) as members of one
    /// coalesced invocation, each with its own key: its replies.
    async fn sent_together<P: RedisPolicy>(
        limiter: &RedisLimiter<RedisConnection, P>,
        members: &[&[Check<'_, P>]],
    ) -> Vec<Vec<i64>> {
        let members = members
            .iter()
            .map(|checks| Member {
                keys: limiter.keys(checks).expect("keys"),
                arguments: P::arguments(checks, Marking::Marked),
            })
            .collect();
        limiter.send(members).await.expect("coalesced")
    }

    /// In one coalesced invocation, marked members whose counters hold no
    /// live state (a lone check, a run of them, a batch) write nothing and
    /// answer that they must carry, while a marked member whose counter
    /// carried already and unmarked members are decided as single
    /// invocations decide them.
    async fn marked_members_carry_on_their_own<P: RedisPolicy>(url: &str, old: P, new: P) {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        let config = RedisConfig::default()
            .with_prefix(format!("rl-test:coalesced-marked:{nanos}:"))
            .expect("valid prefix");
        let limiter = RedisLimiter::<_, P>::connect(url, config)
            .await
            .expect("connect");
        let (old_check, new_check) = (
            |n: usize| Check::new(&old, subject(n)),
            |n: usize| Check::new(&new, subject(n)),
        );
        let allowed = async |check: Check<'_, P>| {
            let (decision, _) = limiter.check_one(&check).await.expect("check");
            decision.is_allowed()
        };
        for n in [1, 2, 5] {
            assert!(allowed(old_check(n)).await);
        }
        // Subject 1 carried already.
        assert!(allowed(new_check(1)).await);
        let replies = sent_together(
            &limiter,
            &[
                &[new_check(2)],
                &[new_check(3)],
                &[new_check(1)],
                &[old_check(4)],
                &[old_check(6), new_check(5)],
                &[new_check(3)],
            ],
        )
        .await;
        let carry = |reply: &Vec<i64>| must_carry(reply);
        assert_eq!(
            replies.iter().map(carry).collect::<Vec<_>>(),
            [true, true, false, false, true, true]
        );
        let decided = |checks: &[Check<'_, P>], reply: &[i64]| {
            P::decisions(checks, reply)
                .expect("a decision")
                .iter()
                .map(|(decision, _)| decision.remaining())
                .collect::<Vec<_>>()
        };
        // Subject 1's one carried unit and two checks of six: three left.
        assert_eq!(decided(&[new_check(1)], &replies[2]), [Some(3)]);
        assert_eq!(decided(&[old_check(4)], &replies[3]), [Some(3)]);
        let mut admin = redis::Client::open(url)
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("admin");
        for check in [new_check(2), new_check(3), new_check(5), old_check(6)] {
            let key = limiter.keys(&[check]).expect("key").remove(0);
            let state: Option<String> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut admin)
                .await
                .expect("get");
            assert_eq!(state, None, "nothing written");
        }
    }

    #[test]
    fn marked_members_of_a_coalesced_invocation_carry_on_their_own() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let Some(url) = server(&runtime) else {
            return;
        };
        let (id, scope) = (
            || PolicyId::new("marked").expect("valid"),
            || ScopeId::new("client").expect("valid"),
        );
        let minute = Duration::from_secs(60);
        let fixed = |limit| FixedWindowPolicy::new(id(), scope(), limit, minute).expect("valid");
        let sliding =
            |limit| SlidingWindowPolicy::new(id(), scope(), limit, minute).expect("valid");
        let gcra = |burst| GcraPolicy::new(id(), scope(), 1, minute, burst).expect("valid");
        // Policies of four, and policies of six continuing from them.
        runtime.block_on(async {
            let new = fixed(6).continuing(&fixed(4)).expect("valid");
            marked_members_carry_on_their_own(&url, fixed(4), new).await;
            let new = sliding(6).continuing(&sliding(4)).expect("valid");
            marked_members_carry_on_their_own(&url, sliding(4), new).await;
            let new = gcra(6).continuing(&gcra(4)).expect("valid");
            marked_members_carry_on_their_own(&url, gcra(4), new).await;
            let new = AnyPolicy::from(gcra(6))
                .continuing(&fixed(4))
                .expect("valid");
            marked_members_carry_on_their_own(&url, AnyPolicy::from(fixed(4)), new).await;
        });
    }
}
