//! A local gate in front of a shared backend as one admission: what reaches
//! the shared backend, and what a shared denial or failure gives back.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use runlimit_core::{
    BatchDecision, Check, Decision, FixedWindowPolicy, Lifecycle, Limiter, MayHaveConsumed,
    PolicyId, ScopeId, SubjectKey, TieredPolicy,
};
use runlimit_memory::{ManualClock, MemoryStore, MemoryStoreConfig, Tiered, TieredError};

fn window(id: &str, scope: &str, limit: u64) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new(id).expect("valid"),
        ScopeId::new(scope).expect("valid"),
        limit,
        Duration::from_secs(60),
    )
    .expect("valid")
}

fn key(n: u8) -> SubjectKey {
    SubjectKey::from_digest([n; 32])
}

fn store() -> MemoryStore {
    MemoryStore::new(MemoryStoreConfig::new(100).expect("valid")).with_clock(ManualClock::new())
}

/// The shared backend's failure: "may have consumed" on demand.
#[derive(Debug, thiserror::Error)]
#[error("the shared backend is down")]
struct Down {
    may_have_consumed: bool,
}

impl MayHaveConsumed for Down {
    fn may_have_consumed_quota(&self) -> bool {
        self.may_have_consumed
    }
}

/// A memory store standing in for the shared backend, counting the
/// operations that reach it and failing while `down` is set.
#[derive(Debug, Clone)]
struct Shared {
    store: Arc<MemoryStore>,
    calls: Arc<AtomicUsize>,
    down: Arc<AtomicBool>,
}

impl Shared {
    fn new() -> Self {
        Self {
            store: Arc::new(store()),
            calls: Arc::default(),
            down: Arc::default(),
        }
    }

    fn reached(&self) -> Result<(), Down> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            Err(Down {
                may_have_consumed: true,
            })
        } else {
            Ok(())
        }
    }
}

impl Limiter for Shared {
    type Policy = FixedWindowPolicy;
    type Error = Down;

    async fn check(&self, check: &Check<'_, FixedWindowPolicy>) -> Result<Decision, Down> {
        self.reached()?;
        Ok(self.store.check(check).expect("memory"))
    }

    async fn check_all(
        &self,
        checks: &[Check<'_, FixedWindowPolicy>],
    ) -> Result<BatchDecision, Down> {
        self.reached()?;
        Ok(self.store.check_all(checks).expect("memory"))
    }
}

fn remaining(store: &MemoryStore, policy: &FixedWindowPolicy, subject: SubjectKey) -> u64 {
    store
        .peek(&Check::new(policy, subject))
        .expect("peek")
        .remaining()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_shared_denial_refunds_the_gate() {
    let shared = Shared::new();
    let limiter = Tiered::new(store(), shared.clone());
    let client = window("login.local", "client", 10);
    let identity = window("login.shared", "identity", 1);
    let (gate, account) = (
        TieredPolicy::Gate(client.clone()),
        TieredPolicy::Shared(identity.clone()),
    );
    let checks = [Check::new(&gate, key(1)), Check::new(&account, key(2))];
    assert!(limiter.check_all(&checks).await.expect("ok").is_allowed());
    for _ in 0..3 {
        match limiter.check_all(&checks).await.expect("ok") {
            BatchDecision::Denied { index: 1, denial } => assert!(denial.is_quota_exceeded()),
            other => panic!("expected the shared check denied, got {other:?}"),
        }
    }
    // Only the allowed batch counts on the gate: the denied ones were refunded.
    assert_eq!(remaining(limiter.gate(), &client, key(1)), 9);
    assert_eq!(remaining(&shared.store, &identity, key(2)), 0);
}

#[tokio::test]
async fn a_gate_denial_never_reaches_the_shared_backend() {
    let shared = Shared::new();
    let limiter = Tiered::new(store(), shared.clone());
    let client = TieredPolicy::Gate(window("login.local", "client", 2));
    let identity = TieredPolicy::Shared(window("login.shared", "identity", 100));
    // The gate's check comes second in the batch: it still runs first, and
    // its denial is reported at its own position.
    let checks = [Check::new(&identity, key(2)), Check::new(&client, key(1))];
    for _ in 0..2 {
        assert!(limiter.check_all(&checks).await.expect("ok").is_allowed());
    }
    for _ in 0..5 {
        match limiter.check_all(&checks).await.expect("ok") {
            BatchDecision::Denied { index: 1, .. } => {}
            other => panic!("expected the gate check denied, got {other:?}"),
        }
    }
    assert_eq!(shared.calls.load(Ordering::SeqCst), 2, "round trips");
    // A single check goes to its own tier alone.
    assert!(
        limiter
            .check(&Check::new(&client, key(1)))
            .await
            .expect("ok")
            .is_denied()
    );
    assert_eq!(shared.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_shared_failure_refunds_the_gate_and_fails_closed_keeping_its_classification() {
    let shared = Shared::new();
    let limiter = Tiered::new(store(), shared.clone());
    let client = window("login.local", "client", 10);
    let (gate, account) = (
        TieredPolicy::Gate(client.clone()),
        TieredPolicy::Shared(window("login.shared", "identity", 10)),
    );
    let checks = [Check::new(&gate, key(1)), Check::new(&account, key(2))];
    shared.down.store(true, Ordering::SeqCst);
    let error = limiter.check_all(&checks).await.expect_err("down");
    assert!(matches!(error, TieredError::Shared(_)), "{error:?}");
    assert!(error.may_have_consumed_quota(), "the shared backend's word");
    assert_eq!(error.to_string(), "the shared backend failed");
    assert_eq!(remaining(limiter.gate(), &client, key(1)), 10, "refunded");
}

#[tokio::test]
async fn batch_caller_errors_consume_nothing_on_either_tier() {
    let shared = Shared::new();
    let limiter = Tiered::new(store(), shared.clone());
    let client = window("login.local", "client", 10);
    let gate = TieredPolicy::Gate(client.clone());
    let check = Check::new(&gate, key(1));
    let error = limiter.check_all(&[check, check]).await.expect_err("dup");
    assert!(matches!(error, TieredError::InvalidBatch(_)));
    assert!(!error.may_have_consumed_quota());
    assert!(matches!(
        limiter.check_all(&[]).await,
        Err(TieredError::InvalidBatch(_))
    ));
    assert_eq!(remaining(limiter.gate(), &client, key(1)), 10);
    assert_eq!(shared.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn refunds_give_each_tier_its_own_and_refuse_foreign_receipts() {
    let (gate_store, shared_store) = (store(), store());
    let limiter = Tiered::new(gate_store, shared_store);
    let client = window("login.local", "client", 10);
    let identity = window("login.shared", "identity", 5);
    let (gate, account) = (
        TieredPolicy::Gate(client.clone()),
        TieredPolicy::Shared(identity.clone()),
    );
    let checks = [Check::new(&gate, key(1)), Check::new(&account, key(2))];
    let receipt = limiter
        .admit_all(&checks)
        .await
        .expect("ok")
        .into_parts()
        .1
        .expect("allowed");
    // Refunding with another subject's check is a mismatch and changes
    // nothing on either tier.
    let swapped = [checks[0], Check::new(&account, key(3))];
    let receipt = {
        let other = limiter
            .admit_all(&checks)
            .await
            .expect("ok")
            .into_parts()
            .1
            .expect("allowed");
        assert!(matches!(
            limiter.refund(&swapped, other).await,
            Err(TieredError::InvalidRefund(_))
        ));
        receipt
    };
    assert_eq!(remaining(limiter.gate(), &client, key(1)), 8);
    assert_eq!(remaining(limiter.shared(), &identity, key(2)), 3);
    let refunded = limiter.refund(&checks, receipt).await.expect("refund");
    assert_eq!((refunded.credited(), refunded.checks()), (2, 2));
    assert_eq!(remaining(limiter.gate(), &client, key(1)), 9);
    assert_eq!(remaining(limiter.shared(), &identity, key(2)), 4);

    // A receipt of one tier's store is not a tiered receipt.
    let plain = limiter
        .gate()
        .admit(&Check::new(&client, key(1)))
        .expect("ok")
        .into_parts()
        .1
        .expect("allowed");
    assert!(matches!(
        limiter.refund(&checks[..1], plain).await,
        Err(TieredError::InvalidRefund(_))
    ));

    // Peeks and resets go to the policy's tier.
    assert_eq!(
        limiter.peek(&checks[1]).await.expect("peek").remaining(),
        Some(4)
    );
    assert!(limiter.reset(&account, &key(2)).await.expect("reset"));
    assert_eq!(remaining(limiter.shared(), &identity, key(2)), 5);
}

#[test]
fn a_single_check_decides_at_once_when_its_tier_does() {
    // The gate is a memory store and decides at once; the shared backend
    // stands in for a networked one and only decides in its future, without
    // being reached by the attempt.
    let shared = Shared::new();
    let limiter = Tiered::new(store(), shared.clone());
    let client = window("login.local", "client", 1);
    let gate = TieredPolicy::Gate(client.clone());
    let account = TieredPolicy::Shared(window("login.shared", "identity", 1));
    let gated = Check::new(&gate, key(1));
    let decided: Vec<bool> = (0..2)
        .map(|_| {
            limiter
                .check_now(&gated)
                .expect("the gate decides at once")
                .expect("ok")
                .is_allowed()
        })
        .collect();
    assert_eq!(decided, [true, false]);
    assert_eq!(remaining(limiter.gate(), &client, key(1)), 0);
    assert!(limiter.check_now(&Check::new(&account, key(2))).is_none());
    assert_eq!(shared.calls.load(Ordering::SeqCst), 0);
}
