//! The bundled schema: migrations and the exact statements they run.

use sqlx::{PgPool, migrate::Migrator};

use crate::error::MaintenanceError;

/// The bundled migrations with SQLx's strict default: applying them fails if
/// the database's `_sqlx_migrations` history holds versions this migrator does
/// not know. Use it only when Runlimit exclusively owns that history; otherwise
/// call [`migrate`], or vendor [`SCHEMA`] as your own migrations.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// One of the bundled migrations: the version and description SQLx records
/// for it, and the exact SQL it runs, each in a transaction of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchemaMigration {
    /// The version [`migrate`] records in `_sqlx_migrations`.
    pub version: i64,
    /// What the migration holds, as SQLx records it.
    pub description: &'static str,
    /// The statements, to run in one transaction.
    pub sql: &'static str,
}

/// The whole bundled schema in the order it must be applied, for applications
/// that vendor it as their own migrations instead of calling [`migrate`]:
/// first what every counter table shares (column domains, the capacity
/// ledger, the steps every function runs), then one migration per algorithm
/// with its table and functions, then the functions of carries and of
/// checks of any algorithm. These are the migrations [`migrate`] and
/// [`MIGRATOR`] apply; from 0.1.0 on they never change, and later schema
/// changes arrive as further entries.
///
/// ```
/// // Applied in the slice's order, which is the order of their versions.
/// let versions: Vec<i64> = runlimit_postgres::SCHEMA.iter().map(|m| m.version).collect();
/// assert!(versions.windows(2).all(|pair| pair[0] < pair[1]));
/// ```
pub const SCHEMA: &[SchemaMigration] = &[
    SchemaMigration {
        version: 20261201000001,
        description: "create runlimit foundations",
        sql: include_str!("../migrations/20261201000001_create_runlimit_foundations.sql"),
    },
    SchemaMigration {
        version: 20261201000002,
        description: "create runlimit fixed windows",
        sql: include_str!("../migrations/20261201000002_create_runlimit_fixed_windows.sql"),
    },
    SchemaMigration {
        version: 20261201000003,
        description: "create runlimit gcra",
        sql: include_str!("../migrations/20261201000003_create_runlimit_gcra.sql"),
    },
    SchemaMigration {
        version: 20261201000004,
        description: "create runlimit sliding windows",
        sql: include_str!("../migrations/20261201000004_create_runlimit_sliding_windows.sql"),
    },
    SchemaMigration {
        version: 20261207000001,
        description: "create runlimit carries",
        sql: include_str!("../migrations/20261207000001_create_runlimit_carries.sql"),
    },
];

/// Applies the bundled migrations in the pool's current schema (the first
/// schema on its connections' `search_path`; see [a schema of your
/// own](crate#a-schema-of-your-own) to choose it), tolerating versions other
/// migrators (the host application's) recorded in the same
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_schema_is_what_the_migrator_applies() {
        let bundled: Vec<(i64, &str, &str)> = MIGRATOR
            .iter()
            .map(|migration| (migration.version, &*migration.description, &*migration.sql))
            .collect();
        let vendored: Vec<(i64, &str, &str)> = SCHEMA
            .iter()
            .map(|migration| (migration.version, migration.description, migration.sql))
            .collect();
        assert_eq!(vendored, bundled);
        assert!(MIGRATOR.iter().all(|migration| !migration.no_tx));
    }
}
