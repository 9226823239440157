//! Runlimit's per-rule settings (`rate_limit.runlimit`): the policies they
//! build, and the combinations refused when the configuration is built.

use std::time::Duration;

use runlimit_core::{
    AnyPolicy, MAX_LIMIT, MAX_WINDOW, Policy, PolicyError, PolicyField, QuotaMode,
};
use runlimit_server::config::{Config, Entry, Limit, ProblemKind, Rule, WarningKind};

/// A file of domain `d` whose one descriptor `k` has `rate_limit`, written
/// as the lines of a block mapping indented by 6.
fn file(rate_limit: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n{rate_limit}")
}

fn load(rate_limit: &str) -> Config {
    Config::from_sources([("d.yaml", file(rate_limit).as_str())]).expect("valid")
}

fn rule(config: &Config) -> &Rule {
    config
        .domain("d")
        .expect("the domain")
        .resolve(&[Entry::new("k", "v")])
        .expect("a rule")
        .rule
}

fn policy(config: &Config) -> &AnyPolicy {
    match &rule(config).limit {
        Limit::Limited { policy, .. } => policy,
        other => panic!("not limited: {other:?}"),
    }
}

/// The first problem refusing `rate_limit`: its kind, path and line.
fn refusal(rate_limit: &str) -> (ProblemKind, String, usize) {
    let error = Config::from_sources([("d.yaml", file(rate_limit).as_str())]).expect_err("refused");
    let problem = &error.problems()[0];
    (
        problem.kind().clone(),
        problem.location().path().to_owned(),
        problem.location().line(),
    )
}

#[test]
fn a_rule_without_settings_is_a_fixed_window_per_unit() {
    let config = load("      unit: minute\n      requests_per_unit: 30\n");
    let AnyPolicy::FixedWindow(policy) = policy(&config) else {
        panic!("a fixed window");
    };
    assert_eq!(policy.limit(), 30);
    assert_eq!(policy.window(), Duration::from_secs(60));
    assert_eq!(policy.quota_mode(), QuotaMode::Enforce);
    assert_eq!(policy.scope().as_str(), "descriptor");
    assert!(!rule(&config).lease);
}

#[test]
fn every_algorithm_and_a_period_that_replaces_the_unit() {
    let config = load(
        "      unit: second\n      requests_per_unit: 100\n      runlimit: {algorithm: gcra, burst: 20, period: 500ms}\n",
    );
    let AnyPolicy::Gcra(gcra) = policy(&config) else {
        panic!("gcra");
    };
    assert_eq!(gcra.quota(), 100);
    assert_eq!(gcra.period(), Duration::from_millis(500));
    assert_eq!(gcra.burst_capacity(), 20);
    // The response still reports the limit as written.
    assert!(matches!(
        rule(&config).limit,
        Limit::Limited {
            requests_per_unit: 100,
            ..
        }
    ));

    let config =
        load("      unit: hour\n      requests_per_unit: 10\n      runlimit: {algorithm: gcra}\n");
    let AnyPolicy::Gcra(gcra) = policy(&config) else {
        panic!("gcra");
    };
    assert_eq!(gcra.burst_capacity(), 10, "the burst defaults to the limit");
    assert_eq!(gcra.period(), Duration::from_secs(3_600));

    let config = load(
        "      unit: minute\n      requests_per_unit: 10\n      runlimit:\n        algorithm: sliding_window\n        period: 1h30m\n",
    );
    let AnyPolicy::SlidingWindow(sliding) = policy(&config) else {
        panic!("a sliding window");
    };
    assert_eq!(sliding.limit(), 10);
    assert_eq!(sliding.window(), Duration::from_secs(5_400));

    let config = load(
        "      unit: minute\n      requests_per_unit: 10\n      runlimit: {algorithm: FIXED_WINDOW, period: 90s, lease: true}\n",
    );
    let AnyPolicy::FixedWindow(fixed) = policy(&config) else {
        panic!("a fixed window");
    };
    assert_eq!(fixed.window(), Duration::from_secs(90));
    assert!(rule(&config).lease);
}

#[test]
fn shadow_mode_builds_a_shadow_policy_with_the_same_counters() {
    let plain = load("      unit: minute\n      requests_per_unit: 30\n");
    let shadow = Config::from_sources([(
        "d.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 30}\n",
    )])
    .expect("valid");
    assert_eq!(policy(&shadow).quota_mode(), QuotaMode::Shadow);
    assert_eq!(policy(&shadow).fingerprint(), policy(&plain).fingerprint());
}

#[test]
fn policy_ids_derive_from_domain_and_path_only() {
    let source = |limit: u32, key: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: {key}\n    descriptors:\n      - key: s\n        rate_limit: {{unit: second, requests_per_unit: {limit}}}\n"
        )
    };
    let id = |text: String, key: &'static str| {
        let config = Config::from_sources([("d.yaml", text.as_str())]).expect("valid");
        let matched = config
            .domain("d")
            .expect("the domain")
            .resolve(&[Entry::new(key, "v"), Entry::new("s", "t")])
            .map(|m| m.rule.limit.clone());
        match matched {
            Some(Limit::Limited { policy, .. }) => policy.id().clone(),
            other => panic!("{other:?}"),
        }
    };
    let first = id(source(5, "k"), "k");
    assert_eq!(first, id(source(9, "k"), "k"), "a new limit keeps the id");
    assert_ne!(
        first,
        id(source(5, "j"), "j"),
        "another path has another id"
    );
    assert!(first.as_str().starts_with("r.") && first.as_str().len() == 34);
}

#[test]
fn invalid_combinations_are_refused_where_they_are_written() {
    let path = |key: &str| format!("descriptors[0].rate_limit.runlimit.{key}");
    let rate = "      unit: second\n      requests_per_unit: 10\n";
    let with = |settings: &str| format!("{rate}      runlimit:\n{settings}");

    assert_eq!(
        refusal(&with("        burst: 5\n")),
        (ProblemKind::BurstWithoutGcra, path("burst"), 8)
    );
    assert_eq!(
        refusal(&with(
            "        algorithm: sliding_window\n        burst: 5\n"
        )),
        (ProblemKind::BurstWithoutGcra, path("burst"), 9)
    );
    assert_eq!(
        refusal(&with("        algorithm: gcra\n        burst: 0\n")),
        (
            ProblemKind::Policy(PolicyError::CountOutOfRange {
                field: PolicyField::BurstCapacity,
                value: 0,
                maximum: MAX_LIMIT,
            }),
            path("burst"),
            9
        )
    );
    assert_eq!(
        refusal(&with("        period: 367d\n")),
        (
            ProblemKind::Policy(PolicyError::DurationOutOfRange {
                field: PolicyField::Period,
                value: Duration::from_secs(367 * 86_400),
                maximum: MAX_WINDOW,
            }),
            path("period"),
            8
        )
    );
    assert_eq!(
        refusal(&with("        period: 0s\n")).0,
        ProblemKind::Policy(PolicyError::DurationOutOfRange {
            field: PolicyField::Period,
            value: Duration::ZERO,
            maximum: MAX_WINDOW,
        })
    );
    assert_eq!(
        refusal(&with("        period: 90\n")),
        (
            ProblemKind::InvalidDuration {
                text: "90".to_owned()
            },
            path("period"),
            8
        )
    );
    assert_eq!(
        refusal(&with("        algorithm: token_bucket\n")),
        (
            ProblemKind::UnknownAlgorithm {
                name: "token_bucket".to_owned()
            },
            path("algorithm"),
            8
        )
    );
    assert_eq!(
        refusal(&with("        bogus: 1\n")),
        (
            ProblemKind::UnknownKey {
                key: "bogus".to_owned()
            },
            path("bogus"),
            8
        )
    );
    assert_eq!(
        refusal(&with("        burst: 1.5\n        algorithm: gcra\n")).0,
        ProblemKind::Type {
            found: "!!float `1.5`".to_owned(),
            expected: "uint64",
        }
    );
    assert_eq!(
        refusal(&with("        lease: sometimes\n")).0,
        ProblemKind::Type {
            found: "!!str `sometimes`".to_owned(),
            expected: "bool",
        }
    );
    // A burst that takes longer than MAX_WINDOW to replenish: 2 per year.
    let (kind, at, _) = refusal(
        "      unit: year\n      requests_per_unit: 1\n      runlimit: {algorithm: gcra, burst: 2}\n",
    );
    assert!(
        matches!(
            kind,
            ProblemKind::Policy(PolicyError::ReplenishmentTooLong { .. })
        ),
        "{kind:?}"
    );
    assert_eq!(at, path("burst"));
}

#[test]
fn the_runlimit_key_is_refused_outside_rate_limit() {
    for (source, path) in [
        ("domain: d\nrunlimit: {lease: true}\n", "runlimit"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: s\n        runlimit: {}\n",
            "descriptors[0].descriptors[0].runlimit",
        ),
    ] {
        let error = Config::from_sources([("d.yaml", source)]).expect_err("refused");
        let problem = &error.problems()[0];
        assert_eq!(problem.kind(), &ProblemKind::MisplacedExtension);
        assert_eq!(problem.location().path(), path);
    }
}

#[test]
fn settings_on_a_rule_that_counts_nothing_load_with_a_warning() {
    for rate_limit in [
        "      unlimited: true\n      runlimit: {algorithm: gcra}\n",
        "      unit: second\n      requests_per_unit: 0\n      runlimit: {algorithm: gcra}\n",
    ] {
        let config = load(rate_limit);
        let kinds: Vec<_> = config.warnings().iter().map(|w| w.kind().clone()).collect();
        assert_eq!(kinds, [WarningKind::UnusedExtension], "{rate_limit}");
    }
    // They are still checked.
    let (kind, _, _) = refusal("      unlimited: true\n      runlimit: {burst: 3}\n");
    assert_eq!(kind, ProblemKind::BurstWithoutGcra);
}

#[test]
fn a_missing_requests_per_unit_blocks_with_a_warning() {
    let config = load("      unit: second\n");
    assert!(matches!(rule(&config).limit, Limit::Blocked { .. }));
    let kinds: Vec<_> = config.warnings().iter().map(|w| w.kind().clone()).collect();
    assert_eq!(kinds, [WarningKind::MissingRequestsPerUnit]);
}
