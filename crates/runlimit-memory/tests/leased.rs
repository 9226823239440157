//! Leases in front of a shared store: admitted from units the shared store
//! consumed first, never more than the limit, under-admitting by at most
//! what other replicas hold.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use proptest::prelude::*;
use runlimit_conformance::{Shared, leased_trace, leased_weighted_suite, run_leased_trace};
use runlimit_core::{
    Admission, BatchDecision, Check, Decision, FixedWindowPolicy, GcraPolicy, Grant, Granted,
    Lifecycle, Limiter, PolicyId, Receipt, Refunded, ScopeId, Settle, SlidingWindowPolicy,
    SubjectKey,
};
use runlimit_memory::{
    GcraStore, LeaseConfig, Leased, ManualClock, MemoryStore, MemoryStoreConfig, SlidingWindowStore,
};

fn key(n: u8) -> SubjectKey {
    SubjectKey::from_digest([n; 32])
}

fn fixed(limit: u64, window: Duration) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("leased").expect("valid"),
        ScopeId::new("tenant").expect("valid"),
        limit,
        window,
    )
    .expect("valid")
}

fn store_config() -> MemoryStoreConfig {
    MemoryStoreConfig::new(64).expect("valid")
}

fn lease_config(max_grant: u64) -> LeaseConfig {
    LeaseConfig::new(64)
        .and_then(|config| config.with_max_grant(max_grant))
        .expect("valid")
}

/// `replicas` leased limiters in front of one memory store, all on `clock`.
fn replicas(
    clock: &ManualClock,
    replicas: usize,
    config: LeaseConfig,
) -> (Arc<MemoryStore>, Vec<Leased<Shared<MemoryStore>>>) {
    let store = Arc::new(MemoryStore::new(store_config()).with_clock(clock.clone()));
    let leased = (0..replicas)
        .map(|_| Leased::new(Shared(Arc::clone(&store)), config).with_clock(clock.clone()))
        .collect();
    (store, leased)
}

fn used_at_shared(store: &MemoryStore, policy: &FixedWindowPolicy, n: u8) -> u64 {
    let remaining = store
        .peek(&Check::new(policy, key(n)))
        .expect("peek")
        .remaining()
        .unwrap_or(0);
    policy.limit() - remaining
}

#[tokio::test]
async fn a_hot_key_is_admitted_from_its_lease_and_flushed_back_exactly() {
    let clock = ManualClock::new();
    let (store, leased) = replicas(&clock, 1, lease_config(50));
    let replica = &leased[0];
    let policy = fixed(10_000, Duration::from_secs(60));
    let check = Check::new(&policy, key(1));
    for _ in 0..1_000 {
        assert!(replica.check(&check).await.expect("no error").is_allowed());
    }
    let stats = replica.stats();
    // Grants of 1, 2, 4, 8, 16, 32, then 50 at a time.
    assert!(stats.grants <= 25, "{stats:?}");
    assert_eq!(stats.local_hits + stats.grants, 1_000, "{stats:?}");
    assert!(stats.units_held <= 50, "{stats:?}");
    // Every unit admitted or held was consumed at the shared store first.
    assert_eq!(used_at_shared(&store, &policy, 1), 1_000 + stats.units_held);

    replica.flush().await.expect("flush");
    let after = replica.stats();
    assert_eq!(after.units_held, 0);
    assert_eq!(after.units_returned, stats.units_held);
    assert_eq!(used_at_shared(&store, &policy, 1), 1_000);
}

/// A GCRA grant's units stop being spendable one increment at a time, as
/// their increments begin: a unit admitted later than that would reach past
/// the burst once the shared store admits on top of it.
#[tokio::test]
async fn gcra_lease_units_expire_one_increment_at_a_time() {
    let clock = ManualClock::new();
    let store = Arc::new(GcraStore::new(store_config()).with_clock(clock.clone()));
    let config = lease_config(8).with_remaining_share(100).expect("valid");
    let replica = Leased::new(Shared(Arc::clone(&store)), config).with_clock(clock.clone());
    // One unit per 100 ms, a burst of 8.
    let policy = GcraPolicy::new(
        PolicyId::new("leased").expect("valid"),
        ScopeId::new("tenant").expect("valid"),
        1,
        Duration::from_millis(100),
        8,
    )
    .expect("valid");
    let check = Check::new(&policy, key(11));
    // Grants of 1 (the cold check), 2 and 4 at the same instant: the last
    // one leaves 3 units held, for the increments beginning at 400, 500 and
    // 600 ms (the arrival time is then 700 ms).
    for _ in 0..4 {
        assert!(replica.check(&check).await.expect("no error").is_allowed());
    }
    assert_eq!(replica.stats().grants, 3);
    assert_eq!(replica.stats().units_held, 3);
    clock.advance(Duration::from_millis(450));
    assert_eq!(replica.stats().units_held, 2);
    clock.advance(Duration::from_millis(200));
    assert_eq!(replica.stats().units_held, 0);
    // At 650 ms the arrival time is 700 ms: GCRA admits 7 more at once (to
    // 1 400 ms, 750 ms ahead, within the burst's 800 ms), and the lease adds
    // none of its own past their increments.
    let mut admitted = 0;
    while replica.check(&check).await.expect("no error").is_allowed() {
        admitted += 1;
    }
    assert_eq!(admitted, 7);
}

/// Dropped inside a Tokio runtime, a leased limiter gives what its leases
/// hold back on a task of that runtime.
#[tokio::test]
async fn dropping_a_leased_limiter_gives_its_unspent_units_back() {
    let clock = ManualClock::new();
    let (store, mut leased) = replicas(&clock, 1, lease_config(50));
    let replica = leased.pop().expect("one replica");
    let policy = fixed(10_000, Duration::from_secs(60));
    let check = Check::new(&policy, key(12));
    for _ in 0..100 {
        assert!(replica.check(&check).await.expect("no error").is_allowed());
    }
    let held = replica.stats().units_held;
    assert!(held > 0, "the lease holds units");
    assert_eq!(used_at_shared(&store, &policy, 12), 100 + held);
    drop(replica);
    for _ in 0..100 {
        if used_at_shared(&store, &policy, 12) == 100 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(used_at_shared(&store, &policy, 12), 100);
}

/// A shared store whose grants wait at a gate: a grant in flight, held
/// there while other checks run.
struct Gated {
    inner: Shared<MemoryStore>,
    waiting: Arc<AtomicBool>,
    open: Arc<AtomicBool>,
}

impl Limiter for Gated {
    type Policy = FixedWindowPolicy;
    type Error = runlimit_memory::MemoryStoreError;

    async fn check(&self, check: &Check<'_, Self::Policy>) -> Result<Decision, Self::Error> {
        self.inner.check(check).await
    }

    async fn check_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> Result<BatchDecision, Self::Error> {
        self.inner.check_all(checks).await
    }
}

impl Lifecycle for Gated {
    async fn admit(&self, check: &Check<'_, Self::Policy>) -> Result<Admission, Self::Error> {
        self.inner.admit(check).await
    }

    async fn admit_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> Result<Admission<BatchDecision>, Self::Error> {
        self.inner.admit_all(checks).await
    }

    async fn refund(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
    ) -> Result<Refunded, Self::Error> {
        self.inner.refund(checks, receipt).await
    }

    async fn peek(&self, check: &Check<'_, Self::Policy>) -> Result<Decision, Self::Error> {
        self.inner.peek(check).await
    }

    async fn reset(
        &self,
        policy: &Self::Policy,
        subject: &SubjectKey,
    ) -> Result<bool, Self::Error> {
        self.inner.reset(policy, subject).await
    }
}

impl Settle for Gated {
    async fn settle(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
        used: &[u64],
    ) -> Result<Refunded, Self::Error> {
        self.inner.settle(checks, receipt, used).await
    }
}

impl Grant for Gated {
    async fn grant(
        &self,
        check: &Check<'_, Self::Policy>,
        up_to: u64,
    ) -> Result<Granted, Self::Error> {
        self.waiting.store(true, Ordering::SeqCst);
        while !self.open.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        self.inner.grant(check, up_to).await
    }
}

/// A leased replica whose grants wait at a gate, open to begin with, on
/// one clock with its shared store.
struct Gate {
    store: Arc<MemoryStore>,
    waiting: Arc<AtomicBool>,
    open: Arc<AtomicBool>,
    replica: Arc<Leased<Gated>>,
    policy: Arc<FixedWindowPolicy>,
}

impl Gate {
    fn new(clock: &ManualClock) -> Self {
        let store = Arc::new(MemoryStore::new(store_config()).with_clock(clock.clone()));
        let (waiting, open) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(true)),
        );
        let gated = Gated {
            inner: Shared(Arc::clone(&store)),
            waiting: Arc::clone(&waiting),
            open: Arc::clone(&open),
        };
        let config = lease_config(8).with_remaining_share(100).expect("valid");
        Self {
            store,
            waiting,
            open,
            replica: Arc::new(Leased::new(gated, config).with_clock(clock.clone())),
            policy: Arc::new(fixed(100, Duration::from_secs(60))),
        }
    }
}

/// A check that costs more than its lease holds sets what the lease holds
/// aside toward its cost and takes a grant for the rest: while the grant is
/// in flight no other check spends those units (one waits for the grant
/// instead), and when it lands nothing of the old grant is left unspent, so
/// the shared store counts exactly what was admitted and what the lease
/// holds.
#[tokio::test]
async fn units_held_while_a_grant_is_in_flight_go_toward_its_check() {
    let Gate {
        store,
        waiting,
        open,
        replica,
        policy,
    } = Gate::new(&ManualClock::new());
    let one = Check::new(&*policy, key(13));
    // A cold check, then a grant of two: one unit held.
    for _ in 0..2 {
        assert!(replica.check(&one).await.expect("no error").is_allowed());
    }
    assert_eq!(replica.stats().units_held, 1);
    // A check of two sets the held unit aside and takes a grant (of one
    // to four units) for the rest, which waits at the gate...
    open.store(false, Ordering::SeqCst);
    waiting.store(false, Ordering::SeqCst);
    let spawn_check = |cost: u64| {
        let (replica, policy) = (Arc::clone(&replica), Arc::clone(&policy));
        tokio::spawn(async move {
            let check = Check::weighted(&*policy, key(13), cost).expect("valid");
            replica.check(&check).await.expect("no error").is_allowed()
        })
    };
    let two = spawn_check(2);
    while !waiting.load(Ordering::SeqCst) {
        tokio::task::yield_now().await;
    }
    assert_eq!(replica.stats().units_held, 0, "set aside");
    // ...while a check of one finds nothing to spend and waits for it.
    let another = spawn_check(1);
    while replica.stats().waits == 0 {
        tokio::task::yield_now().await;
    }
    open.store(true, Ordering::SeqCst);
    assert!(two.await.expect("task"));
    assert!(another.await.expect("task"));
    let admitted = 1 + 1 + 2 + 1;
    let stats = replica.stats();
    // The grant of four: one toward the check of two, one to the waiting
    // check, two held.
    assert_eq!((stats.grants, stats.units_held), (3, 2), "{stats:?}");
    assert_eq!(used_at_shared(&store, &policy, 13), admitted + 2);
}

/// Units set aside for a check can stop being spendable while its grant is
/// in flight (here the lease ends, a millisecond before its window): the
/// check then counts only on the grant, and when that is not enough the
/// lease keeps the grant and the check tries again, here denied as the
/// window's last units do not cover it.
#[tokio::test]
async fn a_check_whose_set_aside_units_expire_in_flight_tries_again() {
    let clock = ManualClock::new();
    let Gate {
        store,
        waiting,
        open,
        replica,
        policy,
    } = Gate::new(&clock);
    let one = Check::new(&*policy, key(17));
    // Grants of 1 (the cold check), 2 and 4: three units held.
    for _ in 0..4 {
        assert!(replica.check(&one).await.expect("no error").is_allowed());
    }
    assert_eq!(replica.stats().units_held, 3);
    // Others take all but three of the window's units.
    let others = Check::weighted(&*policy, key(17), 90).expect("valid");
    assert!(store.check(&others).expect("no error").is_allowed());
    open.store(false, Ordering::SeqCst);
    waiting.store(false, Ordering::SeqCst);
    let five = {
        let (replica, policy) = (Arc::clone(&replica), Arc::clone(&policy));
        tokio::spawn(async move {
            let five = Check::weighted(&*policy, key(17), 5).expect("valid");
            replica.check(&five).await.expect("no error").is_allowed()
        })
    };
    while !waiting.load(Ordering::SeqCst) {
        tokio::task::yield_now().await;
    }
    // The lease ends with the grant in flight; the window lasts half a
    // millisecond longer, and the grant takes its last three units.
    clock.advance(Duration::from_secs(60) - Duration::from_micros(500));
    open.store(true, Ordering::SeqCst);
    assert!(!five.await.expect("task"), "three units do not cover five");
    // The cold check, grants of 2, 4 and 3, and the try again.
    assert_eq!(replica.stats().grants, 5);
    // In the next window the replica admits and holds exactly what the
    // shared store counts.
    clock.advance(Duration::from_millis(1));
    let five = Check::weighted(&*policy, key(17), 5).expect("valid");
    assert!(replica.check(&five).await.expect("no error").is_allowed());
    assert_eq!(
        used_at_shared(&store, &policy, 17),
        5 + replica.stats().units_held
    );
}

/// A refund of a check that spent a lease's last units and the first of
/// the grant that replaced it gives back only its units from that grant:
/// the others went with the grant they came from.
#[tokio::test]
async fn a_refund_credits_a_lease_only_the_units_spent_from_it() {
    let clock = ManualClock::new();
    let config = lease_config(8).with_remaining_share(100).expect("valid");
    let (store, leased) = replicas(&clock, 1, config);
    let replica = &leased[0];
    let policy = fixed(100, Duration::from_secs(60));
    let one = Check::new(&policy, key(18));
    // Grants of 1 (the cold check), 2 and 4: three units held.
    for _ in 0..4 {
        assert!(replica.check(&one).await.expect("no error").is_allowed());
    }
    assert_eq!(replica.stats().units_held, 3);
    // Five: the three held and two of a grant of eight, six left.
    let five = Check::weighted(&policy, key(18), 5).expect("valid");
    let mut admission = replica.admit(&five).await.expect("no error");
    assert!(admission.decision().is_allowed());
    assert_eq!(replica.stats().units_held, 6);
    let four = Check::weighted(&policy, key(18), 4).expect("valid");
    assert!(replica.check(&four).await.expect("no error").is_allowed());
    assert_eq!(replica.stats().units_held, 2);
    let receipt = admission.take_receipt().expect("allowed");
    let refunded = replica.refund(&[five], receipt).await.expect("refund");
    assert_eq!(refunded.credited(), 1);
    // Two back, not five: the grant of eight has four admitted from it.
    assert_eq!(replica.stats().units_held, 4);
    // Grants of 1, 2, 4 and 8 (15 units): 8 admitted, 4 held, and the
    // three units of the grant of four that went toward the refunded check
    // stay consumed until the window ends.
    assert_eq!(used_at_shared(&store, &policy, 18), 8 + 4 + 3);
}

/// Checks key `n` once (cold: the shared store's own check, not a grant),
/// closes the gate, and spawns two more checks: the first takes a grant of
/// two, held at the gate; the second waits for it. Returns both, the gate
/// still closed.
async fn gate_and_wait(
    replica: &Arc<Leased<Gated>>,
    policy: &Arc<FixedWindowPolicy>,
    waiting: &AtomicBool,
    open: &AtomicBool,
    n: u8,
) -> (tokio::task::JoinHandle<bool>, tokio::task::JoinHandle<bool>) {
    assert!(
        replica
            .check(&Check::new(&**policy, key(n)))
            .await
            .expect("no error")
            .is_allowed()
    );
    open.store(false, Ordering::SeqCst);
    let spawn_check = || {
        let (replica, policy) = (Arc::clone(replica), Arc::clone(policy));
        tokio::spawn(async move {
            replica
                .check(&Check::new(&*policy, key(n)))
                .await
                .expect("no error")
                .is_allowed()
        })
    };
    let granting = spawn_check();
    while !waiting.load(Ordering::SeqCst) {
        tokio::task::yield_now().await;
    }
    let waiting_check = spawn_check();
    while replica.stats().waits == 0 {
        tokio::task::yield_now().await;
    }
    (granting, waiting_check)
}

/// A check that finds its key's grant in flight waits for it and is
/// admitted from what it brings, instead of a round trip of its own.
#[tokio::test]
async fn a_check_waits_for_the_grant_in_flight_for_its_key() {
    let Gate {
        store,
        waiting,
        open,
        replica,
        policy,
    } = Gate::new(&ManualClock::new());
    let (granting, waiting_check) = gate_and_wait(&replica, &policy, &waiting, &open, 14).await;
    open.store(true, Ordering::SeqCst);
    assert!(granting.await.expect("task"));
    assert!(waiting_check.await.expect("task"));
    let stats = replica.stats();
    assert_eq!((stats.waits, stats.shared_checks), (1, 0), "{stats:?}");
    assert_eq!(stats.local_hits, 1, "{stats:?}");
    assert_eq!(used_at_shared(&store, &policy, 14), 3 + stats.units_held);
}

/// A reset while a check waits for the grant in flight wakes it: the
/// check takes its own way rather than waiting for a lease that is gone.
#[tokio::test]
async fn a_reset_wakes_the_checks_waiting_for_a_grant() {
    let Gate {
        store: _,
        waiting,
        open,
        replica,
        policy,
    } = Gate::new(&ManualClock::new());
    let (granting, waiting_check) = gate_and_wait(&replica, &policy, &waiting, &open, 15).await;
    replica.reset(&policy, &key(15)).await.expect("reset");
    // The woken check's own grant waits at the gate like the first.
    open.store(true, Ordering::SeqCst);
    // A guard against a hang, not a timing assertion.
    let both = tokio::time::timeout(Duration::from_secs(30), async {
        (
            granting.await.expect("task"),
            waiting_check.await.expect("task"),
        )
    })
    .await
    .expect("the waiting check was woken");
    assert_eq!(both, (true, true));
}

#[tokio::test]
async fn a_cold_key_takes_exactly_its_cost_and_holds_nothing() {
    let clock = ManualClock::new();
    let (store, leased) = replicas(&clock, 1, lease_config(50));
    let replica = &leased[0];
    let policy = fixed(100, Duration::from_secs(3_600));
    let check = Check::new(&policy, key(2));
    for checked in 1..=20 {
        clock.advance(Duration::from_millis(250));
        assert!(replica.check(&check).await.expect("no error").is_allowed());
        assert_eq!(replica.stats().units_held, 0);
        assert_eq!(used_at_shared(&store, &policy, 2), checked);
    }
    assert_eq!(replica.stats().grants, 20);
}

#[tokio::test]
async fn the_last_units_of_a_window_are_admitted_exactly() {
    let clock = ManualClock::new();
    let (_, leased) = replicas(&clock, 1, lease_config(50));
    let replica = &leased[0];
    let policy = fixed(100, Duration::from_secs(60));
    let check = Check::new(&policy, key(3));
    let mut admitted = 0;
    while replica.check(&check).await.expect("no error").is_allowed() {
        admitted += 1;
    }
    assert_eq!(admitted, 100);
    assert_eq!(replica.stats().units_held, 0);
}

#[tokio::test]
async fn under_admission_is_bounded_by_what_other_replicas_hold() {
    let clock = ManualClock::new();
    let max_grant = 16;
    let (_, leased) = replicas(&clock, 3, lease_config(max_grant));
    let policy = fixed(1_000, Duration::from_secs(60));
    let check = Check::new(&policy, key(4));
    let mut admitted = 0u64;
    for replica in &leased[1..] {
        for _ in 0..40 {
            assert!(replica.check(&check).await.expect("no error").is_allowed());
            admitted += 1;
        }
    }
    while leased[0]
        .check(&check)
        .await
        .expect("no error")
        .is_allowed()
    {
        admitted += 1;
    }
    let held: Vec<u64> = leased[1..].iter().map(|r| r.stats().units_held).collect();
    for &units in &held {
        assert!(units <= max_grant, "{held:?}");
    }
    // Denied while exactly the others' leases are unspent.
    assert_eq!(admitted, 1_000 - held.iter().sum::<u64>());
    for replica in &leased[1..] {
        replica.flush().await.expect("flush");
    }
    while leased[0]
        .check(&check)
        .await
        .expect("no error")
        .is_allowed()
    {
        admitted += 1;
    }
    assert_eq!(admitted, 1_000);
}

#[tokio::test]
async fn a_fixed_window_lease_ends_with_its_window() {
    let clock = ManualClock::new();
    let (store, leased) = replicas(&clock, 1, lease_config(8));
    let replica = &leased[0];
    let window = Duration::from_secs(10);
    let policy = fixed(100, window);
    let check = Check::new(&policy, key(5));
    for _ in 0..10 {
        replica.check(&check).await.expect("no error");
    }
    assert!(replica.stats().units_held > 0);
    clock.advance(window);
    assert_eq!(replica.stats().units_held, 0, "expired with the window");
    let grants = replica.stats().grants;
    assert!(replica.check(&check).await.expect("no error").is_allowed());
    assert_eq!(
        replica.stats().grants,
        grants + 1,
        "a new window needs a grant"
    );
    // The new window counts what its own grant took, nothing of the old one.
    assert!(used_at_shared(&store, &policy, 5) <= 8);
}

#[tokio::test]
async fn refunds_go_back_to_the_lease_and_resets_drop_it() {
    let clock = ManualClock::new();
    let (store, leased) = replicas(&clock, 1, lease_config(8));
    let replica = &leased[0];
    let policy = fixed(100, Duration::from_secs(60));
    let check = Check::new(&policy, key(6));
    for _ in 0..10 {
        replica.check(&check).await.expect("no error");
    }
    let shared_before = used_at_shared(&store, &policy, 6);
    let held = replica.stats().units_held;
    assert!(held > 0);
    let mut admission = replica.admit(&check).await.expect("admit");
    assert_eq!(
        replica.stats().units_held,
        held - 1,
        "admitted from the lease"
    );
    let receipt: Receipt = admission.take_receipt().expect("allowed");
    let refunded = replica.refund(&[check], receipt).await.expect("refund");
    assert_eq!(refunded.credited(), 1);
    assert_eq!(replica.stats().units_held, held, "back in the lease");
    assert_eq!(
        used_at_shared(&store, &policy, 6),
        shared_before,
        "not sent"
    );

    assert!(replica.reset(&policy, &key(6)).await.expect("reset"));
    assert_eq!(replica.stats().units_held, 0);
    assert_eq!(replica.stats().leases, 0);
    assert_eq!(used_at_shared(&store, &policy, 6), 0);
}

#[tokio::test]
async fn a_batch_is_admitted_from_leases_only_when_every_check_fits() {
    let clock = ManualClock::new();
    let (store, leased) = replicas(&clock, 1, lease_config(8));
    let replica = &leased[0];
    let (a, b) = (fixed(100, Duration::from_secs(60)), {
        FixedWindowPolicy::new(
            PolicyId::new("leased.other").expect("valid"),
            ScopeId::new("tenant").expect("valid"),
            100,
            Duration::from_secs(60),
        )
        .expect("valid")
    });
    let batch = [Check::new(&a, key(7)), Check::new(&b, key(7))];
    for check in &batch {
        for _ in 0..6 {
            replica.check(check).await.expect("no error");
        }
    }
    let hits = replica.stats().local_hits;
    let shared_a = used_at_shared(&store, &a, 7);
    assert!(
        replica
            .check_all(&batch)
            .await
            .expect("no error")
            .is_allowed()
    );
    assert_eq!(replica.stats().local_hits, hits + 1, "from both leases");
    assert_eq!(used_at_shared(&store, &a, 7), shared_a);
}

/// Admissions the replicas made, for the reference models: when (ns), what
/// cost, and which window of the shared store counted them (an id, or 0).
struct Log {
    admissions: Vec<(u64, u64, usize, u64)>,
}

#[derive(Debug, Clone)]
enum Op {
    /// A check of this cost on this replica.
    Check(usize, u64),
    /// An admission kept for a refund.
    Admit(usize, u64),
    /// Refund the outstanding receipt at this position.
    Refund(usize),
    /// Let this many milliseconds pass.
    Advance(u64),
    /// A replica gives its unspent units back.
    Flush(usize),
    /// A replica gives back the units of leases idle for its idle time.
    FlushIdle(usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            6 => (0usize..3, 1u64..3).prop_map(|(r, c)| Op::Check(r, c)),
            2 => (0usize..3, 1u64..3).prop_map(|(r, c)| Op::Admit(r, c)),
            2 => any::<usize>().prop_map(Op::Refund),
            3 => (0u64..300).prop_map(Op::Advance),
            1 => (0usize..3).prop_map(Op::Flush),
            1 => (0usize..3).prop_map(Op::FlushIdle),
        ],
        1..200,
    )
}

/// Runs `ops` on three leased replicas of one shared store and returns
/// every admission that was not refunded, each with the window `window_of`
/// names for it just after it was admitted.
async fn run<S>(
    clock: &ManualClock,
    replicas: &[Leased<S>],
    policy: &S::Policy,
    ops: &[Op],
    window_of: impl Fn() -> u64,
) -> Log
where
    S: runlimit_core::Grant,
    S::Policy: runlimit_memory::Leasable,
{
    let mut log = Log {
        admissions: Vec::new(),
    };
    let mut outstanding: Vec<(usize, u64, usize, Receipt)> = Vec::new();
    let now = || u64::try_from(runlimit_memory::Clock::now(clock).as_nanos()).expect("fits");
    for (id, op) in ops.iter().enumerate() {
        match *op {
            Op::Advance(millis) => clock.advance(Duration::from_millis(millis)),
            Op::Check(r, cost) | Op::Admit(r, cost) => {
                let cost = cost.min(runlimit_core::Policy::capacity(policy));
                let check = Check::weighted(policy, key(9), cost).expect("valid");
                let mut admission = replicas[r].admit(&check).await.expect("no error");
                if admission.decision().is_allowed() {
                    log.admissions.push((now(), cost, id, window_of()));
                    let receipt = admission.take_receipt().expect("a receipt");
                    if matches!(op, Op::Admit(..)) {
                        outstanding.push((r, cost, id, receipt));
                    }
                }
            }
            Op::Refund(index) => {
                if outstanding.is_empty() {
                    continue;
                }
                let (r, cost, admitted, receipt) =
                    outstanding.swap_remove(index % outstanding.len());
                let check = Check::weighted(policy, key(9), cost).expect("valid");
                let refunded = replicas[r].refund(&[check], receipt).await.expect("refund");
                if refunded.credited() > 0 {
                    log.admissions.retain(|&(_, _, id, _)| id != admitted);
                }
            }
            Op::Flush(r) => replicas[r].flush().await.expect("flush"),
            Op::FlushIdle(r) => replicas[r].flush_idle().await.expect("flush"),
        }
    }
    log
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

/// Grants may take everything the shared store reports remaining, so that
/// even the small limits the properties use are held in leases.
fn config_for(max_grant: u64) -> LeaseConfig {
    lease_config(max_grant)
        .with_remaining_share(100)
        .expect("valid")
        .with_idle_after(Duration::from_millis(200))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Sliding windows: the admissions of all replicas together never exceed
    /// the limit in any interval of the window's length (an exact log).
    #[test]
    fn leased_sliding_windows_never_exceed_the_limit(
        limit in 1u64..12,
        window_ms in 80u64..2_000,
        max_grant in 1u64..8,
        ops in ops(),
    ) {
        let clock = ManualClock::new();
        let store = Arc::new(SlidingWindowStore::new(store_config()).with_clock(clock.clone()));
        let replicas: Vec<_> = (0..3)
            .map(|_| Leased::new(Shared(Arc::clone(&store)), config_for(max_grant)).with_clock(clock.clone()))
            .collect();
        let policy = SlidingWindowPolicy::new(
            PolicyId::new("leased").expect("valid"),
            ScopeId::new("s").expect("valid"),
            limit,
            Duration::from_millis(window_ms),
        ).expect("valid");
        let log = runtime().block_on(run(&clock, &replicas, &policy, &ops, || 0));
        let window = u64::try_from(policy.window().as_nanos()).expect("fits");
        for &(at, _, _, _) in &log.admissions {
            let within: u64 = log
                .admissions
                .iter()
                .filter(|&&(other, _, _, _)| other <= at && other + window > at)
                .map(|&(_, cost, _, _)| cost)
                .sum();
            prop_assert!(within <= limit, "{within} units within a window ending at {at}");
        }
    }

    /// Fixed windows: the admissions counted in each of the shared store's
    /// windows never exceed the limit, whichever replica made them.
    #[test]
    fn leased_fixed_windows_never_exceed_the_limit(
        limit in 1u64..12,
        window_ms in 50u64..2_000,
        max_grant in 1u64..8,
        ops in ops(),
    ) {
        let clock = ManualClock::new();
        let store = Arc::new(MemoryStore::new(store_config()).with_clock(clock.clone()));
        let replicas: Vec<_> = (0..3)
            .map(|_| Leased::new(Shared(Arc::clone(&store)), config_for(max_grant)).with_clock(clock.clone()))
            .collect();
        let policy = fixed(limit, Duration::from_millis(window_ms));
        // The shared store's live window just after an admission: the one
        // the admission's units were consumed in, named by when it ends.
        let window_of = || {
            let now = runlimit_memory::Clock::now(&clock);
            let peeked = store.peek(&Check::new(&policy, key(9))).expect("peek");
            u64::try_from(
                (now + peeked.reset_after().or(peeked.retry_after()).unwrap_or_default()).as_nanos(),
            )
                .expect("fits")
        };
        let log = runtime().block_on(run(&clock, &replicas, &policy, &ops, window_of));
        let mut per_window: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
        for &(at, cost, _, ends) in &log.admissions {
            prop_assert!(at < ends, "admitted at {at} outside its window ending at {ends}");
            let within = per_window.entry(ends).or_default();
            *within += cost;
            prop_assert!(*within <= limit, "{within} units in the window ending at {ends}");
        }
    }

}

proptest! {
    // A unit held past its increment shows only when the shared store then
    // admits up to the burst: rarer among random operations, so more cases.
    #![proptest_config(ProptestConfig::with_cases(1_024))]

    /// GCRA: the admissions of all replicas together conform to the rate and
    /// burst (an exact virtual-scheduling replay).
    #[test]
    fn leased_gcra_keeps_the_rate(
        quota in 1u64..5,
        period_ms in 20u64..1_000,
        burst in 1u64..10,
        max_grant in 1u64..8,
        ops in ops(),
    ) {
        let clock = ManualClock::new();
        let store = Arc::new(GcraStore::new(store_config()).with_clock(clock.clone()));
        let replicas: Vec<_> = (0..3)
            .map(|_| Leased::new(Shared(Arc::clone(&store)), config_for(max_grant)).with_clock(clock.clone()))
            .collect();
        let policy = GcraPolicy::new(
            PolicyId::new("leased").expect("valid"),
            ScopeId::new("s").expect("valid"),
            quota,
            Duration::from_millis(period_ms),
            burst,
        ).expect("valid");
        let log = runtime().block_on(run(&clock, &replicas, &policy, &ops, || 0));
        // Times scaled by the quota, so an increment is a whole period.
        let period = u128::from(period_ms) * 1_000_000;
        let (quota, tolerance) = (u128::from(quota), u128::from(burst) * period);
        let mut tat: u128 = 0;
        for &(at, cost, _, _) in &log.admissions {
            let now = u128::from(at) * quota;
            tat = tat.max(now) + u128::from(cost) * period;
            prop_assert!(tat - now <= tolerance, "an admission at {at} beyond the burst");
        }
    }
}

/// The weighted lease case every backend runs, on each memory store.
#[tokio::test]
async fn weighted_leases_admit_the_whole_limit_on_every_memory_store() {
    leased_weighted_suite(&Shared(Arc::new(MemoryStore::new(store_config())))).await;
    leased_weighted_suite(&Shared(Arc::new(SlidingWindowStore::new(store_config())))).await;
    leased_weighted_suite(&Shared(Arc::new(GcraStore::new(store_config())))).await;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Weighted checks on leased replicas of each memory store, held to the
    /// ledger every backend is ([`runlimit_conformance::leased`]): the shared
    /// store counts exactly what was admitted and what the leases hold,
    /// never more than the limit is admitted, and a replica denies only what
    /// its lease and the shared store together cannot cover.
    #[test]
    fn weighted_leased_traces_strand_no_units(trace in leased_trace()) {
        runtime()
            .block_on(async {
                let fixed = Shared(Arc::new(MemoryStore::new(store_config())));
                run_leased_trace(&fixed, &trace).await?;
                let sliding = Shared(Arc::new(SlidingWindowStore::new(store_config())));
                run_leased_trace(&sliding, &trace).await?;
                let gcra = Shared(Arc::new(GcraStore::new(store_config())));
                run_leased_trace(&gcra, &trace).await
            })
            .map_err(TestCaseError::fail)?;
    }
}

/// Records whether each admission an observer sees came from a lease.
#[derive(Debug, Clone, Default)]
struct SeenLeased(Arc<std::sync::Mutex<Vec<bool>>>);

impl runlimit_core::Observer for SeenLeased {
    fn on_admission(&self, observation: &runlimit_core::AdmissionObservation<'_>) {
        self.0.lock().expect("lock").push(observation.leased());
    }
}

/// The replica's observer sees its local admissions, marked leased; the
/// shared store's observer sees the grants, not marked.
#[tokio::test]
async fn observers_see_local_admissions_apart_from_shared_ones() {
    let clock = ManualClock::new();
    let (shared_seen, local_seen) = (SeenLeased::default(), SeenLeased::default());
    let store = Arc::new(
        MemoryStore::new(store_config())
            .with_clock(clock.clone())
            .with_observer(shared_seen.clone()),
    );
    let replica = Leased::new(Shared(Arc::clone(&store)), lease_config(50))
        .with_clock(clock.clone())
        .with_observer(local_seen.clone());
    let policy = fixed(1_000, Duration::from_secs(60));
    for _ in 0..20 {
        assert!(
            replica
                .check(&Check::new(&policy, key(16)))
                .await
                .expect("no error")
                .is_allowed()
        );
    }
    let stats = replica.stats();
    let local = local_seen.0.lock().expect("lock").clone();
    let shared = shared_seen.0.lock().expect("lock").clone();
    assert!(stats.local_hits > 0, "{stats:?}");
    assert_eq!(
        local,
        vec![true; usize::try_from(stats.local_hits).expect("small")]
    );
    assert_eq!(
        shared,
        vec![false; usize::try_from(stats.grants).expect("small")]
    );
}

/// `max_keys` bounds the leases of the whole limiter, wherever its keys
/// fall; a key that finds no room is decided by the shared store, one check
/// at a time, as exactly as a leased one; a flush makes room again.
#[tokio::test]
async fn max_keys_bounds_the_leases_of_the_whole_limiter() {
    for max_keys in [1_u8, 4] {
        let clock = ManualClock::new();
        let config = LeaseConfig::new(usize::from(max_keys))
            .and_then(|config| config.with_max_grant(8))
            .expect("valid");
        let (store, leased) = replicas(&clock, 1, config);
        let replica = &leased[0];
        let policy = fixed(10, Duration::from_secs(60));
        // 32 keys, spread over every lease shard, each checked until denied.
        let keys = 100..132_u8;
        for n in keys.clone() {
            let check = Check::new(&policy, key(n));
            let mut admitted = 0;
            while replica.check(&check).await.expect("no error").is_allowed() {
                admitted += 1;
            }
            assert_eq!(admitted, 10, "key {n}");
            assert_eq!(used_at_shared(&store, &policy, n), 10, "key {n}");
        }
        let stats = replica.stats();
        assert_eq!(stats.leases, u64::from(max_keys), "{stats:?}");
        // Every check of a key without a lease, the denied one included.
        let unleased = keys.len() as u64 - u64::from(max_keys);
        assert_eq!(stats.shared_checks, unleased * 11, "{stats:?}");

        replica.flush().await.expect("flush");
        assert_eq!(replica.stats().leases, 0);
        let fresh = Check::new(&policy, key(200));
        for _ in 0..2 {
            assert!(replica.check(&fresh).await.expect("no error").is_allowed());
        }
        let stats = replica.stats();
        assert_eq!(stats.leases, 1, "{stats:?}");
        assert_eq!(stats.shared_checks, unleased * 11, "{stats:?}");
    }
}
