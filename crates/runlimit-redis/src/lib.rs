//! Shared quotas on Redis and Redis Cluster.
//!
//! `runlimit-redis` implements [`runlimit_core::Limiter`] on Redis with the same
//! fixed-window, sliding-window and GCRA semantics as `runlimit-memory` and
//! `runlimit-postgres`, proven by the shared conformance suite.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use runlimit_core::{Check, GcraPolicy, Limiter, PolicyId, ScopeId, SubjectKey};
//! use runlimit_redis::{RedisConfig, RedisLimiter};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // The policy type (here GcraPolicy) follows from the checks.
//! let limiter = RedisLimiter::connect("redis://cache.internal:6379/", RedisConfig::default()).await?;
//! let policy = GcraPolicy::new(
//!     PolicyId::new("api.read")?,
//!     ScopeId::new("client")?,
//!     10,
//!     Duration::from_secs(1),
//!     20,
//! )?;
//! let decision = limiter.check(&Check::new(&policy, SubjectKey::from_digest([7; 32]))).await?;
//! # let _ = decision;
//! # Ok(())
//! # }
//! ```
//!
//! # One connection, every policy type
//!
//! A limiter evaluates one policy type, `RedisLimiter<C, P>`, inferred from
//! the checks it is given. [`RedisLimiter::for_policy`] gives another policy
//! type the same connection, configuration and observer, so one connection
//! serves a service's fixed windows and GCRA rates alike.
//!
//! # One round trip, one clock
//!
//! Every check and every atomic batch runs one Lua script: as a Redis
//! function where the server has them (below), otherwise with `EVALSHA`,
//! reloaded with `EVAL` after `SCRIPT FLUSH` or a restart. Scripts run
//! atomically, read Redis's own clock with `TIME`, decide every check first,
//! and write only when all are allowed, so a denied or failed batch consumes
//! nothing. The
//! scripts of the three algorithms share one prelude for the clock, state
//! fields, expiring writes and that batch rule. The scripts need Redis 6.0 or
//! later (`SET … KEEPTTL`); tests and benchmarks run on Redis 7.0.
//!
//! On Redis 7.0 or later the limiter calls the same code as Redis functions
//! (`FCALL`), which define the scripts' shared functions once, when loaded,
//! instead of at every invocation: a single check costs the server about a
//! fifth less, a coalesced one about a twelfth. Each script is one library
//! of one function, named `runlimit_` and a digest of its code, so versions
//! sharing a server never replace each other's. The limiter loads a library
//! (`FUNCTION LOAD`, on every primary of a cluster) the first time a server
//! answers that it lacks it, so after a restart or `FUNCTION FLUSH` as well;
//! an upgrade leaves the previous version's libraries behind (`FUNCTION
//! LIST`, `FUNCTION DELETE`). On a server without functions, or for a user
//! whose ACL denies `FCALL` or `FUNCTION`, the limiter runs the scripts
//! instead from then on.
//!
//! # Coalescing
//!
//! Checks and batches of one policy type issued concurrently through one
//! limiter (its clones, and the limiters [`RedisLimiter::for_policy`] makes)
//! to the same server, or on a cluster the same hash slot, share
//! script invocations. Up to two invocations of a group are in flight at
//! once; checks issued beyond that queue, and the next invocation carries
//! them all (at most [`RedisConfig::with_coalescing`] members, 32 by
//! default) to a script that decides each member on its own, exactly as a
//! lone invocation would: its own all-or-nothing batch, its own decision,
//! its own error (one member's denial or caller error never touches
//! another; caller errors are refused before anything is queued). A server
//! error, such as a counter's key holding another Redis type, fails every
//! member of the invocation it happens in, with nothing written. Members
//! that name the same key see each other's writes, in order. There is no
//! timer: a lone check is sent at once with the single-check script.
//!
//! What a member costs the server is most of what a coalesced check costs,
//! so the shared script reads every member's state before it writes anything
//! (`MGET`, one per thousand keys), receives a policy's arguments once for
//! each run of consecutive checks that share them, and, for fixed windows,
//! decides such a run in one loop that rewrites a count's last digit in
//! place (`SETRANGE`, which keeps the key's TTL) when the count keeps its
//! number of digits, and answers each check with the state it decided on
//! (the client, which sent the arguments, decides from it again).
//!
//! The effect on latency: a queued check waits for one invocation ahead of it
//! to finish, then shares the next; under load this replaces waiting in the
//! server's queue. The caller that sent an invocation for others answers
//! them, then yields to the runtime once before the next is sent, so those
//! that check again at once share it (at 32 tasks about fifteen members
//! per invocation rather than ten, for less server time per check); its own
//! answer waits for that turn. A queued check that reaches its operation timeout before
//! an invocation takes it fails with [`CheckError::OperationTimeout`] (it
//! may still be sent). Turn coalescing off with `with_coalescing(1)`.
//!
//! # Refund, peek and reset
//!
//! [`RedisLimiter`] implements [`runlimit_core::Lifecycle`],
//! [`runlimit_core::Settle`] and [`runlimit_core::Grant`] (a grant is one
//! script that measures the counter's room, then admits that many units, on
//! one reading of `TIME`): a refund, or a settlement giving back part of a
//! receipt, is one atomic script on Redis's clock, a peek one read-only script (`TIME` and
//! `GET`), a reset one `DEL`. GCRA state carries a version (the counter's
//! creation time) that receipts are checked against. On a cluster each works
//! for any key; a batch's refund, like the batch, needs its keys in one slot.
//!
//! # Changing policies and rotating secrets
//!
//! A policy built [`continuing`](runlimit_core::FixedWindowPolicy::continuing)
//! from the one it replaces, and subject keys derived by a
//! [`KeyHasher`](runlimit_core::KeyHasher) that keeps a previous secret,
//! carry a subject's state into its new counter the first time the counter
//! is checked (see [`runlimit_core::carry`] for the translation and its
//! bound). On Redis:
//!
//! * Such a check is *marked* (a sign in one of its script arguments). While
//!   its counter holds live state the script decides it as any other check:
//!   a check of a subject whose counter carried already costs one
//!   invocation on the same script path (coalesced fixed-window checks
//!   included) as a check of a policy without a predecessor.
//! * Where a marked check's counter holds no live state (the subject's first
//!   check after the change, or its first after the counter expired), the
//!   invocation writes nothing and answers that the counter must carry. The
//!   limiter then sends a *carrying* invocation: one atomic script that reads
//!   the sources, translates the first that holds live state exactly as
//!   core's [`carry`](runlimit_core::carry::carry) does (on Redis's clock, in
//!   microseconds), stores it if the counter still holds no live state, and
//!   decides the check, batch or grant as usual. Concurrent first checks
//!   carry once; carrying is not consuming, so a denied check may leave the
//!   carried state stored. Observers hear
//!   [`on_carry`](runlimit_core::Observer::on_carry) once per carried
//!   counter.
//! * So a first check costs one more round trip on one server, where the
//!   carrying script reads every source itself. On a cluster, keys are
//!   tagged by subject key ([`KeyRouting::PerSubject`]) and a subject key is
//!   derived per policy id and scope, so a predecessor's counter shares its
//!   successor's slot: a policy change costs one more round trip there too.
//!   A previous secret's keys hash elsewhere: while a check's subject key
//!   has a previous one, their states are read with one `MGET` sent beside
//!   the check (the cluster connection sends it to each slot's node in
//!   parallel), and handed to the carrying script when the counter must
//!   carry, so a rotation's first check also costs one more round trip,
//!   once per subject. Until the previous secret is dropped, every check of
//!   such a subject sends that `MGET` too: no wait, but one more command per
//!   check. The states are read a round trip before they are carried, so
//!   admissions a replica still keying by the previous secret makes in
//!   between are not carried.
//! * A peek of a counter that may carry is one read-only script that reads
//!   the counter and its sources in its slot (on a cluster, with an `MGET`
//!   after it for sources elsewhere when the counter holds no live state),
//!   and writes nothing; a reset deletes the counter and every source, one
//!   `DEL` (on a cluster, one per slot, in parallel). Refunds and
//!   settlements credit the new counter, as any.
//!
//! Until the predecessor's longest window has passed, every counter without
//! live state costs that extra round trip (a fixed window's first check of
//! each window, say); then drop the predecessor and the previous secret.
//!
//! # Policies of any algorithm
//!
//! `RedisLimiter<C, AnyPolicy>` takes checks of [`runlimit_core::AnyPolicy`],
//! for policies chosen at run time. Each check is decided by its algorithm's
//! own script code (coalesced with the connection's other `AnyPolicy`
//! checks, though a fixed-window check does not take the lone-check loop of
//! a `FixedWindowPolicy` limiter), and carries between any two algorithms. A
//! batch may mix algorithms: one script measures every check without
//! writing, then admits each only if all fit, so it is all admitted or none
//! consumed. A receipt of a mixed batch is refunded by one script. On a
//! cluster a batch's keys must share a slot, as any batch's: checks of
//! different policies hash by different subject keys, so batches of several
//! policies need [`KeyRouting::SingleSlot`].
//!
//! # Exact arithmetic
//!
//! Lua numbers are doubles, exact only below 2<sup>53</sup>. Core's portable
//! bounds keep every value the scripts handle below that: limits and costs are at
//! most 10<sup>9</sup>, times are microseconds since the epoch (about
//! 1.8 × 10<sup>15</sup>), and GCRA products such as `cost × period / quota` are
//! computed by the client with 128-bit integers and handed over as a whole
//! number of microseconds plus a remainder below the quota.
//!
//! # Keys, memory and eviction
//!
//! A key is the configured prefix plus the 64 hex digits of the policy
//! fingerprint and the 64 of the HMAC subject key, the latter in braces (the
//! key's Redis Cluster hash tag); raw subjects never reach Redis.
//! Each key holds one short string (`used:window_end_us`,
//! `arrival_us:remainder:version`, or for a sliding window its expiry, version
//! and nine counts) and expires by itself (`SET … PX`) when its window ends,
//! nothing in its sliding window still counts, or its full burst has
//! replenished, so memory is bounded by the number of subjects active within
//! one window or replenishment period, roughly 200 bytes each with Redis's
//! per-key overhead (a few dozen more for a sliding window). Use `maxmemory-policy noeviction` (or `volatile-*` policies
//! on an instance that holds nothing else you would rather keep): an evicted
//! counter is forgotten, so its subject gets a fresh quota, exactly the failure
//! a rate limiter exists to prevent. With `noeviction`, a full Redis refuses the
//! script and the check fails closed with [`CheckError::Refused`].
//!
//! # Restarts and failover
//!
//! A counter lives only as long as Redis keeps it, so what a restart or a
//! failover loses is quota handed out again:
//!
//! * **A restart without persistence** (`--save ""`, `appendonly no`, or a
//!   crash between RDB snapshots) forgets every counter: every subject gets a
//!   fresh quota. A key that had used 100 of 100 comes back with 99 remaining
//!   after its next check.
//! * **AOF with `appendfsync everysec`** loses at most about the last second
//!   of writes on a crash (every counter consumed in that second is handed out
//!   again); **`appendfsync always`** loses nothing the server acknowledged,
//!   at the cost of an fsync per script, which caps throughput at the disk's
//!   sync rate.
//! * **Failover to an asynchronous replica** (Sentinel, Cluster) loses the
//!   writes the replica had not yet received: usually milliseconds, more under
//!   load or a partition. `WAIT numreplicas timeout` after each script would
//!   narrow that window, at a round trip per check, but is not durability
//!   either: a replica acknowledges receipt, not its own fsync, and a
//!   partitioned old primary can keep accepting writes that are later
//!   discarded.
//!
//! Memory eviction (above) is the third way to forget a counter. Treat each as
//! a burst of extra admissions bounded by one quota per subject, and size
//! persistence to the quotas you cannot afford to grant twice. A quota that
//! must survive any failure belongs in PostgreSQL (`runlimit-postgres`).
//!
//! # Connections and outages
//!
//! [`RedisLimiter::connect`] builds a [`RedisConnection`]: one multiplexed
//! connection that, once it fails, is dropped and re-established in the
//! background (attempts bounded by
//! [`RedisConfig::with_connect_timeout`], at most
//! [`RedisConfig::with_max_reconnect_delay`] apart), while checks fail at
//! once with [`CheckError::Unreachable`]: nothing was sent, so nothing was
//! consumed. After a restart the limiter admits again within about one
//! reconnection delay. The check that discovers a dead connection may have
//! been written before the server died, so it is reported as possibly
//! consumed. [`RedisLimiter::new`] accepts any other connection (a
//! `ConnectionManager`, say); with redis-rs's default backoff a short outage
//! can then fail checks for minutes after the server is back, and checks that
//! waited for the reconnection are reported as possibly consumed.
//! [`RedisLimiter::connect_cluster`] sets the cluster client's retries and
//! waits for admission in the same way.
//!
//! # Redis Cluster
//!
//! Build with [`RedisLimiter::connect_cluster`], or [`RedisLimiter::cluster`]
//! over a `ClusterConnection` of your own. Single
//! checks work for any key. A script can only touch keys in one hash slot, so
//! with the default [`KeyRouting::PerSubject`] a batch whose keys fall in
//! different slots is refused with [`CheckError::CrossSlot`] before anything is
//! sent. [`KeyRouting::SingleSlot`] puts every key in one slot so batches always
//! work, at the price of a hot slot: all limiter traffic on one node.
//!
//! # Failures
//!
//! Errors fail closed. [`CheckError::may_have_consumed_quota`] is `false` when
//! nothing was sent (no connection) or Redis refused the script, and `true`
//! when the connection failed or the timeout expired after sending.

mod carry;
mod coalesce;
mod config;
mod connection;
mod error;
mod keys;
mod limiter;
#[cfg(test)]
mod testing;

pub use config::{
    ConfigError, DEFAULT_COALESCED, KeyRouting, MAX_BATCH_SIZE, MAX_COALESCED, MAX_PREFIX_LEN,
    RedisConfig,
};
pub use connection::{ConnectError, RedisConnection};
pub use error::CheckError;
pub use limiter::{RedisLimiter, RedisPolicy};
