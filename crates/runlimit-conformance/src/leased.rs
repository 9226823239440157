//! Leases in front of a backend that grants: [`Leased`] replicas checking
//! weighted costs, held to an exact ledger of units.
//!
//! A trace ([`leased_trace`]) runs checks of 1 to 8 units on one to three
//! replicas, each a [`Leased`] in front of the same shared backend, with
//! grants of at most 2 to 7 units (below many of the costs), and flushes.
//! [`run_leased_trace`] holds the backend, after every step, to:
//!
//! * **nothing stranded**: the shared store counts exactly the units
//!   admitted and the units the replicas' leases hold, and once every
//!   replica has flushed, exactly the units admitted (for GCRA with several
//!   replicas, also the units a flush could not give back, as the shared
//!   store credits only a subject's latest admission:
//!   [`LeasedPolicy::CREDITS_ONLY_LATEST`]);
//! * **never over**: never more than the limit admitted;
//! * **bounded under-admission**: a replica denies a check only when what
//!   its own lease holds and what the shared store has left fall short of
//!   the check's cost, so a subject is denied early by at most what other
//!   replicas hold.
//!
//! [`leased_weighted_suite`] runs one such case every backend runs alike:
//! one replica checking 5 units at a time, grants of at most 8, a limit of
//! 100, admits all 100.
//!
//! The policies ([`LeasedPolicy`]) hold their units far longer than a trace
//! runs (windows of 320 days, one GCRA unit a day), so a backend on a real
//! clock runs traces too: nothing expires or renews while one does. Every
//! trace uses a fresh policy id.

use std::time::Duration;

use proptest::prelude::*;
use runlimit_core::{
    Check, FixedWindowPolicy, GcraPolicy, Grant, Lifecycle, Limiter, Policy, Shared,
    SlidingWindowPolicy, SubjectKey,
};
use runlimit_memory::{Leasable, LeaseConfig, Leased};

use crate::{fixed_window, gcra, sliding_window, subject};

/// Far longer than any trace runs.
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A policy a leased trace runs with: `limit` units that no clock renews
/// while the trace runs.
pub trait LeasedPolicy: Leasable {
    /// Whether backends credit a settlement only for the subject's latest
    /// admission (GCRA): a flush then gives a lease's units back only while
    /// its grant is the latest, and otherwise they stay consumed until
    /// their increments pass.
    const CREDITS_ONLY_LATEST: bool = false;

    /// A fresh policy (a unique id) of `limit` units, at most 366.
    fn with_limit(limit: u64) -> Self;
}

impl LeasedPolicy for FixedWindowPolicy {
    /// A window of 320 days.
    fn with_limit(limit: u64) -> Self {
        fixed_window("leased", limit, DAY * 320)
    }
}

impl LeasedPolicy for SlidingWindowPolicy {
    /// A window of 320 days: eighths of 40 days.
    fn with_limit(limit: u64) -> Self {
        sliding_window("leased", limit, DAY * 320)
    }
}

impl LeasedPolicy for GcraPolicy {
    const CREDITS_ONLY_LATEST: bool = true;

    /// One unit a day, a burst of `limit`.
    fn with_limit(limit: u64) -> Self {
        gcra("leased", 1, DAY, limit)
    }
}

/// Runs the weighted lease case: one replica in front of `shared`, checking
/// 5 units at a time with grants of at most 8 (taking 10%, then all, of what
/// the shared store has left), admits the whole limit of 100, each check
/// spending what the lease holds before a new grant replaces it; after each
/// check the shared store counts exactly what was admitted and what the
/// lease holds.
///
/// # Panics
///
/// When a case fails, naming it.
pub async fn leased_weighted_suite<L>(shared: &Shared<L>)
where
    L: Grant + 'static,
    L::Policy: LeasedPolicy,
{
    for remaining_share in [10, 100] {
        let case = format!("weighted checks on one replica, a share of {remaining_share}%");
        let policy = L::Policy::with_limit(100);
        let config = LeaseConfig::new(16)
            .and_then(|config| config.with_max_grant(8))
            .and_then(|config| config.with_remaining_share(remaining_share))
            .unwrap_or_else(|error| panic!("{case}: {error}"));
        let replica = Leased::new(shared.clone(), config);
        let check = Check::weighted(&policy, subject(71), 5)
            .unwrap_or_else(|error| panic!("{case}: {error}"));
        let mut admitted = 0;
        loop {
            let decision = replica
                .check(&check)
                .await
                .unwrap_or_else(|error| panic!("{case}: backend error: {error:?}"));
            if !decision.is_allowed() {
                break;
            }
            admitted += check.cost();
            let held = replica.stats().units_held;
            let consumed = consumed(shared, &policy, *check.subject())
                .await
                .unwrap_or_else(|error| panic!("{case}: {error}"));
            assert_eq!(
                consumed,
                admitted + held,
                "{case}: consumed at the shared store, against admitted and held"
            );
        }
        let held = replica.stats().units_held;
        assert_eq!((admitted, held), (100, 0), "{case}: admitted and held");
        assert!(
            replica.stats().local_hits > 0,
            "{case}: no check was admitted from the lease"
        );
    }
}

/// Replicas, lease sizes and steps of one trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedTrace {
    /// The policy's limit (for GCRA, its burst).
    pub limit: u64,
    /// Replicas in front of the shared backend.
    pub replicas: usize,
    /// Each replica's [`max_grant`](LeaseConfig::with_max_grant).
    pub max_grant: u64,
    /// Each replica's [`remaining_share`](LeaseConfig::with_remaining_share).
    pub remaining_share: u8,
    /// The steps, in order.
    pub ops: Vec<LeasedOp>,
}

/// One step of a leased trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeasedOp {
    /// A check of `cost` units on a replica (an index modulo their number).
    Check {
        /// The replica.
        replica: usize,
        /// The check's cost.
        cost: u64,
    },
    /// A replica (an index modulo their number) gives its unspent units
    /// back.
    Flush(usize),
}

/// Traces of up to 48 steps: limits of 8 to 40, one to three replicas,
/// grants of at most 2 to 7 units taking 10 to 100% of what the shared store
/// has left, checks of 1 to 8 units, and an occasional flush.
pub fn leased_trace() -> impl Strategy<Value = LeasedTrace> {
    let op = prop_oneof![
        8 => (0usize..3, 1u64..=8).prop_map(|(replica, cost)| LeasedOp::Check { replica, cost }),
        1 => (0usize..3).prop_map(LeasedOp::Flush),
    ];
    (
        8u64..=40,
        1usize..=3,
        2u64..=7,
        prop_oneof![Just(10u8), Just(50), Just(100)],
        prop::collection::vec(op, 1..48),
    )
        .prop_map(
            |(limit, replicas, max_grant, remaining_share, ops)| LeasedTrace {
                limit,
                replicas,
                max_grant,
                remaining_share,
                ops,
            },
        )
}

/// Runs `trace` on replicas in front of `shared`, each a [`Leased`] of its
/// own, and checks the ledger after every step; `Err` says which step broke
/// which rule.
///
/// # Errors
///
/// A message naming the step and the rule it broke, or a backend error.
pub async fn run_leased_trace<L>(shared: &Shared<L>, trace: &LeasedTrace) -> Result<(), String>
where
    L: Grant + 'static,
    L::Policy: LeasedPolicy,
{
    let policy = L::Policy::with_limit(trace.limit);
    let limit = policy.capacity();
    let config = LeaseConfig::new(16)
        .and_then(|config| config.with_max_grant(trace.max_grant))
        .and_then(|config| config.with_remaining_share(trace.remaining_share))
        .map_err(|error| format!("an invalid lease configuration: {error}"))?;
    let replicas: Vec<_> = (0..trace.replicas.max(1))
        .map(|_| Leased::new(shared.clone(), config))
        .collect();
    let subject = subject(70);
    // A flush may keep units only where the shared store cannot take them
    // back: GCRA grants behind another replica's admission.
    let may_keep = L::Policy::CREDITS_ONLY_LATEST && replicas.len() > 1;
    let (mut admitted, mut kept) = (0, 0);
    let mut consumed = consumed(shared, &policy, subject).await?;
    for (step, op) in trace.ops.iter().enumerate() {
        match *op {
            LeasedOp::Check { replica, cost } => {
                let index = replica % replicas.len();
                let check = Check::weighted(&policy, subject, cost.min(limit))
                    .map_err(|error| format!("step {step}: an invalid check: {error}"))?;
                let own = replicas[index].stats().units_held;
                let decision = replicas[index]
                    .check(&check)
                    .await
                    .map_err(|error| format!("step {step}: backend error: {error:?}"))?;
                if decision.is_allowed() {
                    admitted += check.cost();
                } else if own + (limit - consumed) >= check.cost() {
                    return Err(format!(
                        "step {step}: replica {index} denied {} units while its lease held \
                         {own} and the shared store had {} left",
                        check.cost(),
                        limit - consumed,
                    ));
                }
            }
            LeasedOp::Flush(replica) => {
                let replica = &replicas[replica % replicas.len()];
                kept += flush(shared, &policy, subject, replica, consumed, may_keep)
                    .await
                    .map_err(|error| format!("step {step}: {error}"))?;
            }
        }
        consumed = self::consumed(shared, &policy, subject).await?;
        let held: u64 = replicas
            .iter()
            .map(|replica| replica.stats().units_held)
            .sum();
        if admitted > limit {
            return Err(format!("step {step}: {admitted} units admitted of {limit}"));
        }
        if consumed != admitted + held + kept {
            return Err(format!(
                "step {step}: the shared store counts {consumed} units; {admitted} were \
                 admitted, {held} are held and {kept} were kept by flushes"
            ));
        }
    }
    for replica in &replicas {
        kept += flush(shared, &policy, subject, replica, consumed, may_keep)
            .await
            .map_err(|error| format!("the last flush: {error}"))?;
        consumed = self::consumed(shared, &policy, subject).await?;
    }
    if consumed != admitted + kept {
        return Err(format!(
            "after every flush the shared store counts {consumed} units; {admitted} were \
             admitted and {kept} kept by flushes"
        ));
    }
    Ok(())
}

/// Flushes `replica`, the shared store counting `consumed` units of
/// `subject` before; returns the units its lease held that the flush could
/// not give back, which must be none unless `may_keep`.
async fn flush<L>(
    shared: &Shared<L>,
    policy: &L::Policy,
    subject: SubjectKey,
    replica: &Leased<Shared<L>>,
    consumed: u64,
    may_keep: bool,
) -> Result<u64, String>
where
    L: Grant + 'static,
    L::Policy: Leasable,
{
    let held = replica.stats().units_held;
    replica
        .flush()
        .await
        .map_err(|error| format!("backend error on flush: {error:?}"))?;
    let given_back = consumed.saturating_sub(self::consumed(shared, policy, subject).await?);
    let kept = held.checked_sub(given_back).ok_or_else(|| {
        format!("a flush gave back {given_back} units when its lease held {held}")
    })?;
    if kept > 0 && !may_keep {
        return Err(format!(
            "a flush gave back {given_back} of the {held} units its lease held"
        ));
    }
    Ok(kept)
}

/// The units the shared store counts for `subject` under `policy`: its
/// capacity less what a peek reports remaining.
async fn consumed<L: Lifecycle>(
    shared: &L,
    policy: &L::Policy,
    subject: SubjectKey,
) -> Result<u64, String> {
    let peeked = shared
        .peek(&Check::new(policy, subject))
        .await
        .map_err(|error| format!("backend error on peek: {error:?}"))?;
    Ok(policy.capacity() - peeked.remaining().unwrap_or(0))
}
