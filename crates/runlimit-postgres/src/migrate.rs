//! The bundled schema: migrations and the exact statements they run.

use sqlx::{PgPool, migrate::Migrator};

use crate::error::MaintenanceError;

/// The bundled migrations with SQLx's strict default: applying them fails if
/// the database's `_sqlx_migrations` history holds versions this migrator does
/// not know. Use it only when Runlimit exclusively owns that history; otherwise
/// call [`migrate`], or vendor the `*_SQL` statements as your own migrations.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Creates the fixed-window counter table and its expiry index.
pub const CREATE_RUNLIMIT_FIXED_WINDOWS_SQL: &str =
    include_str!("../migrations/20260101000001_create_runlimit_fixed_windows.sql");

/// Sets the fixed-window table's fillfactor to 80 for HOT counter updates.
pub const SET_RUNLIMIT_FIXED_WINDOWS_FILLFACTOR_SQL: &str =
    include_str!("../migrations/20260101000002_set_runlimit_fixed_windows_fillfactor.sql");

/// Installs the capacity ledger, the generated shard column and the
/// statement-level triggers that keep the ledger exact.
pub const BOUND_RUNLIMIT_FIXED_WINDOW_CARDINALITY_SQL: &str =
    include_str!("../migrations/20260101000003_bound_runlimit_fixed_window_cardinality.sql");

/// Creates the GCRA state table, its expiry index, ledger rows and triggers.
pub const CREATE_RUNLIMIT_GCRA_SQL: &str =
    include_str!("../migrations/20260101000004_create_runlimit_gcra.sql");

/// Creates the admission and cleanup functions.
pub const CREATE_RUNLIMIT_FUNCTIONS_SQL: &str =
    include_str!("../migrations/20260101000005_create_runlimit_functions.sql");

/// Keeps the capacity ledger exact when a counter table is truncated.
pub const KEEP_RUNLIMIT_LEDGER_EXACT_ON_TRUNCATE_SQL: &str =
    include_str!("../migrations/20260101000006_keep_runlimit_ledger_exact_on_truncate.sql");

/// Versions GCRA rows and creates the refund and reset functions.
pub const CREATE_RUNLIMIT_LIFECYCLE_FUNCTIONS_SQL: &str =
    include_str!("../migrations/20260101000007_create_runlimit_lifecycle_functions.sql");

/// Creates the sliding-window table and functions, and the steps every
/// counter function shares (prologue, capacity, cleanup, reset).
pub const CREATE_RUNLIMIT_SLIDING_WINDOWS_SQL: &str =
    include_str!("../migrations/20260101000008_create_runlimit_sliding_windows.sql");

/// Decides a single fixed-window check of an existing row under that row's
/// lock alone.
pub const DECIDE_SINGLE_CHECKS_UNDER_THE_ROW_LOCK_SQL: &str =
    include_str!("../migrations/20260101000009_decide_single_checks_under_the_row_lock.sql");

/// Decides a single GCRA or sliding-window check of an existing row under
/// that row's lock alone.
pub const DECIDE_SINGLE_GCRA_AND_SLIDING_CHECKS_UNDER_THE_ROW_LOCK_SQL: &str = include_str!(
    "../migrations/20260101000010_decide_single_gcra_and_sliding_checks_under_the_row_lock.sql"
);

/// Denies a single fixed-window check whose window is full from the row as
/// last committed, without the row's lock.
pub const DENY_FULL_FIXED_WINDOWS_WITHOUT_THE_ROW_LOCK_SQL: &str =
    include_str!("../migrations/20260101000011_deny_full_fixed_windows_without_the_row_lock.sql");

/// Creates the function that settles a fixed-window batch the in-place
/// update did not admit whole: it takes back what the update added, denies
/// the batch from the rows as last committed when one is full, and
/// otherwise decides it with the general function.
pub const ADMIT_FIXED_WINDOW_BATCHES_IN_PLACE_SQL: &str =
    include_str!("../migrations/20260101000012_admit_fixed_window_batches_in_place.sql");

/// Has the ledger triggers and cleanup read each counter's capacity shard
/// from its key, and drops the stored shard columns.
pub const READ_CAPACITY_SHARDS_FROM_COUNTER_KEYS_SQL: &str =
    include_str!("../migrations/20260101000013_read_capacity_shards_from_counter_keys.sql");

/// Moves the counter tables' column checks (key length, non-negative counts,
/// nine sliding counts) from table `CHECK` constraints, which PostgreSQL
/// plans anew on every execution of every statement that updates the table,
/// to domains with the same conditions.
pub const CHECK_COUNTER_COLUMNS_THROUGH_DOMAINS_SQL: &str =
    include_str!("../migrations/20260101000014_check_counter_columns_through_domains.sql");

/// Applies the bundled migrations in the pool's current schema, tolerating
/// versions other migrators (the host application's) recorded in the same
/// `_sqlx_migrations` history. Re-running is a no-op.
///
/// Every migrator sharing that history must likewise enable
/// `Migrator::set_ignore_missing(true)`.
///
/// # Errors
///
/// [`MaintenanceError::Migrate`] if a migration fails or a recorded Runlimit
/// migration's checksum differs.
pub async fn migrate(pool: &PgPool) -> Result<(), MaintenanceError> {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.set_ignore_missing(true);
    migrator.run(pool).await.map_err(MaintenanceError::Migrate)
}
