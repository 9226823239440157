//! A single fixed-window check as one statement that admits it in place.
//!
//! Most single checks find their counter's row in a live window with room
//! for the check. [`CHECK_FIXED_WINDOW`] admits those with one `UPDATE`
//! whose `WHERE` clause holds the decision and which adds the check's cost
//! to the count and changes nothing else: the row's lock, taken by the
//! update itself, orders the admission with every other operation on the
//! counter, exactly as the row lock of `runlimit_check_fixed_window`
//! does, without that function's separate locking read, its
//! second statement and the call into PL/pgSQL. Everything else (a denial,
//! a window to anchor anew over an expired one, a counter without a row, a
//! row changed or deleted while the update waited for it) updates nothing
//! and is decided, in the same statement, by `runlimit_check_fixed_window`.
//! That function denies a full window from the row as last committed,
//! without its lock, so a denial writes nothing at all (no row lock, no
//! transaction id, no write-ahead-log flush at commit); anything else it
//! decides under the row lock.
//!
//! The update leaves the window's end as it is, so it writes only what a
//! bare increment of the count writes. Anchoring a new window is left to the
//! function: it happens once per window, and computing a new end in the
//! update (one clock sample for both new values, which takes a sub-select
//! per row) cost every admission more server time than the function costs
//! the one that anchors (about 40 µs of server CPU per admission).
//!
//! # Time
//!
//! The database clock is read in the `WHERE` clause, together with the row
//! version the update writes over: when another transaction changes the row
//! before the update gets its lock, PostgreSQL evaluates the `WHERE` clause
//! again against the row as that transaction left it, reading the clock
//! again. A sample taken once, before any wait, could lie before that
//! transaction's own, and deciding a newer state at an older time can
//! over-admit (a refund that forgets a window would look live).
//!
//! The update admits only while the window is live at that sample, so a
//! count it raises always belongs to a live window. The reply's clock sample
//! is read after the update; the time until reset is measured from it, so it
//! is never longer than what is left of the window.
//!
//! # Guards
//!
//! The transaction-local `lock_timeout` (and `synchronous_commit` for
//! relaxed durability) are set by the `WHERE` clause, which runs before the
//! update waits for the row. Functions are schema-qualified; the table and
//! the fallback function resolve through the caller's `search_path`, as the
//! function name always did.

// The in-place statement with `$fallback` deciding what the update leaves,
// and `$columns` after the four every reply has: its text is written once
// for every fallback.
macro_rules! in_place_check {
    ($fallback:literal, $admitted_columns:literal, $fallback_columns:literal) => {
        concat!(
            "\
WITH admitted AS (
    UPDATE runlimit_fixed_windows AS w
    SET used = w.used + $5::bigint
    WHERE w.counter_key = $1::bytea
        AND w.used + $5::bigint <= $3::bigint
        AND w.window_expires_at > pg_catalog.clock_timestamp()
        AND pg_catalog.set_config('lock_timeout', $7::integer::text || 'ms', true) IS NOT NULL
        AND (NOT $8::boolean
            OR pg_catalog.set_config('synchronous_commit', 'off', true) IS NOT NULL)
    RETURNING w.used::bigint AS used, w.window_expires_at, pg_catalog.clock_timestamp() AS now
)
SELECT 0::smallint, a.used, a.window_expires_at, a.now",
            $admitted_columns,
            " FROM admitted AS a
UNION ALL
SELECT
    (s.f).r_outcome,
    (s.f).r_used,
    'epoch'::timestamptz + (s.f).r_expires_us * interval '1 microsecond',
    'epoch'::timestamptz + (s.f).r_now_us * interval '1 microsecond'",
            $fallback_columns,
            "
FROM (
    SELECT ",
            $fallback,
            " AS f
    WHERE NOT EXISTS (SELECT FROM admitted)
    OFFSET 0
) AS s"
        )
    };
}

/// Parameters: `$1` counter key, `$2` advisory-lock id, `$3` limit, `$4`
/// window in microseconds, `$5` cost, `$6` rows per capacity shard, `$7` lock
/// timeout in milliseconds, `$8` relaxed durability. One row: outcome, used,
/// window expiry and the clock sample, the last two as `timestamptz` (read
/// with [`EpochMicros`]: sent as integers, without the numeric arithmetic an
/// `EXTRACT` costs).
///
/// A check's cost is at least one and at most the limit (enforced when the
/// check is built), so the sum in the condition stays far from overflow. The
/// fallback's call sits in a sub-select kept apart by `OFFSET 0`, so its
/// composite result is computed once and then taken apart. The update
/// returns the count as a plain `bigint` (the column's type is a domain over
/// it), so the admitted branch has the union's column types
/// and PostgreSQL scans it without a projection node of its own.
pub(crate) const CHECK_FIXED_WINDOW: &str = in_place_check!(
    "runlimit_check_fixed_window($1, $2, $3, $4, $5, $6, $7, $8)",
    "",
    ""
);

/// [`CHECK_FIXED_WINDOW`] for a check whose counter carries (see the
/// `carry` module): the same update, which admits a live window in place,
/// and for anything else `runlimit_check_live_fixed_window`, which decides
/// as `runlimit_check_fixed_window` does, carrying the state of a counter
/// without a live window from its sources. The same parameters, then the
/// sources (`$9` their keys, `$10` four numbers each); one more column, the
/// source carried from (`NULL` for none).
pub(crate) const CHECK_LIVE_FIXED_WINDOW: &str = in_place_check!(
    "runlimit_check_live_fixed_window($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    ", NULL::integer",
    ",\n    (s.f).r_carried"
);

/// Microseconds since the Unix epoch, read exactly from a `timestamptz`
/// column, which PostgreSQL's binary format sends as microseconds since
/// 2000-01-01.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EpochMicros(pub(crate) i64);

/// Microseconds from the Unix epoch to PostgreSQL's, 2000-01-01.
const POSTGRES_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// `timestamptz`'s type OID in every PostgreSQL catalog.
const TIMESTAMPTZ_OID: sqlx::postgres::types::Oid = sqlx::postgres::types::Oid(1184);

impl sqlx::Type<sqlx::Postgres> for EpochMicros {
    /// Declared by OID: SQLx checks every decoded value's column type against
    /// this, and compares a type declared by name by its name (about 400
    /// instructions per value, callgrind), one declared by OID by the OID.
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        sqlx::postgres::PgTypeInfo::with_oid(TIMESTAMPTZ_OID)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::Postgres> for EpochMicros {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        if !matches!(value.format(), sqlx::postgres::PgValueFormat::Binary) {
            return Err("a timestamptz in text format".into());
        }
        let bytes: [u8; 8] = value.as_bytes()?.try_into()?;
        // Stored counters' times are finite and centuries from either bound.
        Ok(Self(
            i64::from_be_bytes(bytes).saturating_add(POSTGRES_EPOCH_MICROS),
        ))
    }
}
