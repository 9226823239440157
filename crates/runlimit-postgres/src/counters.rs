//! Checks of any algorithm decided together, in one statement.
//!
//! `runlimit_check_counters` is the general path of every check the
//! statements of one algorithm cannot decide: a batch that mixes algorithms
//! (a limiter of [`AnyPolicy`](runlimit_core::AnyPolicy) checks), and
//! batches and grants whose counters may carry another counter's state (see
//! the `carry` module), and, called by the functions of single carrying
//! checks, such a check's counter without a row. It takes each check's policy in the same few numbers
//! whatever its algorithm ([`PolicyArgs`]), and each carry source with its
//! own policy ([`Sources`]), and decides the batch atomically across the
//! three counter tables: advisory locks, rows, one sample of the database's
//! clock, carried states, capacity in ledger order, and writes only when
//! every check is allowed (carried states excepted: carrying is not
//! consuming). Its replies are decided by the same client arithmetic as
//! each algorithm's own functions'.

use runlimit_core::{
    CarriedFrom, Check, Policy, PolicyKind, carry::CarrySource, gcra::GcraMicros,
    sliding::SlidingMicros,
};
use sqlx::{PgConnection, Row, postgres::PgRow};

use crate::{
    config::PostgresConfig,
    full_counters::FullCounters,
    limiter::{
        BindSettings, Decided, GcraReply, SlidingReply, as_i64, as_u64, counter_keys,
        fixed_window_decided, gcra_decided, lock_ids, sliding_window_decided,
    },
};

/// A policy as the functions of every algorithm take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PolicyArgs {
    /// 1 for a fixed window, 2 for a sliding window, 3 for GCRA.
    pub(crate) algorithm: i16,
    /// The limit; GCRA's quota.
    pub(crate) limit: i64,
    /// The window in microseconds; GCRA's period.
    pub(crate) window_us: i64,
}

impl PolicyArgs {
    pub(crate) fn of(policy: PolicyKind<'_>) -> Self {
        let micros = |millis: u64| as_i64(millis.saturating_mul(1_000));
        match policy {
            PolicyKind::FixedWindow(policy) => Self {
                algorithm: 1,
                limit: as_i64(policy.limit()),
                window_us: micros(policy.window_millis()),
            },
            PolicyKind::SlidingWindow(policy) => Self {
                algorithm: 2,
                limit: as_i64(policy.limit()),
                window_us: micros(policy.window_millis()),
            },
            PolicyKind::Gcra(policy) => Self {
                algorithm: 3,
                limit: as_i64(policy.quota()),
                window_us: micros(policy.period_millis()),
            },
        }
    }
}

/// Parameters: per check (arrays in batch order) algorithm, counter key,
/// then the checks' advisory-lock ids (ascending), per check limit, window,
/// cost, and GCRA's increment and tolerance (whole microseconds and
/// remainder); the carry sources ([`Sources`]); the grant's bound (`NULL`
/// for checks); the settings.
const CHECK_COUNTERS: &str = "\
SELECT r_outcome, r_carried, r_granted, r_used, r_expires_us, r_latest, r_counts, r_ahead_us, \
r_ahead_rem, r_now_us, r_version \
FROM runlimit_check_counters($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
$16) ORDER BY r_index";

/// Decides `checks` (any algorithms, carrying or not) in one statement.
pub(crate) async fn decide<P: Policy>(
    connection: &mut PgConnection,
    checks: &[Check<'_, P>],
    config: &PostgresConfig,
    full: &FullCounters,
) -> Result<Vec<Decided>, sqlx::Error> {
    let (rows, sources) = run(connection, checks, None, config).await?;
    checks
        .iter()
        .zip(&rows)
        .map(|(check, row)| decided(check, row, None, &sources, full))
        .collect()
}

/// Grants `check` between its cost and `up_to` units, as many as fit its
/// (possibly carried) state now, in one statement: the units granted (0
/// when denied) and what a check of that cost decided.
pub(crate) async fn grant<P: Policy>(
    connection: &mut PgConnection,
    check: &Check<'_, P>,
    up_to: u64,
    config: &PostgresConfig,
    full: &FullCounters,
) -> Result<(u64, Decided), sqlx::Error> {
    let (rows, sources) = run(connection, std::slice::from_ref(check), Some(up_to), config).await?;
    let row = rows.first().ok_or(sqlx::Error::RowNotFound)?;
    let granted = as_u64(row.try_get::<Option<i64>, _>(2)?.unwrap_or(0));
    Ok((granted, decided(check, row, Some(granted), &sources, full)?))
}

/// Sends the statement: its rows, in batch order, and the sources it
/// listed.
async fn run<P: Policy>(
    connection: &mut PgConnection,
    checks: &[Check<'_, P>],
    up_to: Option<u64>,
    config: &PostgresConfig,
) -> Result<(Vec<PgRow>, Sources), sqlx::Error> {
    let count = checks.len();
    let mut algorithms = Vec::with_capacity(count);
    let mut limits = Vec::with_capacity(count);
    let mut windows = Vec::with_capacity(count);
    let mut costs = Vec::with_capacity(count);
    // GCRA's exact quantities (zero for the windows, which ignore them).
    let mut increments = (Vec::with_capacity(count), Vec::with_capacity(count));
    let mut tolerances = (Vec::with_capacity(count), Vec::with_capacity(count));
    for check in checks {
        let policy = check.policy().kind();
        let args = PolicyArgs::of(policy);
        algorithms.push(args.algorithm);
        limits.push(args.limit);
        windows.push(args.window_us);
        costs.push(as_i64(check.cost()));
        let exact = match policy {
            PolicyKind::Gcra(policy) => {
                let exact = GcraMicros::new(policy, check.cost());
                [exact.increment, exact.tolerance].map(|part| (part.whole, part.remainder))
            }
            _ => [(0, 0); 2],
        };
        increments.0.push(as_i64(exact[0].0));
        increments.1.push(as_i64(exact[0].1));
        tolerances.0.push(as_i64(exact[1].0));
        tolerances.1.push(as_i64(exact[1].1));
    }
    let sources = Sources::of(checks);
    let rows = sqlx::query(CHECK_COUNTERS)
        .bind(algorithms)
        .bind(counter_keys(checks))
        .bind(lock_ids(checks))
        .bind(limits)
        .bind(windows)
        .bind(costs)
        .bind(increments.0)
        .bind(increments.1)
        .bind(tolerances.0)
        .bind(tolerances.1)
        .bind(&sources.keys)
        .bind(&sources.words)
        .bind(up_to.map(as_i64))
        .bind_settings(config)
        .fetch_all(connection)
        .await?;
    Ok((rows, sources))
}

/// The carry sources of a batch's checks, as the functions take them: each
/// source's counter key, and four numbers each (the check it belongs to,
/// 1-based, then its policy's [`PolicyArgs`]), in the order they are read.
#[derive(Debug, Default)]
pub(crate) struct Sources {
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) words: Vec<i64>,
    /// What kind of source each is, for observers.
    from: Vec<CarriedFrom>,
}

impl Sources {
    /// The sources of every check of `checks` whose counter carries.
    pub(crate) fn of<P: Policy>(checks: &[Check<'_, P>]) -> Self {
        let mut sources = Self::default();
        for (index, check) in (1..).zip(checks) {
            for source in check.carry_sources() {
                sources.push(index, &source);
            }
        }
        sources
    }

    fn push(&mut self, check: i64, source: &CarrySource<'_>) {
        let args = PolicyArgs::of(source.policy());
        self.keys.push(source.counter().to_bytes().to_vec());
        self.words
            .extend([check, i64::from(args.algorithm), args.limit, args.window_us]);
        self.from.push(source.from());
    }

    /// The kind of the source a reply names (its 1-based index; `None` or
    /// 0 for none).
    pub(crate) fn carried(&self, index: Option<i64>) -> Result<Option<CarriedFrom>, sqlx::Error> {
        match index.filter(|&index| index > 0) {
            None => Ok(None),
            Some(index) => usize::try_from(index - 1)
                .ok()
                .and_then(|index| self.from.get(index).copied())
                .map(Some)
                .ok_or_else(|| sqlx::Error::Protocol("an unknown carry source".to_owned())),
        }
    }
}

/// One check's decision from its row, decided by its algorithm's
/// arithmetic; a grant as the check of the units granted (of its cost when
/// denied).
fn decided<P: Policy>(
    check: &Check<'_, P>,
    row: &PgRow,
    granted: Option<u64>,
    sources: &Sources,
    full: &FullCounters,
) -> Result<Decided, sqlx::Error> {
    let outcome: i16 = row.try_get(0)?;
    let carried = sources.carried(row.try_get::<Option<i32>, _>(1)?.map(i64::from))?;
    let cost = granted.map_or(check.cost(), |units| units.max(check.cost()));
    let retyped = |error| sqlx::Error::Decode(Box::new(error));
    let now_us: i64 = row.try_get(9)?;
    let version: i64 = row.try_get(10)?;
    let decided = match check.policy().kind() {
        PolicyKind::FixedWindow(policy) => fixed_window_decided(
            &Check::weighted(policy, *check.subject(), cost).map_err(retyped)?,
            (outcome, row.try_get(3)?, row.try_get(4)?, now_us),
            full,
        )?,
        PolicyKind::SlidingWindow(policy) => sliding_window_decided(
            &Check::weighted(policy, *check.subject(), cost).map_err(retyped)?,
            &SlidingMicros::new(policy),
            &SlidingReply {
                outcome,
                latest: row.try_get(5)?,
                counts: row.try_get(6)?,
                now_us,
                version,
            },
        )?,
        PolicyKind::Gcra(policy) => gcra_decided(
            &Check::weighted(policy, *check.subject(), cost).map_err(retyped)?,
            &GcraMicros::new(policy, cost),
            &GcraReply {
                outcome,
                ahead_us: row.try_get(7)?,
                ahead_rem: row.try_get(8)?,
                now_us,
                version,
            },
        )?,
    };
    Ok(decided.carried(carried))
}
