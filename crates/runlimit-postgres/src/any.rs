//! [`PostgresLimiter<AnyPolicy>`](crate::PostgresLimiter): checks of all
//! three algorithms, chosen per check.
//!
//! A check, and a batch whose checks share one algorithm, take that
//! algorithm's statements, so they cost what they cost on the limiter of
//! that policy type; a batch that mixes algorithms is decided by
//! `runlimit_check_counters` in one statement, all admitted or none
//! consumed. Receipts record each check's algorithm's stamp; a refund of a
//! mixed receipt is one statement (`runlimit_refund_counters`) that takes
//! every counter's advisory lock, in the global order, before running each
//! algorithm's refund function.

use runlimit_core::{
    Admitted, AnyPolicy, Check, Decision, FixedWindowPolicy, GcraPolicy, Policy,
    SlidingWindowPolicy, gcra::GcraMicros, sliding::SlidingMicros,
};
use sqlx::{PgConnection, Row};

use crate::{
    config::PostgresConfig,
    counters::{self, PolicyArgs},
    full_counters::FullCounters,
    limiter::{Decided, PgPolicy, as_i64, counter_keys, lock_ids, word_to_i64},
};

impl PgPolicy for AnyPolicy {
    const CLEANUP: &'static str = "SELECT runlimit_cleanup_every_counter($1, $2)";
    const ISSUER: &'static str = "runlimit-postgres/any";

    async fn decide(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        config: &PostgresConfig,
        full: &FullCounters,
    ) -> Result<Vec<Decided>, sqlx::Error> {
        if let Some(checks) = typed(checks, fixed) {
            return FixedWindowPolicy::decide(connection, &checks, config, full).await;
        }
        if let Some(checks) = typed(checks, sliding) {
            return SlidingWindowPolicy::decide(connection, &checks, config, full).await;
        }
        if let Some(checks) = typed(checks, gcra) {
            return GcraPolicy::decide(connection, &checks, config, full).await;
        }
        counters::decide(connection, checks, config, full).await
    }

    async fn grant(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
        up_to: u64,
        config: &PostgresConfig,
        full: &FullCounters,
    ) -> Result<(u64, Decided), sqlx::Error> {
        match check.policy() {
            AnyPolicy::FixedWindow(policy) => {
                FixedWindowPolicy::grant(connection, &retyped(check, policy), up_to, config, full)
                    .await
            }
            AnyPolicy::SlidingWindow(policy) => {
                SlidingWindowPolicy::grant(connection, &retyped(check, policy), up_to, config, full)
                    .await
            }
            AnyPolicy::Gcra(policy) => {
                GcraPolicy::grant(connection, &retyped(check, policy), up_to, config, full).await
            }
        }
    }

    async fn refund(
        connection: &mut PgConnection,
        checks: &[Check<'_, Self>],
        admitted: &[Admitted],
        units: &[u64],
        config: &PostgresConfig,
    ) -> Result<Vec<bool>, sqlx::Error> {
        if let Some(checks) = typed(checks, fixed) {
            return FixedWindowPolicy::refund(connection, &checks, admitted, units, config).await;
        }
        if let Some(checks) = typed(checks, sliding) {
            return SlidingWindowPolicy::refund(connection, &checks, admitted, units, config).await;
        }
        if let Some(checks) = typed(checks, gcra) {
            return GcraPolicy::refund(connection, &checks, admitted, units, config).await;
        }
        refund_mixed(connection, checks, admitted, units, config).await
    }

    async fn peek(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
    ) -> Result<Decision, sqlx::Error> {
        match check.policy() {
            AnyPolicy::FixedWindow(policy) => {
                FixedWindowPolicy::peek(connection, &retyped(check, policy)).await
            }
            AnyPolicy::SlidingWindow(policy) => {
                SlidingWindowPolicy::peek(connection, &retyped(check, policy)).await
            }
            AnyPolicy::Gcra(policy) => GcraPolicy::peek(connection, &retyped(check, policy)).await,
        }
    }

    async fn reset(
        connection: &mut PgConnection,
        check: &Check<'_, Self>,
        config: &PostgresConfig,
    ) -> Result<bool, sqlx::Error> {
        match check.policy() {
            AnyPolicy::FixedWindow(policy) => {
                FixedWindowPolicy::reset(connection, &retyped(check, policy), config).await
            }
            AnyPolicy::SlidingWindow(policy) => {
                SlidingWindowPolicy::reset(connection, &retyped(check, policy), config).await
            }
            AnyPolicy::Gcra(policy) => {
                GcraPolicy::reset(connection, &retyped(check, policy), config).await
            }
        }
    }
}

fn fixed(policy: &AnyPolicy) -> Option<&FixedWindowPolicy> {
    match policy {
        AnyPolicy::FixedWindow(policy) => Some(policy),
        _ => None,
    }
}

fn sliding(policy: &AnyPolicy) -> Option<&SlidingWindowPolicy> {
    match policy {
        AnyPolicy::SlidingWindow(policy) => Some(policy),
        _ => None,
    }
}

fn gcra(policy: &AnyPolicy) -> Option<&GcraPolicy> {
    match policy {
        AnyPolicy::Gcra(policy) => Some(policy),
        _ => None,
    }
}

/// `checks` as checks of the policy type `pick` finds in every one of
/// them, or `None` when one holds another algorithm.
fn typed<'a, Q: Policy>(
    checks: &[Check<'a, AnyPolicy>],
    pick: impl Fn(&'a AnyPolicy) -> Option<&'a Q>,
) -> Option<Vec<Check<'a, Q>>> {
    checks
        .iter()
        .map(|check| Some(retyped(check, pick(check.policy())?)))
        .collect()
}

/// `check` as a check of `policy`, the policy its [`AnyPolicy`] holds: the
/// same subject, cost and counter.
fn retyped<'a, Q: Policy>(check: &Check<'a, AnyPolicy>, policy: &'a Q) -> Check<'a, Q> {
    Check::weighted(policy, *check.subject(), check.cost())
        .unwrap_or_else(|_| unreachable!("an AnyPolicy has the capacity of the policy it holds"))
}

/// Refunds a receipt whose checks mix algorithms, in one statement.
async fn refund_mixed(
    connection: &mut PgConnection,
    checks: &[Check<'_, AnyPolicy>],
    admitted: &[Admitted],
    units: &[u64],
    config: &PostgresConfig,
) -> Result<Vec<bool>, sqlx::Error> {
    let stamp_word = |index: usize| -> Vec<i64> {
        admitted
            .iter()
            .map(|admitted| word_to_i64(admitted.stamp().words()[index]))
            .collect()
    };
    let mut algorithms = Vec::with_capacity(checks.len());
    let mut limits = Vec::with_capacity(checks.len());
    let mut windows = Vec::with_capacity(checks.len());
    let mut increments = (Vec::with_capacity(checks.len()), Vec::new());
    for (check, &units) in checks.iter().zip(units) {
        let args = PolicyArgs::of(check.policy().kind());
        algorithms.push(args.algorithm);
        limits.push(args.limit);
        // What each algorithm's refund takes: a fixed window's window, a
        // sliding window's eighth, the increment of the units given back.
        let (window, increment) = match check.policy() {
            AnyPolicy::FixedWindow(_) => (args.window_us, (0, 0)),
            AnyPolicy::SlidingWindow(policy) => {
                (as_i64(SlidingMicros::new(policy).sub_window), (0, 0))
            }
            AnyPolicy::Gcra(policy) => {
                let increment = GcraMicros::new(policy, units).increment;
                (0, (increment.whole, increment.remainder))
            }
        };
        windows.push(window);
        increments.0.push(as_i64(increment.0));
        increments.1.push(as_i64(increment.1));
    }
    let rows = sqlx::query(
        "SELECT r_credited FROM runlimit_refund_counters(\
         $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ORDER BY r_index",
    )
    .bind(algorithms)
    .bind(counter_keys(checks))
    .bind(lock_ids(checks))
    .bind(units.iter().map(|&units| as_i64(units)).collect::<Vec<_>>())
    .bind(stamp_word(0))
    .bind(stamp_word(1))
    .bind(stamp_word(2))
    .bind(limits)
    .bind(windows)
    .bind(increments.0)
    .bind(increments.1)
    .bind(config.lock_timeout_ms())
    .bind(config.relaxed_durability())
    .fetch_all(connection)
    .await?;
    rows.into_iter().map(|row| row.try_get(0)).collect()
}
