//! The reference service's counters, per rule, for Prometheus.
//!
//! | metric | labels | counts |
//! |---|---|---|
//! | `ratelimit_service_rate_limit_total_hits` | `domain`, `rule` | hits of every descriptor a rule applied to (a descriptor's hits are its cost) |
//! | `ratelimit_service_rate_limit_within_limit` | `domain`, `rule` | hits answered `OK` |
//! | `ratelimit_service_rate_limit_near_limit` | `domain`, `rule` | hits admitted above 80 % of the rule's capacity |
//! | `ratelimit_service_rate_limit_over_limit` | `domain`, `rule` | hits over the limit (shadow rules' too) |
//! | `ratelimit_service_rate_limit_shadow_mode` | `domain`, `rule` | hits over the limit that a shadow rule reported `OK` |
//! | `ratelimit_service_config_load_success` | | configurations loaded |
//! | `ratelimit_service_config_load_error` | | configurations refused |
//! | `ratelimit_service_should_rate_limit_error` | `err_type`: `backend_error`, `budget_exceeded` | requests answered `UNAVAILABLE` |
//!
//! `rule` is the rule's [path](crate::config::RulePath) in its domain (the
//! reference's statistics key without the domain: composite keys as the
//! configuration writes them, wildcard patterns included), or
//! `override:<keys>` for a limit given in the request (the entries' keys
//! joined by `.`; no values). Labels are therefore bounded by the
//! configuration: request values never become labels, whatever
//! `detailed_metric` or `value_to_metric` say, and at most
//! [`MAX_OVERRIDE_LABELS`] distinct override labels are kept, later ones
//! being counted under `override:other`.
//!
//! Each [`Metrics`] has a recorder of its own rather than the process-wide
//! one the `metrics` facade's macros use, so that several servers in one
//! process (tests, embedders) count apart; its counters are the facade's
//! [`metrics::Counter`]s.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, RwLock},
};

use metrics::{Counter, Key, Label, Recorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

/// The most distinct `override:<keys>` labels counted apart.
pub const MAX_OVERRIDE_LABELS: usize = 256;

/// The prefix of an override's label.
const OVERRIDE: &str = "override:";

/// The label of the override counters beyond [`MAX_OVERRIDE_LABELS`].
const OTHER_OVERRIDES: &str = "override:other";

const RULE_COUNTERS: [(&str, &str); 5] = [
    (
        "ratelimit_service_rate_limit_total_hits",
        "Hits of the descriptors a rule applied to.",
    ),
    (
        "ratelimit_service_rate_limit_over_limit",
        "Hits over a rule's limit.",
    ),
    (
        "ratelimit_service_rate_limit_near_limit",
        "Hits admitted above 80% of a rule's capacity.",
    ),
    (
        "ratelimit_service_rate_limit_within_limit",
        "Hits within a rule's limit.",
    ),
    (
        "ratelimit_service_rate_limit_shadow_mode",
        "Hits over the limit of a shadow rule, answered OK.",
    ),
];

/// The service's counters and their Prometheus exposition. Cloning shares
/// them.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

/// Domain → rule label → counters.
type RulesByDomain = HashMap<Box<str>, HashMap<Box<str>, Arc<RuleCounters>>>;

struct Inner {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    rules: RwLock<RulesByDomain>,
    config_load_success: Counter,
    config_load_error: Counter,
    backend_error: Counter,
    budget_exceeded: Counter,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Counters at zero.
    #[must_use]
    pub fn new() -> Self {
        let recorder = PrometheusBuilder::new().build_recorder();
        for (name, help) in RULE_COUNTERS.iter().chain(&[
            (
                "ratelimit_service_config_load_success",
                "Configurations loaded.",
            ),
            (
                "ratelimit_service_config_load_error",
                "Configurations refused; the previous one stayed.",
            ),
            (
                "ratelimit_service_should_rate_limit_error",
                "Requests answered UNAVAILABLE, by reason.",
            ),
        ]) {
            recorder.describe_counter((*name).into(), None, (*help).into());
        }
        let counter = |name: &'static str, labels: Vec<Label>| {
            recorder.register_counter(&Key::from_parts(name, labels), &METADATA)
        };
        let error = |kind: &'static str| {
            counter(
                "ratelimit_service_should_rate_limit_error",
                vec![Label::new("err_type", kind)],
            )
        };
        let inner = Inner {
            config_load_success: counter("ratelimit_service_config_load_success", Vec::new()),
            config_load_error: counter("ratelimit_service_config_load_error", Vec::new()),
            backend_error: error("backend_error"),
            budget_exceeded: error("budget_exceeded"),
            handle: recorder.handle(),
            recorder,
            rules: RwLock::default(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The counters in Prometheus' text exposition format.
    #[must_use]
    pub fn render(&self) -> String {
        self.inner.handle.render()
    }

    /// Counts a configuration loaded (`true`) or refused (`false`).
    pub(crate) fn config_loaded(&self, loaded: bool) {
        if loaded {
            self.inner.config_load_success.increment(1);
        } else {
            self.inner.config_load_error.increment(1);
        }
    }

    /// Counts a request answered `UNAVAILABLE` because the backend failed.
    pub(crate) fn backend_error(&self) {
        self.inner.backend_error.increment(1);
    }

    /// Counts a request answered `UNAVAILABLE` because the backend did not
    /// decide within the budget.
    pub(crate) fn budget_exceeded(&self) {
        self.inner.budget_exceeded.increment(1);
    }

    /// The counters of the rule at `path` in `domain`.
    pub(crate) fn rule(&self, domain: &str, path: &str) -> Arc<RuleCounters> {
        self.counters(domain, path, None)
    }

    /// The counters of limits given in requests of `domain`, labelled by an
    /// [`override_label`]; at most [`MAX_OVERRIDE_LABELS`] are counted apart.
    pub(crate) fn override_rule(&self, domain: &str, label: &str) -> Arc<RuleCounters> {
        self.counters(domain, label, Some(MAX_OVERRIDE_LABELS))
    }

    /// The counters of `rule` in `domain`, registered on first use; with a
    /// `bound`, at most that many override labels exist.
    fn counters(&self, domain: &str, rule: &str, bound: Option<usize>) -> Arc<RuleCounters> {
        {
            let rules = self.inner.rules.read().unwrap_or_else(|e| e.into_inner());
            if let Some(counters) = rules.get(domain).and_then(|rules| rules.get(rule)) {
                return Arc::clone(counters);
            }
        }
        let mut rules = self.inner.rules.write().unwrap_or_else(|e| e.into_inner());
        let overrides = rules
            .values()
            .flat_map(HashMap::keys)
            .filter(|label| label.starts_with(OVERRIDE))
            .count();
        let rule = match bound {
            Some(bound) if overrides >= bound => OTHER_OVERRIDES,
            _ => rule,
        };
        let domain_rules = rules.entry(domain.into()).or_default();
        if let Some(counters) = domain_rules.get(rule) {
            return Arc::clone(counters);
        }
        let labels = || {
            vec![
                Label::new("domain", domain.to_owned()),
                Label::new("rule", rule.to_owned()),
            ]
        };
        let [
            total_hits,
            over_limit,
            near_limit,
            within_limit,
            shadow_mode,
        ] = RULE_COUNTERS.map(|(name, _)| {
            self.inner
                .recorder
                .register_counter(&Key::from_parts(name, labels()), &METADATA)
        });
        let counters = Arc::new(RuleCounters {
            total_hits,
            over_limit,
            near_limit,
            within_limit,
            shadow_mode,
        });
        domain_rules.insert(rule.into(), Arc::clone(&counters));
        counters
    }
}

/// The label of a limit given in a request whose entries have `keys`:
/// `override:` and the keys joined by `.`.
pub(crate) fn override_label<'k>(keys: impl IntoIterator<Item = &'k str>) -> String {
    let mut label = String::from(OVERRIDE);
    for (index, key) in keys.into_iter().enumerate() {
        if index > 0 {
            label.push('.');
        }
        label.push_str(key);
    }
    label
}

static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// One rule's counters.
pub(crate) struct RuleCounters {
    total_hits: Counter,
    over_limit: Counter,
    near_limit: Counter,
    within_limit: Counter,
    shadow_mode: Counter,
}

/// What one descriptor adds to its rule's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Hits {
    pub(crate) total: u64,
    pub(crate) over: u64,
    pub(crate) near: u64,
    pub(crate) within: u64,
    pub(crate) shadow: u64,
}

impl RuleCounters {
    pub(crate) fn add(&self, hits: Hits) {
        for (counter, value) in [
            (&self.total_hits, hits.total),
            (&self.over_limit, hits.over),
            (&self.near_limit, hits.near),
            (&self.within_limit, hits.within),
            (&self.shadow_mode, hits.shadow),
        ] {
            if value > 0 {
                counter.increment(value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(metrics: &Metrics) -> Vec<String> {
        metrics
            .render()
            .lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn rule_counters_render_with_domain_and_rule_labels() {
        let metrics = Metrics::new();
        let label = override_label(["remote_address", "path"]);
        let counters = metrics.override_rule("edge", &label);
        counters.add(Hits {
            total: 3,
            over: 1,
            near: 0,
            within: 2,
            shadow: 0,
        });
        let series = series(&metrics);
        assert!(
            series.contains(
                &r#"ratelimit_service_rate_limit_total_hits{domain="edge",rule="override:remote_address.path"} 3"#
                    .to_owned()
            ),
            "{series:#?}"
        );
        assert!(
            series.iter().any(|line| line.starts_with(
                r#"ratelimit_service_rate_limit_within_limit{domain="edge",rule="override:remote_address.path"} 2"#
            )),
            "{series:#?}"
        );
    }

    #[test]
    fn override_labels_are_bounded() {
        let metrics = Metrics::new();
        for index in 0..MAX_OVERRIDE_LABELS + 10 {
            let key = format!("k{index}");
            metrics
                .override_rule("d", &override_label([key.as_str()]))
                .add(Hits {
                    total: 1,
                    ..Hits::default()
                });
        }
        let rules = metrics.inner.rules.read().expect("not poisoned");
        assert_eq!(rules["d"].len(), MAX_OVERRIDE_LABELS + 1);
        assert!(rules["d"].contains_key(OTHER_OVERRIDES));
        drop(rules);
        let other = series(&metrics)
            .into_iter()
            .find(|line| {
                line.starts_with(
                    r#"ratelimit_service_rate_limit_total_hits{domain="d",rule="override:other"}"#,
                )
            })
            .expect("the overflow series");
        assert!(other.ends_with(" 10"), "{other}");
    }
}
