//! The shared behaviour suite against a real PostgreSQL server.

mod common;

use std::sync::Arc;

use proptest::{prelude::*, test_runner::TestRunner};
use runlimit_conformance::{
    Shared, any_policy_carry_suite, carry_drain_suite, fixed_window_carry_suite,
    fixed_window_grant_suite, fixed_window_lifecycle_suite, fixed_window_settle_suite,
    fixed_window_suite, gcra_carry_suite, gcra_grant_suite, gcra_lifecycle_suite,
    gcra_settle_suite, gcra_suite, leased_trace, leased_weighted_suite, run_leased_trace,
    sliding_window_carry_suite, sliding_window_grant_suite, sliding_window_lifecycle_suite,
    sliding_window_settle_suite, sliding_window_suite,
};
use std::marker::PhantomData;

use runlimit_core::{
    Admission, AnyPolicy, BatchDecision, Check, Decision, FixedWindowPolicy, GcraPolicy, Grant,
    Granted, Lifecycle, Limiter, Policy, Receipt, Refunded, Settle, SlidingWindowPolicy,
    SubjectKey,
};
use runlimit_postgres::{CheckError, PostgresConfig, PostgresLimiter};

#[tokio::test]
async fn fixed_windows_pass_the_conformance_suite() {
    let Some(schema) = common::schema("conf_fixed").await else {
        return;
    };
    let limiter =
        PostgresLimiter::<FixedWindowPolicy>::new(schema.pool(4).await, PostgresConfig::default());
    limiter.migrate().await.expect("migrate");
    fixed_window_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    fixed_window_lifecycle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    fixed_window_settle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    fixed_window_grant_suite(&limiter).await;
}

#[tokio::test]
async fn gcra_passes_the_conformance_suite() {
    let Some(schema) = common::schema("conf_gcra").await else {
        return;
    };
    let limiter =
        PostgresLimiter::<GcraPolicy>::new(schema.pool(4).await, PostgresConfig::default());
    limiter.migrate().await.expect("migrate");
    gcra_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    gcra_lifecycle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    gcra_settle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    gcra_grant_suite(&limiter).await;
    carry_drain_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
}

#[tokio::test]
async fn sliding_windows_pass_the_conformance_suite() {
    let Some(schema) = common::schema("conf_sliding").await else {
        return;
    };
    let limiter = PostgresLimiter::<SlidingWindowPolicy>::new(
        schema.pool(4).await,
        PostgresConfig::default(),
    );
    limiter.migrate().await.expect("migrate");
    sliding_window_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    sliding_window_lifecycle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    sliding_window_settle_suite(&limiter, &common::ShiftTime { schema: &schema }).await;
    sliding_window_grant_suite(&limiter).await;
}

/// Leased replicas in front of PostgreSQL, checking weighted costs, held to
/// the ledger of `runlimit_conformance::leased` for every algorithm: the
/// weighted case admits the whole limit, and random traces strand nothing,
/// never go over the limit, and deny only what neither the replica's lease
/// nor the table can cover.
#[test]
fn weighted_leased_traces_strand_no_units() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let Some(schema) = runtime.block_on(common::schema("conf_leased")) else {
        return;
    };
    let pool = runtime.block_on(schema.migrated_pool(2));
    let config = PostgresConfig::default();
    let fixed = Shared(Arc::new(PostgresLimiter::<FixedWindowPolicy>::new(
        pool.clone(),
        config,
    )));
    let sliding = Shared(Arc::new(PostgresLimiter::<SlidingWindowPolicy>::new(
        pool.clone(),
        config,
    )));
    let gcra = Shared(Arc::new(PostgresLimiter::<GcraPolicy>::new(pool, config)));
    runtime.block_on(async {
        leased_weighted_suite(&fixed).await;
        leased_weighted_suite(&sliding).await;
        leased_weighted_suite(&gcra).await;
    });
    TestRunner::new(ProptestConfig::with_cases(16))
        .run(&leased_trace(), |trace| {
            runtime
                .block_on(async {
                    run_leased_trace(&fixed, &trace).await?;
                    run_leased_trace(&sliding, &trace).await?;
                    run_leased_trace(&gcra, &trace).await
                })
                .map_err(TestCaseError::fail)?;
            Ok(())
        })
        .expect("every trace");
}

#[tokio::test]
async fn every_algorithm_carries_state_across_a_change() {
    let Some(schema) = common::schema("conf_carry").await else {
        return;
    };
    let limiter =
        PostgresLimiter::<FixedWindowPolicy>::new(schema.pool(4).await, PostgresConfig::default());
    limiter.migrate().await.expect("migrate");
    fixed_window_carry_suite(&limiter).await;
    sliding_window_carry_suite(&limiter.for_policy::<SlidingWindowPolicy>()).await;
    gcra_carry_suite(&limiter.for_policy::<GcraPolicy>()).await;
}

#[tokio::test]
async fn any_policy_limiters_carry_between_every_pair_of_algorithms() {
    let Some(schema) = common::schema("conf_carry_any").await else {
        return;
    };
    let limiter =
        PostgresLimiter::<AnyPolicy>::new(schema.pool(4).await, PostgresConfig::default());
    limiter.migrate().await.expect("migrate");
    any_policy_carry_suite(&limiter).await;
}

#[tokio::test]
async fn any_policy_limiters_pass_every_algorithms_suite() {
    let Some(schema) = common::schema("conf_any").await else {
        return;
    };
    let any = PostgresLimiter::<AnyPolicy>::new(schema.pool(4).await, PostgresConfig::default());
    any.migrate().await.expect("migrate");
    let time = common::ShiftTime { schema: &schema };
    let fixed = AsTyped::<FixedWindowPolicy>::new(&any);
    fixed_window_suite(&fixed, &time).await;
    fixed_window_lifecycle_suite(&fixed, &time).await;
    fixed_window_settle_suite(&fixed, &time).await;
    fixed_window_grant_suite(&fixed).await;
    let sliding = AsTyped::<SlidingWindowPolicy>::new(&any);
    sliding_window_suite(&sliding, &time).await;
    sliding_window_lifecycle_suite(&sliding, &time).await;
    sliding_window_settle_suite(&sliding, &time).await;
    sliding_window_grant_suite(&sliding).await;
    let gcra = AsTyped::<GcraPolicy>::new(&any);
    gcra_suite(&gcra, &time).await;
    gcra_lifecycle_suite(&gcra, &time).await;
    gcra_settle_suite(&gcra, &time).await;
    gcra_grant_suite(&gcra).await;
}

/// A limiter of one policy type answered by a limiter of [`AnyPolicy`]
/// checks: each check goes as the check of the [`AnyPolicy`] holding its
/// policy (the same counter), so each algorithm's suite proves the
/// [`AnyPolicy`] limiter.
struct AsTyped<'a, P> {
    any: &'a PostgresLimiter<AnyPolicy>,
    policy: PhantomData<fn() -> P>,
}

impl<'a, P> AsTyped<'a, P> {
    fn new(any: &'a PostgresLimiter<AnyPolicy>) -> Self {
        Self {
            any,
            policy: PhantomData,
        }
    }
}

/// The policies of `checks`, each as an [`AnyPolicy`].
fn policies<P: Policy + Clone + Into<AnyPolicy>>(checks: &[Check<'_, P>]) -> Vec<AnyPolicy> {
    checks
        .iter()
        .map(|check| check.policy().clone().into())
        .collect()
}

/// `checks` as checks of `policies` (from [`policies`]).
fn as_any<'p, P: Policy>(
    policies: &'p [AnyPolicy],
    checks: &[Check<'_, P>],
) -> Vec<Check<'p, AnyPolicy>> {
    policies
        .iter()
        .zip(checks)
        .map(|(policy, check)| {
            Check::weighted(policy, *check.subject(), check.cost()).expect("the same capacity")
        })
        .collect()
}

impl<P> Limiter for AsTyped<'_, P>
where
    P: Policy + Clone + Into<AnyPolicy> + Send + Sync,
{
    type Policy = P;
    type Error = CheckError;

    async fn check(&self, check: &Check<'_, P>) -> Result<Decision, CheckError> {
        let checks = std::slice::from_ref(check);
        let policies = policies(checks);
        self.any.check(&as_any(&policies, checks)[0]).await
    }

    async fn check_all(&self, checks: &[Check<'_, P>]) -> Result<BatchDecision, CheckError> {
        let policies = policies(checks);
        self.any.check_all(&as_any(&policies, checks)).await
    }
}

impl<P> Lifecycle for AsTyped<'_, P>
where
    P: Policy + Clone + Into<AnyPolicy> + Send + Sync,
{
    async fn admit(&self, check: &Check<'_, P>) -> Result<Admission<Decision>, CheckError> {
        let checks = std::slice::from_ref(check);
        let policies = policies(checks);
        self.any.admit(&as_any(&policies, checks)[0]).await
    }

    async fn admit_all(
        &self,
        checks: &[Check<'_, P>],
    ) -> Result<Admission<BatchDecision>, CheckError> {
        let policies = policies(checks);
        self.any.admit_all(&as_any(&policies, checks)).await
    }

    async fn refund(
        &self,
        checks: &[Check<'_, P>],
        receipt: Receipt,
    ) -> Result<Refunded, CheckError> {
        let policies = policies(checks);
        self.any.refund(&as_any(&policies, checks), receipt).await
    }

    async fn peek(&self, check: &Check<'_, P>) -> Result<Decision, CheckError> {
        let checks = std::slice::from_ref(check);
        let policies = policies(checks);
        self.any.peek(&as_any(&policies, checks)[0]).await
    }

    async fn reset(&self, policy: &P, subject: &SubjectKey) -> Result<bool, CheckError> {
        self.any.reset(&policy.clone().into(), subject).await
    }
}

impl<P> Settle for AsTyped<'_, P>
where
    P: Policy + Clone + Into<AnyPolicy> + Send + Sync,
{
    async fn settle(
        &self,
        checks: &[Check<'_, P>],
        receipt: Receipt,
        used: &[u64],
    ) -> Result<Refunded, CheckError> {
        let policies = policies(checks);
        self.any
            .settle(&as_any(&policies, checks), receipt, used)
            .await
    }
}

impl<P> Grant for AsTyped<'_, P>
where
    P: Policy + Clone + Into<AnyPolicy> + Send + Sync,
{
    async fn grant(&self, check: &Check<'_, P>, up_to: u64) -> Result<Granted, CheckError> {
        let checks = std::slice::from_ref(check);
        let policies = policies(checks);
        self.any.grant(&as_any(&policies, checks)[0], up_to).await
    }
}
