//! The periodic upkeep PostgreSQL needs: deleting expired rows.

use runlimit_core::{
    FixedWindowPolicy, GcraPolicy, Maintain, MaintenanceReport, SlidingWindowPolicy,
};

use crate::limiter::{PgPolicy, PostgresLimiter};

/// The most expired rows one cleanup statement of a maintenance round
/// deletes.
pub const MAINTENANCE_ROWS_PER_STATEMENT: u32 = 1_000;

/// The most cleanup statements a maintenance round sends per counter table,
/// so a round deletes at most 64,000 expired rows of each and leaves the
/// rest to the next round.
pub const MAINTENANCE_STATEMENTS_PER_TABLE: u32 = 64;

/// Deletes the expired rows of every counter table (fixed windows, sliding
/// windows and GCRA, whichever policy type this limiter evaluates), freeing
/// their capacity-ledger slots: [`cleanup_expired`] statements of
/// [`MAINTENANCE_ROWS_PER_STATEMENT`] rows, repeated while a statement found
/// that many, at most [`MAINTENANCE_STATEMENTS_PER_TABLE`] per table.
///
/// Every table, rather than this limiter's alone, so that one round serves
/// the limiters of every policy type on the database however they were
/// built; a table no limiter uses is empty, and its statement one index
/// probe. Each statement reports to the limiter's observer
/// ([`Observer::on_cleanup`](runlimit_core::Observer::on_cleanup)); a table
/// whose statement failed is left for the next round, the others are still
/// cleaned, and the failure, a [`MaintenanceError`](crate::MaintenanceError),
/// is in the report.
///
/// [`cleanup_expired`]: PostgresLimiter::cleanup_expired
impl<P: PgPolicy> Maintain for PostgresLimiter<P> {
    async fn maintain(&self) -> MaintenanceReport {
        let mut report = MaintenanceReport::new();
        clean(&self.for_policy::<FixedWindowPolicy>(), &mut report).await;
        clean(&self.for_policy::<SlidingWindowPolicy>(), &mut report).await;
        clean(&self.for_policy::<GcraPolicy>(), &mut report).await;
        report
    }
}

/// Deletes the expired rows of `P`'s table, statement after statement while
/// one finds a full statement's worth.
async fn clean<P: PgPolicy>(limiter: &PostgresLimiter<P>, report: &mut MaintenanceReport) {
    for _ in 0..MAINTENANCE_STATEMENTS_PER_TABLE {
        match limiter
            .cleanup_expired(MAINTENANCE_ROWS_PER_STATEMENT)
            .await
        {
            Ok(removed) => {
                report.record_removed(removed);
                if removed < u64::from(MAINTENANCE_ROWS_PER_STATEMENT) {
                    return;
                }
            }
            Err(error) => {
                report.record_failure(error);
                return;
            }
        }
    }
}
