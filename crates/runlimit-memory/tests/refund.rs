//! Refunds and settlements against exact counterfactual models: a replay of
//! the same admissions without the refunded ones, and with each settled one
//! at the cost it kept.
//!
//! The stores' refund rules must never leave a subject better off than that
//! replay. For GCRA the comparison holds at every moment, however refunds,
//! checks and time interleave. For fixed windows the replay's future windows
//! depend on which check started each one, so the comparison is made at the
//! moment of a refund whose window is still live: remaining and reset time
//! may be worse than the replay's, never better; a refund after its window
//! ended gives nothing back.

use std::{collections::HashMap, time::Duration};

use proptest::prelude::*;
use runlimit_core::{
    Check, Decision, FixedWindowPolicy, GcraPolicy, PolicyId, Receipt, ScopeId, SubjectKey,
};
use runlimit_memory::{GcraStore, ManualClock, MemoryStore, MemoryStoreConfig};

const NANOS_PER_MILLI: u128 = 1_000_000;

#[derive(Debug, Clone)]
enum Op {
    /// Admit (policy, subject, cost), keeping the receipt when allowed.
    Admit(usize, u8, u64),
    /// A plain check of (policy, subject, cost), never refunded.
    Check(usize, u8, u64),
    /// Settle the outstanding receipt at this position (modulo their number)
    /// to this many units used (modulo its cost + 1): 0 is a whole refund.
    Refund(usize, u64),
    /// Advance the clock by this many microseconds.
    Advance(u64),
}

fn ops(policies: usize) -> impl Strategy<Value = Vec<Op>> {
    let item = (0..policies, 0u8..2, 1u64..4);
    prop::collection::vec(
        prop_oneof![
            3 => item.clone().prop_map(|(p, s, c)| Op::Admit(p, s, c)),
            2 => item.prop_map(|(p, s, c)| Op::Check(p, s, c)),
            3 => (any::<usize>(), prop_oneof![Just(0u64), 0u64..4])
                .prop_map(|(index, used)| Op::Refund(index, used)),
            3 => (0u64..15_000).prop_map(Op::Advance),
        ],
        1..120,
    )
}

fn key(subject: u8) -> SubjectKey {
    SubjectKey::from_digest([subject.wrapping_add(0x3C); 32])
}

fn scope(index: usize) -> ScopeId {
    ScopeId::new(format!("s{index}")).expect("valid")
}

fn config() -> MemoryStoreConfig {
    MemoryStoreConfig::new(64)
        .and_then(|config| config.with_shard_count(2))
        .expect("valid")
}

/// One admission the replay keeps: its time (ns) and cost.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    at: u128,
    cost: u64,
}

/// An outstanding receipt and what it admitted.
struct Outstanding {
    policy: usize,
    subject: u8,
    cost: u64,
    id: usize,
    receipt: Receipt,
}

/// Asserts that `store` (a decision of the store) is no better for the
/// subject than `replay` (the counterfactual's decision for the same check).
fn dominated(store: &Decision, replay: &Decision, what: &str) -> Result<(), TestCaseError> {
    match (store.remaining(), replay.remaining()) {
        (Some(store_left), Some(replay_left)) => {
            prop_assert!(
                store_left <= replay_left,
                "{what}: store has {store_left} left, the replay {replay_left}"
            );
            if store_left == replay_left {
                prop_assert!(
                    store.reset_after() >= replay.reset_after(),
                    "{what}: store resets after {:?}, the replay after {:?}",
                    store.reset_after(),
                    replay.reset_after()
                );
            }
        }
        (Some(_), None) => {
            prop_assert!(
                false,
                "{what}: store allows {store:?}, the replay denies {replay:?}"
            );
        }
        (None, Some(_)) => {}
        (None, None) => prop_assert!(
            store.retry_after() >= replay.retry_after(),
            "{what}: store retries after {:?}, the replay after {:?}",
            store.retry_after(),
            replay.retry_after()
        ),
    }
    Ok(())
}

/// Gives back `cost - used` of `check`'s admission: a whole refund when
/// `used` is 0, a settlement otherwise (which credits nothing when `used` is
/// the whole cost). Returns how many checks were credited.
fn give_back<A: runlimit_memory::Algorithm>(
    store: &runlimit_memory::Store<A>,
    check: Check<'_, A::Policy>,
    receipt: Receipt,
    used: u64,
) -> Result<usize, TestCaseError>
where
    A::Policy: runlimit_core::Policy,
{
    let refunded = if used == 0 {
        store.refund(&[check], receipt)
    } else {
        store.settle(&[check], receipt, &[used])
    }
    .expect("no error");
    if used == check.cost() {
        prop_assert_eq!(refunded.credited(), 0, "nothing to give back");
    }
    Ok(refunded.credited())
}

/// The replay's admissions after admission `id` was settled to `used`: its
/// cost becomes `used`, or it is gone when nothing was used.
fn keep_only(admissions: &mut Vec<(usize, Admitted)>, id: usize, used: u64) {
    admissions.retain_mut(|(admission, admitted)| {
        if *admission == id {
            admitted.cost = used;
        }
        admitted.cost > 0
    });
}

/// GCRA, exactly: the arrival time × quota, in nanoseconds, of a replay of
/// `admissions` in order (each forced through, as the store admitted it).
fn gcra_replay(policy: &GcraPolicy, admissions: &[Admitted]) -> u128 {
    let quota = u128::from(policy.quota());
    let period = u128::from(policy.period_millis()) * NANOS_PER_MILLI;
    admissions.iter().fold(0, |tat, admitted| {
        tat.max(admitted.at * quota) + u128::from(admitted.cost) * period
    })
}

/// What a peek of one unit reports against the replay's arrival time.
fn gcra_peek(policy: &GcraPolicy, tat: u128, now: u128) -> Decision {
    let quota = u128::from(policy.quota());
    let period = u128::from(policy.period_millis()) * NANOS_PER_MILLI;
    let tolerance = u128::from(policy.burst_capacity()) * period;
    let ahead = tat.max(now * quota) - now * quota;
    let millis = |scaled: u128| {
        Duration::from_millis(
            u64::try_from(scaled.div_ceil(quota * NANOS_PER_MILLI)).expect("fits"),
        )
    };
    if ahead + period > tolerance {
        return Decision::denied(runlimit_core::Denial::QuotaExceeded {
            capacity: policy.burst_capacity(),
            retry_after: millis(ahead + period - tolerance),
        });
    }
    let remaining = u64::try_from((tolerance - ahead) / period).expect("fits");
    Decision::allowed(policy.burst_capacity(), remaining, millis(ahead)).expect("valid")
}

fn gcra_policies() -> impl Strategy<Value = Vec<GcraPolicy>> {
    prop::collection::vec((1u64..5, 1u64..30, 1u64..5), 1..3).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (quota, period_ms, burst))| {
                GcraPolicy::new(
                    PolicyId::new("refund").expect("valid"),
                    scope(index),
                    quota,
                    Duration::from_millis(period_ms),
                    burst,
                )
                .expect("valid")
            })
            .collect()
    })
}

/// Fixed windows, replayed: the live window (expiry ns, used) at `now` of the
/// same admissions in order, each forced through, anchoring as the store does.
fn window_replay(policy: &FixedWindowPolicy, admissions: &[Admitted], now: u128) -> (u128, u64) {
    let window = u128::from(policy.window_millis()) * NANOS_PER_MILLI;
    let (expires, used) = admissions.iter().fold((0, 0), |(expires, used), admitted| {
        if expires > admitted.at {
            (expires, used + admitted.cost)
        } else {
            (admitted.at + window, admitted.cost)
        }
    });
    if expires > now {
        (expires, used)
    } else {
        (0, 0)
    }
}

fn window_peek(policy: &FixedWindowPolicy, (expires, used): (u128, u64), now: u128) -> Decision {
    let left = if used == 0 {
        Duration::ZERO
    } else {
        Duration::from_nanos(u64::try_from(expires - now).expect("fits"))
    };
    if used + 1 > policy.limit() {
        return Decision::denied(runlimit_core::Denial::QuotaExceeded {
            capacity: policy.limit(),
            retry_after: left,
        });
    }
    Decision::allowed(policy.limit(), policy.limit() - used, left).expect("valid")
}

fn fixed_policies() -> impl Strategy<Value = Vec<FixedWindowPolicy>> {
    prop::collection::vec((1u64..6, 1u64..40), 1..3).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (limit, window_ms))| {
                FixedWindowPolicy::new(
                    PolicyId::new("refund").expect("valid"),
                    scope(index),
                    limit,
                    Duration::from_millis(window_ms),
                )
                .expect("valid")
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// However refunds, checks and time interleave, a GCRA key is never
    /// better off than a replay of its admissions without the refunded ones,
    /// and no refund gives back more than its cost.
    #[test]
    fn gcra_refunds_never_beat_the_replay_without_them(
        policies in gcra_policies(),
        ops in ops(2),
    ) {
        let clock = ManualClock::new();
        let store = GcraStore::new(config()).with_clock(clock.clone());
        let mut now: u128 = 0;
        let mut kept: HashMap<(usize, u8), Vec<(usize, Admitted)>> = HashMap::new();
        let mut outstanding: Vec<Outstanding> = Vec::new();
        for (id, op) in ops.into_iter().enumerate() {
            match op {
                Op::Advance(micros) => {
                    now += u128::from(micros) * 1_000;
                    clock.set(Duration::from_nanos(u64::try_from(now).expect("fits")));
                }
                Op::Admit(p, s, cost) | Op::Check(p, s, cost) => {
                    let p = p % policies.len();
                    let policy = &policies[p];
                    let cost = cost.min(policy.burst_capacity());
                    let check = Check::weighted(policy, key(s), cost).expect("valid");
                    let admitted = if matches!(op, Op::Admit(..)) {
                        let (decision, receipt) = store.admit(&check).expect("no error").into_parts();
                        if let Some(receipt) = receipt {
                            outstanding.push(Outstanding { policy: p, subject: s, cost, id, receipt });
                        }
                        decision.is_allowed()
                    } else {
                        store.check(&check).expect("no error").is_allowed()
                    };
                    if admitted {
                        kept.entry((p, s)).or_default().push((id, Admitted { at: now, cost }));
                    }
                }
                Op::Refund(index, used) => {
                    if outstanding.is_empty() {
                        continue;
                    }
                    let refunded = outstanding.swap_remove(index % outstanding.len());
                    let used = used % (refunded.cost + 1);
                    let policy = &policies[refunded.policy];
                    let check = Check::weighted(policy, key(refunded.subject), refunded.cost)
                        .expect("valid");
                    let one = Check::new(policy, key(refunded.subject));
                    let before = store.peek(&one).expect("no error");
                    give_back(&store, check, refunded.receipt, used)?;
                    let after = store.peek(&one).expect("no error");
                    let unused = refunded.cost - used;
                    prop_assert!(
                        after.remaining().unwrap_or(0) <= before.remaining().unwrap_or(0) + unused,
                        "giving back {unused} gave back more: {before:?} then {after:?}"
                    );
                    if let Some(admissions) = kept.get_mut(&(refunded.policy, refunded.subject)) {
                        keep_only(admissions, refunded.id, used);
                    }
                }
            }
            for (p, policy) in policies.iter().enumerate() {
                for s in 0..2 {
                    let admissions: Vec<Admitted> = kept
                        .get(&(p, s))
                        .map(|list| list.iter().map(|(_, admitted)| *admitted).collect())
                        .unwrap_or_default();
                    let replay = gcra_peek(policy, gcra_replay(policy, &admissions), now);
                    let actual = store.peek(&Check::new(policy, key(s))).expect("no error");
                    dominated(&actual, &replay, &format!("policy {p}, subject {s}"))?;
                }
            }
        }
    }

    /// A fixed-window refund whose window is still live leaves the key no
    /// better off than a replay without the refunded check, at that moment;
    /// one whose window has ended gives nothing back; none gives back more
    /// than its cost.
    #[test]
    fn fixed_window_refunds_never_beat_the_replay_without_them(
        policies in fixed_policies(),
        ops in ops(2),
    ) {
        let clock = ManualClock::new();
        let store = MemoryStore::new(config()).with_clock(clock.clone());
        let mut now: u128 = 0;
        // Every admission, in order, and the ids refunded so far: the replay
        // is the admissions minus those refunded.
        let mut history: HashMap<(usize, u8), Vec<(usize, Admitted)>> = HashMap::new();
        let mut outstanding: Vec<(Outstanding, u128)> = Vec::new();
        for (id, op) in ops.into_iter().enumerate() {
            match op {
                Op::Advance(micros) => {
                    now += u128::from(micros) * 1_000;
                    clock.set(Duration::from_nanos(u64::try_from(now).expect("fits")));
                }
                Op::Admit(p, s, cost) | Op::Check(p, s, cost) => {
                    let p = p % policies.len();
                    let policy = &policies[p];
                    let cost = cost.min(policy.limit());
                    let check = Check::weighted(policy, key(s), cost).expect("valid");
                    let decision = if matches!(op, Op::Admit(..)) {
                        let (decision, receipt) = store.admit(&check).expect("no error").into_parts();
                        if let Some(receipt) = receipt {
                            // When the window this admission counts in ends.
                            let expires = now + decision.reset_after().expect("allowed").as_nanos();
                            outstanding.push((Outstanding { policy: p, subject: s, cost, id, receipt }, expires));
                        }
                        decision
                    } else {
                        store.check(&check).expect("no error")
                    };
                    if decision.is_allowed() {
                        history.entry((p, s)).or_default().push((id, Admitted { at: now, cost }));
                    }
                }
                Op::Refund(index, used) => {
                    if outstanding.is_empty() {
                        continue;
                    }
                    let (refunded, expires) = outstanding.swap_remove(index % outstanding.len());
                    let used = used % (refunded.cost + 1);
                    let policy = &policies[refunded.policy];
                    let check = Check::weighted(policy, key(refunded.subject), refunded.cost)
                        .expect("valid");
                    let one = Check::new(policy, key(refunded.subject));
                    let before = store.peek(&one).expect("no error");
                    let credited = give_back(&store, check, refunded.receipt, used)?;
                    let after = store.peek(&one).expect("no error");
                    let unused = refunded.cost - used;
                    prop_assert!(
                        after.remaining().unwrap_or(0) <= before.remaining().unwrap_or(0) + unused,
                        "giving back {unused} gave back more: {before:?} then {after:?}"
                    );
                    if expires <= now {
                        prop_assert_eq!(credited, 0, "the refunded check's window had ended");
                    }
                    let admissions = history.entry((refunded.policy, refunded.subject)).or_default();
                    let before_refund: Vec<Admitted> = admissions.iter().map(|(_, a)| *a).collect();
                    keep_only(admissions, refunded.id, used);
                    let without: Vec<Admitted> = admissions.iter().map(|(_, a)| *a).collect();
                    // The replay of the store's own history (all admissions so
                    // far, the refunded one included) must be what the store
                    // held before: then the replay without it is the true
                    // counterfactual, and the store may not beat it.
                    let held = window_peek(policy, window_replay(policy, &before_refund, now), now);
                    if expires > now && held == before {
                        let replay = window_peek(policy, window_replay(policy, &without, now), now);
                        dominated(&after, &replay, "after the refund")?;
                    }
                    // Later comparisons would need the replay to re-anchor the
                    // store's way: a refunded check's window is history.
                    history.remove(&(refunded.policy, refunded.subject));
                }
            }
        }
    }
}
