//! Counters that may carry another counter's state: a policy continuing
//! from a predecessor, or a subject key derived under a previous secret too
//! (see [`runlimit_core::carry`]).
//!
//! A check whose counter [`carries`](Check::carries) takes the statement of
//! its kind with its carry sources as two more parameters (their counter
//! keys, and four numbers each: see `counters::Sources`), which only the
//! statement's fallback reads. A single fixed-window check keeps its
//! in-place `UPDATE`, which admits a live window with room, with
//! `runlimit_check_live_fixed_window` deciding what it leaves; a small
//! fixed-window batch keeps its in-place `UPDATE`, settled by
//! `runlimit_settle_live_fixed_windows`; a single GCRA or sliding-window
//! check takes `runlimit_check_live_gcra_counter` or
//! `runlimit_check_live_sliding_window`, the row-lock functions taking the
//! sources too. So a subject whose counter holds live state pays what any
//! check pays, and one whose counter holds none carries in the same round
//! trip: under the row's lock when the row exists, through
//! `runlimit_check_counters` (the `counters` module, with the advisory lock
//! and capacity of a new row) when it does not. Batches of the general
//! functions (larger fixed-window batches, GCRA and sliding-window batches)
//! and grants go to `runlimit_check_counters` with their sources.
//!
//! A peek reads the counter and its sources in one read-only statement and
//! translates the first live source with the core's arithmetic; a reset
//! deletes the counter and every source in one statement.

use std::time::Duration;

use runlimit_core::{
    Check, Decision, Policy, PolicyKind,
    carry::{CounterState, StateMicros, carry},
    gcra::{Exact, ExactMicros, GcraMicros},
    sliding::{Buckets, COUNTED, SlidingMicros},
};
use sqlx::{PgConnection, Row, postgres::PgRow};

use crate::{
    config::PostgresConfig,
    counters::PolicyArgs,
    limiter::{as_u64, counter_lock_id, sorted_lock_ids},
};

/// The clock, the counter's state and each source's, in one read-only
/// statement: `$1`/`$2` the counter's algorithm and key, then up to three
/// sources' (`NULL` where there are fewer).
const PEEK: &str = "\
SELECT (EXTRACT(EPOCH FROM pg_catalog.clock_timestamp()) * 1000000)::bigint, \
runlimit_counter_state($1, $2), runlimit_counter_state($3, $4), \
runlimit_counter_state($5, $6), runlimit_counter_state($7, $8)";

/// What `check` would get now, its counter carrying its first live
/// source's state if it holds none, in one read-only statement.
pub(crate) async fn peek<P: Policy>(
    connection: &mut PgConnection,
    check: &Check<'_, P>,
) -> Result<Decision, sqlx::Error> {
    let policy = check.policy().kind();
    let sources: Vec<_> = check.carry_sources().collect();
    let mut query = sqlx::query(PEEK)
        .bind(PolicyArgs::of(policy).algorithm)
        .bind(check.counter_key().to_bytes().to_vec());
    for slot in 0..3 {
        let source = sources.get(slot);
        query = query
            .bind(source.map(|source| PolicyArgs::of(source.policy()).algorithm))
            .bind(source.map(|source| source.counter().to_bytes().to_vec()));
    }
    let row = query.fetch_one(connection).await?;
    let now = as_u64(row.try_get(0)?);
    let own = stored(policy, &row, 1)?.filter(|state| live(policy, state, now));
    let state = match own {
        Some(state) => Some(state),
        None => {
            let mut carried = None;
            for (column, source) in (2..).zip(&sources) {
                carried = stored(source.policy(), &row, column)?
                    .and_then(|state| carry::<1_000>(source.policy(), &state, policy, now));
                if carried.is_some() {
                    break;
                }
            }
            carried
        }
    };
    Ok(peek_decision(policy, check.cost(), state, now))
}

/// The state in `row`'s `column`, stored by a counter of `policy`.
fn stored(
    policy: PolicyKind<'_>,
    row: &PgRow,
    column: usize,
) -> Result<Option<StateMicros>, sqlx::Error> {
    let Some(words) = row.try_get::<Option<Vec<i64>>, _>(column)? else {
        return Ok(None);
    };
    let malformed = || sqlx::Error::Protocol("a counter state of an unexpected shape".to_owned());
    Ok(Some(match (policy, words.as_slice()) {
        (PolicyKind::FixedWindow(_), &[used, expires_at]) => CounterState::FixedWindow {
            used: as_u64(used),
            expires_at: as_u64(expires_at),
        },
        (PolicyKind::SlidingWindow(policy), [expires_at, counts @ ..]) => {
            let counts: [i64; COUNTED] = counts.try_into().map_err(|_| malformed())?;
            CounterState::SlidingWindow(Buckets {
                latest_start: SlidingMicros::new(policy).latest_start_of(as_u64(*expires_at)),
                counts: counts.map(as_u64),
            })
        }
        (PolicyKind::Gcra(_), &[whole, remainder]) => CounterState::Gcra {
            arrival: Exact {
                whole: as_u64(whole),
                remainder: as_u64(remainder),
            },
        },
        _ => return Err(malformed()),
    }))
}

/// Whether `state`, of a counter of `policy`, is still live at `now`: a
/// window or counts still counting, an arrival time ahead of now.
fn live(policy: PolicyKind<'_>, state: &StateMicros, now: u64) -> bool {
    match state {
        CounterState::FixedWindow { expires_at, .. } => *expires_at > now,
        CounterState::SlidingWindow(buckets) => match policy {
            PolicyKind::SlidingWindow(policy) => {
                SlidingMicros::new(policy).expiry_of(buckets.latest_start) > now
            }
            // `stored` reads a counter's state in its own policy's form.
            _ => false,
        },
        CounterState::Gcra { arrival } => *arrival > Exact::from_whole(now),
    }
}

/// What a check of `cost` under `policy` would get at `now` against `state`
/// (`None`: a fresh counter), as each algorithm's own peek decides.
fn peek_decision(
    policy: PolicyKind<'_>,
    cost: u64,
    state: Option<StateMicros>,
    now: u64,
) -> Decision {
    match policy {
        PolicyKind::FixedWindow(policy) => {
            let (used, left) = match state {
                Some(CounterState::FixedWindow { used, expires_at })
                    if expires_at > now && used > 0 =>
                {
                    (used, Duration::from_micros(expires_at - now))
                }
                _ => (0, Duration::ZERO),
            };
            policy.peek_decision(used, left, cost)
        }
        PolicyKind::SlidingWindow(policy) => {
            let buckets = match state {
                Some(CounterState::SlidingWindow(buckets)) => Some(buckets),
                _ => None,
            };
            SlidingMicros::new(policy).peek_decision(policy, buckets, cost, now)
        }
        PolicyKind::Gcra(policy) => {
            let exact = GcraMicros::new(policy, cost);
            let ahead = match state {
                Some(CounterState::Gcra { arrival }) => {
                    arrival.saturating_sub(ExactMicros::from_whole(now), exact.quota)
                }
                _ => ExactMicros::from_whole(0),
            };
            exact.peek_decision(policy, ahead)
        }
    }
}

/// Deletes `check`'s counter and every one of its carry sources, in one
/// statement, so a reset counter carries nothing again; whether any was
/// live.
pub(crate) async fn reset<P: Policy>(
    connection: &mut PgConnection,
    check: &Check<'_, P>,
    config: &PostgresConfig,
) -> Result<bool, sqlx::Error> {
    let counter = check.counter_key();
    let mut algorithms = vec![PolicyArgs::of(check.policy().kind()).algorithm];
    let mut keys = vec![counter.to_bytes().to_vec()];
    let mut locks = vec![counter_lock_id(&counter)];
    for source in check.carry_sources() {
        algorithms.push(PolicyArgs::of(source.policy()).algorithm);
        keys.push(source.counter().to_bytes().to_vec());
        locks.push(counter_lock_id(source.counter()));
    }
    sqlx::query_scalar("SELECT runlimit_reset_counters($1, $2, $3, $4, $5)")
        .bind(algorithms)
        .bind(keys)
        .bind(sorted_lock_ids(locks))
        .bind(config.lock_timeout_ms())
        .bind(config.relaxed_durability())
        .fetch_one(connection)
        .await
}
