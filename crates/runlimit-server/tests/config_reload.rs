//! `Config::continuing_from`: what a reload keeps of each rule's counters.

use runlimit_core::{AnyPolicy, Policy, QuotaMode};
use runlimit_server::config::{Config, Entry, Limit};

/// A configuration of domain `d` whose descriptor `key: k, value: <value>`
/// carries `rate_limit`.
fn config(value: &str, rate_limit: &str) -> Config {
    let source = format!(
        "domain: d
descriptors:
  - key: k
    value: {value}
    rate_limit: {rate_limit}
  - key: other
    rate_limit: {{unit: hour, requests_per_unit: 7}}
"
    );
    Config::from_sources([("d.yaml", source.as_str())]).expect("valid")
}

fn policy<'c>(config: &'c Config, key: &'static str, value: &'static str) -> Option<&'c AnyPolicy> {
    let matched = config
        .domain("d")
        .expect("the domain")
        .resolve(&[Entry::new(key, value)])?;
    match &matched.rule.limit {
        Limit::Limited { policy, .. } => Some(policy),
        _ => None,
    }
}

const TEN_PER_MINUTE: &str = "{unit: minute, requests_per_unit: 10}";
const TWENTY_PER_MINUTE: &str = "{unit: minute, requests_per_unit: 20}";

#[test]
fn an_unchanged_rule_keeps_an_equal_policy() {
    let before = config("v", TEN_PER_MINUTE);
    let after = config("v", TEN_PER_MINUTE).continuing_from(&before);
    let policy = policy(&after, "k", "v").expect("limited");
    assert_eq!(Some(policy), self::policy(&before, "k", "v"));
    assert!(policy.predecessor().is_none());
}

#[test]
fn a_changed_limit_continues_from_the_previous_policy() {
    let before = config("v", TEN_PER_MINUTE);
    let after = config("v", TWENTY_PER_MINUTE).continuing_from(&before);
    let old = policy(&before, "k", "v").expect("limited");
    let new = policy(&after, "k", "v").expect("limited");
    assert_eq!(new.id(), old.id());
    assert_ne!(new.fingerprint(), old.fingerprint());
    assert_eq!(new.predecessor(), Some(old));
    // The rule beside it did not change.
    assert!(
        policy(&after, "other", "x")
            .expect("limited")
            .predecessor()
            .is_none()
    );
}

#[test]
fn a_changed_algorithm_continues_too() {
    let before = config("v", TEN_PER_MINUTE);
    let after = config(
        "v",
        "{unit: minute, requests_per_unit: 10, runlimit: {algorithm: gcra, burst: 3}}",
    )
    .continuing_from(&before);
    let new = policy(&after, "k", "v").expect("limited");
    assert!(matches!(new, AnyPolicy::Gcra(_)));
    assert_eq!(new.predecessor(), policy(&before, "k", "v"));
}

#[test]
fn a_reload_without_changes_keeps_a_carry_under_way() {
    let first = config("v", TEN_PER_MINUTE);
    let second = config("v", TWENTY_PER_MINUTE).continuing_from(&first);
    let third = config("v", TWENTY_PER_MINUTE).continuing_from(&second);
    let old = policy(&first, "k", "v").expect("limited");
    assert_eq!(policy(&third, "k", "v"), policy(&second, "k", "v"));
    assert_eq!(
        policy(&third, "k", "v").expect("limited").predecessor(),
        Some(old)
    );
}

#[test]
fn a_shadow_mode_switch_keeps_counters_and_the_new_mode() {
    let before = config("v", TEN_PER_MINUTE);
    let source = "domain: d
descriptors:
  - key: k
    value: v
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
";
    let after = Config::from_sources([("d.yaml", source)])
        .expect("valid")
        .continuing_from(&before);
    let old = policy(&before, "k", "v").expect("limited");
    let new = policy(&after, "k", "v").expect("limited");
    assert_eq!(new.quota_mode(), QuotaMode::Shadow);
    assert_eq!(new.fingerprint(), old.fingerprint());
    assert!(new.predecessor().is_none());
}

#[test]
fn a_removed_rule_is_gone_and_a_renamed_path_starts_fresh() {
    let before = config("v", TEN_PER_MINUTE);
    let source = "domain: d
descriptors:
  - key: other
    rate_limit: {unit: hour, requests_per_unit: 7}
";
    let removed = Config::from_sources([("d.yaml", source)])
        .expect("valid")
        .continuing_from(&before);
    let paths: Vec<_> = removed
        .domain("d")
        .expect("the domain")
        .rules()
        .map(|rule| rule.path.as_str())
        .collect();
    assert_eq!(paths, ["other"]);
    assert!(policy(&removed, "k", "v").is_none());

    let renamed = config("w", TWENTY_PER_MINUTE).continuing_from(&before);
    let new = policy(&renamed, "k", "w").expect("limited");
    assert_ne!(Some(new.id()), policy(&before, "k", "v").map(|p| p.id()));
    assert!(new.predecessor().is_none());
}

#[test]
fn rules_that_counted_nothing_leave_no_lineage() {
    for previous in ["{unit: minute, requests_per_unit: 0}", "{unlimited: true}"] {
        let before = config("v", previous);
        let after = config("v", TEN_PER_MINUTE).continuing_from(&before);
        assert!(
            policy(&after, "k", "v")
                .expect("limited")
                .predecessor()
                .is_none()
        );
    }
}

#[test]
fn domains_continue_apart() {
    let one = |domain: &str, limit: u32| {
        format!(
            "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: {limit}}}\n"
        )
    };
    let before = Config::from_sources([("a.yaml", one("a", 1).as_str())]).expect("valid");
    let after = Config::from_sources([("b.yaml", one("b", 2).as_str())])
        .expect("valid")
        .continuing_from(&before);
    let Some(Limit::Limited { policy, .. }) = after
        .domain("b")
        .and_then(|d| d.resolve(&[Entry::new("k", "v")]))
        .map(|m| m.rule.limit.clone())
    else {
        panic!("limited");
    };
    assert!(policy.predecessor().is_none());
}

#[test]
fn a_configuration_is_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Config>();
    assert_send_sync::<runlimit_server::config::Domain>();
    assert_send_sync::<runlimit_server::config::ConfigError>();
}
