//! Replica-safe shared quotas on PostgreSQL.
//!
//! `runlimit-postgres` implements [`runlimit_core::Limiter`] on a PostgreSQL
//! database through SQLx, for quotas that must hold across replicas or survive
//! restarts. [`PostgresLimiter<FixedWindowPolicy>`](PostgresLimiter),
//! [`PostgresLimiter<SlidingWindowPolicy>`](PostgresLimiter) and
//! [`PostgresLimiter<GcraPolicy>`](PostgresLimiter) have exactly the semantics of
//! `runlimit-memory`'s `MemoryStore`, `SlidingWindowStore` and `GcraStore`,
//! proven by the same conformance suite. The functions of the three share one
//! prologue (settings, advisory locks in order, the clock), the capacity rule,
//! cleanup and reset. [`PostgresLimiter<AnyPolicy>`](PostgresLimiter) checks
//! policies of all three algorithms, chosen per check (see
//! [Every algorithm in one limiter](#every-algorithm-in-one-limiter)).
//!
//! [`AnyPolicy`]: runlimit_core::AnyPolicy
//! [`FixedWindowPolicy`]: runlimit_core::FixedWindowPolicy
//! [`GcraPolicy`]: runlimit_core::GcraPolicy
//! [`SlidingWindowPolicy`]: runlimit_core::SlidingWindowPolicy
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use runlimit_core::{Check, FixedWindowPolicy, Limiter, PolicyId, ScopeId, SubjectKey};
//! use runlimit_postgres::{PostgresConfig, PostgresLimiter};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // A pool of the limiter's own keeps every check at one round trip.
//! let pool = runlimit_postgres::pool_options().connect("postgres://app@db/app").await?;
//! let limiter =
//!     PostgresLimiter::<FixedWindowPolicy>::with_dedicated_pool(pool, PostgresConfig::default());
//! limiter.migrate().await?;
//! let policy = FixedWindowPolicy::new(
//!     PolicyId::new("auth.login.shared")?,
//!     ScopeId::new("identity")?,
//!     8,
//!     Duration::from_secs(60),
//! )?;
//! let decision = limiter.check(&Check::new(&policy, SubjectKey::from_digest([7; 32]))).await?;
//! # let _ = decision;
//! # Ok(())
//! # }
//! ```
//!
//! # One round trip
//!
//! Every check and every atomic batch is a single statement built on
//! server-side functions (installed by the migrations). With a pool of its own
//! ([`PostgresLimiter::with_dedicated_pool`], built from [`pool_options`]) the
//! limiter keeps its connections between checks, so SQLx's pings on acquire
//! and release never happen and a check is exactly one round trip on the
//! wire; on a pool shared with the application
//! ([`PostgresLimiter::new`]), SQLx pings each connection it gets back, a
//! second exchange after the check has answered. It takes
//! transaction-scoped advisory locks on the counters in ascending order, locks
//! their rows, samples `pg_catalog.clock_timestamp()` once, decides every check,
//! reserves capacity for new keys in a 256-shard ledger (shards locked in
//! ascending order), and writes only when every check is allowed, committing as
//! the statement ends. The number of statements does not grow with the batch.
//! A single check of a counter that already has a row (any algorithm) skips
//! the advisory lock and the ledger: it locks the row, samples the clock, and
//! decides and writes under that lock alone, which orders it with every
//! admission, refund, reset and cleanup of the counter. It takes no lock
//! after the row's, so it never waits in a cycle with the general path; a
//! row deleted while it waits sends it down the general path. A single
//! fixed-window check goes further: its statement is an `UPDATE` that adds
//! the check's cost to a live window with room, its condition holding the
//! decision, so an admission is one write under the row lock the update
//! takes itself, decided on a clock read with the row version it writes
//! over (read again if the update waited for the row). A denial, a window
//! that has ended, or a counter without a row updates nothing and is decided
//! in the same statement by `runlimit_check_fixed_window`, which
//! denies a full window from the row as last committed,
//! without its lock (a denial changes nothing, so the snapshot it read
//! orders it), and locks the row for anything else, anchoring a new window
//! over one that has ended.
//!
//! A fixed-window batch of two to eight checks is one statement of the same
//! kind: it takes the batch's advisory locks in ascending
//! order first, then one `UPDATE` adds each check's cost to its row where
//! the window is live with room. When every row was updated the batch is
//! admitted; otherwise the same statement calls
//! `runlimit_settle_fixed_windows`, which takes back what the update added
//! (it holds those rows' locks, and no other transaction sees the cost),
//! denies the batch from the rows as last committed when one is full, and
//! otherwise decides it with the general function. A batch naming a counter
//! that a recent reply of the same limiter found full is sent to that
//! function directly, so repeated denials write nothing; the limiter
//! remembers such counters in a fixed table of 1,024 slots, which only
//! chooses the statement, never the decision.
//!
//! # Changing policies and rotating secrets
//!
//! A policy built `continuing` from the policy it replaces, and a
//! [`KeyHasher`](runlimit_core::KeyHasher) keeping the previous secret, carry
//! a subject's state into the new counter the first time the subject is
//! checked (see [`runlimit_core::carry`] for the translation and its bound),
//! on PostgreSQL as in memory: an attacker at the limit before a deploy or a
//! rotation is still denied after it. The sources may be of any algorithm;
//! each is read in its own table, on the database's clock, as last
//! committed, and never changed.
//!
//! What it costs: **no extra round trip**. A check whose counter may carry
//! takes the statement it takes without a lineage, with its carry sources
//! as two more parameters (their counter keys, and four numbers each) that
//! only the statement's fallback reads: a single fixed-window check's
//! in-place `UPDATE` (and a small batch's) still admits a live window with
//! room, with `runlimit_check_live_fixed_window`
//! (`runlimit_settle_live_fixed_windows`) deciding what it leaves; GCRA and
//! sliding windows take the live forms of their row-lock functions. A
//! subject whose counter holds live state pays what any check pays. When the
//! counter holds none, the fallback reads the sources, translates the first
//! holding live state exactly as the core does, stores it (even for a
//! denial: carrying is not consuming, so an attacker at the limit carries
//! once) and decides the check, in the same round trip: under the row's
//! lock when the counter has a row, and through `runlimit_check_counters`,
//! with the advisory lock and capacity of a new row, when it has none. A
//! counter whose state has ended while a source still holds state carries
//! again, so carried usage is released no earlier than the source releases
//! it. Batches decided by the general functions (GCRA and sliding-window
//! batches, fixed-window batches of more than eight checks) and grants go
//! to `runlimit_check_counters` with their sources. Concurrent first checks
//! of one subject carry once: the counter's locks order them, and the later
//! ones find the state the first one stored. A peek reads the counter and
//! its sources in one read-only statement; a reset deletes the counter and
//! every source in one (`runlimit_reset_counters`), so nothing is carried
//! again. Drop the lineage and the previous secret once the predecessor's
//! longest window has passed: until then each source is read whenever a
//! counter has no live state.
//!
//! # Every algorithm in one limiter
//!
//! [`PostgresLimiter<AnyPolicy>`](PostgresLimiter) (also through
//! [`for_policy`](PostgresLimiter::for_policy)) takes checks of fixed
//! windows, sliding windows and GCRA alike, for configurations that choose
//! the algorithm per rule. A check, and a batch of one algorithm, take that
//! algorithm's statements at their cost. A batch that mixes algorithms is one
//! statement, `runlimit_check_counters`, atomic across the three tables: it
//! takes every counter's advisory lock in the global order, then the rows,
//! then capacity in one pass over the tables in the ledger's order, decides
//! every check on one clock sample, and consumes all or nothing. A receipt
//! of a mixed batch is refunded in one statement (`runlimit_refund_counters`)
//! that takes every lock first, then runs each algorithm's refund; its
//! [`cleanup_expired`](PostgresLimiter::cleanup_expired) shares its bound
//! among the three tables. Carries between algorithms (a fixed window
//! replaced by GCRA, say) work as above.
//!
//! # Refund, peek and reset
//!
//! [`PostgresLimiter`] implements [`runlimit_core::Lifecycle`],
//! [`runlimit_core::Settle`] and [`runlimit_core::Grant`]. A grant is one
//! statement (`runlimit_grant_fixed_window`, `runlimit_grant_gcra`,
//! `runlimit_grant_sliding_window`) that takes the counter's advisory and row
//! locks, reads its room on the database's clock and admits that many units
//! through the general path. A refund, or a settlement giving back part of a
//! receipt, is one statement (`runlimit_refund_fixed_windows`,
//! `runlimit_refund_gcra`, `runlimit_refund_sliding_windows`) taking
//! the check's advisory and row locks in the same order; a fixed-window refund
//! that forgets its window expires the row in place (it keeps its ledger slot
//! until cleanup), so refunds never touch the ledger. A peek is one read-only
//! `SELECT` with the database clock, storing nothing. A reset deletes the row
//! (freeing its ledger slot) in one statement. GCRA rows carry a version, the
//! row's creation time, that receipts are checked against.
//!
//! # Time
//!
//! PostgreSQL's clock is the authority, and every call is schema-qualified as
//! `pg_catalog.clock_timestamp()`, so a function earlier on a caller's
//! `search_path` cannot stand in for it; the functions also pin their own
//! `search_path` to the schema they were installed in. Durations are measured
//! on the database clock and can overstate what remains at the caller by commit
//! and transport latency.
//!
//! # Timeouts and failures
//!
//! [`PostgresConfig::with_pool_acquire_timeout`] bounds waiting for a pooled
//! connection; after acquisition the operation gets a fresh
//! [`operation_timeout`](PostgresConfig::with_operation_timeout) budget,
//! enforced on the client as a deadline after which the connection is closed,
//! never returned to the pool. Lock waits are bounded on the server by a
//! `lock_timeout` a margin shorter (a quarter of the budget, at most 250 ms),
//! so a check blocked on another session's lock ends with the server's
//! definite lock-timeout error rather than the client's uncertain deadline. A cancelled operation
//! closes its connection the same way. If an application also imposes an outer
//! timeout, allow for both budgets plus scheduling overhead.
//!
//! Errors fail closed. [`CheckError::may_have_consumed_quota`] tells "definitely
//! not consumed" (nothing sent, or the server rolled back) from "the commit
//! outcome is unknown" (the connection failed or the deadline passed after
//! sending); do not blindly retry the latter. [`MaintenanceError`] makes the
//! same distinction for cleanup.
//!
//! # Cardinality and maintenance
//!
//! Stored keys are hard-bounded: 256 capacity shards (chosen by the first byte
//! of the subject key) of at most
//! [`max_rows_per_shard`](PostgresConfig::with_max_rows_per_shard) rows each
//! (default 4,096; the database itself refuses more than 65,536, so an older or
//! foreign writer cannot exceed it). A new key in a full shard is denied with
//! [`Denial::StorageCapacity`](runlimit_core::Denial); existing keys keep
//! working and active rows are never evicted. The bound is per shard, so skew can
//! deny a new key while other shards have room.
//!
//! The ledger is kept exact by statement-level triggers on every counter
//! table, for `INSERT`, `DELETE` and `TRUNCATE`, so truncating a counter
//! table (the quickest way to reset every limit of one algorithm) also frees
//! all its capacity.
//!
//! Expiry alone does not free a ledger slot: expired rows must be deleted.
//! [`cleanup_expired`](PostgresLimiter::cleanup_expired)`(maximum_rows)`
//! deletes at most that many expired rows of one policy type's table along the
//! expiry index, skipping rows admissions hold, and returns how many it
//! removed. [`PostgresLimiter`] implements [`runlimit_core::Maintain`]: a
//! round cleans every counter table in statements of
//! [`MAINTENANCE_ROWS_PER_STATEMENT`] rows, repeated while they come back
//! full (at most [`MAINTENANCE_STATEMENTS_PER_TABLE`] per table), so one call
//! schedules it for every policy type on the Tokio runtime:
//!
//! ```no_run
//! # use std::time::Duration;
//! # use runlimit_core::FixedWindowPolicy;
//! # use runlimit_postgres::PostgresLimiter;
//! # async fn run(limiter: PostgresLimiter<FixedWindowPolicy>) -> Result<(), Box<dyn std::error::Error>> {
//! let maintenance = runlimit_memory::maintenance::spawn(limiter.clone(), Duration::from_secs(60))?;
//! // … and at shutdown:
//! maintenance.stop().await;
//! # Ok(())
//! # }
//! ```
//!
//! Monitor shard headroom:
//!
//! ```sql
//! SELECT counter_table, max(used) AS fullest_shard, sum(used) AS rows
//! FROM runlimit_capacity_ledger GROUP BY counter_table;
//! ```
//!
//! # Vacuum and fillfactor
//!
//! The counter tables are update-heavy: each admission after a row's insert
//! leaves a dead tuple. In-window increments can be HOT updates (the tables use
//! fillfactor 80 to leave room for them); renewing a window or advancing a GCRA
//! arrival time changes an indexed column and cannot. Tune autovacuum for churn,
//! for example:
//!
//! ```sql
//! ALTER TABLE runlimit_fixed_windows SET (
//!     autovacuum_vacuum_threshold = 500,
//!     autovacuum_vacuum_scale_factor = 0.01,
//!     autovacuum_analyze_threshold = 500,
//!     autovacuum_analyze_scale_factor = 0.02
//! );
//! ```
//!
//! and watch live and dead tuples, the HOT ratio and relation sizes:
//!
//! ```sql
//! SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, last_autovacuum,
//!        pg_size_pretty(pg_relation_size(relid)) AS heap,
//!        pg_size_pretty(pg_indexes_size(relid)) AS indexes
//! FROM pg_stat_user_tables
//! WHERE relid IN ('runlimit_fixed_windows'::regclass, 'runlimit_gcra'::regclass);
//! ```
//!
//! Alert when dead tuples or sizes keep rising across completed autovacuums while
//! live rows are stable, and look for long-running transactions holding back
//! cleanup before adding vacuum capacity.
//!
//! # Advisory-lock namespace
//!
//! The functions use `pg_advisory_xact_lock(bigint)` with ids derived from
//! counter keys. Advisory locks are database-wide and shared by every role: an
//! unrelated session holding the same number can delay a counter until the
//! operation timeout. Use a dedicated database, or make sure untrusted roles
//! cannot call the advisory-lock functions.
//!
//! # Migrations
//!
//! The bundled migrations need PostgreSQL 13 or later.
//! [`migrate`] (and [`PostgresLimiter::migrate`]) apply them
//! with `set_ignore_missing(true)`, so they coexist with the application's own
//! migrations in one `_sqlx_migrations` table; every migrator sharing it must do
//! the same. [`MIGRATOR`] keeps SQLx's strict default for databases Runlimit owns
//! alone. Applications that must keep a strict migrator of their own can vendor
//! the bundled schema, [`SCHEMA`], as their own migrations, in its order.
//!
//! # A schema of your own
//!
//! The limiter's statements name Runlimit's functions without a schema, and
//! [`migrate`] creates its tables, functions and migration history without
//! one, so both follow each connection's `search_path`: by default the
//! `public` schema. To keep everything Runlimit owns in a schema of the
//! application's choosing, create the schema once (owned by, or granting
//! `USAGE` and `CREATE` to, the role that migrates) and start every
//! connection of the limiter's pool with it on the search path, then
//! migrate:
//!
//! ```sql
//! CREATE SCHEMA ratelimit AUTHORIZATION app;
//! ```
//!
//! ```no_run
//! use runlimit_core::FixedWindowPolicy;
//! use runlimit_postgres::{PostgresConfig, PostgresLimiter};
//! use sqlx::postgres::PgConnectOptions;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let options = "postgres://app@db/app"
//!     .parse::<PgConnectOptions>()?
//!     .options([("search_path", "ratelimit")]);
//! let pool = runlimit_postgres::pool_options().connect_with(options).await?;
//! let limiter =
//!     PostgresLimiter::<FixedWindowPolicy>::with_dedicated_pool(pool, PostgresConfig::default());
//! limiter.migrate().await?; // ratelimit.runlimit_fixed_windows, ratelimit._sqlx_migrations, …
//! # Ok(())
//! # }
//! ```
//!
//! The same setting fits in the URL, for configuration that holds only a
//! URL: `postgres://app@db/app?options=-c%20search_path%3Dratelimit`. It is
//! sent when a connection starts, so it costs no round trip. Every replica's
//! pool needs it, since the limiter's statements find the functions through
//! it; the functions themselves keep the schema they were installed in
//! (`SET search_path FROM CURRENT`), whatever path calls them. The migration
//! history then lives in the schema too, apart from the application's own
//! `_sqlx_migrations`. Keep the application's queries off that pool (a pool
//! of the limiter's own, as above, already is), or they too resolve
//! unqualified names in `ratelimit` first.
//!
//! # Durability
//!
//! Commits are durable by default.
//! [`with_relaxed_durability`](PostgresConfig::with_relaxed_durability) commits
//! the limiter's transactions with `synchronous_commit = off`: faster, but a
//! server crash can forget the last moments of admissions.
//!
//! # Production topology
//!
//! Use PostgreSQL for authoritative shared identity, account or global limits,
//! and keep a coarse hard-bounded `runlimit-memory` gate in front of it as the
//! first-line client and cardinality filter that protects request parsing and
//! the connection pool. Give the two gates distinct policy ids. Every replica
//! sharing the database must use the same policies, subject normalization and
//! HMAC secret; readiness checks should verify the database a fail-closed path
//! depends on.

mod any;
mod batch;
mod carry;
mod config;
mod connections;
mod counters;
mod error;
mod full_counters;
mod limiter;
mod maintenance;
mod migrate;
mod pool;
mod single;

pub use config::{
    CAPACITY_SHARDS, ConfigError, DEFAULT_ROWS_PER_SHARD, MAX_BATCH_SIZE, MAX_ROWS_PER_SHARD,
    PostgresConfig,
};
pub use error::{CheckError, MaintenanceError};
pub use limiter::{PgPolicy, PostgresLimiter};
pub use maintenance::{MAINTENANCE_ROWS_PER_STATEMENT, MAINTENANCE_STATEMENTS_PER_TABLE};
pub use migrate::{MIGRATOR, SCHEMA, SchemaMigration, migrate};
pub use pool::pool_options;
