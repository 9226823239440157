//! The optional serde representation: round trips, shapes and rejections.
#![cfg(feature = "serde")]

use std::time::Duration;

use proptest::prelude::*;
use runlimit_core::{
    BatchDecision, Decision, Denial, FixedWindowPolicy, GcraPolicy, MAX_ID_LEN, MAX_LIMIT,
    MAX_WINDOW, PolicyId, QuotaMode, ScopeId,
};
use serde_json::{Value, json};

fn fixed() -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("auth.login").expect("valid"),
        ScopeId::new("client").expect("valid"),
        40,
        Duration::from_secs(60),
    )
    .expect("valid")
    .with_quota_mode(QuotaMode::Shadow)
}

fn round_trip<T>(value: &T) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    serde_json::from_value(serde_json::to_value(value).expect("serializes")).expect("deserializes")
}

#[test]
fn policies_serialize_parameters_without_fingerprints() {
    let policy = fixed();
    assert_eq!(
        serde_json::to_value(&policy).expect("serializes"),
        json!({
            "id": "auth.login",
            "scope": "client",
            "limit": 40,
            "window": {"secs": 60, "nanos": 0},
            "quota_mode": "shadow",
        })
    );
    let back = round_trip(&policy);
    assert_eq!(back, policy);
    assert_eq!(back.fingerprint(), policy.fingerprint());

    let gcra = GcraPolicy::new(
        PolicyId::new("api.read").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        Duration::from_millis(1_500),
        20,
    )
    .expect("valid");
    assert_eq!(
        serde_json::to_value(&gcra).expect("serializes"),
        json!({
            "id": "api.read",
            "scope": "client",
            "quota": 10,
            "period": {"secs": 1, "nanos": 500_000_000},
            "burst_capacity": 20,
            "quota_mode": "enforce",
        })
    );
    assert_eq!(round_trip(&gcra), gcra);
}

#[test]
fn quota_mode_defaults_to_enforce_when_absent() {
    let policy: FixedWindowPolicy = serde_json::from_value(json!({
        "id": "a", "scope": "b", "limit": 1, "window": {"secs": 1, "nanos": 0}
    }))
    .expect("valid");
    assert_eq!(policy.quota_mode(), QuotaMode::Enforce);
}

fn rejects<T: serde::de::DeserializeOwned + std::fmt::Debug>(value: Value) -> String {
    serde_json::from_value::<T>(value)
        .expect_err("must be rejected")
        .to_string()
}

#[test]
fn policy_deserialization_validates_and_refuses_unknown_fields() {
    let base = json!({
        "id": "auth.login", "scope": "client", "limit": 40,
        "window": {"secs": 60, "nanos": 0}, "quota_mode": "enforce"
    });
    let with = |key: &str, value: Value| {
        let mut object = base.clone();
        object[key] = value;
        object
    };
    assert!(rejects::<FixedWindowPolicy>(with("limit", json!(0))).contains("limit 0"));
    assert!(rejects::<FixedWindowPolicy>(with("id", json!("bad id"))).contains("policy id"));
    assert!(rejects::<FixedWindowPolicy>(with("scope", json!(""))).contains("scope id"));
    assert!(
        rejects::<FixedWindowPolicy>(with("window", json!({"secs": 0, "nanos": 1_000})))
            .contains("whole number of milliseconds")
    );
    assert!(
        rejects::<FixedWindowPolicy>(with("quota_mode", json!("warn"))).contains("unknown variant")
    );
    assert!(
        rejects::<FixedWindowPolicy>(with("fingerprint", json!("00"))).contains("unknown field")
    );
}

#[test]
fn decisions_are_tagged_and_round_trip() {
    let allowed = Decision::allowed(8, 3, Duration::from_millis(1_250)).expect("valid");
    assert_eq!(
        serde_json::to_value(allowed).expect("serializes"),
        json!({"outcome": "allowed", "limit": 8, "remaining": 3,
               "reset_after": {"secs": 1, "nanos": 250_000_000}})
    );
    let quota = Denial::QuotaExceeded {
        capacity: 8,
        retry_after: Duration::new(2, 5),
    };
    assert_eq!(
        serde_json::to_value(Decision::shadow_denied(quota).expect("quota")).expect("serializes"),
        json!({"outcome": "shadow_denied", "denial": {"kind": "quota_exceeded", "capacity": 8,
               "retry_after": {"secs": 2, "nanos": 5}}})
    );
    let capacity = Denial::StorageCapacity { retry_after: None };
    assert_eq!(
        serde_json::to_value(Decision::denied(capacity)).expect("serializes"),
        json!({"outcome": "denied", "denial": {"kind": "storage_capacity", "retry_after": null}})
    );
    for decision in [
        allowed,
        Decision::denied(quota),
        Decision::denied(capacity),
        Decision::shadow_denied(quota).expect("quota"),
    ] {
        assert_eq!(round_trip(&decision), decision);
    }
    for batch in [
        BatchDecision::Allowed(vec![allowed, allowed]),
        BatchDecision::Denied {
            index: 1,
            denial: capacity,
        },
        BatchDecision::ShadowDenied {
            index: 0,
            denial: quota,
        },
    ] {
        assert_eq!(round_trip(&batch), batch);
    }
    assert_eq!(
        serde_json::to_value(BatchDecision::Denied {
            index: 1,
            denial: quota
        })
        .expect("ok"),
        json!({"outcome": "denied", "index": 1, "denial": {"kind": "quota_exceeded",
               "capacity": 8, "retry_after": {"secs": 2, "nanos": 5}}})
    );
}

#[test]
fn decision_deserialization_rejects_broken_invariants() {
    let reset = json!({"secs": 1, "nanos": 0});
    assert!(
        rejects::<Decision>(
            json!({"outcome": "allowed", "limit": 8, "remaining": 9, "reset_after": reset})
        )
        .contains("exceeds the limit")
    );
    assert!(
        rejects::<Decision>(
            json!({"outcome": "allowed", "limit": 0, "remaining": 0, "reset_after": reset})
        )
        .contains("capacity 0")
    );
    assert!(
        rejects::<Decision>(json!({"outcome": "shadow_denied",
            "denial": {"kind": "storage_capacity", "retry_after": null}}))
        .contains("cannot be a shadow denial")
    );
    assert!(
        rejects::<Decision>(json!({"outcome": "denied",
            "denial": {"kind": "quota_exceeded", "capacity": 0, "retry_after": reset}}))
        .contains("capacity 0")
    );
    assert!(
        rejects::<Decision>(json!({"outcome": "allowed", "limit": 8, "remaining": 1,
            "reset_after": reset, "subject": "x"}))
        .contains("unknown field")
    );
    assert!(
        rejects::<BatchDecision>(json!({"outcome": "allowed", "decisions": [
            {"outcome": "denied", "denial": {"kind": "storage_capacity", "retry_after": null}}
        ]}))
        .contains("only hold allowed")
    );
    // An empty batch is a caller error: no backend allows one.
    assert!(
        rejects::<BatchDecision>(json!({"outcome": "allowed", "decisions": []}))
            .contains("at least one decision")
    );
    assert!(
        rejects::<BatchDecision>(json!({"outcome": "shadow_denied", "index": 0,
            "denial": {"kind": "storage_capacity", "retry_after": null}}))
        .contains("cannot be a shadow denial")
    );
}

fn id_strategy() -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[A-Za-z0-9._-]{{1,{MAX_ID_LEN}}}")).expect("regex")
}

fn mode_strategy() -> impl Strategy<Value = QuotaMode> {
    prop_oneof![Just(QuotaMode::Enforce), Just(QuotaMode::Shadow)]
}

fn max_window_ms() -> u64 {
    u64::try_from(MAX_WINDOW.as_millis()).expect("fits")
}

proptest! {
    #[test]
    fn any_valid_fixed_window_policy_round_trips(
        id in id_strategy(),
        scope in id_strategy(),
        limit in 1..=MAX_LIMIT,
        window_ms in 1..=max_window_ms(),
        mode in mode_strategy(),
    ) {
        let policy = FixedWindowPolicy::new(
            PolicyId::new(&id).expect("valid"),
            ScopeId::new(&scope).expect("valid"),
            limit,
            Duration::from_millis(window_ms),
        ).expect("valid").with_quota_mode(mode);
        let back = round_trip(&policy);
        prop_assert_eq!(back.fingerprint(), policy.fingerprint());
        prop_assert_eq!(back, policy);
    }

    #[test]
    fn any_valid_gcra_policy_round_trips(
        quota in 1..=MAX_LIMIT,
        period_ms in 1..=max_window_ms(),
        burst in 1..=MAX_LIMIT,
        mode in mode_strategy(),
    ) {
        let built = GcraPolicy::new(
            PolicyId::new("api.read").expect("valid"),
            ScopeId::new("client").expect("valid"),
            quota,
            Duration::from_millis(period_ms),
            burst,
        );
        // Random combinations may replenish too slowly; those must also be refused
        // by deserialization, which the next property covers.
        if let Ok(policy) = built {
            let policy = policy.with_quota_mode(mode);
            prop_assert_eq!(round_trip(&policy), policy);
        }
    }

    #[test]
    fn any_out_of_range_fixed_window_field_is_rejected(
        limit in prop_oneof![Just(0u64), (MAX_LIMIT + 1)..=u64::MAX],
        window_ms in 1..=max_window_ms(),
        bad_window in prop_oneof![
            Just(json!({"secs": 0, "nanos": 0})),
            (MAX_WINDOW.as_secs() + 1..=u64::MAX).prop_map(|secs| json!({"secs": secs, "nanos": 0})),
            (1u32..1_000_000).prop_map(|nanos| json!({"secs": 1, "nanos": nanos})),
        ],
    ) {
        let window = json!({"secs": window_ms / 1000, "nanos": (window_ms % 1000) * 1_000_000});
        let bad_limit = json!({"id": "a", "scope": "b", "limit": limit, "window": window});
        prop_assert!(serde_json::from_value::<FixedWindowPolicy>(bad_limit).is_err());
        let bad_window = json!({"id": "a", "scope": "b", "limit": 1, "window": bad_window});
        prop_assert!(serde_json::from_value::<FixedWindowPolicy>(bad_window).is_err());
    }

    #[test]
    fn gcra_deserialization_agrees_with_the_constructor(
        quota in prop_oneof![Just(0u64), 1..=MAX_LIMIT, (MAX_LIMIT + 1)..=u64::MAX],
        period_ms in prop_oneof![Just(0u64), 1..=max_window_ms(), max_window_ms() + 1..=u64::MAX / 1000],
        burst in prop_oneof![Just(0u64), 1..=MAX_LIMIT, (MAX_LIMIT + 1)..=u64::MAX],
    ) {
        let period = Duration::from_millis(period_ms);
        let constructed = GcraPolicy::new(
            PolicyId::new("a").expect("valid"),
            ScopeId::new("b").expect("valid"),
            quota,
            period,
            burst,
        );
        let value = json!({"id": "a", "scope": "b", "quota": quota,
            "period": {"secs": period.as_secs(), "nanos": period.subsec_nanos()},
            "burst_capacity": burst});
        let deserialized = serde_json::from_value::<GcraPolicy>(value);
        prop_assert_eq!(constructed.is_ok(), deserialized.is_ok());
        if let (Ok(a), Ok(b)) = (constructed, deserialized) {
            prop_assert_eq!(a, b);
        }
    }
}
