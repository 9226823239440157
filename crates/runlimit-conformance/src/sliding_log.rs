//! An exact sliding log: the reference every sliding-window backend is held
//! to on random traces.
//!
//! The log keeps every admitted unit with the time it was admitted at. A
//! backend running the same trace must:
//!
//! * never admit more than the limit in any interval `(t - window, t]` of the
//!   log, refunded admissions removed and settled ones at the cost they
//!   kept (the guarantee of
//!   [`SlidingWindowPolicy`]);
//! * deny a cost only when the log holds more than `limit - cost` units in
//!   `(t - window - window / 8, t]` (the bound: a unit counts at most an
//!   eighth of a window longer than the log would count it);
//! * refuse duplicate keys and mixed quota modes in a batch, changing nothing.
//!
//! Property tests generate traces with [`trace`] and policies with
//! [`policies`], and hand them to [`run_trace`]. An injected clock may step
//! by any amount; a backend whose [`TimeControl`] shifts stored state steps
//! by whole eighths of every policy's window.

use std::{collections::HashMap, time::Duration};

use proptest::prelude::*;
use runlimit_core::{
    BatchDecision, Check, QuotaMode, Receipt, ScopeId, Settle, SlidingWindowPolicy,
};

use crate::{TimeControl, subject, unique_policy_id};

/// Traces over `policies` policies and three subjects, with costs of 1 to
/// 3, batches of up to three checks (duplicates and mixed modes included),
/// and time steps drawn from `advance`.
pub fn trace(
    policies: usize,
    advance: impl Strategy<Value = Duration> + 'static,
) -> impl Strategy<Value = Vec<TraceOp>> {
    let check = (0..policies, 0u8..3, 1u64..4).prop_map(|(policy, subject, cost)| TraceCheck {
        policy,
        subject,
        cost,
    });
    prop::collection::vec(
        prop_oneof![
            4 => check.clone().prop_map(TraceOp::Check),
            3 => check.clone().prop_map(TraceOp::Admit),
            2 => prop::collection::vec(check, 0..4).prop_map(TraceOp::Batch),
            2 => any::<usize>().prop_map(TraceOp::Refund),
            2 => (any::<usize>(), prop::collection::vec(0u64..4, 3))
                .prop_map(|(index, used)| TraceOp::Settle(index, used)),
            1 => (0..policies, 0u8..3)
                .prop_map(|(policy, subject)| TraceOp::Reset { policy, subject }),
            4 => advance.prop_map(TraceOp::Advance),
        ],
        1..150,
    )
}

/// One or two fresh policies with limits of 1 to 6, windows drawn from
/// `window`, enforcing or in shadow mode.
pub fn policies(
    window: impl Strategy<Value = Duration> + 'static,
) -> impl Strategy<Value = Vec<SlidingWindowPolicy>> {
    prop::collection::vec((1u64..7, window, any::<bool>()), 1..3).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (limit, window, shadow))| {
                let mode = if shadow {
                    QuotaMode::Shadow
                } else {
                    QuotaMode::Enforce
                };
                let scope = ScopeId::new(format!("s{index}"))
                    .unwrap_or_else(|error| panic!("a valid scope: {error}"));
                SlidingWindowPolicy::new(unique_policy_id("trace"), scope, limit, window)
                    .unwrap_or_else(|error| panic!("a valid policy: {error}"))
                    .with_quota_mode(mode)
            })
            .collect()
    })
}

/// One check of a trace: an index into the trace's policies, a subject
/// number and a cost (capped at the policy's limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceCheck {
    /// Index into the policies the trace runs with (modulo their number).
    pub policy: usize,
    /// The subject, as [`subject`] numbers them.
    pub subject: u8,
    /// The cost, capped at the policy's limit.
    pub cost: u64,
}

/// One step of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceOp {
    /// A plain check.
    Check(TraceCheck),
    /// An admission whose receipt is kept for a later refund.
    Admit(TraceCheck),
    /// An atomic batch admitted with a receipt.
    Batch(Vec<TraceCheck>),
    /// Refunds the outstanding receipt at this position (modulo their number).
    Refund(usize),
    /// Settles the outstanding receipt at this position (modulo their
    /// number): each of its checks keeps the used amount at its position
    /// (modulo the check's cost + 1).
    Settle(usize, Vec<u64>),
    /// Resets one subject's counter of one policy.
    Reset {
        /// Index into the policies.
        policy: usize,
        /// The subject number.
        subject: u8,
    },
    /// Lets time pass (through [`TimeControl::advance`]).
    Advance(Duration),
}

/// A unit on record: the admission it came with, its time and cost.
#[derive(Debug, Clone, Copy)]
struct Unit {
    admission: usize,
    at: Duration,
    cost: u64,
}

type Counter = (usize, u8);

/// A check resolved against the trace's policies: (policy, subject, cost).
type Item = (usize, u8, u64);

#[derive(Debug, Default)]
struct Log {
    units: HashMap<Counter, Vec<Unit>>,
}

impl Log {
    /// Units on record for `counter` admitted after `now - reach`, up to `now`.
    fn within(&self, counter: Counter, now: Duration, reach: Duration) -> u64 {
        self.units.get(&counter).map_or(0, |units| {
            units
                .iter()
                .filter(|unit| unit.at <= now && unit.at + reach > now)
                .map(|unit| unit.cost)
                .sum()
        })
    }

    fn record(&mut self, counter: Counter, admission: usize, at: Duration, cost: u64) {
        self.units.entry(counter).or_default().push(Unit {
            admission,
            at,
            cost,
        });
    }

    fn guarantee_holds(&self, policies: &[SlidingWindowPolicy]) -> Result<(), String> {
        for (&(p, s), units) in &self.units {
            let policy = &policies[p];
            for unit in units {
                let held = self.within((p, s), unit.at, policy.window());
                if held > policy.limit() {
                    return Err(format!(
                        "policy {p}, subject {s}: {held} units in the window ending at {:?}, \
                         limit {}",
                        unit.at,
                        policy.limit()
                    ));
                }
            }
        }
        Ok(())
    }

    fn denial_justified(
        &self,
        policies: &[SlidingWindowPolicy],
        (p, s, cost): Item,
        now: Duration,
    ) -> Result<(), String> {
        let policy = &policies[p];
        let reach = policy.window() + policy.sub_window();
        let held = self.within((p, s), now, reach);
        if held + cost > policy.limit() {
            Ok(())
        } else {
            Err(format!(
                "policy {p}, subject {s}: denied {cost} at {now:?} with only {held} units \
                 within a window and an eighth, limit {}",
                policy.limit()
            ))
        }
    }
}

fn batch_is_caller_error(policies: &[SlidingWindowPolicy], items: &[Item]) -> bool {
    let mut seen = Vec::new();
    for &(p, s, _) in items {
        if seen.contains(&(p, s)) {
            return true;
        }
        seen.push((p, s));
    }
    let first = policies[items[0].0].quota_mode();
    items
        .iter()
        .any(|&(p, _, _)| policies[p].quota_mode() != first)
}

/// Runs `ops` against `limiter` and the log; the first disagreement, or a
/// backend error, is the error.
///
/// Every policy must be fresh (a counter no other test uses), and `time`
/// must move time for them alone or for state no other assertion depends on.
///
/// # Errors
///
/// A description of the first step at which the backend broke the
/// guarantee or the bound, failed, or accepted an invalid batch.
///
/// # Panics
///
/// If `policies` is empty.
pub async fn run_trace<L, T>(
    limiter: &L,
    time: &T,
    policies: &[SlidingWindowPolicy],
    ops: &[TraceOp],
) -> Result<(), String>
where
    L: Settle<Policy = SlidingWindowPolicy>,
    T: TimeControl,
{
    assert!(!policies.is_empty(), "a trace needs a policy");
    let resolve = |check: &TraceCheck| {
        let p = check.policy % policies.len();
        (p, check.subject, check.cost.clamp(1, policies[p].limit()))
    };
    let checks_of = |items: &[Item]| -> Vec<Check<'_, SlidingWindowPolicy>> {
        items
            .iter()
            .map(|&(p, s, cost)| {
                Check::weighted(&policies[p], subject(s), cost)
                    .unwrap_or_else(|error| panic!("a capped cost is valid: {error}"))
            })
            .collect()
    };
    let mut now = Duration::ZERO;
    let mut log = Log::default();
    let mut outstanding: Vec<(Vec<Item>, usize, Receipt)> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        match op {
            TraceOp::Advance(by) => {
                time.advance(*by).await;
                now += *by;
                if !time.receipts_survive_advance() {
                    // They would name eighths the shift has moved; the units
                    // they admitted simply stay on record.
                    outstanding.clear();
                }
            }
            TraceOp::Check(check) | TraceOp::Admit(check) => {
                let item = resolve(check);
                let checks = checks_of(&[item]);
                let decision = if matches!(op, TraceOp::Admit(_)) {
                    let (decision, receipt) = limiter
                        .admit(&checks[0])
                        .await
                        .map_err(|error| format!("step {step}: {error}"))?
                        .into_parts();
                    if let Some(receipt) = receipt {
                        outstanding.push((vec![item], step, receipt));
                    }
                    decision
                } else {
                    limiter
                        .check(&checks[0])
                        .await
                        .map_err(|error| format!("step {step}: {error}"))?
                };
                if decision.is_allowed() {
                    log.record((item.0, item.1), step, now, item.2);
                } else {
                    log.denial_justified(policies, item, now)
                        .map_err(|error| format!("step {step}: {error}"))?;
                }
            }
            TraceOp::Batch(batch) => {
                let items: Vec<Item> = batch.iter().map(resolve).collect();
                let invalid = items.is_empty() || batch_is_caller_error(policies, &items);
                match limiter.admit_all(&checks_of(&items)).await {
                    Err(error) if invalid => drop(error),
                    Err(error) => {
                        return Err(format!("step {step}: a valid batch failed: {error}"));
                    }
                    Ok(_) if invalid => return Err(format!("step {step}: an invalid batch ran")),
                    Ok(admission) => match admission.into_parts() {
                        (BatchDecision::Allowed(_), receipt) => {
                            for &(p, s, cost) in &items {
                                log.record((p, s), step, now, cost);
                            }
                            let receipt = receipt
                                .ok_or_else(|| format!("step {step}: allowed without a receipt"))?;
                            outstanding.push((items, step, receipt));
                        }
                        (
                            BatchDecision::Denied { index, .. }
                            | BatchDecision::ShadowDenied { index, .. },
                            _,
                        ) => log
                            .denial_justified(policies, items[index], now)
                            .map_err(|error| format!("step {step}: {error}"))?,
                        (other, _) => {
                            return Err(format!("step {step}: unexpected outcome {other:?}"));
                        }
                    },
                }
            }
            TraceOp::Refund(index) => {
                if outstanding.is_empty() {
                    continue;
                }
                let (items, admission, receipt) =
                    outstanding.swap_remove(index % outstanding.len());
                limiter
                    .refund(&checks_of(&items), receipt)
                    .await
                    .map_err(|error| format!("step {step}: a matching refund failed: {error}"))?;
                // The refunded admission leaves the record: the guarantee
                // must hold without it.
                for &(p, s, _) in &items {
                    if let Some(units) = log.units.get_mut(&(p, s)) {
                        units.retain(|unit| unit.admission != admission);
                    }
                }
            }
            TraceOp::Settle(index, used) => {
                if outstanding.is_empty() {
                    continue;
                }
                let (items, admission, receipt) =
                    outstanding.swap_remove(index % outstanding.len());
                let used: Vec<u64> = items
                    .iter()
                    .zip(used.iter().cycle())
                    .map(|(&(_, _, cost), used)| used % (cost + 1))
                    .collect();
                limiter
                    .settle(&checks_of(&items), receipt, &used)
                    .await
                    .map_err(|error| format!("step {step}: a matching settle failed: {error}"))?;
                // The settled admission stays on record at the cost it kept.
                for (&(p, s, _), &kept) in items.iter().zip(&used) {
                    if let Some(units) = log.units.get_mut(&(p, s)) {
                        for unit in units.iter_mut().filter(|unit| unit.admission == admission) {
                            unit.cost = kept;
                        }
                        units.retain(|unit| unit.cost > 0);
                    }
                }
            }
            TraceOp::Reset { policy, subject: s } => {
                let p = policy % policies.len();
                limiter
                    .reset(&policies[p], &subject(*s))
                    .await
                    .map_err(|error| format!("step {step}: {error}"))?;
                // Support forgave the subject: the record starts afresh. Its
                // receipts stay outstanding; refunding them later must credit
                // nothing, or the record would be exceeded.
                log.units.remove(&(p, *s));
            }
        }
        log.guarantee_holds(policies)
            .map_err(|error| format!("after step {step}: {error}"))?;
    }
    Ok(())
}
