//! The configuration conformance table: YAML files, whether they load, and
//! which rule each request descriptor matches, or which problem refuses them
//! and where.
//!
//! Every file is written from the documented schema of the reference
//! rate-limit service. A refused file states the reference's message (after
//! the `file: ` prefix), the YAML path and the line of its first problem.

use runlimit_core::{Policy, QuotaMode};
use runlimit_server::config::{Config, ConfigError, Entry, Limit, Rule, Unit};
use serde_json::json;

/// A request descriptor in a domain, and the path of the rule it must
/// match, or `None` for no rule.
struct Request {
    domain: &'static str,
    entries: &'static [(&'static str, &'static str)],
    rule: Option<&'static str>,
}

/// A request in the domain `d`.
const fn req(
    entries: &'static [(&'static str, &'static str)],
    rule: Option<&'static str>,
) -> Request {
    Request {
        domain: "d",
        entries,
        rule,
    }
}

enum Expect {
    /// Loads; every request matches as stated, and `check` holds.
    Accepts {
        requests: Vec<Request>,
        check: Option<fn(&Config)>,
    },
    /// Refused; the first problem is in `file`, at `path` and `line`, and
    /// reads `message` after the file's name.
    Refuses {
        file: &'static str,
        message: &'static str,
        path: &'static str,
        line: usize,
    },
}

struct Case {
    name: &'static str,
    files: Vec<(&'static str, &'static str)>,
    expect: Expect,
}

/// A case of one file, `d.yaml`, that loads.
fn accepts(name: &'static str, source: &'static str, requests: Vec<Request>) -> Case {
    Case {
        name,
        files: vec![("d.yaml", source)],
        expect: Expect::Accepts {
            requests,
            check: None,
        },
    }
}

/// A case of one file, `d.yaml`, that loads, with a check of the loaded
/// configuration.
fn accepts_and(
    name: &'static str,
    source: &'static str,
    requests: Vec<Request>,
    check: fn(&Config),
) -> Case {
    Case {
        name,
        files: vec![("d.yaml", source)],
        expect: Expect::Accepts {
            requests,
            check: Some(check),
        },
    }
}

/// A case of one file, `d.yaml`, that is refused.
fn refuses(
    name: &'static str,
    source: &'static str,
    message: &'static str,
    path: &'static str,
    line: usize,
) -> Case {
    Case {
        name,
        files: vec![("d.yaml", source)],
        expect: Expect::Refuses {
            file: "d.yaml",
            message,
            path,
            line,
        },
    }
}

/// The rule `entries` match in `domain`.
fn rule<'c>(config: &'c Config, domain: &str, entries: &[(&str, &str)]) -> &'c Rule {
    let entries: Vec<Entry<'_>> = entries.iter().map(|(k, v)| Entry::new(k, v)).collect();
    config
        .domain(domain)
        .expect("the domain")
        .resolve(&entries)
        .expect("a rule")
        .rule
}

fn cases() -> Vec<Case> {
    vec![
        // The seeds.
        accepts_and(
            "C1: the unit is read in any case",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: Minute, requests_per_unit: 5}
",
            vec![req(&[("k", "v")], Some("k")), req(&[("k", "")], Some("k"))],
            |config| {
                let rule = rule(config, "d", &[("k", "v")]);
                assert!(matches!(
                    rule.limit,
                    Limit::Limited {
                        requests_per_unit: 5,
                        unit: Unit::Minute,
                        ..
                    }
                ));
            },
        ),
        refuses(
            "C2: an unknown unit",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: fortnight, requests_per_unit: 5}
",
            "invalid rate limit unit 'fortnight'",
            "descriptors[0].rate_limit.unit",
            4,
        ),
        refuses(
            "C3: unlimited with a unit",
            "domain: d
descriptors:
  - key: k
    rate_limit:
      unlimited: true
      unit: second
",
            "should not specify rate limit unit when unlimited",
            "descriptors[0].rate_limit.unit",
            6,
        ),
        accepts_and(
            "C4: unlimited",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unlimited: true}
",
            vec![req(&[("k", "v")], Some("k"))],
            |config| assert_eq!(rule(config, "d", &[("k", "v")]).limit, Limit::Unlimited),
        ),
        accepts_and(
            "C5: unlimited with an invalid unit loads",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unlimited: true, unit: foo}
",
            vec![req(&[("k", "v")], Some("k"))],
            |config| assert_eq!(rule(config, "d", &[("k", "v")]).limit, Limit::Unlimited),
        ),
        refuses(
            "C6: an unknown key",
            "domain: d
descriptors:
  - key: k
    foo: 1
",
            "config error, unknown key 'foo'",
            "descriptors[0].foo",
            4,
        ),
        refuses(
            "C7: an empty key",
            "domain: d
descriptors:
  - key: ''
    rate_limit: {unit: second, requests_per_unit: 1}
",
            "descriptor has empty key",
            "descriptors[0]",
            3,
        ),
        refuses(
            "C7: a descriptor without a key",
            "domain: d
descriptors:
  - key: k
  - value: v
    rate_limit: {unit: second, requests_per_unit: 1}
",
            "descriptor has empty key",
            "descriptors[1]",
            4,
        ),
        refuses(
            "C8: two siblings with one composite key",
            "domain: d
descriptors:
  - key: k
    value: v
  - key: k
    value: v
",
            "duplicate descriptor composite key 'd.k_v'",
            "descriptors[1]",
            5,
        ),
        refuses(
            "C8: a nested duplicate names its path",
            "domain: d
descriptors:
  - key: k
    descriptors:
      - key: s
      - key: s
",
            "duplicate descriptor composite key 'd.k.s'",
            "descriptors[0].descriptors[1]",
            6,
        ),
        refuses(
            "C8: key a_b collides with key a, value b",
            "domain: d
descriptors:
  - key: a_b
  - key: a
    value: b
",
            "duplicate descriptor composite key 'd.a_b'",
            "descriptors[1]",
            4,
        ),
        refuses(
            "C9: no domain",
            "descriptors:
  - key: k
",
            "config file cannot have empty domain",
            "",
            1,
        ),
        refuses(
            "C9: an empty file",
            "# nothing yet\n",
            "config file cannot have empty domain",
            "",
            1,
        ),
        refuses(
            "C9: an empty domain",
            "domain: ''\n",
            "config file cannot have empty domain",
            "domain",
            1,
        ),
        Case {
            name: "C10: one domain in two files",
            files: vec![
                ("a.yaml", "domain: d\n"),
                ("b.yaml", "# the same domain\ndomain: d\n"),
            ],
            expect: Expect::Refuses {
                file: "b.yaml",
                message: "duplicate domain 'd' in config file",
                path: "domain",
                line: 2,
            },
        },
        accepts(
            "C11: values are the scalar's text",
            "domain: d
descriptors:
  - key: k
    value: 404
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: yes
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: 0x10
    rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![
                req(&[("k", "404")], Some("k_404")),
                req(&[("k", "true")], Some("k_true")),
                req(&[("k", "yes")], Some("k_yes")),
                req(&[("k", "0x10")], Some("k_0x10")),
                req(&[("k", "16")], None),
                req(&[("k", "TRUE")], None),
            ],
        ),
        accepts(
            "C11: a null value is any value",
            "domain: d
descriptors:
  - key: k
    value: ~
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: j
    value:
    rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![
                req(&[("k", "anything")], Some("k")),
                req(&[("j", "")], Some("j")),
            ],
        ),
        accepts_and(
            "C12: YAML 1.1 booleans",
            "domain: d
descriptors:
  - key: a
    shadow_mode: yes
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    shadow_mode: On
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: c
    shadow_mode: y
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: e
    shadow_mode: off
    rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![],
            |config| {
                for key in ["a", "b", "c"] {
                    let rule = rule(config, "d", &[(key, "v")]);
                    assert!(rule.shadow_mode, "{key}");
                    let Limit::Limited { policy, .. } = &rule.limit else {
                        panic!("{key} is limited");
                    };
                    assert_eq!(policy.quota_mode(), QuotaMode::Shadow, "{key}");
                }
                assert!(!rule(config, "d", &[("e", "v")]).shadow_mode);
            },
        ),
        refuses(
            "C13: 1 is no boolean",
            "domain: d
descriptors:
  - key: k
    shadow_mode: 1
",
            "error loading config file: yaml: unmarshal errors: cannot unmarshal !!int `1` into bool",
            "descriptors[0].shadow_mode",
            4,
        ),
        refuses(
            "C13: a quoted yes is no boolean",
            "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 1
      unlimited: \"yes\"
",
            "error loading config file: yaml: unmarshal errors: cannot unmarshal !!str `yes` into bool",
            "descriptors[0].rate_limit.unlimited",
            7,
        ),
        refuses(
            "C14: a float",
            "domain: d
descriptors:
  - key: k
    value: 1.5
",
            "error checking config",
            "descriptors[0].value",
            4,
        ),
        refuses(
            "C14: 08 is a float, not an octal integer",
            "domain: d
descriptors:
  - key: month
    value: 08
",
            "error checking config",
            "descriptors[0].value",
            4,
        ),
        refuses(
            "C14: an integer beyond 64 bits",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 18446744073709551615}
",
            "error checking config",
            "descriptors[0].rate_limit.requests_per_unit",
            4,
        ),
        refuses(
            "C15: a list of strings",
            "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 1
      replaces: [a]
",
            "config error, yaml file contains list of type other than map: a",
            "descriptors[0].rate_limit.replaces[0]",
            7,
        ),
        refuses(
            "C15: descriptors holding a string",
            "domain: d
descriptors:
  - yes
",
            "config error, yaml file contains list of type other than map: true",
            "descriptors[0]",
            3,
        ),
        refuses(
            "C16: an empty replaces entry",
            "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 1
      replaces: [{name: ''}]
",
            "should not have an empty replaces entry",
            "descriptors[0].rate_limit.replaces[0].name",
            7,
        ),
        refuses(
            "C17: a rule replacing itself",
            "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 1
      name: x
      replaces:
        - name: x
",
            "replaces should not contain name of same descriptor",
            "descriptors[0].rate_limit.replaces[0].name",
            9,
        ),
        refuses(
            "C18: share_threshold without a wildcard",
            "domain: d
descriptors:
  - key: k
    value: foo
    share_threshold: true
",
            "share_threshold can only be used with wildcard values (ending with '*'), but found key 'k_foo'",
            "descriptors[0].share_threshold",
            5,
        ),
        accepts(
            "C19, C20: the request's depth must be the rule's",
            "domain: d
descriptors:
  - key: k
    value: v
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: w
    descriptors:
      - key: s
        rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![
                req(&[("k", "v")], Some("k_v")),
                req(&[("k", "v"), ("s", "t")], None),
                req(&[("k", "w")], None),
                req(&[("k", "w"), ("s", "t")], Some("k_w.s")),
                req(&[("k", "w"), ("s", "t"), ("u", "x")], None),
            ],
        ),
        accepts(
            "C21: an exact value before the bare key",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: v
    rate_limit: {unit: second, requests_per_unit: 2}
",
            vec![
                req(&[("k", "v")], Some("k_v")),
                req(&[("k", "w")], Some("k")),
                req(&[("k", "V")], Some("k")),
                req(&[("j", "v")], None),
            ],
        ),
        accepts(
            "C22: the first wildcard in file order",
            "domain: d
descriptors:
  - key: k
    value: fo*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: foo*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: foobar
    rate_limit: {unit: second, requests_per_unit: 3}
",
            vec![
                req(&[("k", "foobaz")], Some("k_fo*")),
                req(&[("k", "foobar")], Some("k_foobar")),
                req(&[("k", "f")], None),
            ],
        ),
        accepts(
            "C23: a * inside a value is a wildcard",
            "domain: d
descriptors:
  - key: k
    value: f*o
    rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![
                req(&[("k", "fxo")], Some("k_f*o")),
                req(&[("k", "fo")], Some("k_f*o")),
                req(&[("k", "f*o")], Some("k_f*o")),
                req(&[("k", "fxoy")], None),
            ],
        ),
        accepts(
            "C24: a wildcard with nested descriptors",
            "domain: d
descriptors:
  - key: k
    value: a*
    descriptors:
      - key: s
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 2}
",
            vec![
                req(&[("k", "ab"), ("s", "1")], Some("k_a*.s")),
                req(&[("k", "ab")], None),
                req(&[("k", "b")], Some("k")),
                req(&[("k", "b"), ("s", "1")], None),
            ],
        ),
        accepts_and(
            "C25: requests_per_unit 0 blocks",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 0}
",
            vec![req(&[("k", "v")], Some("k"))],
            |config| {
                let rule = rule(config, "d", &[("k", "v")]);
                assert_eq!(rule.limit, Limit::Blocked { unit: Unit::Hour });
            },
        ),
        accepts(
            "C26: of a key written twice, the last value counts",
            "domain: d
descriptors:
  - key: k
    value: a
    value: b
    rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![req(&[("k", "b")], Some("k_b")), req(&[("k", "a")], None)],
        ),
        // Wildcards.
        accepts(
            "wildcards at every level",
            "domain: d
descriptors:
  - key: tenant
    value: team-*
    descriptors:
      - key: path
        value: /api/*/items
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: path
        value: '*'
        rate_limit: {unit: second, requests_per_unit: 2}
",
            vec![
                req(
                    &[("tenant", "team-a"), ("path", "/api/v1/items")],
                    Some("tenant_team-*.path_/api/*/items"),
                ),
                req(
                    &[("tenant", "team-a"), ("path", "/api/v1/users")],
                    Some("tenant_team-*.path_*"),
                ),
                req(
                    &[("tenant", "team-a"), ("path", "")],
                    Some("tenant_team-*.path_*"),
                ),
                req(&[("tenant", "other"), ("path", "/api/v1/items")], None),
            ],
        ),
        accepts(
            "several * in one value",
            "domain: d
descriptors:
  - key: host
    value: '*.eu-*.example.com'
    rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![
                req(
                    &[("host", "api.eu-west.example.com")],
                    Some("host_*.eu-*.example.com"),
                ),
                req(
                    &[("host", "a.b.eu-1.example.com")],
                    Some("host_*.eu-*.example.com"),
                ),
                req(&[("host", "api.us-east.example.com")], None),
                req(&[("host", "eu-west.example.com")], None),
            ],
        ),
        accepts(
            "a key ending in * without a value is a prefix of composite keys",
            "domain: d
descriptors:
  - key: user*
    rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![
                req(&[("user", "a")], Some("user*")),
                req(&[("user_id", "7")], Some("user*")),
                req(&[("use", "r")], None),
            ],
        ),
        accepts(
            "composite keys compare as strings",
            "domain: d
descriptors:
  - key: a_b
    rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![
                req(&[("a", "b")], Some("a_b")),
                req(&[("a_b", "x")], Some("a_b")),
            ],
        ),
        accepts_and(
            "share_threshold keys one counter by the pattern",
            "domain: d
descriptors:
  - key: files
    value: docs/*
    share_threshold: yes
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /a/*
    rate_limit: {unit: minute, requests_per_unit: 10}
",
            vec![req(
                &[("files", "docs/a"), ("user", "u")],
                Some("files_docs/*.user"),
            )],
            |config| {
                let domain = config.domain("d").expect("the domain");
                let subject = |entries: &[Entry<'static>]| {
                    domain.resolve(entries).expect("a rule").subject.to_vec()
                };
                let shared = [Entry::new("files", "docs/a"), Entry::new("user", "u")];
                assert_eq!(subject(&shared), ["docs/*", "u"]);
                let other = [Entry::new("files", "docs/b"), Entry::new("user", "u")];
                assert_eq!(subject(&other), ["docs/*", "u"]);
                // Without share_threshold, each value counts apart.
                assert_eq!(subject(&[Entry::new("path", "/a/x")]), ["/a/x"]);
            },
        ),
        accepts(
            "an entry that selects nothing ends the search",
            "domain: d
descriptors:
  - key: k
    descriptors:
      - key: s
        value: t
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: s
    rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![
                req(&[("k", "v"), ("s", "t")], Some("k.s_t")),
                req(&[("k", "v"), ("s", "u")], None),
                req(&[("x", "v"), ("s", "t")], None),
                req(&[], None),
            ],
        ),
        // Limits.
        accepts_and(
            "unlimited with replaces",
            "domain: d
descriptors:
  - key: k
    rate_limit:
      unlimited: true
      name: vip
      replaces:
        - name: per_ip
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 5, name: per_ip}
",
            vec![
                req(&[("k", "v")], Some("k")),
                req(&[("ip", "1")], Some("ip")),
            ],
            |config| {
                let vip = rule(config, "d", &[("k", "v")]);
                assert_eq!(vip.limit, Limit::Unlimited);
                assert_eq!(vip.name.as_deref(), Some("vip"));
                assert_eq!(vip.replaces, ["per_ip"]);
                let ip = rule(config, "d", &[("ip", "1")]);
                assert_eq!(ip.name.as_deref(), Some("per_ip"));
                assert!(ip.replaces.is_empty());
            },
        ),
        accepts_and(
            "every unit, and integers as the reference reads them",
            "domain: d
descriptors:
  - {key: a, rate_limit: {unit: SECOND, requests_per_unit: 1_000}}
  - {key: b, rate_limit: {unit: week, requests_per_unit: 0x10}}
  - {key: c, rate_limit: {unit: Month, requests_per_unit: 010}}
  - {key: e, rate_limit: {unit: year, requests_per_unit: 4}}
  - {key: f, rate_limit: {unit: day, requests_per_unit: 4}}
",
            vec![],
            |config| {
                let limit = |key| match &rule(config, "d", &[(key, "v")]).limit {
                    Limit::Limited {
                        requests_per_unit,
                        unit,
                        ..
                    } => (*requests_per_unit, *unit),
                    other => panic!("{other:?}"),
                };
                assert_eq!(limit("a"), (1_000, Unit::Second));
                assert_eq!(limit("b"), (16, Unit::Week));
                assert_eq!(limit("c"), (8, Unit::Month));
                assert_eq!(limit("e"), (4, Unit::Year));
                assert_eq!(limit("f"), (4, Unit::Day));
            },
        ),
        refuses(
            "rate_limit with no unit",
            "domain: d
descriptors:
  - key: k
    rate_limit: {}
",
            "invalid rate limit unit ''",
            "descriptors[0].rate_limit",
            4,
        ),
        refuses(
            "the unit unknown",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: unknown, requests_per_unit: 1}
",
            "invalid rate limit unit 'unknown'",
            "descriptors[0].rate_limit.unit",
            4,
        ),
        refuses(
            "a quoted requests_per_unit",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: \"10\"}
",
            "error loading config file: yaml: unmarshal errors: cannot unmarshal !!str `10` into uint32",
            "descriptors[0].rate_limit.requests_per_unit",
            4,
        ),
        refuses(
            "a negative requests_per_unit",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: -1}
",
            "error loading config file: yaml: unmarshal errors: cannot unmarshal !!int `-1` into uint32",
            "descriptors[0].rate_limit.requests_per_unit",
            4,
        ),
        refuses(
            "requests_per_unit beyond 32 bits",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 4294967296}
",
            "error loading config file: yaml: unmarshal errors: cannot unmarshal !!int `4294967296` into uint32",
            "descriptors[0].rate_limit.requests_per_unit",
            4,
        ),
        refuses(
            "requests_per_unit beyond Runlimit's largest limit",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 2000000000}
",
            "invalid limit: limit 2000000000 is outside 1..=1000000000",
            "descriptors[0].rate_limit.requests_per_unit",
            4,
        ),
        accepts(
            "rate_limit left empty carries no rule",
            "domain: d
descriptors:
  - key: k
    rate_limit:
    descriptors:
      - key: s
        rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![
                req(&[("k", "v")], None),
                req(&[("k", "v"), ("s", "t")], Some("k.s")),
            ],
        ),
        // Flags and metadata.
        accepts_and(
            "YAML 1.1 booleans in every flag",
            "domain: d
descriptors:
  - key: t
    shadow_mode: Y
    quota_mode: yes
    detailed_metric: ON
    value_to_metric: True
    rate_limit: {unit: second, requests_per_unit: 1, runlimit: {lease: on}}
  - key: f
    shadow_mode: N
    quota_mode: no
    detailed_metric: OFF
    value_to_metric: False
    rate_limit: {unit: second, requests_per_unit: 1, runlimit: {lease: n}}
  - key: w
    value: '*'
    share_threshold: YES
    rate_limit: {unlimited: y}
",
            vec![req(&[("w", "x")], Some("w_*"))],
            |config| {
                let on = rule(config, "d", &[("t", "v")]);
                assert!(on.shadow_mode && on.quota_mode && on.detailed_metric);
                assert!(on.value_to_metric && on.lease);
                let off = rule(config, "d", &[("f", "v")]);
                assert!(!(off.shadow_mode || off.quota_mode || off.detailed_metric));
                assert!(!(off.value_to_metric || off.lease));
                assert_eq!(rule(config, "d", &[("w", "x")]).limit, Limit::Unlimited);
            },
        ),
        accepts_and(
            "value_to_metric along the path",
            "domain: d
descriptors:
  - key: k
    value_to_metric: true
    descriptors:
      - key: s
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: j
    descriptors:
      - key: s
        rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![],
            |config| {
                assert!(rule(config, "d", &[("k", "v"), ("s", "t")]).value_to_metric);
                assert!(!rule(config, "d", &[("j", "v"), ("s", "t")]).value_to_metric);
            },
        ),
        accepts_and(
            "metadata is free-form, as JSON",
            "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata:
      tier: gold
      weight: 0.5
      count: 3
      enabled: yes
      nothing: ~
      tags: [a, 404]
      nested: {unit: x, key: y}
",
            vec![],
            |config| {
                let rule = rule(config, "d", &[("k", "v")]);
                assert_eq!(
                    rule.metadata,
                    Some(json!({
                        "tier": "gold",
                        "weight": 0.5,
                        "count": 3,
                        "enabled": true,
                        "nothing": null,
                        "tags": ["a", 404],
                        // YAML 1.1: a plain y is true.
                        "nested": {"unit": "x", "key": true},
                    }))
                );
                assert!(config.warnings().is_empty());
            },
        ),
        refuses(
            "metadata that is not a mapping",
            "domain: d
descriptors:
  - key: k
    metadata: [a, b]
",
            "error loading config file: yaml: unmarshal errors: cannot unmarshal !!seq into a mapping",
            "descriptors[0].metadata",
            4,
        ),
        refuses(
            "metadata holding infinity",
            "domain: d
descriptors:
  - key: k
    metadata: {limit: .inf}
",
            "metadata cannot hold the number .inf",
            "descriptors[0].metadata.limit",
            4,
        ),
        // YAML.
        accepts_and(
            "anchors, aliases and merge keys",
            "domain: d
descriptors:
  - key: a
    rate_limit: &second
      unit: second
      requests_per_unit: 5
  - key: b
    rate_limit:
      requests_per_unit: 1
      <<: *second
      requests_per_unit: 7
  - key: c
    rate_limit: *second
",
            vec![
                req(&[("a", "v")], Some("a")),
                req(&[("b", "v")], Some("b")),
                req(&[("c", "v")], Some("c")),
            ],
            |config| {
                let per_unit = |key| match rule(config, "d", &[(key, "v")]).limit {
                    Limit::Limited {
                        requests_per_unit, ..
                    } => requests_per_unit,
                    _ => panic!("{key} is limited"),
                };
                assert_eq!([per_unit("a"), per_unit("b"), per_unit("c")], [5, 7, 5]);
            },
        ),
        accepts(
            "a tagged string",
            "domain: d
descriptors:
  - key: status
    value: !!str 404
    rate_limit: {unit: second, requests_per_unit: 1}
",
            vec![req(&[("status", "404")], Some("status_404"))],
        ),
        refuses(
            "a key that is not a string",
            "domain: d
1: x
",
            "config error, key is not of type string: 1",
            "",
            2,
        ),
        refuses(
            "a boolean key",
            "domain: d
descriptors:
  - key: k
    on: x
",
            "config error, key is not of type string: true",
            "descriptors[0]",
            4,
        ),
        refuses(
            "a list at the top level",
            "- domain: d\n",
            "error loading config file: yaml: unmarshal errors: cannot unmarshal !!seq into a mapping",
            "",
            1,
        ),
        refuses(
            "descriptors that are a mapping",
            "domain: d
descriptors:
  key: k
",
            "error loading config file: yaml: unmarshal errors: cannot unmarshal !!map into a list of descriptors",
            "descriptors",
            3,
        ),
        refuses(
            "a merge of a scalar",
            "domain: d
descriptors:
  - key: k
    <<: 1
",
            "error loading config file: yaml: map merge requires map or sequence of maps as the value",
            "descriptors[0]",
            4,
        ),
        // Misplaced keys and Runlimit's key.
        accepts_and(
            "keys of the schema out of place load with warnings",
            "domain: d
unit: second
descriptors:
  - key: k
    requests_per_unit: 5
    rate_limit:
      unit: second
      requests_per_unit: 1
      shadow_mode: true
",
            vec![req(&[("k", "v")], Some("k"))],
            |config| {
                let rule = rule(config, "d", &[("k", "v")]);
                assert!(!rule.shadow_mode, "ignored where misplaced");
                let warnings: Vec<_> = config
                    .warnings()
                    .iter()
                    .map(|w| {
                        (
                            w.location().path(),
                            w.location().line(),
                            w.kind().to_string(),
                        )
                    })
                    .collect();
                assert_eq!(
                    warnings,
                    [
                        (
                            "unit",
                            2,
                            "key 'unit' has no effect here and is ignored (it belongs in rate_limit)"
                                .to_owned()
                        ),
                        (
                            "descriptors[0].requests_per_unit",
                            5,
                            "key 'requests_per_unit' has no effect here and is ignored (it belongs in rate_limit)"
                                .to_owned()
                        ),
                        (
                            "descriptors[0].rate_limit.shadow_mode",
                            9,
                            "key 'shadow_mode' has no effect here and is ignored (it belongs in a descriptor)"
                                .to_owned()
                        ),
                    ]
                );
            },
        ),
        refuses(
            "the runlimit key outside rate_limit",
            "domain: d
descriptors:
  - key: k
    runlimit: {algorithm: gcra}
    rate_limit: {unit: second, requests_per_unit: 1}
",
            "the runlimit key belongs inside rate_limit",
            "descriptors[0].runlimit",
            4,
        ),
        // Domains.
        Case {
            name: "several domains across files",
            files: vec![
                (
                    "a.yaml",
                    "domain: a
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
",
                ),
                (
                    "b.yml",
                    "domain: b
descriptors:
  - key: j
    rate_limit: {unit: second, requests_per_unit: 1}
",
                ),
            ],
            expect: Expect::Accepts {
                requests: vec![
                    Request {
                        domain: "a",
                        entries: &[("k", "v")],
                        rule: Some("k"),
                    },
                    Request {
                        domain: "a",
                        entries: &[("j", "v")],
                        rule: None,
                    },
                    Request {
                        domain: "b",
                        entries: &[("j", "v")],
                        rule: Some("j"),
                    },
                ],
                check: Some(|config| {
                    assert!(config.domain("c").is_none());
                    let names: Vec<_> = config.domains().map(|d| d.name()).collect();
                    assert_eq!(names, ["a", "b"]);
                }),
            },
        },
    ]
}

/// Runs one case: `Err` describes how it failed.
fn run(case: &Case) -> Result<(), String> {
    let loaded = Config::from_sources(case.files.iter().copied());
    match (&case.expect, loaded) {
        (Expect::Accepts { requests, check }, Ok(config)) => {
            for request in requests {
                let entries: Vec<Entry<'_>> = request
                    .entries
                    .iter()
                    .map(|(k, v)| Entry::new(k, v))
                    .collect();
                let domain = config
                    .domain(request.domain)
                    .ok_or_else(|| format!("no domain {}", request.domain))?;
                let matched = domain.resolve(&entries).map(|m| m.rule.path.as_str());
                if matched != request.rule {
                    return Err(format!(
                        "{:?} matched {matched:?}, expected {:?}",
                        request.entries, request.rule
                    ));
                }
            }
            if let Some(check) = check {
                check(&config);
            }
            Ok(())
        }
        (Expect::Accepts { .. }, Err(error)) => Err(format!("refused: {error}")),
        (
            Expect::Refuses {
                file,
                message,
                path,
                line,
            },
            Err(error),
        ) => {
            let Some(problem) = error.problems().first() else {
                return Err(format!("no problem listed: {error}"));
            };
            let found = (
                problem.location().file(),
                problem.kind().to_string(),
                problem.location().path(),
                problem.location().line(),
            );
            if found == (*file, (*message).to_owned(), *path, *line) {
                Ok(())
            } else {
                Err(format!("refused with {found:?}"))
            }
        }
        (Expect::Refuses { .. }, Ok(_)) => Err("loaded".to_owned()),
    }
}

#[test]
fn conformance_table() {
    let failures: Vec<String> = cases()
        .iter()
        .filter_map(|case| run(case).err().map(|why| format!("{}: {why}", case.name)))
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn a_syntax_error_names_the_file_and_line() {
    let error = Config::from_sources([("bad.yaml", "domain: d\ndescriptors: [\n  - key: k\n")])
        .expect_err("not YAML");
    let problem = &error.problems()[0];
    assert_eq!(problem.location().file(), "bad.yaml");
    assert!(problem.location().line() >= 2, "{problem}");
    let message = problem.to_string();
    assert!(
        message.starts_with("bad.yaml: error loading config file: yaml: "),
        "{message}"
    );
}

#[test]
fn every_problem_of_every_file_is_reported_in_file_order() {
    let error = Config::from_sources([
        (
            "a.yaml",
            "domain: a
descriptors:
  - key: k
    rate_limit: {unit: fortnight, requests_per_unit: 1}
  - key: ''
",
        ),
        ("b.yaml", "domain: b\nfoo: 1\nbar: 2\n"),
    ])
    .expect_err("invalid");
    let ConfigError::Invalid { problems } = &error else {
        panic!("{error:?}");
    };
    let found: Vec<_> = problems
        .iter()
        .map(|p| (p.location().file(), p.location().line()))
        .collect();
    assert_eq!(
        found,
        [("a.yaml", 4), ("a.yaml", 5), ("b.yaml", 2), ("b.yaml", 3)]
    );
    assert_eq!(
        error.to_string(),
        "a.yaml: invalid rate limit unit 'fortnight' (at descriptors[0].rate_limit.unit, line 4, column 24); and 3 more problems"
    );
}

#[test]
fn a_file_refused_in_one_step_reports_no_later_step() {
    // A float refuses the file before the type of shadow_mode is read, as
    // in the reference.
    let error = Config::from_sources([(
        "d.yaml",
        "domain: d
descriptors:
  - key: k
    value: 2.5
    shadow_mode: maybe
",
    )])
    .expect_err("invalid");
    let messages: Vec<_> = error
        .problems()
        .iter()
        .map(|p| p.kind().to_string())
        .collect();
    assert_eq!(messages, ["error checking config"]);
}

#[test]
fn long_values_match_and_debug_output_reveals_no_values() {
    let config = Config::from_sources([(
        "d.yaml",
        "domain: d
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 1}
",
    )])
    .expect("valid");
    let domain = config.domain("d").expect("the domain");
    let long = "x".repeat(500);
    let matched = domain.resolve(&[Entry::new("ip", &long)]).expect("a rule");
    assert_eq!(matched.subject[0], long);
    let debug = format!("{matched:?} {:?}", Entry::new("ip", "203.0.113.7"));
    assert!(
        !debug.contains("203.0.113.7") && !debug.contains(&long),
        "{debug}"
    );
}
