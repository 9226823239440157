//! Decisions, denials, batch outcomes and the shared batch validation.

use std::time::Duration;

use runlimit_core::{
    BatchDecision, BatchError, Check, CostError, Decision, DecisionError, DecisionKind, Denial,
    FixedWindowPolicy, MAX_LIMIT, PolicyId, QuotaMode, ScopeId, SubjectKey, validate_batch,
};

fn quota(retry_after: Duration) -> Denial {
    Denial::QuotaExceeded {
        capacity: 8,
        retry_after,
    }
}

fn policy(scope: &str, mode: QuotaMode) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("auth.login").expect("valid"),
        ScopeId::new(scope).expect("valid"),
        8,
        Duration::from_secs(60),
    )
    .expect("valid")
    .with_quota_mode(mode)
}

fn allowed() -> Decision {
    Decision::allowed(8, 7, Duration::from_secs(60)).expect("valid")
}

#[test]
fn predicates_are_unambiguous_for_every_kind() {
    let denial = quota(Duration::from_secs(1));
    let rows = [
        (
            allowed(),
            DecisionKind::Allowed,
            [true, false, true, false, false],
        ),
        (
            Decision::denied(denial),
            DecisionKind::Denied,
            [false, true, false, true, false],
        ),
        (
            Decision::shadow_denied(denial).expect("quota denial"),
            DecisionKind::ShadowDenied,
            [true, true, false, false, true],
        ),
    ];
    for (decision, kind, expected) in rows {
        assert_eq!(decision.kind(), kind);
        assert_eq!(
            [
                decision.permits_request(),
                decision.would_deny(),
                decision.is_allowed(),
                decision.is_denied(),
                decision.is_shadow_denied(),
            ],
            expected,
            "{kind:?}"
        );
    }
}

#[test]
fn allowed_decisions_expose_their_quota_and_nothing_else() {
    let decision = allowed();
    assert_eq!(decision.limit(), Some(8));
    assert_eq!(decision.remaining(), Some(7));
    assert_eq!(decision.reset_after(), Some(Duration::from_secs(60)));
    assert_eq!(decision.denial(), None);
    assert_eq!(decision.retry_after(), None);
    assert_eq!(decision.retry_after_seconds(), None);
    let denied = Decision::denied(quota(Duration::from_millis(10)));
    assert_eq!(denied.remaining(), None);
    assert_eq!(denied.retry_after(), Some(Duration::from_millis(10)));
}

#[test]
fn decision_invariants_are_enforced() {
    assert_eq!(
        Decision::allowed(8, 9, Duration::ZERO),
        Err(DecisionError::RemainingAboveLimit {
            remaining: 9,
            limit: 8
        })
    );
    assert_eq!(
        Decision::allowed(0, 0, Duration::ZERO),
        Err(DecisionError::CapacityOutOfRange { capacity: 0 })
    );
    assert_eq!(
        Decision::allowed(MAX_LIMIT + 1, 0, Duration::ZERO),
        Err(DecisionError::CapacityOutOfRange {
            capacity: MAX_LIMIT + 1
        })
    );
    assert_eq!(
        Decision::shadow_denied(Denial::StorageCapacity { retry_after: None }),
        Err(DecisionError::ShadowStorageCapacity)
    );
}

#[test]
fn retry_after_seconds_rounds_up_and_keeps_exact_seconds() {
    for (retry_after, seconds) in [
        (Duration::ZERO, 0),
        (Duration::from_nanos(1), 1),
        (Duration::from_millis(999), 1),
        (Duration::from_secs(1), 1),
        (Duration::from_millis(1_001), 2),
        (Duration::from_secs(60), 60),
        (Duration::new(59, 999_999_999), 60),
        (Duration::MAX, u64::MAX),
    ] {
        assert_eq!(
            quota(retry_after).retry_after_seconds(),
            Some(seconds),
            "{retry_after:?}"
        );
        assert_eq!(
            Decision::denied(quota(retry_after)).retry_after_seconds(),
            Some(seconds)
        );
    }
    let unknown = Denial::StorageCapacity { retry_after: None };
    assert_eq!(unknown.retry_after_seconds(), None);
    let known = Denial::StorageCapacity {
        retry_after: Some(Duration::from_millis(1_500)),
    };
    assert_eq!(known.retry_after_seconds(), Some(2));
}

#[test]
fn batch_outcome_prefers_capacity_then_the_first_quota_denial() {
    let capacity = Denial::StorageCapacity { retry_after: None };
    let first_quota = quota(Duration::from_secs(1));
    let second_quota = quota(Duration::from_secs(2));

    let all_allowed = BatchDecision::from_decisions(vec![allowed(), allowed()]);
    assert_eq!(all_allowed.decisions().map(<[_]>::len), Some(2));
    assert!(all_allowed.is_allowed() && all_allowed.permits_request());

    let denied = BatchDecision::from_decisions(vec![
        allowed(),
        Decision::denied(first_quota),
        Decision::denied(second_quota),
    ]);
    assert_eq!(
        denied,
        BatchDecision::Denied {
            index: 1,
            denial: first_quota
        }
    );
    assert!(!denied.permits_request() && denied.would_deny());
    assert_eq!(denied.retry_after_seconds(), Some(1));

    let capacity_wins = BatchDecision::from_decisions(vec![
        Decision::shadow_denied(first_quota).expect("quota"),
        Decision::denied(capacity),
    ]);
    assert_eq!(
        capacity_wins,
        BatchDecision::Denied {
            index: 1,
            denial: capacity
        }
    );

    let shadow = BatchDecision::from_decisions(vec![
        allowed(),
        Decision::shadow_denied(second_quota).expect("quota"),
    ]);
    assert_eq!(
        shadow,
        BatchDecision::ShadowDenied {
            index: 1,
            denial: second_quota
        }
    );
    assert!(shadow.permits_request() && shadow.would_deny() && !shadow.is_allowed());
    assert_eq!(shadow.denial(), Some((1, &second_quota)));
}

#[test]
fn weighted_checks_must_fit_the_capacity() {
    let policy = policy("client", QuotaMode::Enforce);
    let key = SubjectKey::from_digest([1; 32]);
    assert_eq!(Check::weighted(&policy, key, 8).map(|c| c.cost()), Ok(8));
    assert_eq!(
        Check::weighted(&policy, key, 0).map(|c| c.cost()),
        Err(CostError::OutOfRange {
            cost: 0,
            capacity: 8
        })
    );
    assert_eq!(
        Check::weighted(&policy, key, 9).map(|c| c.cost()),
        Err(CostError::OutOfRange {
            cost: 9,
            capacity: 8
        })
    );
}

#[test]
fn batch_validation_refuses_caller_errors() {
    let client = policy("client", QuotaMode::Enforce);
    let identity = policy("identity", QuotaMode::Enforce);
    let shadow = policy("identity", QuotaMode::Shadow);
    let a = SubjectKey::from_digest([1; 32]);
    let b = SubjectKey::from_digest([2; 32]);

    let empty: [Check<'_, FixedWindowPolicy>; 0] = [];
    assert_eq!(validate_batch(&empty, 4), Err(BatchError::Empty));
    assert_eq!(
        validate_batch(&[Check::new(&client, a), Check::new(&client, b)], 1),
        Err(BatchError::TooLarge {
            size: 2,
            maximum: 1
        })
    );
    assert_eq!(
        validate_batch(
            &[
                Check::new(&client, a),
                Check::new(&identity, a),
                Check::new(&client, a)
            ],
            4
        ),
        Err(BatchError::DuplicateKey {
            first: 0,
            second: 2
        })
    );
    assert_eq!(
        validate_batch(&[Check::new(&client, a), Check::new(&shadow, b)], 4),
        Err(BatchError::MixedQuotaModes { index: 1 })
    );
    // Same subject under two policies is two counters, so it is fine.
    assert_eq!(
        validate_batch(&[Check::new(&client, a), Check::new(&identity, a)], 4),
        Ok(())
    );
}

#[test]
fn large_batches_find_the_earliest_duplicate() {
    let client = policy("client", QuotaMode::Enforce);
    let keys: Vec<SubjectKey> = (0..40u8)
        .map(|i| SubjectKey::from_digest([i; 32]))
        .collect();
    let mut checks: Vec<_> = keys.iter().map(|key| Check::new(&client, *key)).collect();
    assert_eq!(validate_batch(&checks, 64), Ok(()));
    checks.push(Check::new(&client, keys[3]));
    checks.push(Check::new(&client, keys[1]));
    assert_eq!(
        validate_batch(&checks, 64),
        Err(BatchError::DuplicateKey {
            first: 3,
            second: 40
        })
    );
}

#[test]
fn for_mode_shadows_only_quota_denials() {
    let quota = quota(Duration::from_secs(1));
    let capacity = Denial::StorageCapacity { retry_after: None };
    assert!(Decision::for_mode(QuotaMode::Shadow, quota).is_shadow_denied());
    assert!(Decision::for_mode(QuotaMode::Enforce, quota).is_denied());
    assert!(
        Decision::for_mode(QuotaMode::Shadow, capacity).is_denied(),
        "capacity stays fail-closed"
    );
}
