//! Continuity across a change of policy or secret, in memory: the bound a
//! change keeps, proven for every pair of algorithms against an exact record
//! of admissions, and the behaviours a user relies on.

use std::time::Duration;

use proptest::prelude::*;
use runlimit_core::{
    AnyPolicy, BatchDecision, CarriedFrom, CarryObservation, Check, FixedWindowPolicy, GcraPolicy,
    KeyHasher, Lifecycle, Observer, Policy, PolicyId, Receipt, ScopeId, SlidingWindowPolicy,
    SubjectKey,
};
use runlimit_memory::{AnyStore, GcraStore, ManualClock, MemoryStore, MemoryStoreConfig};

fn id() -> PolicyId {
    PolicyId::new("auth.reset").expect("valid")
}

fn scope() -> ScopeId {
    ScopeId::new("recipient").expect("valid")
}

fn fixed(limit: u64, window_ms: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(id(), scope(), limit, Duration::from_millis(window_ms)).expect("valid")
}

fn sliding(limit: u64, window_ms: u64) -> SlidingWindowPolicy {
    SlidingWindowPolicy::new(id(), scope(), limit, Duration::from_millis(window_ms)).expect("valid")
}

fn gcra(quota: u64, period_ms: u64, burst: u64) -> GcraPolicy {
    GcraPolicy::new(
        id(),
        scope(),
        quota,
        Duration::from_millis(period_ms),
        burst,
    )
    .expect("valid")
}

fn subject(n: u8) -> SubjectKey {
    SubjectKey::from_digest([n; 32])
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn store(clock: &ManualClock) -> AnyStore {
    AnyStore::new(MemoryStoreConfig::new(1_000).expect("valid")).with_clock(clock.clone())
}

// ---------------------------------------------------------------------------
// The bound, against an exact record.

/// The length of a policy's window, in milliseconds (GCRA: its full
/// replenishment).
fn window_of(policy: &AnyPolicy) -> u64 {
    let window = match policy {
        AnyPolicy::FixedWindow(policy) => policy.window(),
        AnyPolicy::SlidingWindow(policy) => policy.window(),
        AnyPolicy::Gcra(policy) => policy.full_replenishment(),
    };
    u64::try_from(window.as_millis()).expect("small")
}

/// The most `policy` admits in any interval of `d` milliseconds from a
/// fresh start.
fn cap(policy: &AnyPolicy, d: u64) -> u64 {
    match policy {
        AnyPolicy::FixedWindow(policy) => policy.limit() * (d.div_ceil(policy.window_millis()) + 1),
        AnyPolicy::SlidingWindow(policy) => policy.limit() * d.div_ceil(policy.window_millis()),
        AnyPolicy::Gcra(policy) => {
            policy.burst_capacity() + (d * policy.quota()).div_ceil(policy.period_millis()) - 1
        }
    }
}

fn any_policy() -> impl Strategy<Value = AnyPolicy> {
    // Windows of whole eighths of a millisecond's multiples, so every
    // boundary falls on the manual clock's millisecond steps.
    let window = prop::sample::select(vec![8_u64, 16, 24, 40, 64]);
    prop_oneof![
        (1_u64..=6, window.clone()).prop_map(|(limit, w)| AnyPolicy::from(fixed(limit, w))),
        (1_u64..=6, window.clone()).prop_map(|(limit, w)| AnyPolicy::from(sliding(limit, w))),
        (1_u64..=4, window, 1_u64..=6)
            .prop_map(|(quota, period, burst)| AnyPolicy::from(gcra(quota, period, burst))),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Check {
        subject: u8,
        cost: u64,
    },
    /// Both subjects, all-or-nothing.
    Batch {
        costs: [u64; 2],
    },
    /// Refund the latest single check's receipt.
    RefundLatest,
    /// Peek, then check the same cost at the same moment: they agree.
    PeekThenCheck {
        subject: u8,
        cost: u64,
    },
    Reset {
        subject: u8,
    },
    Advance(u64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (0_u8..2, 1_u64..=3).prop_map(|(subject, cost)| Op::Check { subject, cost }),
        2 => (1_u64..=3, 1_u64..=3).prop_map(|(a, b)| Op::Batch { costs: [a, b] }),
        1 => Just(Op::RefundLatest),
        2 => (0_u8..2, 1_u64..=3).prop_map(|(subject, cost)| Op::PeekThenCheck { subject, cost }),
        1 => (0_u8..2).prop_map(|subject| Op::Reset { subject }),
        6 => (0_u64..=30).prop_map(Op::Advance),
    ];
    prop::collection::vec(op, 0..40)
}

/// One admission: when (ms), whose, how many units, under which policy.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    at: u64,
    subject: u8,
    units: u64,
    new: bool,
}

struct Run<'a> {
    store: AnyStore,
    clock: ManualClock,
    now: u64,
    policy: &'a AnyPolicy,
    new: bool,
    record: Vec<Admitted>,
    latest: Option<(u8, u64, Receipt, usize)>,
}

impl Run<'_> {
    fn cost(&self, cost: u64) -> u64 {
        cost.min(self.policy.capacity())
    }

    fn check(&mut self, subject_n: u8, cost: u64) -> bool {
        let check =
            Check::weighted(self.policy, subject(subject_n), self.cost(cost)).expect("fits");
        let (decision, receipt) = self.store.admit(&check).expect("stored").into_parts();
        if decision.permits_request() {
            self.record.push(Admitted {
                at: self.now,
                subject: subject_n,
                units: check.cost(),
                new: self.new,
            });
            self.latest =
                receipt.map(|receipt| (subject_n, check.cost(), receipt, self.record.len() - 1));
        }
        decision.permits_request()
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Check { subject, cost } => {
                self.check(subject, cost);
            }
            Op::Batch { costs } => {
                let checks = [
                    Check::weighted(self.policy, subject(0), self.cost(costs[0])).expect("fits"),
                    Check::weighted(self.policy, subject(1), self.cost(costs[1])).expect("fits"),
                ];
                if let BatchDecision::Allowed(_) = self.store.check_all(&checks).expect("valid") {
                    for (n, check) in checks.iter().enumerate() {
                        self.record.push(Admitted {
                            at: self.now,
                            subject: u8::try_from(n).expect("two"),
                            units: check.cost(),
                            new: self.new,
                        });
                    }
                }
            }
            Op::RefundLatest => {
                if let Some((subject_n, cost, receipt, index)) = self.latest.take() {
                    let check =
                        Check::weighted(self.policy, subject(subject_n), cost).expect("fits");
                    let refunded = self.store.refund(&[check], receipt).expect("stored");
                    if refunded.credited() == 1 {
                        // Never better off than had the check not happened:
                        // the record forgets it.
                        self.record[index].units = 0;
                    }
                }
            }
            Op::PeekThenCheck {
                subject: subject_n,
                cost,
            } => {
                let check = Check::weighted(self.policy, subject(subject_n), self.cost(cost))
                    .expect("fits");
                let peeked = self.store.peek(&check).expect("stored").permits_request();
                assert_eq!(
                    peeked,
                    self.check(subject_n, cost),
                    "a peek predicts the check"
                );
            }
            Op::Reset { subject } => {
                Lifecycle::reset(&self.store, self.policy, &self::subject(subject))
                    .now_or_never()
                    .expect("memory answers at once")
                    .expect("stored");
                // A reset forgives: the record forgets the subject's past.
                for admitted in &mut self.record {
                    if admitted.subject == subject {
                        admitted.units = 0;
                    }
                }
                self.latest = None;
            }
            Op::Advance(by) => {
                self.now += by;
                self.clock.advance(ms(by));
            }
        }
    }
}

trait NowOrNever: std::future::Future + Sized {
    fn now_or_never(self) -> Option<Self::Output> {
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        let mut future = std::pin::pin!(self);
        match future.as_mut().poll(&mut context) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        }
    }
}

impl<F: std::future::Future> NowOrNever for F {}

/// The units the old policy's state holds against `subject` now: what it
/// remembers of the subject's past.
fn held(store: &AnyStore, old: &AnyPolicy, subject_n: u8) -> u64 {
    let peeked = store
        .peek(&Check::new(old, subject(subject_n)))
        .expect("stored");
    old.capacity() - peeked.remaining().unwrap_or(0)
}

fn units(record: &[Admitted], subject: u8, from: u64, until: u64, new: Option<bool>) -> u64 {
    record
        .iter()
        .filter(|a| a.subject == subject && a.at >= from && a.at < until)
        .filter(|a| new.is_none_or(|new| a.new == new))
        .map(|a| a.units)
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Across a change, in every interval of either policy's window length
    /// that contains the carry, a subject is admitted at most the larger of
    /// what either policy admits in such an interval, plus what the old
    /// policy admitted there beyond the units its state still held at the
    /// carry; after the carry, at most what the new policy admits.
    #[test]
    fn a_change_admits_no_more_than_the_larger_policy(
        old in any_policy(),
        new in any_policy(),
        before in ops(),
        gap in 0_u64..=40,
        after in ops(),
    ) {
        let new = new.continuing(&old).expect("same id and scope");
        let clock = ManualClock::new();
        let mut run = Run {
            store: store(&clock),
            clock,
            now: 0,
            policy: &old,
            new: false,
            record: Vec::new(),
            latest: None,
        };
        for op in &before {
            run.apply(op);
        }
        run.apply(&Op::Advance(gap));
        run.policy = &new;
        run.new = true;
        run.latest = None;
        // The carry happens at each subject's first admission under the new
        // policy; the old state's horizon is read just before each op.
        let mut carried: [Option<(u64, u64)>; 2] = [None, None];
        for op in &after {
            let held = [0_u8, 1].map(|s| held(&run.store, &old, s));
            let admitted_before = run.record.len();
            run.apply(op);
            for admitted in &run.record[admitted_before..] {
                let s = usize::from(admitted.subject);
                if carried[s].is_none() {
                    carried[s] = Some((admitted.at, held[s]));
                }
            }
            if let Op::Reset { subject } = op {
                // Forgiven: a later admission starts afresh.
                carried[usize::from(*subject)] = None;
            }
        }

        for subject_n in [0_u8, 1] {
            let Some((carry_at, held)) = carried[usize::from(subject_n)] else {
                continue;
            };
            for d in [window_of(&old), window_of(&new)] {
                let larger = cap(&old, d).max(cap(&new, d));
                let starts = run
                    .record
                    .iter()
                    .map(|a| a.at)
                    .chain([carry_at.saturating_sub(d - 1), carry_at]);
                for a in starts {
                    let admitted = units(&run.record, subject_n, a, a + d, None);
                    if a <= carry_at && carry_at < a + d {
                        let forgotten = units(&run.record, subject_n, a, a + d, Some(false))
                            .saturating_sub(held);
                        prop_assert!(
                            admitted <= larger + forgotten,
                            "[{a}, {}) holds {admitted} > {larger} + {forgotten} forgotten \
                             (carry at {carry_at}, {held} held)",
                            a + d
                        );
                    } else if a >= carry_at {
                        prop_assert!(
                            admitted <= cap(&new, d),
                            "[{a}, {}) after the carry holds {admitted} > {}",
                            a + d,
                            cap(&new, d)
                        );
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// What a user relies on.

const OLD_SECRET: &[u8] = b"the secret in use until the rotation, 32+ bytes";
const NEW_SECRET: &[u8] = b"the secret in use from the rotation on, 32+ bytes";

#[test]
fn a_rotation_keeps_an_attacker_at_the_limit_denied() {
    let clock = ManualClock::new();
    let limiter =
        MemoryStore::new(MemoryStoreConfig::new(100).expect("valid")).with_clock(clock.clone());
    let policy = fixed(5, 900_000);
    let before = KeyHasher::new(OLD_SECRET).expect("valid");
    for _ in 0..5 {
        let key = before.hash_for(&policy, b"victim@example.test");
        assert!(
            limiter
                .check(&Check::new(&policy, key))
                .expect("stored")
                .is_allowed()
        );
    }
    let after = KeyHasher::new(NEW_SECRET)
        .expect("valid")
        .with_previous_secret(OLD_SECRET)
        .expect("distinct");
    let key = after.hash_for(&policy, b"victim@example.test");
    assert!(
        limiter
            .check(&Check::new(&policy, key))
            .expect("stored")
            .is_denied()
    );
    // Without the previous secret the rotation would have been a fresh quota.
    let plain = KeyHasher::new(NEW_SECRET).expect("valid");
    let fresh = plain.hash_for(&policy, b"other@example.test");
    assert_eq!(
        limiter
            .check(&Check::new(&policy, fresh))
            .expect("stored")
            .remaining(),
        Some(4)
    );
    // Once the window has passed, the subject is admitted again.
    clock.advance(ms(900_000));
    assert!(
        limiter
            .check(&Check::new(&policy, key))
            .expect("stored")
            .is_allowed()
    );
}

#[test]
fn a_gcra_store_carries_a_changed_rate() {
    let limiter =
        GcraStore::new(MemoryStoreConfig::new(100).expect("valid")).with_clock(ManualClock::new());
    let old = gcra(10, 1_000, 10);
    for _ in 0..10 {
        assert!(
            limiter
                .check(&Check::new(&old, subject(1)))
                .expect("stored")
                .is_allowed()
        );
    }
    // Lowered to 1 a second: ten units in flight take ten seconds now.
    let new = gcra(1, 1_000, 10).continuing(&old).expect("valid");
    let denied = limiter
        .check(&Check::new(&new, subject(1)))
        .expect("stored");
    assert_eq!(denied.retry_after(), Some(ms(1_000)));
}

/// Carry observations, as an observer hears them.
#[derive(Debug, Default)]
struct Carries(std::sync::Mutex<Vec<(String, CarriedFrom)>>);

impl Observer for Carries {
    fn on_carry(&self, observation: &CarryObservation<'_>) {
        let label = observation.policy();
        self.0.lock().expect("unpoisoned").push((
            format!("{}/{} {observation:?}", label.policy, label.scope),
            observation.from(),
        ));
    }
}

#[test]
fn observers_hear_of_each_carry_once_and_never_of_the_subject() {
    let carries = std::sync::Arc::new(Carries::default());
    let limiter = MemoryStore::new(MemoryStoreConfig::new(100).expect("valid"))
        .with_clock(ManualClock::new())
        .with_observer(std::sync::Arc::clone(&carries));
    let old = fixed(2, 60_000);
    let key = subject(0xAB);
    for _ in 0..2 {
        limiter.check(&Check::new(&old, key)).expect("stored");
    }
    let lowered = fixed(1, 60_000).continuing(&old).expect("valid");
    let raised = fixed(4, 60_000).continuing(&old).expect("valid");
    // A denied check carries too (carrying is not consuming), once.
    for _ in 0..2 {
        assert!(
            limiter
                .check(&Check::new(&lowered, key))
                .expect("stored")
                .is_denied()
        );
    }
    assert_eq!(carries.0.lock().expect("unpoisoned").len(), 1);
    for _ in 0..2 {
        assert!(
            limiter
                .check(&Check::new(&raised, key))
                .expect("stored")
                .is_allowed()
        );
    }
    let heard = carries.0.lock().expect("unpoisoned").clone();
    assert_eq!(heard.len(), 2, "{heard:?}");
    assert!(
        heard
            .iter()
            .all(|(_, from)| *from == CarriedFrom::Predecessor)
    );
    assert!(heard[0].0.starts_with("auth.reset/recipient"));
    assert!(
        !heard
            .iter()
            .any(|(text, _)| text.to_lowercase().contains("abab")),
        "no subject bytes"
    );
}

#[test]
fn a_carried_state_drains_from_the_first_check_even_when_it_is_denied() {
    let clock = ManualClock::new();
    let limiter = store(&clock);
    let old = AnyPolicy::from(fixed(4, 3_600_000));
    for _ in 0..4 {
        limiter
            .check(&Check::new(&old, subject(1)))
            .expect("stored");
    }
    // Four units at one a minute, with a burst of two: denied for two minutes.
    let new = AnyPolicy::from(gcra(1, 60_000, 2))
        .continuing(&old)
        .expect("valid");
    let first = limiter
        .check(&Check::new(&new, subject(1)))
        .expect("stored");
    assert_eq!(first.retry_after(), Some(ms(180_000)));
    clock.advance(ms(30_000));
    let later = limiter
        .check(&Check::new(&new, subject(1)))
        .expect("stored");
    assert_eq!(
        later.retry_after(),
        Some(ms(150_000)),
        "the carried units drain"
    );
    clock.advance(ms(150_000));
    assert!(
        limiter
            .check(&Check::new(&new, subject(1)))
            .expect("stored")
            .is_allowed()
    );
}

#[test]
fn a_typed_store_reads_only_its_own_algorithm() {
    // A change of algorithm in process needs a store that holds both; a
    // single-algorithm store has no state of another algorithm to read.
    let clock = ManualClock::new();
    let windows =
        MemoryStore::new(MemoryStoreConfig::new(100).expect("valid")).with_clock(clock.clone());
    let rates = GcraStore::new(MemoryStoreConfig::new(100).expect("valid")).with_clock(clock);
    let old = fixed(4, 60_000);
    for _ in 0..4 {
        windows
            .check(&Check::new(&old, subject(1)))
            .expect("stored");
    }
    let new = gcra(1, 60_000, 4).continuing(&old).expect("valid");
    assert_eq!(
        rates
            .check(&Check::new(&new, subject(1)))
            .expect("stored")
            .remaining(),
        Some(3)
    );
    // The store of both carries it.
    let clock = ManualClock::new();
    let both = store(&clock);
    let old = AnyPolicy::from(old);
    let new = AnyPolicy::from(new);
    for _ in 0..4 {
        both.check(&Check::new(&old, subject(1))).expect("stored");
    }
    assert!(
        both.check(&Check::new(&new, subject(1)))
            .expect("stored")
            .is_denied()
    );
}
