//! Reading the fields servers send: our own fields read back, header sets as
//! real APIs document them, malformed and hostile values.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use runlimit_http::{
    draft_11::{PolicyName, QuotaPolicy, QuotaStatus, policy_field, status_field},
    read::{self, Pushback, ReadError, Reset},
};

fn headers(fields: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in fields {
        map.append(*name, HeaderValue::from_static(value));
    }
    map
}

#[test]
fn our_own_fields_read_back_as_sent() {
    let client = PolicyName::new("auth.login/client").expect("valid");
    let identity = PolicyName::new("auth.login/identity").expect("valid");
    let (_, policy) = policy_field(&[
        QuotaPolicy::new(client.clone(), 40, Duration::from_secs(60)).expect("valid"),
        QuotaPolicy::new(identity.clone(), 8, Duration::from_secs(60)).expect("valid"),
    ])
    .expect("encodes");
    let (_, status) = status_field(&[
        QuotaStatus::new(client, 39, Duration::from_millis(59_001)).expect("valid"),
        QuotaStatus::new(identity, 7, Duration::from_secs(60)).expect("valid"),
    ])
    .expect("encodes");
    let mut map = HeaderMap::new();
    map.insert("ratelimit-policy", policy);
    map.insert("ratelimit", status);

    let policies = read::policies(&map).expect("reads");
    assert_eq!(policies.skipped(), 0);
    let read: Vec<_> = policies
        .members()
        .iter()
        .map(|p| (p.name(), p.quota(), p.window()))
        .collect();
    assert_eq!(
        read,
        [
            ("auth.login/client", 40, Some(Duration::from_secs(60))),
            ("auth.login/identity", 8, Some(Duration::from_secs(60))),
        ]
    );
    let statuses = read::statuses(&map).expect("reads");
    let read: Vec<_> = statuses
        .members()
        .iter()
        .map(|s| (s.name(), s.remaining(), s.reset()))
        .collect();
    assert_eq!(
        read,
        [
            ("auth.login/client", 39, Some(Duration::from_secs(60))),
            ("auth.login/identity", 7, Some(Duration::from_secs(60))),
        ]
    );
}

/// The examples of draft-ietf-httpapi-ratelimit-headers: several policies,
/// a quota unit, a partition key, and several field lines as one List.
#[test]
fn the_drafts_examples_read_as_documented() {
    let map = headers(&[
        (
            "ratelimit-policy",
            r#""burst";q=100;w=60,"daily";q=1000;w=86400"#,
        ),
        (
            "ratelimit-policy",
            r#""bytes";q=65535;qu="content-bytes";w=10;pk=:cHJvamVjdDEyMw==:"#,
        ),
        ("ratelimit", r#""default";r=50;t=30"#),
    ]);
    let policies = read::policies(&map).expect("reads");
    assert_eq!(policies.members().len(), 3);
    let daily = &policies.members()[1];
    assert_eq!(
        (daily.name(), daily.quota(), daily.window()),
        ("daily", 1000, Some(Duration::from_secs(86_400)))
    );
    let bytes = &policies.members()[2];
    assert_eq!(bytes.quota_unit(), Some("content-bytes"));
    assert_eq!(bytes.partition_key(), Some(&b"project123"[..]));
    let statuses = read::statuses(&map).expect("reads");
    let status = &statuses.members()[0];
    assert_eq!(
        (status.name(), status.remaining(), status.reset()),
        ("default", 50, Some(Duration::from_secs(30)))
    );
}

#[test]
fn invalid_members_are_skipped_and_unknown_parameters_ignored() {
    let map = headers(&[(
        "ratelimit",
        concat!(
            r#""ok";r=5;t=2;future=?1, "#,
            r#""no-remaining";t=2, "#,
            r#""negative";r=-1, "#,
            r#""text";r="five", "#,
            r#"("inner" "list");r=1, "#,
            r#"7;r=1, "#,
            r#"token;r=3, "#,
            r#""bad-key";r=1;pk=text"#
        ),
    )]);
    let statuses = read::statuses(&map).expect("reads");
    let names: Vec<_> = statuses.members().iter().map(|s| s.name()).collect();
    assert_eq!(names, ["ok", "token"]);
    assert_eq!(statuses.skipped(), 6);
}

#[test]
fn a_field_that_is_not_a_list_is_a_typed_error_and_absent_fields_read_empty() {
    let map = headers(&[("ratelimit", r#""open;r=1"#)]);
    assert_eq!(
        read::statuses(&map),
        Err(ReadError::Syntax { field: "RateLimit" })
    );
    assert!(read::policies(&map).expect("absent").is_empty());
    let mut binary = HeaderMap::new();
    binary.insert(
        "ratelimit-policy",
        HeaderValue::from_bytes(b"\"a\";q=1\xff").expect("a header value"),
    );
    assert_eq!(
        read::policies(&binary),
        Err(ReadError::NotText {
            field: "RateLimit-Policy"
        })
    );
}

/// RFC 9110's own examples: delay-seconds and an IMF-fixdate.
#[test]
fn retry_after_reads_delay_seconds_and_http_dates() {
    let now = UNIX_EPOCH + Duration::from_secs(1_445_412_000); // 2015-10-21 07:20:00 UTC
    let map = headers(&[("retry-after", "120")]);
    assert_eq!(
        read::retry_after(&map, now),
        Ok(Some(Duration::from_secs(120)))
    );
    let map = headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]);
    assert_eq!(
        read::retry_after(&map, now),
        Ok(Some(Duration::from_secs(480)))
    );
    let later = now + Duration::from_secs(3_600);
    assert_eq!(read::retry_after(&map, later), Ok(Some(Duration::ZERO)));
    // The obsolete RFC 850 and asctime forms, which recipients must accept.
    let map = headers(&[("retry-after", "Wednesday, 21-Oct-15 07:28:00 GMT")]);
    assert_eq!(
        read::retry_after(&map, now),
        Ok(Some(Duration::from_secs(480)))
    );
    let map = headers(&[("retry-after", "Wed Oct 21 07:28:00 2015")]);
    assert_eq!(
        read::retry_after(&map, now),
        Ok(Some(Duration::from_secs(480)))
    );
    assert_eq!(read::retry_after(&HeaderMap::new(), now), Ok(None));
    for bad in ["-1", "1.5", "soon", "", "12 s"] {
        let mut map = HeaderMap::new();
        map.insert("retry-after", HeaderValue::from_str(bad).expect("value"));
        assert_eq!(
            read::retry_after(&map, now),
            Err(ReadError::Malformed {
                field: "Retry-After"
            }),
            "{bad:?}"
        );
    }
    let map = headers(&[("retry-after", "1"), ("retry-after", "2")]);
    assert_eq!(
        read::retry_after(&map, now),
        Err(ReadError::Conflicting {
            field: "Retry-After"
        })
    );
}

/// GitHub's documented primary rate-limit headers: an epoch reset.
#[test]
fn githubs_fields_read_with_an_epoch_reset() {
    let map = headers(&[
        ("x-ratelimit-limit", "60"),
        ("x-ratelimit-remaining", "56"),
        ("x-ratelimit-used", "4"),
        ("x-ratelimit-reset", "1372700873"),
        ("x-ratelimit-resource", "core"),
    ]);
    let quota = read::legacy(&map);
    assert!(quota.malformed.is_empty());
    assert_eq!(quota.limit, Some(60));
    assert_eq!(quota.remaining, Some(56));
    assert_eq!(quota.used, Some(4));
    let reset_at = UNIX_EPOCH + Duration::from_secs(1_372_700_873);
    assert_eq!(quota.reset, Some(Reset::At(reset_at)));
    assert_eq!(
        quota
            .reset
            .expect("sent")
            .remaining_from(reset_at - Duration::from_secs(90)),
        Duration::from_secs(90)
    );
}

/// GitLab's documented headers (no `X-` prefix, an epoch reset) and a
/// delta-seconds reset as many other APIs send it.
#[test]
fn gitlabs_fields_and_delta_resets_read_as_documented() {
    let map = headers(&[
        ("ratelimit-limit", "60"),
        ("ratelimit-observed", "67"),
        ("ratelimit-remaining", "0"),
        ("ratelimit-reset", "1609844400"),
        ("ratelimit-resettime", "Tue, 05 Jan 2021 11:00:00 GMT"),
        ("retry-after", "3600"),
    ]);
    let quota = read::legacy(&map);
    assert_eq!((quota.limit, quota.remaining), (Some(60), Some(0)));
    assert_eq!(
        quota.reset,
        Some(Reset::At(UNIX_EPOCH + Duration::from_secs(1_609_844_400)))
    );
    assert_eq!(
        read::retry_after(&map, SystemTime::now()),
        Ok(Some(Duration::from_secs(3_600)))
    );

    // Delta-seconds, just below the epoch threshold and at it.
    let map = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "42")]);
    let quota = read::legacy(&map);
    assert_eq!(quota.reset, Some(Reset::After(Duration::from_secs(42))));
    assert_eq!(quota.limit, None);
    let map = headers(&[("ratelimit-reset", "999999999")]);
    assert_eq!(
        read::legacy(&map).reset,
        Some(Reset::After(Duration::from_secs(999_999_999)))
    );
    let map = headers(&[("ratelimit-reset", "1000000000")]);
    assert_eq!(
        read::legacy(&map).reset,
        Some(Reset::At(UNIX_EPOCH + Duration::from_secs(1_000_000_000)))
    );
    assert!(read::legacy(&HeaderMap::new()).is_empty());
}

/// express-rate-limit's `draft-6` and `draft-7` modes: the separate
/// `RateLimit-Limit`/`-Remaining`/`-Reset` (delta-seconds), revision 7's
/// `RateLimit` Dictionary, and the unnamed `RateLimit-Policy: 20;w=1` both
/// send.
#[test]
fn the_earlier_drafts_fields_read_as_express_rate_limit_sends_them() {
    let draft_6 = headers(&[
        ("ratelimit-policy", "20;w=1"),
        ("ratelimit-limit", "20"),
        ("ratelimit-remaining", "19"),
        ("ratelimit-reset", "1"),
    ]);
    let quota = read::legacy(&draft_6);
    assert_eq!((quota.limit, quota.remaining), (Some(20), Some(19)));
    assert_eq!(quota.reset, Some(Reset::After(Duration::from_secs(1))));
    let policies = read::policies(&draft_6).expect("reads");
    let read: Vec<_> = policies
        .members()
        .iter()
        .map(|p| (p.name(), p.quota(), p.window()))
        .collect();
    assert_eq!(read, [("", 20, Some(Duration::from_secs(1)))]);
    assert_eq!(read::draft_7_status(&draft_6), Ok(None));

    let draft_7 = headers(&[
        ("ratelimit-policy", "10, 10;w=1, 50;w=60;burst=5"),
        ("ratelimit", "limit=20, remaining=0, reset=1"),
    ]);
    let status = read::draft_7_status(&draft_7)
        .expect("reads")
        .expect("a Dictionary");
    assert_eq!(
        (status.limit(), status.remaining(), status.reset()),
        (Some(20), 0, Some(Duration::from_secs(1)))
    );
    // Revision 7's field is not a List of named members.
    assert!(read::statuses(&draft_7).is_err());
    let windows: Vec<_> = read::policies(&draft_7)
        .expect("reads")
        .members()
        .iter()
        .map(|p| (p.quota(), p.window().map(|w| w.as_secs())))
        .collect();
    assert_eq!(windows, [(10, None), (10, Some(1)), (50, Some(60))]);

    // A List of named members is not revision 7's Dictionary, nor is a
    // token-named member without `remaining`; values that are not
    // non-negative Integers are malformed.
    for list in [
        r#""api";r=19;t=1"#,
        "api;r=19;t=1",
        r#""20-in-1sec"; r=19; t=1"#,
    ] {
        let map = headers(&[("ratelimit", list)]);
        assert_eq!(read::draft_7_status(&map), Ok(None), "{list}");
        assert!(!read::statuses(&map).expect("a List").is_empty(), "{list}");
    }
    for malformed in [
        "limit=20, remaining=-1, reset=1",
        "remaining=1.5",
        "remaining=(1 2)",
        "remaining=1, reset=?1",
    ] {
        let map = headers(&[("ratelimit", malformed)]);
        assert_eq!(
            read::draft_7_status(&map),
            Err(ReadError::Malformed { field: "RateLimit" }),
            "{malformed}"
        );
    }
    // Two lines are one Dictionary, whose last value of a key wins.
    let map = headers(&[
        ("ratelimit", "limit=20, remaining=5"),
        ("ratelimit", "remaining=4, reset=2"),
    ]);
    let status = read::draft_7_status(&map)
        .expect("reads")
        .expect("a Dictionary");
    assert_eq!(
        (status.limit(), status.remaining(), status.reset()),
        (Some(20), 4, Some(Duration::from_secs(2)))
    );
    assert_eq!(read::draft_7_status(&HeaderMap::new()), Ok(None));
}

/// Discord's `X-RateLimit-Reset-After`: seconds with a decimal fraction,
/// read to the millisecond and rounded up.
#[test]
fn discords_reset_after_reads_to_the_millisecond() {
    for (value, millis) in [
        ("64.57", 64_570),
        ("0.001", 1),
        ("0.0001", 1),
        ("1.2345", 1_235),
        ("2", 2_000),
        ("0.000", 0),
    ] {
        let map = headers(&[("x-ratelimit-reset-after", value)]);
        assert_eq!(
            read::legacy(&map).reset_after,
            Some(Duration::from_millis(millis)),
            "{value}"
        );
    }
    for malformed in ["1.", ".5", "-1.5", "1.5s", ""] {
        let map = headers(&[("x-ratelimit-reset-after", malformed)]);
        let quota = read::legacy(&map);
        assert_eq!(quota.reset_after, None, "{malformed}");
        assert_eq!(quota.malformed, ["x-ratelimit-reset-after"], "{malformed}");
    }
}

/// Discord's fractional epoch reset rounds up; stacked limiters' lines read
/// as the most cautious value; an unreadable field is named and the rest
/// kept; a reset the clock cannot hold is malformed, not a panic.
#[test]
fn legacy_fields_are_read_one_by_one_and_cautiously() {
    let map = headers(&[
        ("x-ratelimit-limit", "10"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1470173023.123"),
        ("x-ratelimit-reset-after", "1.2"),
    ]);
    let quota = read::legacy(&map);
    assert_eq!(
        quota.reset,
        Some(Reset::At(UNIX_EPOCH + Duration::from_secs(1_470_173_024)))
    );
    let map = headers(&[
        ("x-ratelimit-limit", "100"),
        ("x-ratelimit-limit", "60"),
        ("x-ratelimit-remaining", "40"),
        ("x-ratelimit-remaining", "3"),
        ("x-ratelimit-reset", "30"),
        ("x-ratelimit-reset", "3600"),
    ]);
    let quota = read::legacy(&map);
    assert_eq!((quota.limit, quota.remaining), (Some(60), Some(3)));
    assert_eq!(quota.reset, Some(Reset::After(Duration::from_secs(3_600))));
    let map = headers(&[
        ("x-ratelimit-limit", "10, 10;w=1"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "99999999999999999999"),
    ]);
    let quota = read::legacy(&map);
    assert_eq!((quota.limit, quota.remaining), (None, Some(0)));
    assert_eq!(quota.reset, None);
    assert_eq!(quota.malformed, ["x-ratelimit-limit", "x-ratelimit-reset"]);
    let map = headers(&[("x-ratelimit-remaining", "-3")]);
    assert_eq!(read::legacy(&map).malformed, ["x-ratelimit-remaining"]);
}

/// An epoch reset is measured against the server's `Date`; one more than a
/// day in the past is read as the long delay it more likely was.
#[test]
fn resets_are_measured_against_the_servers_date() {
    let map = headers(&[
        ("date", "Wed, 21 Oct 2015 07:28:00 GMT"),
        ("x-ratelimit-reset", "1445412500"),
    ]);
    let server = read::server_date(&map).expect("a date");
    assert_eq!(server, UNIX_EPOCH + Duration::from_secs(1_445_412_480));
    let reset = read::legacy(&map).reset.expect("sent");
    assert_eq!(reset.remaining_from(server), Duration::from_secs(20));
    assert_eq!(
        reset.remaining_from(server + Duration::from_secs(60)),
        Duration::ZERO
    );
    let long_delay = Reset::At(UNIX_EPOCH + Duration::from_secs(1_200_000_000));
    assert_eq!(
        long_delay.remaining_from(server),
        Duration::from_secs(1_200_000_000)
    );
    assert_eq!(read::server_date(&HeaderMap::new()), None);
}

#[test]
fn grpc_pushback_reads_a_delay_or_do_not_retry() {
    let map = headers(&[("grpc-retry-pushback-ms", "1500")]);
    assert_eq!(
        read::grpc_pushback(&map),
        Some(Pushback::After(Duration::from_millis(1_500)))
    );
    assert_eq!(read::grpc_pushback(&HeaderMap::new()), None);
    // Negative, unreadable, beyond 32 bits, or disagreeing: do not retry.
    for bad in ["-1", "soon", "1.5", "-", "", "99999999999"] {
        let mut map = HeaderMap::new();
        map.insert(
            "grpc-retry-pushback-ms",
            HeaderValue::from_str(bad).expect("value"),
        );
        assert_eq!(
            read::grpc_pushback(&map),
            Some(Pushback::DoNotRetry),
            "{bad:?}"
        );
    }
    let map = headers(&[
        ("grpc-retry-pushback-ms", "10"),
        ("grpc-retry-pushback-ms", "20"),
    ]);
    assert_eq!(read::grpc_pushback(&map), Some(Pushback::DoNotRetry));
}

/// An empty field line adds no member.
#[test]
fn empty_field_lines_are_ignored() {
    let map = headers(&[
        ("ratelimit", ""),
        ("ratelimit", r#""a";r=1"#),
        ("ratelimit", " "),
    ]);
    let statuses = read::statuses(&map).expect("reads");
    assert_eq!(statuses.members().len(), 1);
    assert_eq!(statuses.skipped(), 0);
}

/// A field value from any bytes a header may hold, with the shapes the
/// readers look for mixed in.
fn field_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        "[ -~]{0,64}".prop_map(String::into_bytes),
        r#"("[a-z]{0,4}"|[a-z]{1,4}|[0-9]{1,20})(;[a-z]{1,2}=(-?[0-9]{1,20}|"[a-z]*"|:[A-Za-z0-9+/=]*:|\?[01]))*"#
            .prop_map(String::into_bytes),
        r#"(limit|remaining|reset)=(-?[0-9]{1,20}|[0-9]\.[0-9]|\?1)(, (limit|remaining|reset)=[0-9]{1,20}){0,2}"#
            .prop_map(String::into_bytes),
        "[0-9]{1,25}(\\.[0-9]{0,25})?".prop_map(String::into_bytes),
        "[0-9]{1,40}".prop_map(String::into_bytes),
    ]
}

proptest! {
    /// Whatever a server sends, in any of the fields, every reader returns
    /// without panicking, and a window read is never zero.
    #[test]
    fn hostile_values_are_errors_or_skipped_members(
        fields in prop::collection::vec(
            (
                prop::sample::select(vec![
                    "ratelimit", "ratelimit-policy", "retry-after", "date",
                    "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
                    "x-ratelimit-used", "ratelimit-limit", "ratelimit-remaining",
                    "ratelimit-reset", "ratelimit-used", "grpc-retry-pushback-ms",
                    "x-ratelimit-reset-after",
                ]),
                field_value(),
            ),
            1..6,
        ),
        now_seconds in 0u64..4_000_000_000,
    ) {
        let mut map = HeaderMap::new();
        for (name, value) in &fields {
            if let Ok(value) = HeaderValue::from_bytes(value) {
                map.append(HeaderName::from_static(name), value);
            }
        }
        let now = UNIX_EPOCH + Duration::from_secs(now_seconds);
        if let Ok(policies) = read::policies(&map) {
            prop_assert!(policies.members().iter().all(|p| p.window() != Some(Duration::ZERO)));
        }
        let _ = read::statuses(&map);
        let _ = read::draft_7_status(&map);
        let _ = read::retry_after(&map, now);
        let _ = read::server_date(&map);
        if let Some(reset) = read::legacy(&map).reset {
            let _ = reset.remaining_from(now);
        }
        let _ = read::grpc_pushback(&map);
    }
}
