//! Golden strings and range errors for every field.

use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use runlimit_core::{
    Decision, Denial, FixedWindowPolicy, GcraPolicy, MAX_LIMIT, PolicyId, ScopeId,
    SlidingWindowPolicy,
};
use runlimit_http::{
    FieldError,
    draft_11::{
        Advertise, MAX_INTEGER, PolicyName, QuotaPolicy, QuotaStatus, QuotaUnit, policy_field,
        status_field,
    },
    legacy::{LegacyFields, retry_after_value},
    problem::{CONTENT_TYPE, Problem, QuotaExceededProblem},
};

fn name(value: &str) -> PolicyName {
    PolicyName::new(value).expect("valid name")
}

#[test]
fn policy_field_lists_every_policy_with_its_parameters() {
    let policies = [
        QuotaPolicy::new(name("client"), 40, Duration::from_secs(60)).expect("valid"),
        QuotaPolicy::new(name("identity"), 8, Duration::from_secs(3_600))
            .expect("valid")
            .with_unit(QuotaUnit::Requests)
            .with_partition_key(b"abc".to_vec()),
        QuotaPolicy::new(name("bytes"), MAX_INTEGER, Duration::from_secs(1))
            .expect("valid")
            .with_unit(QuotaUnit::ContentBytes),
    ];
    let (field, value) = policy_field(&policies).expect("encodes");
    assert_eq!(field.as_str(), "ratelimit-policy");
    assert_eq!(
        value,
        r#""client";q=40;w=60, "identity";q=8;qu="requests";w=3600;pk=:YWJj:, "bytes";q=999999999999999;qu="content-bytes";w=1"#
    );
}

#[test]
fn status_field_rounds_durations_up() {
    let statuses = [
        QuotaStatus::new(name("client"), 39, Duration::from_secs(60)).expect("valid"),
        QuotaStatus::new(name("identity"), 0, Duration::from_millis(1)).expect("valid"),
        QuotaStatus::new(name("zero"), 5, Duration::ZERO)
            .expect("valid")
            .with_partition_key(vec![0xff]),
    ];
    let (field, value) = status_field(&statuses).expect("encodes");
    assert_eq!(field.as_str(), "ratelimit");
    assert_eq!(
        value,
        r#""client";r=39;t=60, "identity";r=0;t=1, "zero";r=5;t=0;pk=:/w==:"#
    );
}

#[test]
fn names_must_be_structured_field_strings() {
    assert_eq!(PolicyName::new(""), Err(FieldError::InvalidName));
    assert_eq!(PolicyName::new("tab\there"), Err(FieldError::InvalidName));
    assert_eq!(PolicyName::new("é"), Err(FieldError::InvalidName));
    // Quotes and backslashes are escaped, not refused.
    let quoted = QuotaStatus::new(name(r#"a"b\c"#), 1, Duration::ZERO).expect("valid");
    assert_eq!(
        status_field(&[quoted]).expect("encodes").1,
        r#""a\"b\\c";r=1;t=0"#
    );
}

#[test]
fn integers_beyond_rfc_9651_are_refused() {
    let too_big = MAX_INTEGER + 1;
    assert_eq!(
        QuotaPolicy::new(name("p"), too_big, Duration::from_secs(1)),
        Err(FieldError::IntegerOutOfRange { value: too_big })
    );
    assert_eq!(
        QuotaStatus::new(name("p"), too_big, Duration::ZERO),
        Err(FieldError::IntegerOutOfRange { value: too_big })
    );
    assert_eq!(
        QuotaStatus::new(name("p"), 1, Duration::from_secs(too_big)),
        Err(FieldError::IntegerOutOfRange { value: too_big })
    );
    assert_eq!(
        QuotaPolicy::new(name("p"), 1, Duration::from_secs(too_big)),
        Err(FieldError::IntegerOutOfRange { value: too_big })
    );
}

#[test]
fn advertised_windows_must_be_whole_seconds() {
    for window in [
        Duration::ZERO,
        Duration::from_millis(1_500),
        Duration::from_nanos(1),
    ] {
        assert_eq!(
            QuotaPolicy::new(name("p"), 1, window),
            Err(FieldError::WindowNotWholeSeconds { window })
        );
    }
    let fractional = FixedWindowPolicy::new(
        PolicyId::new("p").expect("valid"),
        ScopeId::new("s").expect("valid"),
        1,
        Duration::from_millis(1_500),
    )
    .expect("valid");
    assert!(QuotaPolicy::for_fixed_window(PolicyName::of(&fractional), &fractional).is_err());
}

#[test]
fn empty_fields_are_refused() {
    assert_eq!(policy_field(&[]), Err(FieldError::Empty));
    assert_eq!(status_field(&[]), Err(FieldError::Empty));
}

#[test]
fn policies_and_decisions_convert() {
    let fixed = FixedWindowPolicy::new(
        PolicyId::new("auth.login").expect("valid"),
        ScopeId::new("client").expect("valid"),
        40,
        Duration::from_secs(60),
    )
    .expect("valid");
    assert_eq!(PolicyName::of(&fixed).as_str(), "auth.login/client");
    let policy = QuotaPolicy::for_fixed_window(PolicyName::of(&fixed), &fixed).expect("valid");
    assert_eq!(
        policy_field(&[policy]).expect("ok").1,
        r#""auth.login/client";q=40;w=60"#
    );
    let gcra = GcraPolicy::new(
        PolicyId::new("api").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        Duration::from_secs(1),
        20,
    )
    .expect("valid");
    let policy = QuotaPolicy::for_gcra(PolicyName::of(&gcra), &gcra).expect("valid");
    assert_eq!(
        policy_field(&[policy]).expect("ok").1,
        r#""api/client";q=10;w=1"#
    );

    let sliding = SlidingWindowPolicy::new(
        PolicyId::new("auth.reset").expect("valid"),
        ScopeId::new("recipient").expect("valid"),
        5,
        Duration::from_secs(900),
    )
    .expect("valid");
    let policy = sliding
        .quota_policy(PolicyName::of(&sliding))
        .expect("valid");
    assert_eq!(
        policy_field(&[policy]).expect("ok").1,
        r#""auth.reset/recipient";q=5;w=900"#
    );

    let allowed = Decision::allowed(40, 39, Duration::from_millis(59_400)).expect("valid");
    let status = QuotaStatus::from_decision(name("c"), &allowed)
        .expect("ok")
        .expect("some");
    assert_eq!(status.reset_seconds(), Some(60));
    let denied = Decision::denied(Denial::QuotaExceeded {
        capacity: 40,
        retry_after: Duration::from_millis(2_100),
    });
    let status = QuotaStatus::from_decision(name("c"), &denied)
        .expect("ok")
        .expect("some");
    assert_eq!(status_field(&[status]).expect("ok").1, r#""c";r=0;t=3"#);
    let capacity = Decision::denied(Denial::StorageCapacity { retry_after: None });
    assert_eq!(QuotaStatus::from_decision(name("c"), &capacity), Ok(None));
}

#[test]
fn legacy_fields_round_up_and_match_the_draft_reset() {
    let now = UNIX_EPOCH + Duration::from_millis(1_000_500);
    let allowed = Decision::allowed(40, 12, Duration::from_millis(30_200)).expect("valid");
    let mut headers = HeaderMap::new();
    LegacyFields::from_decision(&allowed, now)
        .expect("some")
        .append_to(&mut headers);
    assert_eq!(headers["x-ratelimit-limit"], "40");
    assert_eq!(headers["x-ratelimit-remaining"], "12");
    // 1000.5 s + 30.2 s = 1030.7 s, rounded up.
    assert_eq!(headers["x-ratelimit-reset"], "1031");
    assert!(!headers.contains_key("retry-after"));

    for millis in [1, 999, 1_000, 1_001, 59_999, 60_000] {
        let retry = Duration::from_millis(millis);
        let denied = Decision::denied(Denial::QuotaExceeded {
            capacity: 8,
            retry_after: retry,
        });
        let legacy = LegacyFields::from_decision(&denied, now).expect("some");
        let draft = QuotaStatus::from_decision(name("c"), &denied)
            .expect("ok")
            .expect("some");
        assert_eq!(legacy.retry_after_seconds(), Some(millis.div_ceil(1_000)));
        assert!(
            legacy.retry_after_seconds() >= draft.reset_seconds(),
            "{millis} ms"
        );
        assert_eq!(
            retry_after_value(retry),
            millis.div_ceil(1_000).to_string().as_str()
        );
    }
    let capacity = Decision::denied(Denial::StorageCapacity { retry_after: None });
    assert_eq!(LegacyFields::from_decision(&capacity, now), None);
}

#[test]
fn problem_details_serialize_and_round_trip() {
    let problem =
        QuotaExceededProblem::new(vec![name("auth.login/identity")]).with_detail("try again later");
    let json = serde_json::to_value(&problem).expect("serializes");
    assert_eq!(
        json,
        serde_json::json!({
            "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
            "title": "Request cannot be satisfied as assigned quota has been exceeded",
            "status": 429,
            "detail": "try again later",
            "violated-policies": ["auth.login/identity"],
        })
    );
    let back: QuotaExceededProblem = serde_json::from_value(json).expect("deserializes");
    assert_eq!(back, problem);
    assert_eq!(CONTENT_TYPE, "application/problem+json");
}

#[test]
fn a_general_problem_is_about_blank_titled_by_its_status() {
    let problem = Problem::new(StatusCode::BAD_REQUEST).with_detail("missing x-api-key");
    let json = serde_json::to_value(&problem).expect("serializes");
    assert_eq!(
        json,
        serde_json::json!({
            "type": "about:blank",
            "title": "Bad Request",
            "status": 400,
            "detail": "missing x-api-key",
        })
    );
    let back: Problem = serde_json::from_value(json).expect("deserializes");
    assert_eq!(back, problem);
    // Without detail, the member is left out rather than sent as null.
    let bare = serde_json::to_value(Problem::new(StatusCode::SERVICE_UNAVAILABLE)).expect("ok");
    assert_eq!(bare.get("detail"), None);
    assert_eq!(bare["title"], "Service Unavailable");
}

#[test]
fn reading_a_problem_ignores_extensions_and_defaults_its_type() {
    let problem: Problem = serde_json::from_value(serde_json::json!({
        "status": 403,
        "balance": 30,
        "accounts": ["/account/12345"],
    }))
    .expect("deserializes");
    assert_eq!(problem.problem_type, "about:blank");
    assert_eq!(problem.status, 403);
    assert_eq!(problem.title, None);
}

/// Encodes `RateLimit` through both paths and checks they agree.
fn fast_and_general(names: &[PolicyName], decisions: &[Decision]) -> (HeaderName, HeaderValue) {
    let statuses: Vec<QuotaStatus> = names
        .iter()
        .zip(decisions)
        .filter_map(|(name, decision)| {
            QuotaStatus::from_decision(name.clone(), decision).expect("in range")
        })
        .collect();
    let general = status_field(&statuses).expect("encodes");
    let fast =
        runlimit_http::draft_11::status_field_for(names.iter().zip(decisions)).expect("some");
    assert_eq!(fast, general);
    // One policy at a time, the one-policy path agrees with both.
    for (name, decision) in names.iter().zip(decisions) {
        assert_eq!(
            runlimit_http::draft_11::status_value(name, decision),
            runlimit_http::draft_11::status_field_for([(name, decision)]).map(|(_, value)| value),
        );
    }
    fast
}

#[test]
fn the_fast_status_path_matches_the_general_one() {
    let names = [name("a"), name(r#"q"uote"#), name("cap")];
    let decisions = [
        Decision::allowed(10, 3, Duration::from_millis(4_500)).expect("valid"),
        Decision::shadow_denied(Denial::QuotaExceeded {
            capacity: 5,
            retry_after: Duration::from_secs(7),
        })
        .expect("quota"),
        Decision::denied(Denial::StorageCapacity { retry_after: None }),
    ];
    let (_, value) = fast_and_general(&names, &decisions);
    assert_eq!(value, r#""a";r=3;t=5, "q\"uote";r=0;t=7"#);
    assert_eq!(
        runlimit_http::draft_11::status_field_for(names[2..].iter().zip(&decisions[2..])),
        None
    );
}

#[test]
fn the_fast_status_path_matches_the_general_one_for_long_fields() {
    // Many members with long names: the fast path has no length limit of its own.
    let names: Vec<_> = (0..12)
        .map(|index| name(&format!("tenant-{index}/a-rather-long-policy-scope")))
        .collect();
    let decisions: Vec<Decision> = (0..12u64)
        .map(|index| {
            Decision::allowed(
                1_000_000,
                999_000 - index,
                Duration::from_secs(3_600 + index),
            )
            .expect("valid")
        })
        .collect();
    let (_, value) = fast_and_general(&names, &decisions);
    assert!(value.len() > 256, "a long field");
}

/// Integers up to `max` at every digit-count boundary, and anywhere between.
fn field_integer(max: u64) -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    prop_oneof![
        0..=20u64,
        (0..16u32).prop_map(|exponent| 10u64.pow(exponent)),
        (1..16u32).prop_map(|exponent| 10u64.pow(exponent) - 1),
        0..=max,
    ]
    .prop_map(move |integer| integer.min(max))
}

proptest::proptest! {
    /// The fast path sizes its buffer from the digits it will write: any
    /// remaining count and reset, at any digit count, encode as the general
    /// path encodes them.
    #[test]
    fn the_fast_status_path_matches_the_general_one_for_any_integers(
        members in proptest::collection::vec(
            (field_integer(MAX_LIMIT), field_integer(MAX_INTEGER)),
            1..4,
        ),
    ) {
        let names: Vec<_> = (0..members.len()).map(|index| name(&format!("p{index}"))).collect();
        let decisions: Vec<Decision> = members
            .iter()
            .map(|&(remaining, reset)| {
                Decision::allowed(MAX_LIMIT, remaining, Duration::from_secs(reset))
                    .expect("valid")
            })
            .collect();
        fast_and_general(&names, &decisions);
    }
}
