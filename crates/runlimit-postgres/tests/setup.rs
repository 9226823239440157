//! Setting a limiter up: constructors that take the policy type from the
//! checks (the limiters here are built without naming one, so this file
//! compiles only while that inference works), and Runlimit's objects in a
//! schema of the application's choosing, as the crate documentation shows.

mod common;

use std::time::Duration;

use runlimit_core::{Check, GcraPolicy, Limiter, PolicyId, ScopeId};
use runlimit_postgres::{PostgresConfig, PostgresLimiter};
use sqlx::{PgPool, postgres::PgConnectOptions};

/// Whether each of `times` checks is allowed, in order.
async fn allowed<L: Limiter>(limiter: &L, check: &Check<'_, L::Policy>, times: usize) -> Vec<bool> {
    let mut allowed = Vec::with_capacity(times);
    for _ in 0..times {
        allowed.push(limiter.check(check).await.expect("decided").is_allowed());
    }
    allowed
}

#[tokio::test]
async fn new_and_with_dedicated_pool_take_the_policy_type_from_the_checks() {
    let Some(schema) = common::schema("inferred").await else {
        return;
    };
    let limiter = PostgresLimiter::new(schema.migrated_pool(1).await, PostgresConfig::default());
    let window = common::policy("inferred", 2, Duration::from_secs(60));
    assert_eq!(
        allowed(&limiter, &Check::new(&window, common::key(1, 1)), 3).await,
        [true, true, false]
    );

    let limiter =
        PostgresLimiter::with_dedicated_pool(schema.pool(1).await, PostgresConfig::default());
    let rate = GcraPolicy::new(
        PolicyId::new("inferred").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(60),
        1,
    )
    .expect("valid");
    assert_eq!(
        allowed(&limiter, &Check::new(&rate, common::key(1, 1)), 2).await,
        [true, false]
    );
}

/// The names of the tables, functions and domains in `namespace` that
/// Runlimit's migrations create (and SQLx's migration history).
async fn runlimit_objects(admin: &PgPool, namespace: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT name FROM ( \
             SELECT c.relname::text AS name FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') \
             UNION ALL \
             SELECT p.proname::text FROM pg_catalog.pg_proc p \
             JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 \
             UNION ALL \
             SELECT t.typname::text FROM pg_catalog.pg_type t \
             JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace \
             WHERE n.nspname = $1 AND t.typtype = 'd' \
         ) objects \
         WHERE name LIKE 'runlimit%' OR name = '_sqlx_migrations' ORDER BY name",
    )
    .bind(namespace)
    .fetch_all(admin)
    .await
    .expect("catalog")
}

/// The crate documentation's recipe: a schema of the application's, first
/// on the search path of every connection of the limiter's pool (set as a
/// startup option, or in the URL), then `migrate`. Tables, functions and the
/// migration history land there, and nothing in `public`.
#[tokio::test]
async fn runlimit_lives_in_the_schema_its_pool_names() {
    // A schema of the test's own, created (as `CREATE SCHEMA ratelimit`
    // would be) and dropped afterwards.
    let Some(schema) = common::schema("own_schema").await else {
        return;
    };
    let public_before = runlimit_objects(schema.admin(), "public").await;

    let options = common::database_url()
        .parse::<PgConnectOptions>()
        .expect("url")
        .options([("search_path", schema.name.as_str())]);
    let pool = runlimit_postgres::pool_options()
        .max_connections(2)
        .connect_with(options)
        .await
        .expect("connect");
    let limiter = PostgresLimiter::with_dedicated_pool(pool, PostgresConfig::default());
    limiter.migrate().await.expect("migrate");
    let window = common::policy("own-schema", 2, Duration::from_secs(60));
    let check = Check::new(&window, common::key(3, 3));
    assert_eq!(allowed(&limiter, &check, 1).await, [true]);

    // A replica that names the schema in its URL shares the counters.
    let base = common::database_url();
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!(
        "{base}{separator}options=-c%20search_path%3D{}",
        schema.name
    );
    let replica = PostgresLimiter::new(
        PgPool::connect(&url).await.expect("connect"),
        PostgresConfig::default(),
    );
    assert_eq!(allowed(&replica, &check, 2).await, [true, false]);

    let ours = runlimit_objects(schema.admin(), &schema.name).await;
    for object in [
        "_sqlx_migrations",
        "runlimit_capacity_ledger",
        "runlimit_fixed_windows",
        "runlimit_gcra",
        "runlimit_sliding_windows",
        "runlimit_counter_key",
        "runlimit_check_fixed_window",
    ] {
        assert!(
            ours.iter().any(|name| name == object),
            "{object} in {ours:?}"
        );
    }
    let rows: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {}.runlimit_fixed_windows",
        schema.name
    ))
    .fetch_one(schema.admin())
    .await
    .expect("rows");
    assert_eq!(rows, 1);
    assert_eq!(
        runlimit_objects(schema.admin(), "public").await,
        public_before
    );
}
