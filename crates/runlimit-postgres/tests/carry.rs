//! Carries on PostgreSQL: a rotated secret, concurrent first checks, grants
//! and peeks of carried state, resets of every source, receipts and cleanup
//! of limiters of every algorithm, and the SQL translation held to the
//! core's.

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use proptest::prelude::*;
use runlimit_core::{
    AnyPolicy, CarryObservation, Check, FixedWindowPolicy, GcraPolicy, Grant, KeyHasher, Lifecycle,
    Limiter, MAX_LIMIT, MAX_WINDOW, Observer, Policy, PolicyId, ScopeId, Settle,
    SlidingWindowPolicy, SubjectKey,
    carry::{CounterState, StateMicros, carry},
    gcra::Exact,
    sliding::{Buckets, SlidingMicros},
};
use runlimit_postgres::{CheckError, PgPolicy, PostgresConfig, PostgresLimiter};

const HOUR: Duration = Duration::from_secs(3_600);

fn id(name: &str) -> PolicyId {
    PolicyId::new(name).expect("valid")
}

fn scope() -> ScopeId {
    ScopeId::new("client").expect("valid")
}

fn fixed(name: &str, limit: u64, window: Duration) -> FixedWindowPolicy {
    FixedWindowPolicy::new(id(name), scope(), limit, window).expect("valid")
}

fn sliding(name: &str, limit: u64, window: Duration) -> SlidingWindowPolicy {
    SlidingWindowPolicy::new(id(name), scope(), limit, window).expect("valid")
}

fn gcra(name: &str, quota: u64, period: Duration, burst: u64) -> GcraPolicy {
    GcraPolicy::new(id(name), scope(), quota, period, burst).expect("valid")
}

fn config() -> PostgresConfig {
    PostgresConfig::default()
        .with_operation_timeout(Duration::from_secs(10))
        .and_then(|config| config.with_pool_acquire_timeout(Duration::from_secs(10)))
        .expect("valid")
}

/// Checks `policy` for `subject` until denied; how many were admitted.
async fn spend<L: Limiter>(limiter: &L, policy: &L::Policy, subject: SubjectKey) -> u64 {
    let mut admitted = 0;
    while limiter
        .check(&Check::new(policy, subject))
        .await
        .expect("no error")
        .is_allowed()
    {
        admitted += 1;
    }
    admitted
}

const BEFORE: &[u8] = b"the secret in use until the rotation, 32+ bytes";
const AFTER: &[u8] = b"the secret in use from the rotation on, 32+ bytes";

#[tokio::test]
async fn a_rotated_secret_keeps_an_attacker_at_the_limit_denied() {
    let Some(schema) = common::schema("carry_rotation").await else {
        return;
    };
    let windows =
        PostgresLimiter::<FixedWindowPolicy>::new(schema.migrated_pool(2).await, config());
    let before = KeyHasher::new(BEFORE).expect("valid");
    let after = KeyHasher::new(AFTER)
        .expect("valid")
        .with_previous_secret(BEFORE)
        .expect("valid");
    rotation(&windows, &fixed("reset.fixed", 5, HOUR), &before, &after).await;
    rotation(
        &windows.for_policy(),
        &sliding("reset.sliding", 5, HOUR),
        &before,
        &after,
    )
    .await;
    rotation(
        &windows.for_policy(),
        &gcra("reset.gcra", 5, HOUR, 5),
        &before,
        &after,
    )
    .await;
}

/// An attacker spends `policy` under the secret `before`; under `after`,
/// which keeps `before` as its previous secret, the attacker's checks,
/// batches and peeks are still denied, while a subject never seen keeps its
/// whole quota.
async fn rotation<P>(
    limiter: &PostgresLimiter<P>,
    policy: &P,
    before: &KeyHasher,
    after: &KeyHasher,
) where
    P: PgPolicy,
    PostgresLimiter<P>: Lifecycle<Policy = P, Error = CheckError>,
{
    let attacker = b"attacker@example.test";
    let spent = spend(limiter, policy, before.hash_for(policy, attacker)).await;
    assert_eq!(spent, policy.capacity());
    let rotated = after.hash_for(policy, attacker);
    let check = Check::new(policy, rotated);
    assert!(limiter.peek(&check).await.expect("peek").is_denied());
    assert!(limiter.check(&check).await.expect("check").is_denied());
    let batch = [
        check,
        Check::new(policy, after.hash_for(policy, b"another subject")),
    ];
    assert!(!limiter.check_all(&batch).await.expect("batch").is_allowed());
    let user = Check::new(policy, after.hash_for(policy, b"user@example.test"));
    let decision = limiter.check(&user).await.expect("check");
    assert_eq!(decision.remaining(), Some(policy.capacity() - 1));
}

#[tokio::test]
async fn an_expired_counter_carries_again_while_its_source_holds_state() {
    let Some(schema) = common::schema("carry_again").await else {
        return;
    };
    let windows =
        PostgresLimiter::<FixedWindowPolicy>::new(schema.migrated_pool(2).await, config());
    let time = common::ShiftTime { schema: &schema };
    // Four units spent of an old policy of two hours; the new one holds six
    // per hour, so its carried window ends an hour before the old one's.
    let old = fixed("again.fixed", 4, 2 * HOUR);
    let new = fixed("again.fixed", 6, HOUR)
        .continuing(&old)
        .expect("lineage");
    again(
        &windows,
        &time,
        &old,
        &new,
        HOUR + Duration::from_secs(60),
        [1, 1, 5],
    )
    .await;
    // Sliding windows, shifted by whole eighths of both windows.
    let old = sliding("again.sliding", 4, 2 * HOUR);
    let new = sliding("again.sliding", 6, HOUR)
        .continuing(&old)
        .expect("lineage");
    let sliding_limiter: PostgresLimiter<SlidingWindowPolicy> = windows.for_policy();
    again(
        &sliding_limiter,
        &time,
        &old,
        &new,
        Duration::from_secs(75 * 60),
        [1, 1, 5],
    )
    .await;
    // GCRA: four periods of two hours in flight, carried as four of one;
    // after five hours the old arrival time is still three hours ahead, two
    // old periods rounded up.
    let old = gcra("again.gcra", 1, 2 * HOUR, 4);
    let new = gcra("again.gcra", 1, HOUR, 6)
        .continuing(&old)
        .expect("lineage");
    let gcra_limiter: PostgresLimiter<GcraPolicy> = windows.for_policy();
    again(
        &gcra_limiter,
        &time,
        &old,
        &new,
        5 * HOUR + Duration::from_secs(60),
        [1, 3, 5],
    )
    .await;
}

/// Spends `old`, checks `new` (carrying), lets `shift` pass (the new
/// counter's state ends, the old one's does not) and checks `new` again,
/// which carries again; then, once both have ended, starts fresh. The
/// units `remaining` after each of the three checks.
async fn again<P>(
    limiter: &PostgresLimiter<P>,
    time: &common::ShiftTime<'_>,
    old: &P,
    new: &P,
    shift: Duration,
    remaining: [u64; 3],
) where
    P: PgPolicy,
    PostgresLimiter<P>: Limiter<Policy = P, Error = CheckError>,
{
    let subject = common::key(9, 9);
    assert_eq!(spend(limiter, old, subject).await, 4);
    let check = Check::new(new, subject);
    let first = limiter.check(&check).await.expect("check");
    assert_eq!(first.remaining(), Some(remaining[0]), "{new:?}: carried");
    time.advance_now(shift).await;
    let again = limiter.check(&check).await.expect("check");
    assert_eq!(
        again.remaining(),
        Some(remaining[1]),
        "{new:?}: carried again"
    );
    time.advance_now(4 * HOUR).await;
    let fresh = limiter.check(&check).await.expect("check");
    assert_eq!(fresh.remaining(), Some(remaining[2]), "{new:?}: fresh");
}

/// Counts carry observations.
#[derive(Debug, Default)]
struct Carries(AtomicUsize);

impl Observer for Carries {
    fn on_carry(&self, _: &CarryObservation<'_>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_checks_carry_once_and_admit_exactly_the_rest() {
    let Some(schema) = common::schema("carry_race").await else {
        return;
    };
    schema.migrated_pool(1).await;
    // Ten spent of the old policy; the new one holds thirty, so twenty
    // remain for every task of every pool together.
    let old = fixed("race.fixed", 10, HOUR);
    let new = fixed("race.fixed", 30, HOUR)
        .continuing(&old)
        .expect("lineage");
    race(&schema, old, new).await;
    let old = sliding("race.sliding", 10, HOUR);
    let new = sliding("race.sliding", 30, HOUR)
        .continuing(&old)
        .expect("lineage");
    race(&schema, old, new).await;
    let old = gcra("race.gcra", 1, HOUR, 10);
    let new = gcra("race.gcra", 1, HOUR, 30)
        .continuing(&old)
        .expect("lineage");
    race(&schema, old, new).await;
}

async fn race<P>(schema: &common::TestSchema, old: P, new: P)
where
    P: PgPolicy + Send + Sync,
    PostgresLimiter<P>: Limiter<Policy = P, Error = CheckError>,
{
    let subject = common::key(7, 7);
    let carries = Arc::new(Carries::default());
    let admitted = Arc::new(AtomicUsize::new(0));
    let new = Arc::new(new);
    let mut tasks = Vec::new();
    for pool in 0..4 {
        let limiter = Arc::new(
            PostgresLimiter::<P>::new(schema.pool(4).await, config())
                .with_observer(Arc::clone(&carries)),
        );
        if pool == 0 {
            assert_eq!(spend(&*limiter, &old, subject).await, 10);
        }
        for _ in 0..8 {
            let (limiter, new, admitted) = (
                Arc::clone(&limiter),
                Arc::clone(&new),
                Arc::clone(&admitted),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..4 {
                    let decision = limiter
                        .check(&Check::new(&*new, subject))
                        .await
                        .expect("no error");
                    if decision.is_allowed() {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 20);
    assert_eq!(carries.0.load(Ordering::SeqCst), 1, "carried once");
}

#[tokio::test]
async fn grants_and_peeks_read_the_carried_state() {
    let Some(schema) = common::schema("carry_grant").await else {
        return;
    };
    let limiter = PostgresLimiter::<AnyPolicy>::new(schema.migrated_pool(2).await, config());
    let olds: [AnyPolicy; 3] = [
        fixed("grant.fixed", 4, HOUR).into(),
        sliding("grant.sliding", 4, HOUR).into(),
        gcra("grant.gcra", 1, HOUR, 4).into(),
    ];
    for (n, old) in (0u8..).zip(&olds) {
        // Into each algorithm: a capacity of six, three of them carried.
        let news: [AnyPolicy; 3] = [
            fixed(old.id().as_str(), 6, 2 * HOUR).into(),
            sliding(old.id().as_str(), 6, 2 * HOUR).into(),
            gcra(old.id().as_str(), 2, HOUR, 6).into(),
        ];
        for (m, new) in (0u8..).zip(news) {
            let new = new.continuing(old).expect("lineage");
            let subject = common::key(n, m);
            for _ in 0..3 {
                assert!(
                    limiter
                        .check(&Check::new(old, subject))
                        .await
                        .expect("spend")
                        .is_allowed()
                );
            }
            let case = format!("{:?} into {:?}", old.kind(), new.kind());
            // A peek reads the carried state and stores nothing: forgetting
            // the old counter afterwards leaves the new one fresh.
            let peeked = limiter
                .peek(&Check::new(&new, subject))
                .await
                .expect("peek");
            assert_eq!(peeked.remaining(), Some(3), "{case}");
            assert!(limiter.reset(old, &subject).await.expect("reset"), "{case}");
            let fresh = limiter
                .check(&Check::new(&new, subject))
                .await
                .expect("check");
            assert_eq!(fresh.remaining(), Some(5), "{case}: a fresh quota");
            // Carried, a grant gets what the carried state leaves.
            let subject = common::key(n, m + 10);
            for _ in 0..3 {
                assert!(
                    limiter
                        .check(&Check::new(old, subject))
                        .await
                        .expect("spend")
                        .is_allowed()
                );
            }
            let granted = limiter
                .grant(&Check::new(&new, subject), 6)
                .await
                .expect("grant");
            assert_eq!(granted.units(), 3, "{case}: the carried state's room");
            let denied = limiter
                .grant(&Check::new(&new, subject), 6)
                .await
                .expect("grant");
            assert_eq!(denied.units(), 0, "{case}: nothing left");
            assert!(denied.decision().is_denied(), "{case}");
        }
    }
}

#[tokio::test]
async fn a_reset_forgets_every_source_in_every_table() {
    let Some(schema) = common::schema("carry_reset").await else {
        return;
    };
    let limiter = PostgresLimiter::<AnyPolicy>::new(schema.migrated_pool(2).await, config());
    let before = KeyHasher::new(BEFORE).expect("valid");
    let after = KeyHasher::new(AFTER)
        .expect("valid")
        .with_previous_secret(BEFORE)
        .expect("valid");
    let old: AnyPolicy = gcra("sources", 1, HOUR, 4).into();
    let new = AnyPolicy::from(fixed("sources", 6, HOUR))
        .continuing(&old)
        .expect("lineage");
    let subject = b"user@example.test";
    let rotated = after.hash_for(&new, subject);
    // State in every source: the new policy under the previous secret, the
    // old policy under both.
    let sources = [
        (&new, before.hash_for(&new, subject)),
        (&old, after.hash_for(&old, subject)),
        (&old, before.hash_for(&old, subject)),
    ];
    for (policy, key) in &sources {
        assert!(
            limiter
                .check(&Check::new(*policy, *key))
                .await
                .expect("check")
                .is_allowed()
        );
    }
    assert!(
        limiter.reset(&new, &rotated).await.expect("reset"),
        "the sources were live"
    );
    for (policy, key) in &sources {
        let peeked = limiter
            .peek(&Check::new(*policy, *key))
            .await
            .expect("peek");
        assert_eq!(peeked.remaining(), Some(policy.capacity()), "forgotten");
    }
    let decision = limiter
        .check(&Check::new(&new, rotated))
        .await
        .expect("check");
    assert_eq!(
        decision.remaining(),
        Some(5),
        "nothing carried after a reset"
    );
    let never = after.hash_for(&new, b"never@example.test");
    assert!(!limiter.reset(&new, &never).await.expect("reset"));
}

#[tokio::test]
async fn mixed_receipts_refund_and_settle_every_algorithm_at_once() {
    let Some(schema) = common::schema("carry_mixed_refund").await else {
        return;
    };
    let limiter = PostgresLimiter::<AnyPolicy>::new(schema.migrated_pool(2).await, config());
    let policies: [AnyPolicy; 3] = [
        fixed("mixed.fixed", 4, HOUR).into(),
        sliding("mixed.sliding", 4, HOUR).into(),
        gcra("mixed.gcra", 1, HOUR, 4).into(),
    ];
    let subject = common::key(3, 3);
    let checks: Vec<_> = policies
        .iter()
        .map(|policy| Check::weighted(policy, subject, 2).expect("valid"))
        .collect();
    let remaining = async |expected: u64| {
        for check in &checks {
            let peeked = limiter
                .peek(&Check::new(check.policy(), subject))
                .await
                .expect("peek");
            assert_eq!(
                peeked.remaining(),
                Some(expected),
                "{:?}",
                check.policy().kind()
            );
        }
    };
    let receipt = limiter
        .admit_all(&checks)
        .await
        .expect("admit")
        .into_parts()
        .1;
    remaining(2).await;
    let refunded = limiter
        .refund(&checks, receipt.expect("allowed"))
        .await
        .expect("refund");
    assert_eq!(refunded.credited(), 3);
    remaining(4).await;
    // Settled: the sliding window keeps both units, the others give one back.
    let receipt = limiter
        .admit_all(&checks)
        .await
        .expect("admit")
        .into_parts()
        .1;
    let settled = limiter
        .settle(&checks, receipt.expect("allowed"), &[1, 2, 1])
        .await
        .expect("settle");
    assert_eq!(settled.credited(), 2);
    for (check, left) in checks.iter().zip([3, 2, 3]) {
        let peeked = limiter
            .peek(&Check::new(check.policy(), subject))
            .await
            .expect("peek");
        assert_eq!(
            peeked.remaining(),
            Some(left),
            "{:?}",
            check.policy().kind()
        );
    }
}

#[tokio::test]
async fn any_policy_cleanup_shares_its_bound_among_the_tables() {
    let Some(schema) = common::schema("carry_cleanup").await else {
        return;
    };
    let limiter = PostgresLimiter::<AnyPolicy>::new(schema.migrated_pool(2).await, config());
    let policies: [AnyPolicy; 3] = [
        fixed("clean.fixed", 4, Duration::from_secs(1)).into(),
        sliding("clean.sliding", 4, Duration::from_secs(1)).into(),
        gcra("clean.gcra", 1, Duration::from_secs(1), 4).into(),
    ];
    for n in 0..2 {
        let checks: Vec<_> = policies
            .iter()
            .map(|policy| Check::new(policy, common::key(n, n)))
            .collect();
        assert!(
            limiter
                .check_all(&checks)
                .await
                .expect("batch")
                .is_allowed()
        );
    }
    common::ShiftTime { schema: &schema }
        .advance_now(Duration::from_secs(60))
        .await;
    assert_eq!(limiter.cleanup_expired(4).await.expect("cleanup"), 4);
    assert_eq!(limiter.cleanup_expired(10).await.expect("cleanup"), 2);
    let rows: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM runlimit_fixed_windows) \
         + (SELECT count(*) FROM runlimit_sliding_windows) + (SELECT count(*) FROM runlimit_gcra)",
    )
    .fetch_one(limiter.pool())
    .await
    .expect("count");
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn batches_of_carried_counters_stay_all_or_nothing() {
    let Some(schema) = common::schema("carry_batches").await else {
        return;
    };
    let limiter =
        PostgresLimiter::<FixedWindowPolicy>::new(schema.migrated_pool(2).await, config());
    let subject = common::key(5, 5);
    let [roomy, tight] = [("batch.roomy", 10), ("batch.tight", 3)].map(|(name, limit)| {
        let old = fixed(name, 2, HOUR);
        (
            old.clone(),
            fixed(name, limit, HOUR).continuing(&old).expect("lineage"),
        )
    });
    for (old, _) in [&roomy, &tight] {
        assert_eq!(spend(&limiter, old, subject).await, 2);
    }
    let batch = [Check::new(&roomy.1, subject), Check::new(&tight.1, subject)];
    // Carried (two and two), then decided in place: the tight one has room
    // for one more.
    assert!(limiter.check_all(&batch).await.expect("batch").is_allowed());
    for round in 0..2 {
        // Denied by the tight counter, with nothing consumed of the other;
        // the second time the limiter remembers the full counter.
        match limiter.check_all(&batch).await.expect("batch") {
            runlimit_core::BatchDecision::Denied { index, .. } => assert_eq!(index, 1, "{round}"),
            other => panic!("expected the tight counter to deny, got {other:?}"),
        }
        let peeked = limiter.peek(&batch[0]).await.expect("peek");
        assert_eq!(peeked.remaining(), Some(7), "round {round}");
    }
}

#[tokio::test]
async fn carried_states_obey_the_capacity_of_their_table() {
    let Some(schema) = common::schema("carry_capacity").await else {
        return;
    };
    let limiter = PostgresLimiter::<AnyPolicy>::new(
        schema.migrated_pool(2).await,
        config().with_max_rows_per_shard(2).expect("valid"),
    );
    let old: AnyPolicy = fixed("capped", 4, HOUR).into();
    let carried = common::key(40, 1);
    // Shard 40 of the fixed-window table is full with the old policy's rows.
    for subject in [carried, common::key(40, 2)] {
        assert!(
            limiter
                .check(&Check::new(&old, subject))
                .await
                .expect("check")
                .is_allowed()
        );
    }
    let raised = AnyPolicy::from(fixed("capped", 6, HOUR))
        .continuing(&old)
        .expect("lineage");
    let refused = limiter
        .check(&Check::new(&raised, carried))
        .await
        .expect("check");
    assert_eq!(
        refused.denial(),
        Some(&runlimit_core::Denial::StorageCapacity { retry_after: None }),
        "a carried state needs a row of its own"
    );
    let lowered = AnyPolicy::from(fixed("capped", 1, HOUR))
        .continuing(&old)
        .expect("lineage");
    let denied = limiter
        .check(&Check::new(&lowered, carried))
        .await
        .expect("check");
    assert!(
        denied
            .denial()
            .is_some_and(runlimit_core::Denial::is_quota_exceeded),
        "the carried state denies before any row is needed: {denied:?}"
    );
    // GCRA's table has room in that shard: the state carries there.
    let rate = AnyPolicy::from(gcra("capped", 1, HOUR, 6))
        .continuing(&old)
        .expect("lineage");
    let decision = limiter
        .check(&Check::new(&rate, carried))
        .await
        .expect("check");
    assert_eq!(decision.remaining(), Some(4), "one carried, one admitted");
}

/// A policy of some algorithm, as the SQL functions take it.
#[derive(Debug, Clone, Copy)]
struct Shape {
    algorithm: u8,
    limit: u64,
    window_ms: u64,
    burst: u64,
}

impl Shape {
    fn policy(self) -> Option<AnyPolicy> {
        let window = Duration::from_millis(self.window_ms);
        match self.algorithm {
            0 => FixedWindowPolicy::new(id("p"), scope(), self.limit, window)
                .ok()
                .map(Into::into),
            1 => SlidingWindowPolicy::new(id("p"), scope(), self.limit, window)
                .ok()
                .map(Into::into),
            _ => GcraPolicy::new(id("p"), scope(), self.limit, window, self.burst)
                .ok()
                .map(Into::into),
        }
    }

    /// A policy of `algorithm` with this one's window (GCRA: its emission
    /// interval, its quota and period `scale` times those of the interval
    /// in lowest terms) and a limit (GCRA: burst) of `other`.
    fn alike(self, algorithm: u8, scale: u64, other: u64) -> Self {
        let (limit, window_ms) = if algorithm == 2 {
            let common = gcd(self.limit, self.window_ms);
            (
                (self.limit / common).saturating_mul(scale),
                (self.window_ms / common).saturating_mul(scale),
            )
        } else {
            (other, self.window_ms)
        };
        Self {
            algorithm,
            limit,
            window_ms,
            burst: other,
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn shape() -> impl Strategy<Value = Shape> {
    let max_window_ms = u64::try_from(MAX_WINDOW.as_millis()).expect("fits");
    (
        0u8..3,
        prop_oneof![1u64..=10, 1u64..=MAX_LIMIT],
        prop_oneof![1u64..=10_000, 1u64..=max_window_ms],
        prop_oneof![1u64..=10, 1u64..=MAX_LIMIT],
    )
        .prop_map(|(algorithm, limit, window_ms, burst)| Shape {
            algorithm,
            limit,
            window_ms,
            burst,
        })
}

/// A state a counter of `shape` may hold at `now`, in its stored words,
/// from the seeds: a window ending within a window of now, counts ending up
/// to twelve eighths before or three after now's, an arrival time from a
/// period before now to a period beyond the tolerance.
fn state(shape: Shape, now: u64, seeds: [u64; 11]) -> Vec<i64> {
    let word = |value: u64| i64::try_from(value).expect("a stored time fits");
    let window = shape.window_ms * 1_000;
    match shape.algorithm {
        0 => vec![
            word(seeds[0] % (shape.limit + 1)),
            word(now - window + seeds[1] % (2 * window + 1)),
        ],
        1 => {
            let sub = window / 8;
            let latest = (now / sub + seeds[0] % 16).saturating_sub(12);
            let mut words = vec![word((latest + 9) * sub)];
            words.extend(seeds[2..].iter().map(|seed| word(seed % (shape.limit + 1))));
            words
        }
        _ => {
            let tolerance = u64::try_from(
                u128::from(shape.burst) * u128::from(window) / u128::from(shape.limit),
            )
            .expect("below the longest window");
            let arrival = now - window + seeds[0] % (tolerance + 2 * window + 1);
            vec![word(arrival), word(seeds[1] % shape.limit)]
        }
    }
}

/// The state in its stored words as the core reads it.
fn as_core(policy: &AnyPolicy, words: &[i64]) -> StateMicros {
    let unsigned = |word: i64| u64::try_from(word).expect("non-negative");
    match policy {
        AnyPolicy::FixedWindow(_) => CounterState::FixedWindow {
            used: unsigned(words[0]),
            expires_at: unsigned(words[1]),
        },
        AnyPolicy::SlidingWindow(policy) => CounterState::SlidingWindow(Buckets {
            latest_start: SlidingMicros::new(policy).latest_start_of(unsigned(words[0])),
            counts: std::array::from_fn(|i| unsigned(words[i + 1])),
        }),
        AnyPolicy::Gcra(_) => CounterState::Gcra {
            arrival: Exact {
                whole: unsigned(words[0]),
                remainder: unsigned(words[1]),
            },
        },
    }
}

/// A core state in the stored words of a counter of `policy`.
fn as_words(policy: &AnyPolicy, state: StateMicros) -> Vec<i64> {
    let word = |value: u64| i64::try_from(value).expect("a stored time fits");
    match (policy, state) {
        (_, CounterState::FixedWindow { used, expires_at }) => vec![word(used), word(expires_at)],
        (AnyPolicy::SlidingWindow(policy), CounterState::SlidingWindow(buckets)) => {
            let mut words = vec![word(
                SlidingMicros::new(policy).expiry_of(buckets.latest_start),
            )];
            words.extend(buckets.counts.map(word));
            words
        }
        (_, CounterState::Gcra { arrival }) => vec![word(arrival.whole), word(arrival.remainder)],
        (_, CounterState::SlidingWindow(_)) => panic!("sliding counts for another policy"),
    }
}

/// The numbers the SQL functions take for `shape`'s policy.
fn args(shape: Shape) -> (i16, i64, i64) {
    (
        i16::from(shape.algorithm) + 1,
        i64::try_from(shape.limit).expect("bounded"),
        i64::try_from(shape.window_ms * 1_000).expect("bounded"),
    )
}

#[test]
fn the_sql_translation_is_the_cores_for_every_pair_of_algorithms() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let Some(schema) = runtime.block_on(common::schema("carry_translation")) else {
        return;
    };
    let pool = runtime.block_on(schema.migrated_pool(1));
    let config = ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(
        from in shape(),
        to in proptest::collection::vec(shape(), 3),
        scale in 1u64..=3,
        now in 1_700_000_000_000_000u64..1_900_000_000_000_000,
        seeds in proptest::array::uniform11(any::<u64>()),
    )| {
        let Some(old) = from.policy() else {
            return Ok(());
        };
        let words = state(from, now, seeds);
        // Into every algorithm, with other parameters and with the ones it
        // keeps state across (the same window, the same emission interval).
        for (algorithm, other) in (0u8..).zip(&to) {
            for target in [Shape { algorithm, ..*other }, from.alike(algorithm, scale, other.limit)] {
                let Some(new) = target.policy() else {
                    continue;
                };
                let expected = carry::<1_000>(old.kind(), &as_core(&old, &words), new.kind(), now)
                    .map(|state| as_words(&new, state));
                let (from_algorithm, from_limit, from_window) = args(from);
                let (to_algorithm, to_limit, to_window) = args(target);
                let actual: Option<Vec<i64>> = runtime.block_on(
                    sqlx::query_scalar(
                        "SELECT runlimit_carry_state($1, $2, $3, $4, $5, $6, $7, $8)",
                    )
                    .bind(from_algorithm)
                    .bind(from_limit)
                    .bind(from_window)
                    .bind(&words)
                    .bind(to_algorithm)
                    .bind(to_limit)
                    .bind(to_window)
                    .bind(i64::try_from(now).expect("fits"))
                    .fetch_one(&pool),
                ).expect("translate");
                prop_assert_eq!(actual, expected, "{:?} into {:?}", from, target);
            }
        }
    });
}
