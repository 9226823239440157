//! A small fixed-window batch as one statement that admits it in place.
//!
//! Most batches find every counter's row in a live window with room for its
//! check. [`statement`] admits those as the single check's statement does
//! (see the `single` module): one `UPDATE` whose `WHERE` clause holds the
//! decision adds each check's cost to its row, and changes nothing else.
//! A batch is all or nothing, and an update decides each row on its own, so
//! the statement counts the rows it updated: when it updated them all, the
//! batch is admitted. Otherwise (a denial, a window to anchor anew, a
//! counter without a row, a row changed while the update waited for it) the
//! same statement calls `runlimit_settle_fixed_windows`,
//! which takes back what the update added to the rows it did update (the
//! rows whose version the transaction wrote), denies
//! the batch from the rows as last committed if one is full (without a
//! further lock, as a single check's denial), and otherwise decides it with
//! the general function `runlimit_check_fixed_windows` under its locks. No
//! other transaction can see the added cost: it is taken back in the
//! transaction that added it, under those rows' locks.
//!
//! A denial found this way writes twice (the update, then taking it back).
//! A batch naming a counter that a recent reply found full (see the
//! `full_counters` module) is therefore sent as [`settle_statement`], the
//! settling function alone, which denies it without writing.
//!
//! # Locks
//!
//! Every statement that locks several counters takes their advisory locks
//! first, in ascending id order, and row locks only after; that order is why
//! they cannot deadlock. The update keeps it: its `WHERE` clause starts with
//! a sub-select that reads no row, which PostgreSQL evaluates once, before
//! the scan hands the update any row to lock, and that sub-select takes the
//! batch's advisory locks (after setting the transaction's `lock_timeout`,
//! so the waits are bounded). The settling function then takes the same
//! advisory locks again, which the transaction already holds.
//!
//! # Time
//!
//! As for a single check: each row's condition reads the clock together with
//! the row version it writes over, so a row the update waited for is decided
//! on a clock read after the wait, and each reply's clock sample is read
//! after its row's update.
//!
//! # Shape
//!
//! Batches of two to [`MAX_CHECKS`] checks take this statement, one text per
//! size (parameters rather than arrays, so PostgreSQL plans each text once
//! for every batch of that size, where an `= ANY (array)` parameter had it
//! plan every call anew); larger batches go to the general function
//! directly. The update finds its rows with `counter_key IN (…)` and picks
//! each row's cost, limit and position in the batch with a `CASE` on the
//! row's key, rather than joining the table to a `VALUES` list of the
//! checks: the join's nested loop and values scan cost more to start than
//! the `CASE` arms cost to run (about 10,000 of a batch of two's 250,000
//! server instructions, callgrind). It returns the count as a plain
//! `bigint`, the union's column type, as the single check's statement
//! does. The statement relies on a batch never naming one counter twice,
//! which `validate_batch` refuses before any batch is decided (the
//! conformance suite proves it on every backend): a row is updated once
//! however many checks name it, and what to take back would be ambiguous.
//!
//! PostgreSQL starts every node of the statement's plan on every execution,
//! the fallback branch's included, whether it runs or not. The branch's gate
//! asks whether the update returned fewer rows than the batch has checks as
//! `NOT EXISTS (… OFFSET n - 1)`, whose limit node starts in less time than
//! the aggregate of a `count(*)` (about 2% of a batch's throughput in
//! pgbench runs).

use std::{fmt::Write, sync::OnceLock};

use sqlx::{Row, postgres::PgRow};

use crate::single::EpochMicros;

/// The largest batch [`statement`] is written for.
pub(crate) const MAX_CHECKS: usize = 8;

/// The statement for a batch of `checks` checks (two to [`MAX_CHECKS`]).
///
/// Parameters, for `n` checks: `$1..=$n` counter keys, then `n` limits, `n`
/// costs and `n` windows in microseconds (each in batch order), `n`
/// advisory-lock ids in ascending order, then the rows per capacity shard,
/// the lock timeout in milliseconds and relaxed durability. Rows: one per
/// admitted check (its position, count, window expiry and clock sample) when
/// the update admitted the whole batch; otherwise also one row whose last
/// column holds the settled batch, flat (see [`replies`]).
///
/// A batch naming a counter that carries (`carrying`) is settled by
/// `runlimit_settle_live_fixed_windows` instead, which carries the state of
/// a counter without a live window from its sources; its statement takes
/// the sources last (their keys, and four numbers each), and its settled
/// row names the source each check carried from.
pub(crate) fn statement(checks: usize, carrying: bool) -> &'static str {
    &statements()[checks][usize::from(carrying)].0
}

/// The statement that sends a batch of `checks` checks to the settling
/// function directly: the parameters of [`statement`], and one row like
/// its settled row.
pub(crate) fn settle_statement(checks: usize, carrying: bool) -> &'static str {
    &statements()[checks][usize::from(carrying)].1
}

/// Both statements for every size, without and with carries, written once.
fn statements() -> &'static [[(String, String); 2]] {
    static STATEMENTS: OnceLock<Vec<[(String, String); 2]>> = OnceLock::new();
    STATEMENTS.get_or_init(|| {
        (0..=MAX_CHECKS)
            .map(|n| [write_statements(n, false), write_statements(n, true)])
            .collect()
    })
}

fn write_statements(n: usize, carrying: bool) -> (String, String) {
    if n < 2 {
        return (String::new(), String::new());
    }
    // 1-based parameter numbers of each list.
    let key = |i: usize| i;
    let limit = |i: usize| n + i;
    let cost = |i: usize| 2 * n + i;
    let window = |i: usize| 3 * n + i;
    let lock = |i: usize| 4 * n + i;
    let (max_rows, lock_timeout, relaxed) = (5 * n + 1, 5 * n + 2, 5 * n + 3);
    let list = |param: &dyn Fn(usize) -> usize, cast: &str| {
        (1..=n)
            .map(|i| format!("${}::{cast}", param(i)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Each row's value of a per-check list, chosen by the row's key. The
    // last check's value needs no test: the update only reaches rows whose
    // key the batch names, and every other key has its arm.
    let by_key = |value: &dyn Fn(usize) -> String| {
        let mut arms = String::from("CASE w.counter_key");
        for i in 1..n {
            // Writing to a String cannot fail.
            let _ = write!(arms, " WHEN ${}::bytea THEN {}", key(i), value(i));
        }
        let _ = write!(arms, " ELSE {} END", value(n));
        arms
    };
    let cost_of = by_key(&|i| format!("${}::bigint", cost(i)));
    let limit_of = by_key(&|i| format!("${}::bigint", limit(i)));
    let position_of = by_key(&|i| i.to_string());
    let mut advisory = String::new();
    for i in 1..=n {
        // Writing to a String cannot fail.
        let _ = write!(
            advisory,
            "\n            AND pg_catalog.pg_advisory_xact_lock(${}::bigint) IS NOT NULL",
            lock(i)
        );
    }
    let (function, sources) = if carrying {
        (
            "runlimit_settle_live_fixed_windows",
            format!(", ${}::bytea[], ${}::bigint[]", 5 * n + 4, 5 * n + 5),
        )
    } else {
        ("runlimit_settle_fixed_windows", String::new())
    };
    let settle = || {
        format!(
            "{function}(
    ARRAY[{keys}], ARRAY[{locks}], ARRAY[{limits}], ARRAY[{windows}], ARRAY[{costs}],
    ${max_rows}::integer, ${lock_timeout}::integer, ${relaxed}::boolean{sources})",
            keys = list(&key, "bytea"),
            locks = list(&lock, "bigint"),
            limits = list(&limit, "bigint"),
            windows = list(&window, "bigint"),
            costs = list(&cost, "bigint"),
        )
    };
    let in_place = format!(
        "\
WITH admitted AS (
    UPDATE runlimit_fixed_windows AS w
    SET used = w.used + {cost_of}
    WHERE (SELECT pg_catalog.set_config('lock_timeout', ${lock_timeout}::integer::text || 'ms', true) IS NOT NULL
            AND (NOT ${relaxed}::boolean
                OR pg_catalog.set_config('synchronous_commit', 'off', true) IS NOT NULL){advisory})
        AND w.counter_key IN ({keys})
        AND w.used + {cost_of} <= {limit_of}
        AND w.window_expires_at > pg_catalog.clock_timestamp()
    RETURNING {position_of} AS i, w.used::bigint AS used, w.window_expires_at, pg_catalog.clock_timestamp() AS now
)
SELECT a.i, a.used, a.window_expires_at, a.now, NULL::bigint[] AS settled FROM admitted AS a
UNION ALL
SELECT NULL, NULL, NULL, NULL, {settle}
WHERE NOT EXISTS (SELECT FROM admitted OFFSET {last})",
        keys = list(&key, "bytea"),
        settle = settle(),
        last = n - 1,
    );
    let settle_only = format!(
        "SELECT NULL::integer, NULL::bigint, NULL::timestamptz, NULL::timestamptz, {}",
        settle()
    );
    (in_place, settle_only)
}

/// A fixed-window check's outcome, count, window expiry and clock sample
/// (the last two in microseconds since the Unix epoch).
pub(crate) type Reply = (i16, i64, i64, i64);

/// Each check's [`Reply`], and the carry source it carried from (1-based;
/// 0 for none), in batch order, from the rows of
/// [`statement`] or [`settle_statement`] for `checks` checks.
///
/// # Errors
///
/// [`sqlx::Error::Decode`] if the rows are not a reply of that statement.
pub(crate) fn replies(
    rows: &[PgRow],
    checks: usize,
    carrying: bool,
) -> Result<Vec<(Reply, i64)>, sqlx::Error> {
    let malformed = || sqlx::Error::Decode("a batch reply of an unexpected shape".into());
    // Flat: (outcome, used, expiry) per check, and the source carried from
    // when the batch carries, then the clock sample.
    let stride = 3 + usize::from(carrying);
    for row in rows {
        if let Some(settled) = row.try_get::<Option<Vec<i64>>, _>(4)? {
            let (&now_us, replies) = settled.split_last().ok_or_else(malformed)?;
            if replies.len() != stride * checks {
                return Err(malformed());
            }
            return replies
                .chunks_exact(stride)
                .map(|reply| {
                    let outcome = i16::try_from(reply[0]).map_err(|_| malformed())?;
                    let carried = reply.get(3).copied().unwrap_or(0);
                    Ok(((outcome, reply[1], reply[2], now_us), carried))
                })
                .collect();
        }
    }
    // No settled row: the update admitted every check, one row each.
    let mut admitted = vec![None; checks];
    for row in rows {
        let position: i32 = row.try_get(0)?;
        let slot = usize::try_from(position)
            .ok()
            .and_then(|position| admitted.get_mut(position.checked_sub(1)?))
            .ok_or_else(malformed)?;
        let (EpochMicros(expires_us), EpochMicros(now_us)) = (row.try_get(2)?, row.try_get(3)?);
        *slot = Some(((0, row.try_get(1)?, expires_us, now_us), 0));
    }
    admitted
        .into_iter()
        .map(|reply| reply.ok_or_else(malformed))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_numbers_its_parameters_without_gaps() {
        for n in 2..=MAX_CHECKS {
            for carrying in [false, true] {
                let highest = 5 * n + 3 + 2 * usize::from(carrying);
                for text in [statement(n, carrying), settle_statement(n, carrying)] {
                    for param in 1..=highest {
                        assert!(text.contains(&format!("${param}::")), "${param} of {n}");
                    }
                    assert!(!text.contains(&format!("${}", highest + 1)), "{n}");
                }
                assert_eq!(
                    statement(n, carrying)
                        .matches("pg_advisory_xact_lock")
                        .count(),
                    n
                );
            }
            assert!(statement(n, true).contains("runlimit_settle_live_fixed_windows("));
            assert!(!statement(n, false).contains("live"));
        }
    }
}
