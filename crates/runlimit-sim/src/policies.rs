//! The candidate policies of a run, read from TOML in the core's serde forms.

use std::{collections::HashSet, fmt, time::Duration};

use runlimit_core::{AnyPolicy, FixedWindowPolicy, GcraPolicy, SlidingWindowPolicy};
use runlimit_memory::MemoryStoreConfig;
use serde::{Deserialize, Serialize};

/// One candidate policy: any of the three algorithms, tagged by `algorithm`.
///
/// The other fields are the policy's own serde form (`id`, `scope`, then
/// `limit` and `window`, or `quota`, `period` and `burst_capacity`; durations
/// as `{ secs, nanos }`), validated by its constructor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "algorithm", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Candidate {
    /// An anchored fixed window.
    FixedWindow(FixedWindowPolicy),
    /// A sliding window.
    SlidingWindow(SlidingWindowPolicy),
    /// GCRA.
    Gcra(GcraPolicy),
}

impl Candidate {
    /// The policy's id, as reports name it.
    #[must_use]
    pub fn id(&self) -> &str {
        match self {
            Self::FixedWindow(policy) => policy.id().as_str(),
            Self::SlidingWindow(policy) => policy.id().as_str(),
            Self::Gcra(policy) => policy.id().as_str(),
        }
    }

    /// The algorithm's name: `fixed_window`, `sliding_window` or `gcra`.
    #[must_use]
    pub fn algorithm(&self) -> &'static str {
        match self {
            Self::FixedWindow(_) => "fixed_window",
            Self::SlidingWindow(_) => "sliding_window",
            Self::Gcra(_) => "gcra",
        }
    }

    /// Whether the candidate enforces or only observes.
    #[must_use]
    pub fn quota_mode(&self) -> runlimit_core::QuotaMode {
        match self {
            Self::FixedWindow(policy) => policy.quota_mode(),
            Self::SlidingWindow(policy) => policy.quota_mode(),
            Self::Gcra(policy) => policy.quota_mode(),
        }
    }

    /// The policy's scope, which a policy it replaces must share.
    pub(crate) fn scope(&self) -> &str {
        match self {
            Self::FixedWindow(policy) => policy.scope().as_str(),
            Self::SlidingWindow(policy) => policy.scope().as_str(),
            Self::Gcra(policy) => policy.scope().as_str(),
        }
    }

    /// The candidate as a policy of any algorithm, without a predecessor.
    pub(crate) fn to_any(&self) -> AnyPolicy {
        match self {
            Self::FixedWindow(policy) => policy.clone().into(),
            Self::SlidingWindow(policy) => policy.clone().into(),
            Self::Gcra(policy) => policy.clone().into(),
        }
    }

    /// Roughly the memory one stored key costs (entry, control byte and
    /// expiry-heap entry, as `runlimit-memory` documents it).
    pub(crate) fn bytes_per_key(&self) -> u64 {
        match self {
            Self::SlidingWindow(_) => 152,
            Self::FixedWindow(_) | Self::Gcra(_) => 85,
        }
    }
}

/// `100 per 1m`, `10 per 1s, burst 20`.
impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FixedWindow(policy) => {
                write!(f, "{} per {}", policy.limit(), Span(policy.window()))
            }
            Self::SlidingWindow(policy) => {
                write!(
                    f,
                    "{} per {} sliding",
                    policy.limit(),
                    Span(policy.window())
                )
            }
            Self::Gcra(policy) => write!(
                f,
                "{} per {}, burst {}",
                policy.quota(),
                Span(policy.period()),
                policy.burst_capacity()
            ),
        }
    }
}

/// A duration in the largest unit that divides it: `1h`, `90s`, `250ms`.
pub(crate) struct Span(pub(crate) Duration);

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.as_millis();
        for (unit, size) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1_000),
        ] {
            if millis >= size && millis.is_multiple_of(size) {
                return write!(f, "{}{unit}", millis / size);
            }
        }
        write!(f, "{millis}ms")
    }
}

/// The candidates of one run and the store bound each is evaluated with.
///
/// ```
/// use runlimit_sim::PolicySet;
///
/// let set = PolicySet::from_toml(r#"
///     max_keys = 100000
///
///     [[policy]]
///     algorithm = "fixed_window"
///     id = "login.ip"
///     scope = "ip"
///     limit = 100
///     window = { secs = 60, nanos = 0 }
///
///     [[policy]]
///     algorithm = "gcra"
///     id = "login.ip.gcra"
///     scope = "ip"
///     quota = 100
///     period = { secs = 60, nanos = 0 }
///     burst_capacity = 20
/// "#)?;
/// assert_eq!(set.candidates().len(), 2);
/// assert_eq!(set.candidates()[1].to_string(), "100 per 1m, burst 20");
/// # Ok::<(), runlimit_sim::PolicySetError>(())
/// ```
#[derive(Debug, Clone)]
pub struct PolicySet {
    candidates: Vec<Candidate>,
    /// Each candidate's `[[policy]]` line, for a set read from TOML.
    lines: Vec<Option<usize>>,
    store: MemoryStoreConfig,
}

/// Why a policy set was refused. Nothing is replayed with an invalid set.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicySetError {
    /// The TOML did not parse, or its top level held an unknown key.
    #[error("invalid policy file: {0}")]
    Toml(#[from] toml::de::Error),
    /// A `[[policy]]` table names no known algorithm or fails its policy's
    /// constructor.
    #[error("invalid [[policy]] at line {line}: {}", source.message())]
    Policy {
        /// The 1-based line of the table's `[[policy]]` header.
        line: usize,
        /// What the policy's form or constructor refused.
        source: toml::de::Error,
    },
    /// The set was empty.
    #[error("the policy file names no [[policy]]")]
    Empty,
    /// Two candidates share an id, so a report could not tell them apart.
    #[error("two policies have the id `{0}`")]
    DuplicateId(String),
    /// `max_keys` was refused by the memory store.
    #[error("invalid max_keys: {0}")]
    Store(#[from] runlimit_memory::ConfigError),
}

/// The default bound on stored keys per store: a million.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRepr {
    max_keys: Option<usize>,
    /// Tables, each deserialized on its own so that an error names its
    /// table's line (the array as a whole spans from its first table).
    #[serde(default, rename = "policy")]
    policies: Vec<toml::Spanned<toml::Table>>,
}

impl PolicySet {
    /// A set of `candidates`, each store bounded to `max_keys` keys (one
    /// shard, so the bound is exact whatever the key distribution).
    ///
    /// # Errors
    ///
    /// [`PolicySetError::Empty`], [`PolicySetError::DuplicateId`], and
    /// [`PolicySetError::Store`] for a `max_keys` the store refuses.
    pub fn new(candidates: Vec<Candidate>, max_keys: usize) -> Result<Self, PolicySetError> {
        if candidates.is_empty() {
            return Err(PolicySetError::Empty);
        }
        let mut ids = HashSet::new();
        for candidate in &candidates {
            if !ids.insert(candidate.id()) {
                return Err(PolicySetError::DuplicateId(candidate.id().to_owned()));
            }
        }
        Ok(Self {
            lines: vec![None; candidates.len()],
            candidates,
            store: MemoryStoreConfig::new(max_keys)?,
        })
    }

    /// Reads a set from TOML: an optional top-level `max_keys` and one
    /// `[[policy]]` table per candidate.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), [`PolicySetError::Toml`] for TOML that does
    /// not parse, and [`PolicySetError::Policy`] for a `[[policy]]` table
    /// its policy refuses, naming the table's line.
    pub fn from_toml(text: &str) -> Result<Self, PolicySetError> {
        let repr: FileRepr = toml::from_str(text)?;
        let mut lines = Vec::with_capacity(repr.policies.len());
        let candidates = repr
            .policies
            .into_iter()
            .map(|table| {
                let line = line_of(text, table.span().start);
                lines.push(Some(line));
                toml::Value::Table(table.into_inner())
                    .try_into::<Candidate>()
                    .map_err(|source| PolicySetError::Policy { line, source })
            })
            .collect::<Result<_, _>>()?;
        let mut set = Self::new(candidates, repr.max_keys.unwrap_or(DEFAULT_MAX_KEYS))?;
        set.lines = lines;
        Ok(set)
    }

    /// The candidates, in file order.
    #[must_use]
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// The line of the `[[policy]]` header of the candidate at `index`, for
    /// a set read from TOML.
    pub(crate) fn line(&self, index: usize) -> Option<usize> {
        self.lines.get(index).copied().flatten()
    }

    /// The configuration of each store.
    #[must_use]
    pub fn store_config(&self) -> &MemoryStoreConfig {
        &self.store
    }
}

/// The 1-based line holding byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let before = text.get(..offset).unwrap_or(text);
    before.bytes().filter(|&byte| byte == b'\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_policies_and_sets_are_refused() {
        let zero_limit = r#"
            [[policy]]
            algorithm = "fixed_window"
            id = "a"
            scope = "ip"
            limit = 0
            window = { secs = 60, nanos = 0 }
        "#;
        assert!(matches!(
            PolicySet::from_toml(zero_limit),
            Err(PolicySetError::Policy { line: 2, .. })
        ));
        let unknown_field = r#"
            [[policy]]
            algorithm = "gcra"
            id = "a"
            scope = "ip"
            quota = 1
            period = { secs = 60, nanos = 0 }
            burst_capacity = 1
            colour = "red"
        "#;
        assert!(matches!(
            PolicySet::from_toml(unknown_field),
            Err(PolicySetError::Policy { line: 2, .. })
        ));
        let unknown_algorithm = r#"
            [[policy]]
            algorithm = "leaky_bucket"
            id = "a"
        "#;
        assert!(matches!(
            PolicySet::from_toml(unknown_algorithm),
            Err(PolicySetError::Policy { line: 2, .. })
        ));
        assert!(matches!(
            PolicySet::from_toml("max_keys = 10\ncolour = \"red\""),
            Err(PolicySetError::Toml(_))
        ));
        assert!(matches!(
            PolicySet::from_toml(""),
            Err(PolicySetError::Empty)
        ));
        let twice = format!("{0}{0}", zero_limit.replace("limit = 0", "limit = 1"));
        assert!(matches!(
            PolicySet::from_toml(&twice),
            Err(PolicySetError::DuplicateId(id)) if id == "a"
        ));
        let no_keys = zero_limit.replace("limit = 0", "limit = 1");
        assert!(matches!(
            PolicySet::from_toml(&format!("max_keys = 0\n{no_keys}")),
            Err(PolicySetError::Store(_))
        ));
    }

    #[test]
    fn an_invalid_policy_is_reported_at_its_own_table() {
        let valid = |id: &str| {
            format!(
                "[[policy]]\nalgorithm = \"fixed_window\"\nid = \"{id}\"\nscope = \"ip\"\n\
                 limit = 1\nwindow = {{ secs = 60, nanos = 0 }}\n\n"
            )
        };
        // Three valid tables of seven lines each, then the fourth at line 22.
        let text = format!(
            "{}{}{}{}",
            valid("a"),
            valid("b"),
            valid("c"),
            valid("d").replace("limit = 1", "limit = 0")
        );
        let error = PolicySet::from_toml(&text).expect_err("a zero limit");
        assert!(
            matches!(error, PolicySetError::Policy { line: 22, .. }),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "invalid [[policy]] at line 22: limit 0 is outside 1..=1000000000"
        );
    }

    #[test]
    fn candidates_describe_their_quota() {
        let set = PolicySet::from_toml(
            r#"
            [[policy]]
            algorithm = "sliding_window"
            id = "s"
            scope = "ip"
            limit = 5
            window = { secs = 90, nanos = 0 }
        "#,
        )
        .expect("a valid set");
        assert_eq!(set.candidates()[0].to_string(), "5 per 90s sliding");
        assert_eq!(set.candidates()[0].algorithm(), "sliding_window");
        assert_eq!(set.store_config().max_keys(), DEFAULT_MAX_KEYS);
    }
}
