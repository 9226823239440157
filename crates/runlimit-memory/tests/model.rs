//! Property tests: each store against a tiny reference model.
//!
//! The models keep state in the plainest form (a map from key to window, or to
//! a GCRA arrival time scaled by the quota as one `u128`), so a mistake in the
//! stores' sharding, slot reuse, lazy expiry or pairwise scaled arithmetic shows
//! up as a disagreement in decisions, remaining counts or durations.

use std::{collections::HashMap, time::Duration};

use proptest::prelude::*;
use runlimit_core::{
    BatchDecision, Check, Decision, Denial, FixedWindowPolicy, GcraPolicy, Policy, PolicyId,
    QuotaMode, ScopeId, SubjectKey,
};
use runlimit_memory::{GcraStore, ManualClock, MemoryStore, MemoryStoreConfig};

const NANOS_PER_MILLI: u128 = 1_000_000;

#[derive(Debug, Clone)]
enum Op {
    /// (policy, subject, cost) checked alone.
    Check(usize, u8, u64),
    /// Checked as one atomic batch.
    Batch(Vec<(usize, u8, u64)>),
    /// Advance the clock by this many microseconds.
    Advance(u64),
    /// Set the clock back by this many microseconds; stores must ignore it.
    Rewind(u64),
}

fn op_strategy(policies: usize) -> impl Strategy<Value = Op> {
    let item = (0..policies, 0u8..4, 1u64..4);
    prop_oneof![
        4 => item.clone().prop_map(|(p, s, c)| Op::Check(p, s, c)),
        2 => prop::collection::vec(item, 1..4).prop_map(Op::Batch),
        3 => (0u64..40_000).prop_map(Op::Advance),
        1 => (0u64..5_000).prop_map(Op::Rewind),
    ]
}

fn key(subject: u8) -> SubjectKey {
    let mut digest = [subject; 32];
    digest[7] = 0x5A;
    SubjectKey::from_digest(digest)
}

trait Model {
    type Policy: Policy;
    type State: Copy;
    fn evaluate(
        policy: &Self::Policy,
        state: Option<Self::State>,
        cost: u64,
        now: u128,
    ) -> (Decision, Option<Self::State>);
}

struct FixedModel;

impl Model for FixedModel {
    type Policy = FixedWindowPolicy;
    /// (expires_at ns, used)
    type State = (u128, u64);

    fn evaluate(
        policy: &FixedWindowPolicy,
        state: Option<(u128, u64)>,
        cost: u64,
        now: u128,
    ) -> (Decision, Option<(u128, u64)>) {
        let window = u128::from(policy.window_millis()) * NANOS_PER_MILLI;
        let (expires, used) = match state {
            Some((expires, used)) if expires > now => (expires, used),
            _ => (now + window, 0),
        };
        let left = Duration::from_nanos(u64::try_from(expires - now).expect("fits"));
        if used + cost > policy.limit() {
            let denial = Denial::QuotaExceeded {
                capacity: policy.limit(),
                retry_after: left,
            };
            return (denied(policy.quota_mode(), denial), None);
        }
        let used = used + cost;
        let decision =
            Decision::allowed(policy.limit(), policy.limit() - used, left).expect("valid");
        (decision, Some((expires, used)))
    }
}

struct GcraModel;

impl Model for GcraModel {
    type Policy = GcraPolicy;
    /// Theoretical arrival time × quota, in nanoseconds.
    type State = u128;

    fn evaluate(
        policy: &GcraPolicy,
        state: Option<u128>,
        cost: u64,
        now: u128,
    ) -> (Decision, Option<u128>) {
        let quota = u128::from(policy.quota());
        let period = u128::from(policy.period_millis()) * NANOS_PER_MILLI;
        let now_scaled = now * quota;
        let tat = state.map_or(now_scaled, |tat| tat.max(now_scaled)) + u128::from(cost) * period;
        let ahead = tat - now_scaled;
        let tolerance = u128::from(policy.burst_capacity()) * period;
        let to_millis = |scaled: u128| {
            Duration::from_millis(
                u64::try_from(scaled.div_ceil(quota * NANOS_PER_MILLI)).expect("fits"),
            )
        };
        if ahead > tolerance {
            let denial = Denial::QuotaExceeded {
                capacity: policy.burst_capacity(),
                retry_after: to_millis(ahead - tolerance),
            };
            return (denied(policy.quota_mode(), denial), None);
        }
        let remaining = u64::try_from((tolerance - ahead) / period).expect("fits");
        let decision =
            Decision::allowed(policy.burst_capacity(), remaining, to_millis(ahead)).expect("valid");
        (decision, Some(tat))
    }
}

fn denied(mode: QuotaMode, denial: Denial) -> Decision {
    match mode {
        QuotaMode::Enforce => Decision::denied(denial),
        QuotaMode::Shadow => Decision::shadow_denied(denial).expect("quota denial"),
    }
}

/// The model's answer to a batch, `None` for a caller error. Caller errors are
/// refused before the store reads its clock, so only valid batches observe time.
fn model_batch<M: Model>(
    state: &mut HashMap<(usize, u8), M::State>,
    policies: &[M::Policy],
    items: &[(usize, u8, u64)],
    now: &mut u128,
    clock_now: u128,
) -> Option<BatchDecision> {
    let mode = policies[items[0].0].quota_mode();
    let duplicate = items
        .iter()
        .enumerate()
        .any(|(i, a)| items[..i].iter().any(|b| (a.0, a.1) == (b.0, b.1)));
    if duplicate
        || items
            .iter()
            .any(|item| policies[item.0].quota_mode() != mode)
    {
        return None;
    }
    *now = (*now).max(clock_now);
    let now = *now;
    let mut decisions = Vec::new();
    let mut updates = Vec::new();
    for (index, &(p, s, cost)) in items.iter().enumerate() {
        let (decision, next) = M::evaluate(&policies[p], state.get(&(p, s)).copied(), cost, now);
        if let Some(denial) = decision.denial() {
            let denial = *denial;
            return Some(if decision.is_shadow_denied() {
                BatchDecision::ShadowDenied { index, denial }
            } else {
                BatchDecision::Denied { index, denial }
            });
        }
        decisions.push(decision);
        updates.push(((p, s), next.expect("allowed has a next state")));
    }
    state.extend(updates);
    Some(BatchDecision::Allowed(decisions))
}

fn run<M: Model>(
    policies: &[M::Policy],
    ops: &[Op],
    check: impl Fn(&Check<'_, M::Policy>) -> Decision,
    check_all: impl Fn(&[Check<'_, M::Policy>]) -> Option<BatchDecision>,
    clock: &ManualClock,
) -> Result<(), TestCaseError> {
    let mut state: HashMap<(usize, u8), M::State> = HashMap::new();
    let mut clock_now: u128 = 0;
    let mut now: u128 = 0;
    for op in ops {
        match op {
            Op::Advance(micros) => {
                clock_now += u128::from(*micros) * 1_000;
                clock.set(Duration::from_nanos(
                    u64::try_from(clock_now).expect("fits"),
                ));
            }
            Op::Rewind(micros) => {
                clock_now = clock_now.saturating_sub(u128::from(*micros) * 1_000);
                clock.set(Duration::from_nanos(
                    u64::try_from(clock_now).expect("fits"),
                ));
            }
            Op::Check(p, s, cost) => {
                // Single-shard stores: time never moves backwards for the store.
                now = now.max(clock_now);
                let policy = &policies[*p];
                let cost = (*cost).min(policy.capacity());
                let check_value = Check::weighted(policy, key(*s), cost).expect("valid cost");
                let actual = check(&check_value);
                let (expected, next) =
                    M::evaluate(policy, state.get(&(*p, *s)).copied(), cost, now);
                prop_assert_eq!(actual, expected, "{:?}", op);
                if let Some(next) = next {
                    state.insert((*p, *s), next);
                }
            }
            Op::Batch(items) => {
                let items: Vec<_> = items
                    .iter()
                    .map(|&(p, s, cost)| (p, s, cost.min(policies[p].capacity())))
                    .collect();
                let checks: Vec<_> = items
                    .iter()
                    .map(|&(p, s, cost)| {
                        Check::weighted(&policies[p], key(s), cost).expect("valid")
                    })
                    .collect();
                let actual = check_all(&checks);
                let expected = model_batch::<M>(&mut state, policies, &items, &mut now, clock_now);
                prop_assert_eq!(actual, expected, "{:?}", op);
            }
        }
    }
    Ok(())
}

fn scope(index: usize) -> ScopeId {
    ScopeId::new(format!("s{index}")).expect("valid")
}

fn mode(shadow: bool) -> QuotaMode {
    if shadow {
        QuotaMode::Shadow
    } else {
        QuotaMode::Enforce
    }
}

fn fixed_policies() -> impl Strategy<Value = Vec<FixedWindowPolicy>> {
    prop::collection::vec((1u64..6, 1u64..60, any::<bool>()), 1..4).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (limit, window_ms, shadow))| {
                FixedWindowPolicy::new(
                    PolicyId::new("model").expect("valid"),
                    scope(index),
                    limit,
                    Duration::from_millis(window_ms),
                )
                .expect("valid")
                .with_quota_mode(mode(shadow))
            })
            .collect()
    })
}

fn gcra_policies() -> impl Strategy<Value = Vec<GcraPolicy>> {
    prop::collection::vec((1u64..7, 1u64..40, 1u64..6, any::<bool>()), 1..4).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (quota, period_ms, burst, shadow))| {
                GcraPolicy::new(
                    PolicyId::new("model").expect("valid"),
                    scope(index),
                    quota,
                    Duration::from_millis(period_ms),
                    burst,
                )
                .expect("valid")
                .with_quota_mode(mode(shadow))
            })
            .collect()
    })
}

fn config(shards: usize) -> MemoryStoreConfig {
    MemoryStoreConfig::new(1_024)
        .and_then(|config| config.with_shard_count(shards))
        .and_then(|config| config.with_cleanup_per_check(1))
        .expect("valid")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn memory_store_matches_the_fixed_window_model(
        policies in fixed_policies(),
        ops in prop::collection::vec(op_strategy(3), 1..80),
        shards in prop_oneof![Just(1usize), Just(3usize)],
    ) {
        prop_assume!(ops.iter().all(|op| !matches!(op, Op::Rewind(_))) || shards == 1);
        let ops: Vec<Op> = ops.into_iter().map(|op| clamp(op, policies.len())).collect();
        let clock = ManualClock::new();
        let store = MemoryStore::new(config(shards)).with_clock(clock.clone());
        run::<FixedModel>(
            &policies,
            &ops,
            |check| store.check(check).expect("no store error"),
            |checks| store.check_all(checks).ok(),
            &clock,
        )?;
    }

    #[test]
    fn gcra_store_matches_the_gcra_model(
        policies in gcra_policies(),
        ops in prop::collection::vec(op_strategy(3), 1..80),
        shards in prop_oneof![Just(1usize), Just(3usize)],
    ) {
        prop_assume!(ops.iter().all(|op| !matches!(op, Op::Rewind(_))) || shards == 1);
        let ops: Vec<Op> = ops.into_iter().map(|op| clamp(op, policies.len())).collect();
        let clock = ManualClock::new();
        let store = GcraStore::new(config(shards)).with_clock(clock.clone());
        run::<GcraModel>(
            &policies,
            &ops,
            |check| store.check(check).expect("no store error"),
            |checks| store.check_all(checks).ok(),
            &clock,
        )?;
    }
}

/// Maps generated policy indices onto the generated policies.
fn clamp(op: Op, policies: usize) -> Op {
    match op {
        Op::Check(p, s, c) => Op::Check(p % policies, s, c),
        Op::Batch(items) => Op::Batch(
            items
                .into_iter()
                .map(|(p, s, c)| (p % policies, s, c))
                .collect(),
        ),
        other => other,
    }
}
