//! The protocol through a real tonic client over TCP, against a server
//! started in process on loopback, deciding on a memory store whose clock
//! the tests move.

mod common;

use std::time::Duration;

use common::{costing, descriptor, request, start, summary};
use runlimit_memory::ManualClock;
use runlimit_server::proto::{
    RateLimitDescriptor, RateLimitRequest, RateLimitUnit,
    rate_limit_descriptor::RateLimitOverride,
    rate_limit_response::{Code, RateLimit, rate_limit::Unit},
};
use tonic::Code as Grpc;

const RULES: &str = "
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /special
    rate_limit:
      unit: minute
      requests_per_unit: 10
      name: special
      replaces: [{name: per-user}]
";

fn one(entries: &[(&str, &str)]) -> RateLimitRequest {
    request("d", vec![descriptor(entries)])
}

#[tokio::test]
async fn remaining_counts_down_to_zero_then_over_until_the_window_resets() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    let per_user = Some(RateLimit {
        name: "per-user".into(),
        requests_per_unit: 3,
        unit: Unit::Minute.into(),
    });
    for remaining in [2, 1, 0] {
        let response = server.decide(one(&[("user", "alice")])).await;
        assert_eq!(response.overall_code(), Code::Ok);
        assert_eq!(response.statuses.len(), 1);
        assert_eq!(response.statuses[0].current_limit, per_user);
        assert_eq!(
            summary(&response.statuses[0]),
            (Code::Ok, remaining, Some(60))
        );
    }
    let over = server.decide(one(&[("user", "alice")])).await;
    assert_eq!(over.overall_code(), Code::OverLimit);
    assert_eq!(over.statuses[0].current_limit, per_user);
    assert_eq!(summary(&over.statuses[0]), (Code::OverLimit, 0, Some(60)));

    // 20.5 s later: 39.5 s to wait, rounded up.
    clock.advance(Duration::from_millis(20_500));
    let over = server.decide(one(&[("user", "alice")])).await;
    assert_eq!(summary(&over.statuses[0]), (Code::OverLimit, 0, Some(40)));
    // Another subject has a window of its own.
    let other = server.decide(one(&[("user", "bob")])).await;
    assert_eq!(summary(&other.statuses[0]), (Code::Ok, 2, Some(60)));

    clock.advance(Duration::from_millis(39_500));
    let renewed = server.decide(one(&[("user", "alice")])).await;
    assert_eq!(renewed.overall_code(), Code::Ok);
    assert_eq!(summary(&renewed.statuses[0]), (Code::Ok, 2, Some(60)));
    server.stop().await;
}

#[tokio::test]
async fn statuses_are_one_per_descriptor_in_request_order() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    let response = server
        .decide(request(
            "d",
            vec![
                descriptor(&[("nothing", "matches")]),
                descriptor(&[("user", "carol")]),
                descriptor(&[("free", "x")]),
                descriptor(&[("user", "carol"), ("deeper", "than any rule")]),
            ],
        ))
        .await;
    assert_eq!(response.overall_code(), Code::Ok);
    let statuses = &response.statuses;
    assert_eq!(statuses.len(), 4);
    // No rule: OK, no limit.
    assert_eq!(statuses[0].current_limit, None);
    assert_eq!(summary(&statuses[0]), (Code::Ok, 0, None));
    assert_eq!(summary(&statuses[1]), (Code::Ok, 2, Some(60)));
    // Unlimited: never counted, u32::MAX remaining.
    assert_eq!(statuses[2].current_limit, None);
    assert_eq!(summary(&statuses[2]), (Code::Ok, u32::MAX, None));
    assert_eq!(summary(&statuses[3]), (Code::Ok, 0, None));

    // An unknown domain limits nothing.
    let unknown = server
        .decide(request("elsewhere", vec![descriptor(&[("user", "carol")])]))
        .await;
    assert_eq!(unknown.overall_code(), Code::Ok);
    assert_eq!(unknown.statuses[0].current_limit, None);
    server.stop().await;
}

#[tokio::test]
async fn a_denied_request_consumes_nothing_of_its_other_descriptors() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    let both = || {
        request(
            "d",
            vec![
                descriptor(&[("user", "dan")]),
                descriptor(&[("ip", "192.0.2.1")]),
            ],
        )
    };
    for (user, ip) in [(2, 1), (1, 0)] {
        let response = server.decide(both()).await;
        assert_eq!(response.overall_code(), Code::Ok);
        assert_eq!(summary(&response.statuses[0]), (Code::Ok, user, Some(60)));
        assert_eq!(summary(&response.statuses[1]), (Code::Ok, ip, Some(60)));
    }
    // The address is spent: the request is over, and the user's status
    // says what is left without this request.
    for _ in 0..3 {
        let response = server.decide(both()).await;
        assert_eq!(response.overall_code(), Code::OverLimit);
        assert_eq!(summary(&response.statuses[0]), (Code::Ok, 1, Some(60)));
        assert_eq!(
            summary(&response.statuses[1]),
            (Code::OverLimit, 0, Some(60))
        );
    }
    // None of the refused requests counted against the user.
    let alone = server.decide(one(&[("user", "dan")])).await;
    assert_eq!(summary(&alone.statuses[0]), (Code::Ok, 0, Some(60)));
    server.stop().await;
}

#[tokio::test]
async fn descriptors_of_one_counter_count_once_at_their_summed_cost() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    let twice = || {
        request(
            "d",
            vec![
                descriptor(&[("user", "fay")]),
                descriptor(&[("user", "fay")]),
            ],
        )
    };
    let response = server.decide(twice()).await;
    assert_eq!(response.overall_code(), Code::Ok);
    assert_eq!(summary(&response.statuses[0]), (Code::Ok, 1, Some(60)));
    assert_eq!(summary(&response.statuses[1]), (Code::Ok, 1, Some(60)));
    // Two more do not fit in the one left: both over, nothing counted.
    let response = server.decide(twice()).await;
    assert_eq!(response.overall_code(), Code::OverLimit);
    let left = server.decide(one(&[("user", "fay")])).await;
    assert_eq!(summary(&left.statuses[0]), (Code::Ok, 0, Some(60)));
    server.stop().await;
}

#[tokio::test]
async fn hits_addend_is_the_cost_and_zero_checks_without_counting() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    // The request's cost applies to descriptors without their own.
    let response = server
        .decide(RateLimitRequest {
            hits_addend: 2,
            ..one(&[("user", "gus")])
        })
        .await;
    assert_eq!(summary(&response.statuses[0]), (Code::Ok, 1, Some(60)));
    // Cost 0, twice: a peek.
    for _ in 0..2 {
        let peek = server
            .decide(request("d", vec![costing(0, &[("user", "gus")])]))
            .await;
        assert_eq!(peek.overall_code(), Code::Ok);
        assert_eq!(summary(&peek.statuses[0]), (Code::Ok, 1, Some(60)));
    }
    // A descriptor's own cost wins over the request's: 2 do not fit in 1.
    let over = server
        .decide(RateLimitRequest {
            hits_addend: 1,
            ..request("d", vec![costing(2, &[("user", "gus")])])
        })
        .await;
    assert_eq!(over.overall_code(), Code::OverLimit);
    // More than the limit can ever admit is over, not an error.
    let never = server
        .decide(request("d", vec![costing(4, &[("user", "hal")])]))
        .await;
    assert_eq!(never.overall_code(), Code::OverLimit);
    assert_eq!(summary(&never.statuses[0]), (Code::OverLimit, 0, Some(60)));
    // Neither counted.
    let response = server.decide(one(&[("user", "gus")])).await;
    assert_eq!(summary(&response.statuses[0]), (Code::Ok, 0, Some(60)));
    let response = server.decide(one(&[("user", "hal")])).await;
    assert_eq!(summary(&response.statuses[0]), (Code::Ok, 2, Some(60)));
    // A peek of a spent quota says over: one more unit would not pass.
    let spent = server
        .decide(request("d", vec![costing(0, &[("user", "gus")])]))
        .await;
    assert_eq!(spent.overall_code(), Code::OverLimit);
    assert_eq!(summary(&spent.statuses[0]), (Code::OverLimit, 0, Some(60)));
    server.stop().await;
}

#[tokio::test]
async fn shadow_rules_report_ok_and_count_only_requests_within_their_limits() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    let first = server.decide(one(&[("shadow", "ivy")])).await;
    assert_eq!(summary(&first.statuses[0]), (Code::Ok, 0, Some(60)));
    let over = server.decide(one(&[("shadow", "ivy")])).await;
    assert_eq!(over.overall_code(), Code::Ok);
    assert_eq!(summary(&over.statuses[0]), (Code::Ok, 0, Some(60)));
    assert!(over.statuses[0].current_limit.is_some());

    // A request refused by another rule does not count against a shadow rule.
    let refused = server
        .decide(request(
            "d",
            vec![
                descriptor(&[("blocked", "x")]),
                descriptor(&[("shadow", "jay")]),
            ],
        ))
        .await;
    assert_eq!(refused.overall_code(), Code::OverLimit);
    assert_eq!(summary(&refused.statuses[1]), (Code::Ok, 1, Some(0)));
    let counted = server.decide(one(&[("shadow", "jay")])).await;
    assert_eq!(summary(&counted.statuses[0]), (Code::Ok, 0, Some(60)));

    let metrics = server.metrics.render();
    assert!(
        metrics.contains(r#"ratelimit_service_rate_limit_shadow_mode{domain="d",rule="shadow"} 1"#),
        "{metrics}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_rule_that_replaces_another_drops_it_from_the_request() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    let response = server
        .decide(request(
            "d",
            vec![
                descriptor(&[("user", "kim")]),
                descriptor(&[("path", "/special")]),
            ],
        ))
        .await;
    assert_eq!(response.overall_code(), Code::Ok);
    assert_eq!(response.statuses[0].current_limit, None);
    assert_eq!(summary(&response.statuses[0]), (Code::Ok, 0, None));
    assert_eq!(
        response.statuses[1].current_limit,
        Some(RateLimit {
            name: "special".into(),
            requests_per_unit: 10,
            unit: Unit::Minute.into(),
        })
    );
    assert_eq!(summary(&response.statuses[1]), (Code::Ok, 9, Some(60)));
    // The replaced rule counted nothing.
    let alone = server.decide(one(&[("user", "kim")])).await;
    assert_eq!(summary(&alone.statuses[0]), (Code::Ok, 2, Some(60)));
    server.stop().await;
}

#[tokio::test]
async fn quota_mode_is_over_only_when_every_quota_descriptor_is() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    let quotas = || {
        request(
            "d",
            vec![
                descriptor(&[("quota_a", "lee")]),
                descriptor(&[("quota_b", "lee")]),
            ],
        )
    };
    let codes = |response: &runlimit_server::proto::RateLimitResponse| {
        (
            response.overall_code(),
            response
                .statuses
                .iter()
                .map(|status| (status.code(), status.limit_remaining))
                .collect::<Vec<_>>(),
        )
    };
    let response = server.decide(quotas()).await;
    assert_eq!(
        codes(&response),
        (Code::Ok, vec![(Code::Ok, 0), (Code::Ok, 1)])
    );
    // One quota descriptor over: the request is not.
    let response = server.decide(quotas()).await;
    assert_eq!(
        codes(&response),
        (Code::Ok, vec![(Code::OverLimit, 0), (Code::Ok, 0)])
    );
    // Both over: it is.
    let response = server.decide(quotas()).await;
    assert_eq!(
        codes(&response),
        (
            Code::OverLimit,
            vec![(Code::OverLimit, 0), (Code::OverLimit, 0)]
        )
    );
    server.stop().await;
}

#[tokio::test]
async fn a_request_over_on_its_quotas_gives_back_its_enforced_hits() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    let mixed = || {
        request(
            "d",
            vec![
                descriptor(&[("user", "max")]),
                descriptor(&[("quota_a", "max")]),
            ],
        )
    };
    let response = server.decide(mixed()).await;
    assert_eq!(response.overall_code(), Code::Ok);
    assert_eq!(summary(&response.statuses[0]), (Code::Ok, 2, Some(60)));
    // The only quota descriptor is over: the request is, and the user's
    // hit is given back before the answer.
    for _ in 0..2 {
        let response = server.decide(mixed()).await;
        assert_eq!(response.overall_code(), Code::OverLimit);
        assert_eq!(summary(&response.statuses[0]), (Code::Ok, 2, Some(60)));
        assert_eq!(response.statuses[1].code(), Code::OverLimit);
    }
    let alone = server.decide(one(&[("user", "max")])).await;
    assert_eq!(summary(&alone.statuses[0]), (Code::Ok, 1, Some(60)));

    // An enforced descriptor over: quota descriptors are not counted.
    let refused = server
        .decide(request(
            "d",
            vec![
                descriptor(&[("blocked", "x")]),
                descriptor(&[("quota_b", "max")]),
            ],
        ))
        .await;
    assert_eq!(refused.overall_code(), Code::OverLimit);
    let quota = server.decide(one(&[("quota_b", "max")])).await;
    assert_eq!(summary(&quota.statuses[0]), (Code::Ok, 1, Some(60)));
    server.stop().await;
}

#[tokio::test]
async fn a_rule_of_zero_requests_blocks_without_counting() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    let response = server.decide(one(&[("blocked", "ned")])).await;
    assert_eq!(response.overall_code(), Code::OverLimit);
    assert_eq!(
        response.statuses[0].current_limit,
        Some(RateLimit {
            name: String::new(),
            requests_per_unit: 0,
            unit: Unit::Hour.into(),
        })
    );
    assert_eq!(
        summary(&response.statuses[0]),
        (Code::OverLimit, 0, Some(3_600))
    );
    server.stop().await;
}

fn overriding(
    requests_per_unit: u32,
    unit: RateLimitUnit,
    entries: &[(&str, &str)],
) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit,
            unit: unit.into(),
        }),
        ..descriptor(entries)
    }
}

#[tokio::test]
async fn a_limit_given_in_the_request_replaces_the_configuration() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    let given = |requests| {
        request(
            "d",
            vec![overriding(
                requests,
                RateLimitUnit::Second,
                &[("user", "ola")],
            )],
        )
    };
    for remaining in [1, 0] {
        let response = server.decide(given(2)).await;
        assert_eq!(
            response.statuses[0].current_limit,
            Some(RateLimit {
                name: String::new(),
                requests_per_unit: 2,
                unit: Unit::Second.into(),
            })
        );
        assert_eq!(
            summary(&response.statuses[0]),
            (Code::Ok, remaining, Some(1))
        );
    }
    assert_eq!(
        server.decide(given(2)).await.overall_code(),
        Code::OverLimit
    );
    // The configuration's rule for the same entries counted nothing.
    let configured = server.decide(one(&[("user", "ola")])).await;
    assert_eq!(summary(&configured.statuses[0]), (Code::Ok, 2, Some(60)));
    // A second later the window is new.
    clock.advance(Duration::from_secs(1));
    assert_eq!(server.decide(given(2)).await.overall_code(), Code::Ok);
    // In an unknown domain, an override limits nothing either.
    let unknown = server
        .decide(request(
            "elsewhere",
            vec![overriding(1, RateLimitUnit::Minute, &[("k", "v")])],
        ))
        .await;
    assert_eq!(unknown.statuses[0].current_limit, None);

    let metrics = server.metrics.render();
    assert!(
        metrics.contains(
            r#"ratelimit_service_rate_limit_over_limit{domain="d",rule="override:user"} 1"#
        ),
        "{metrics}"
    );
    assert!(!metrics.contains("ola"), "{metrics}");
    server.stop().await;
}

#[tokio::test]
async fn malformed_requests_are_invalid_arguments_and_count_nothing() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    let negative = RateLimitDescriptor {
        is_negative_hits: true,
        ..descriptor(&[("user", "pat")])
    };
    let cases: Vec<(RateLimitRequest, &str)> = vec![
        (request("", vec![descriptor(&[("user", "pat")])]), "domain"),
        (request("d", vec![]), "descriptor list"),
        (
            request("d", vec![descriptor(&[("user", "pat")]), descriptor(&[])]),
            "descriptor 1 has no entries",
        ),
        (
            request("d", vec![descriptor(&[("user", "pat"), ("", "x")])]),
            "entry 1 of descriptor 0",
        ),
        (request("d", vec![negative]), "negative"),
        (
            request(
                "d",
                vec![overriding(5, RateLimitUnit::Unknown, &[("user", "pat")])],
            ),
            "unit 0",
        ),
        (
            request(
                "d",
                vec![RateLimitDescriptor {
                    limit: Some(RateLimitOverride {
                        requests_per_unit: 5,
                        unit: 7,
                    }),
                    ..descriptor(&[("user", "pat")])
                }],
            ),
            "unit 7",
        ),
        (
            request(
                "d",
                vec![overriding(0, RateLimitUnit::Minute, &[("user", "pat")])],
            ),
            "allows 0 requests",
        ),
        (
            request("d", vec![descriptor(&[("user", "pat")]); 17]),
            "17 descriptors",
        ),
    ];
    for (request, message) in cases {
        let status = server.ask(request).await.expect_err(message);
        assert_eq!(status.code(), Grpc::InvalidArgument, "{message}");
        assert!(status.message().contains(message), "{}", status.message());
        assert!(!status.message().contains("pat"), "{}", status.message());
    }
    let response = server.decide(one(&[("user", "pat")])).await;
    assert_eq!(summary(&response.statuses[0]), (Code::Ok, 2, Some(60)));
    server.stop().await;
}

/// A quota-mode descriptor that is over without being counted (peeked with
/// `hits_addend: 0`, or a rule blocking everything) makes the request over
/// when it is the only one: the enforced descriptors beside it consume
/// nothing.
#[tokio::test]
async fn a_request_over_by_a_peeked_quota_descriptor_consumes_nothing() {
    let clock = ManualClock::new();
    let mut server = start(RULES, &clock).await;
    // Spend quota_a.
    let spent = server.decide(one(&[("quota_a", "lee")])).await;
    assert_eq!(spent.overall_code(), Code::Ok);
    for _ in 0..4 {
        let response = server
            .decide(request(
                "d",
                vec![
                    descriptor(&[("user", "kim")]),
                    costing(0, &[("quota_a", "lee")]),
                ],
            ))
            .await;
        assert_eq!(response.overall_code(), Code::OverLimit);
    }
    // None of the four counted against the user's three a minute.
    let alone = server.decide(one(&[("user", "kim")])).await;
    assert_eq!(summary(&alone.statuses[0]), (Code::Ok, 2, Some(60)));
    server.stop().await;
}
