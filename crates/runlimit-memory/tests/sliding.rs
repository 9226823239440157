//! Sliding windows against an exact sliding log.
//!
//! The reference keeps every admitted unit with its time. On random traces of
//! checks, batches, admissions, refunds, resets and clock steps (with an
//! injected clock), the store must:
//!
//! * never admit more than the limit in any interval `(t - window, t]` of
//!   the log without the refunded checks (the guarantee);
//! * deny only when the log holds more than `limit - cost` units in
//!   `(t - window - window / 8, t]`: a unit counts at most an eighth of a
//!   window longer than the exact log would count it (the bound);
//! * treat duplicate keys and mixed quota modes in a batch as caller errors
//!   that change nothing.

use std::{collections::HashMap, time::Duration};

use proptest::prelude::*;
use runlimit_core::{
    BatchDecision, Check, Decision, PolicyId, QuotaMode, Receipt, ScopeId, SlidingWindowPolicy,
    SubjectKey,
};
use runlimit_memory::{ManualClock, MemoryStoreConfig, SlidingWindowStore};

const NANOS_PER_MILLI: u128 = 1_000_000;

#[derive(Debug, Clone)]
enum Op {
    /// (policy, subject, cost) checked alone.
    Check(usize, u8, u64),
    /// Admitted alone, keeping the receipt.
    Admit(usize, u8, u64),
    /// Checked as one atomic batch, keeping the receipt.
    Batch(Vec<Item>),
    /// Refund the outstanding receipt at this position (modulo their number).
    Refund(usize),
    /// Reset one subject's counter of one policy.
    Reset(usize, u8),
    /// Advance the clock by this many microseconds.
    Advance(u64),
}

fn ops(policies: usize) -> impl Strategy<Value = Vec<Op>> {
    let item = (0..policies, 0u8..3, 1u64..4);
    prop::collection::vec(
        prop_oneof![
            4 => item.clone().prop_map(|(p, s, c)| Op::Check(p, s, c)),
            3 => item.clone().prop_map(|(p, s, c)| Op::Admit(p, s, c)),
            2 => prop::collection::vec(item, 1..4).prop_map(Op::Batch),
            2 => any::<usize>().prop_map(Op::Refund),
            1 => (0..policies, 0u8..3).prop_map(|(p, s)| Op::Reset(p, s)),
            4 => (0u64..12_000).prop_map(Op::Advance),
        ],
        1..150,
    )
}

fn policies() -> impl Strategy<Value = Vec<SlidingWindowPolicy>> {
    prop::collection::vec((1u64..7, 1u64..60, any::<bool>()), 1..3).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (limit, window_ms, shadow))| {
                let mode = if shadow {
                    QuotaMode::Shadow
                } else {
                    QuotaMode::Enforce
                };
                SlidingWindowPolicy::new(
                    PolicyId::new("sliding").expect("valid"),
                    ScopeId::new(format!("s{index}")).expect("valid"),
                    limit,
                    Duration::from_millis(window_ms),
                )
                .expect("valid")
                .with_quota_mode(mode)
            })
            .collect()
    })
}

fn key(subject: u8) -> SubjectKey {
    let mut digest = [subject.wrapping_add(0x71); 32];
    digest[9] = 0x0D;
    SubjectKey::from_digest(digest)
}

/// (policy, subject, cost): one check of a trace.
type Item = (usize, u8, u64);

/// An admission on record: (admission id, time ns, cost).
type Unit = (usize, u128, u64);

/// Every admitted unit still on record, by (policy, subject).
#[derive(Debug, Default)]
struct Log {
    units: HashMap<(usize, u8), Vec<Unit>>,
}

impl Log {
    /// Units on record for `counter` in `(from, to]`.
    fn within(&self, counter: (usize, u8), from: u128, to: u128) -> u64 {
        self.units.get(&counter).map_or(0, |units| {
            units
                .iter()
                .filter(|(_, at, _)| *at > from && *at <= to)
                .map(|(_, _, cost)| cost)
                .sum()
        })
    }

    /// The guarantee: no interval of length `window` on record holds more
    /// than the limit. Maximal intervals end at an admission.
    fn assert_never_over(&self, policies: &[SlidingWindowPolicy]) -> Result<(), TestCaseError> {
        for (&(p, s), units) in &self.units {
            let window = u128::from(policies[p].window_millis()) * NANOS_PER_MILLI;
            for &(_, at, _) in units {
                let held = self.within((p, s), at - window, at);
                prop_assert!(
                    held <= policies[p].limit(),
                    "policy {p}, subject {s}: {held} units in the window ending at {at} ns, limit {}",
                    policies[p].limit()
                );
            }
        }
        Ok(())
    }

    /// The bound: a denial of `cost` at `now` needs more than `limit - cost`
    /// units on record in the window and one eighth before it.
    fn assert_denial_justified(
        &self,
        policies: &[SlidingWindowPolicy],
        (p, s, cost): Item,
        now: u128,
    ) -> Result<(), TestCaseError> {
        let policy = &policies[p];
        let window = u128::from(policy.window_millis()) * NANOS_PER_MILLI;
        let reach = window + window / 8;
        let held = self.within((p, s), now - reach, now);
        prop_assert!(
            held + cost > policy.limit(),
            "policy {p}, subject {s}: denied {cost} at {now} ns with only {held} units within \
             a window and an eighth, limit {}",
            policy.limit()
        );
        Ok(())
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn sliding_windows_never_exceed_the_limit_and_deny_at_most_an_eighth_early(
        policies in policies(),
        ops in ops(2),
    ) {
        let clock = ManualClock::new();
        let config = MemoryStoreConfig::new(64)
            .and_then(|config| config.with_shard_count(2))
            .expect("valid");
        let store = SlidingWindowStore::new(config).with_clock(clock.clone());
        // Far from the origin, so every window before now lies after it.
        let mut now: u128 = 1_000 * 1_000 * NANOS_PER_MILLI;
        clock.set(Duration::from_nanos(u64::try_from(now).expect("fits")));
        let mut log = Log::default();
        let mut outstanding: Vec<(Vec<Item>, usize, Receipt)> = Vec::new();
        for (id, op) in ops.into_iter().enumerate() {
            match op {
                Op::Advance(micros) => {
                    now += u128::from(micros) * 1_000;
                    clock.set(Duration::from_nanos(u64::try_from(now).expect("fits")));
                }
                Op::Check(p, s, cost) | Op::Admit(p, s, cost) => {
                    let p = p % policies.len();
                    let cost = cost.min(policies[p].limit());
                    let check = Check::weighted(&policies[p], key(s), cost).expect("valid");
                    let decision: Decision = if matches!(op, Op::Admit(..)) {
                        let (decision, receipt) = store.admit(&check).expect("no error").into_parts();
                        if let Some(receipt) = receipt {
                            outstanding.push((vec![(p, s, cost)], id, receipt));
                        }
                        decision
                    } else {
                        store.check(&check).expect("no error")
                    };
                    if decision.is_allowed() {
                        log.units.entry((p, s)).or_default().push((id, now, cost));
                    } else {
                        log.assert_denial_justified(&policies, (p, s, cost), now)?;
                    }
                }
                Op::Batch(items) => {
                    let items: Vec<Item> = items
                        .into_iter()
                        .map(|(p, s, cost)| {
                            let p = p % policies.len();
                            (p, s, cost.min(policies[p].limit()))
                        })
                        .collect();
                    let checks: Vec<Check<'_, SlidingWindowPolicy>> = items
                        .iter()
                        .map(|&(p, s, cost)| Check::weighted(&policies[p], key(s), cost).expect("valid"))
                        .collect();
                    match store.admit_all(&checks) {
                        Err(error) => prop_assert!(
                            batch_is_caller_error(&policies, &items),
                            "a valid batch failed: {error}"
                        ),
                        Ok(admission) => {
                            prop_assert!(!batch_is_caller_error(&policies, &items), "an invalid batch ran");
                            let (batch, receipt) = admission.into_parts();
                            match batch {
                                BatchDecision::Allowed(_) => {
                                    for &(p, s, cost) in &items {
                                        log.units.entry((p, s)).or_default().push((id, now, cost));
                                    }
                                    outstanding.push((items, id, receipt.expect("allowed")));
                                }
                                BatchDecision::Denied { index, .. }
                                | BatchDecision::ShadowDenied { index, .. } => {
                                    log.assert_denial_justified(&policies, items[index], now)?;
                                }
                                other => prop_assert!(false, "unexpected batch outcome {other:?}"),
                            }
                        }
                    }
                }
                Op::Refund(index) => {
                    if outstanding.is_empty() {
                        continue;
                    }
                    let (items, admission, receipt) = outstanding.swap_remove(index % outstanding.len());
                    let checks: Vec<Check<'_, SlidingWindowPolicy>> = items
                        .iter()
                        .map(|&(p, s, cost)| Check::weighted(&policies[p], key(s), cost).expect("valid"))
                        .collect();
                    store.refund(&checks, receipt).expect("a matching refund");
                    // The refunded admission leaves the record: the guarantee
                    // must hold without it.
                    for &(p, s, _) in &items {
                        if let Some(units) = log.units.get_mut(&(p, s)) {
                            units.retain(|(admitted, _, _)| *admitted != admission);
                        }
                    }
                }
                Op::Reset(p, s) => {
                    let p = p % policies.len();
                    store.reset(&policies[p], &key(s)).expect("no error");
                    // Support forgave the subject: the record starts afresh.
                    // Its receipts stay outstanding: refunding them later
                    // must credit nothing, or the record would be exceeded.
                    log.units.remove(&(p, s));
                }
            }
            log.assert_never_over(&policies)?;
        }
    }
}

/// The boundary burst a fixed window allows: a whole quota just before its
/// window ends and another just after. A sliding window refuses the second
/// until the first has aged out.
#[test]
fn the_fixed_window_boundary_burst_is_refused() {
    let clock = ManualClock::new();
    let store = SlidingWindowStore::new(MemoryStoreConfig::new(16).expect("valid"))
        .with_clock(clock.clone());
    let policy = SlidingWindowPolicy::new(
        PolicyId::new("burst").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        Duration::from_secs(60),
    )
    .expect("valid");
    let check = Check::weighted(&policy, key(1), 10).expect("valid");
    clock.set(Duration::from_millis(59_999));
    assert!(store.check(&check).expect("ok").is_allowed());
    clock.set(Duration::from_millis(60_001));
    let denied = store.check(&check).expect("ok");
    assert!(denied.is_denied(), "a second quota across the boundary");
    // Admitted in the eighth 52.5..60 s, the units stop counting when the
    // ninth eighth after it begins, at 120 s: 7.5 s after 59.999 s + 60 s at
    // most.
    assert_eq!(
        denied.retry_after(),
        Some(Duration::from_millis(120_000 - 60_001))
    );
    clock.set(Duration::from_millis(119_999));
    assert!(store.check(&check).expect("ok").is_denied());
    clock.set(Duration::from_millis(120_000));
    assert!(store.check(&check).expect("ok").is_allowed());
}

/// `MAX_LIMIT` units over `MAX_WINDOW`: exact at the extremes.
#[test]
fn the_largest_policy_is_exact() {
    use runlimit_core::{MAX_LIMIT, MAX_WINDOW};
    let clock = ManualClock::new();
    let store = SlidingWindowStore::new(MemoryStoreConfig::new(16).expect("valid"))
        .with_clock(clock.clone());
    let policy = SlidingWindowPolicy::new(
        PolicyId::new("extreme").expect("valid"),
        ScopeId::new("client").expect("valid"),
        MAX_LIMIT,
        MAX_WINDOW,
    )
    .expect("valid");
    clock.set(Duration::from_secs(1_800_000_000));
    let all = Check::weighted(&policy, key(2), MAX_LIMIT).expect("valid");
    let admitted = store.check(&all).expect("ok");
    assert_eq!(admitted.remaining(), Some(0));
    let one = Check::new(&policy, key(2));
    let denied = store.check(&one).expect("ok");
    // 1.8e9 s is a whole number of eighths of MAX_WINDOW only by chance; the
    // unit counted in the current eighth stops counting nine eighths after
    // that eighth began.
    let eighth = MAX_WINDOW / 8;
    let into = Duration::from_nanos(
        u64::try_from(Duration::from_secs(1_800_000_000).as_nanos() % eighth.as_nanos())
            .expect("fits"),
    );
    assert_eq!(denied.retry_after(), Some(eighth * 9 - into));
    assert_eq!(admitted.reset_after(), Some(eighth * 9 - into));
    clock.advance(eighth * 9 - into);
    assert_eq!(store.check(&all).expect("ok").remaining(), Some(0));
}
