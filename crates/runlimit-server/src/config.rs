//! The configuration: YAML files in the format of Envoy's reference
//! rate-limit service, read as that service reads them, into rules that
//! [`Domain::resolve`] matches request descriptors against.
//!
//! Every file the reference service accepts loads unchanged and matches as
//! it matches there (the one exception, a `*` inside a value, is listed under
//! [differences](#differences-from-the-reference-service)). Runlimit's own
//! algorithms are opt-in per rule, under a key the reference does not have.
//!
//! # Example
//!
//! ```
//! use runlimit_server::config::{Config, Entry, Limit};
//!
//! let config = Config::from_sources([(
//!     "edge.yaml",
//!     "
//! domain: edge
//! descriptors:
//!   - key: remote_address
//!     rate_limit: {unit: minute, requests_per_unit: 60}
//!   - key: path
//!     value: /api/*
//!     rate_limit:
//!       unit: second
//!       requests_per_unit: 10
//!       runlimit: {algorithm: gcra, burst: 20}
//! ",
//! )])?;
//! let edge = config.domain("edge").expect("loaded");
//!
//! let matched = edge.resolve(&[Entry::new("path", "/api/users")]).expect("a rule");
//! assert_eq!(matched.rule.path.as_str(), "path_/api/*");
//! assert!(matches!(matched.rule.limit, Limit::Limited { requests_per_unit: 10, .. }));
//!
//! // No rule: the request is not limited by this descriptor.
//! assert!(edge.resolve(&[Entry::new("path", "/health")]).is_none());
//! # Ok::<(), runlimit_server::config::ConfigError>(())
//! ```
//!
//! # Loading
//!
//! [`Config::load_dir`] reads every file named `*.yaml` or `*.yml` (in any
//! case) under a directory and its subdirectories, in the order of their
//! paths. Files and directories whose name begins with `.` are skipped
//! (Kubernetes keeps a mounted ConfigMap's files twice, once under `..data`);
//! other files are ignored; symbolic links are followed. Each file holds one
//! YAML document (later documents are not read) with one domain, and two
//! files with the same domain are an error. Problems name a file by its path
//! relative to the directory.
//!
//! Loading is all or nothing: a [`ConfigError::Invalid`] lists every problem
//! found (each with its file, YAML path, line and column), and nothing loads.
//! Keys of the schema found where they have no effect load with a
//! [`Warning`] ([`Config::warnings`]).
//!
//! # Schema
//!
//! The top level of a file:
//!
//! | key | type | meaning |
//! |---|---|---|
//! | `domain` | string, required | the domain a request names |
//! | `descriptors` | list of descriptors | the first level of the tree |
//!
//! A descriptor, at any level:
//!
//! | key | type | meaning |
//! |---|---|---|
//! | `key` | string, required | the key of the request entry it matches |
//! | `value` | string | the entry's value; a `*` in it matches any run of characters; absent or empty: any value (see [matching](#matching)) |
//! | `rate_limit` | mapping | the rule this descriptor carries |
//! | `descriptors` | list of descriptors | the next level, matched against the request's next entry |
//! | `shadow_mode` | bool | the rule reports over-limit requests as within the limit |
//! | `quota_mode` | bool | the request is over the limit only when every quota-mode descriptor of it is |
//! | `share_threshold` | bool | on a wildcard value: every value it matches shares one counter |
//! | `detailed_metric`, `value_to_metric` | bool | recorded on the rule ([`Rule::detailed_metric`], [`Rule::value_to_metric`]) |
//! | `metadata` | mapping | returned to the proxy as JSON for a request within the limit |
//!
//! `rate_limit`:
//!
//! | key | type | meaning |
//! |---|---|---|
//! | `unit` | `second`, `minute`, `hour`, `day`, `week`, `month` (30 days), `year` (365 days), in any case | required unless unlimited |
//! | `requests_per_unit` | integer, 0 to 10⁹ | 0 blocks every request |
//! | `unlimited` | bool | every request is within the limit; no unit allowed |
//! | `name` | string | the name other rules' `replaces` use |
//! | `replaces` | list of `{name: …}` | rules this one drops from a request that matches both |
//! | `runlimit` | mapping | Runlimit's settings (see [below](#runlimits-settings)) |
//!
//! # Matching
//!
//! A request descriptor is a list of entries `(key, value)`. The first entry
//! selects one of the domain's top-level descriptors, the second one of that
//! descriptor's children, and so on. At each level the entry selects, in this
//! order:
//!
//! 1. the descriptor whose composite key equals the entry's `key_value`
//!    (a descriptor's composite key is `key_value`, or `key` without a
//!    value);
//! 2. else the first wildcard descriptor, in file order, whose pattern
//!    matches `key_value`;
//! 3. else the descriptor whose composite key is the entry's `key` (no
//!    value: any value).
//!
//! The rule is the one on the descriptor the last entry selects. A request
//! longer or shorter than the path to a rule does not match it, and an entry
//! that selects nothing ends the search: matching never falls back to
//! another branch or level. Values are compared exactly (case-sensitively).
//! Composite keys are compared as strings, as the reference service compares
//! them, so a descriptor with the key `a_b` and no value is also selected by
//! an entry `(a, b)`.
//!
//! # Reading YAML
//!
//! Files are read with YAML 1.1's typing, as the reference service reads
//! them, not YAML 1.2's:
//!
//! * plain `y`, `yes`, `on`, `true` (and `n`, `no`, `off`, `false`), in
//!   lowercase, capitalized or uppercase, are booleans: `shadow_mode: yes`
//!   is true; quoted `"yes"`, `1` or `maybe` are not booleans and are
//!   refused where one is expected;
//! * a string field takes the scalar's text whatever it looks like:
//!   `value: 404`, `value: true` and `value: 0x10` are the values `404`,
//!   `true` and `0x10`; `~`, `null` or nothing are the empty string;
//! * a float (`1.5`, `1e3`, `.inf`, and `08`, which is no octal integer) or
//!   an integer above 2⁶³ − 1 is refused anywhere outside `metadata`;
//! * of a key written twice in one mapping, the last value counts;
//! * anchors, aliases and merge keys (`<<: *defaults`) work; a merged
//!   mapping overrides the keys before the `<<`, keys after it override it;
//! * tags of the core schema (`!!str 404`) are honoured, other tags ignored.
//!
//! Nesting deeper than 1 000 levels, and aliases that expand to more than
//! 100 000 nodes, are refused.
//!
//! # Runlimit's settings
//!
//! A rule may choose Runlimit's algorithms with a `runlimit` mapping inside
//! its `rate_limit`. The reference service refuses the key, and Runlimit
//! refuses it anywhere else, so a file without it means the same to both.
//!
//! ```yaml
//! rate_limit:
//!   unit: second
//!   requests_per_unit: 100
//!   runlimit:
//!     algorithm: gcra   # fixed_window (the default), sliding_window or gcra
//!     burst: 20         # gcra only: units available at once (default: requests_per_unit)
//!     period: 500ms     # the window or period, instead of one unit
//!     lease: true       # admit from leases of the shared quota: for a hot rule
//! ```
//!
//! * `fixed_window`: at most `requests_per_unit` per window, a subject's
//!   window starting at its first counted request;
//! * `sliding_window`: at most `requests_per_unit` in any interval of the
//!   window's length;
//! * `gcra`: `requests_per_unit` replenished evenly over each period, at most
//!   `burst` at once.
//!
//! `period` takes whole numbers with a unit (`ms`, `s`, `m`, `h`, `d` of 24
//! hours, `w` of 7 days), or sums of them (`1h30m`), up to 366 days. The
//! `unit` stays required: the protocol reports every limit per unit.
//!
//! Refused when the configuration is built: an unknown algorithm or key,
//! `burst` without `gcra`, a burst of 0 or above 10⁹, a period of 0 or over
//! 366 days, a burst that takes longer than 366 days to replenish. Settings
//! on a rule that counts nothing (unlimited, or `requests_per_unit: 0`) are
//! checked, and load with a warning.
//!
//! # Reloading
//!
//! A reload builds a whole new [`Config`] and swaps it in.
//! [`Config::continuing_from`] keeps counters across it: each rule's policy
//! id depends only on its domain and path ([`Rule`]), so a rule whose
//! parameters did not change counts on as before, and a rule whose limit,
//! unit, period or algorithm changed continues from the previous policy
//! (each subject's state is carried over, translated, the first time it is
//! checked; see [`runlimit_core::carry`]).
//!
//! # Differences from the reference service
//!
//! | topic | the reference service | Runlimit |
//! |---|---|---|
//! | files read | every file under the directory, whatever its name, dot entries too unless told otherwise; order unspecified | `*.yaml` and `*.yml` under the directory; dot entries skipped; in path order |
//! | `*` inside a value | literal unless it ends the value: `f*o` matches only `f*o` | a wildcard anywhere: `f*o` matches `fo`, `f1o`, `f*o`, … |
//! | `share_threshold` | only on a value ending in `*` | on any wildcard value |
//! | keys of the schema where they have no effect | ignored silently | ignored, with a warning |
//! | `rate_limit` without `requests_per_unit` | blocks every request | blocks every request, with a warning |
//! | one domain in two files | an error, or merged when configured | always an error |
//! | `requests_per_unit` | up to 2³² − 1 | up to 10⁹; a larger value is refused |
//! | windows | aligned to the Unix epoch | a subject's fixed window starts at its first counted request; sliding windows and GCRA on request |
//! | `detailed_metric`, `value_to_metric` | put request values into statistics names | recorded on the rule; metrics name rules by their path only |
//! | `metadata` | a free-form mapping | a free-form mapping, as JSON: `.inf` and `.nan` are refused |
//! | problems | the first one, with the file name | every one, with the file, YAML path, line and column |

mod domain;
mod duration;
mod error;
mod rule;
mod schema;
mod yaml;

use std::{
    collections::{HashMap, HashSet},
    fs,
    path::{Path, PathBuf},
};

use runlimit_core::{AnyPolicy, Policy, PolicyId};

pub use domain::{Domain, Entry, Matched};
pub(crate) use duration::parse as parse_duration;
pub use error::{ConfigError, Location, Problem, ProblemKind, Warning, WarningKind};
pub(crate) use rule::{IdPrefix, digest_id};
pub use rule::{Limit, Rule, RulePath, Unit};

/// A loaded configuration: domains of rules, and the warnings loading gave.
///
/// Built whole or not at all, and never changed: a reload builds a new one
/// ([`continuing_from`](Self::continuing_from) the current one) and swaps it
/// in. The default is a configuration without domains.
#[derive(Debug, Clone, Default)]
pub struct Config {
    domains: schema::Domains,
    warnings: Vec<Warning>,
    /// The policy ids of limited rules with `runlimit.lease: true`.
    leased: HashSet<PolicyId>,
}

impl Config {
    /// Loads every `*.yaml` and `*.yml` file under `dir` (see
    /// [loading](self#loading)).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Read`] when the directory or a file in it cannot be
    /// read; [`ConfigError::Invalid`] with every problem of every file.
    pub fn load_dir(dir: impl AsRef<Path>) -> Result<Self, ConfigError> {
        Self::from_files(&read_dir(dir.as_ref())?)
    }

    /// Loads files read by [`read_dir`].
    pub(crate) fn from_files(files: &[SourceFile]) -> Result<Self, ConfigError> {
        let mut loader = schema::Loader::default();
        for file in files {
            match std::str::from_utf8(&file.bytes) {
                Ok(text) => loader.add(&file.name, text),
                Err(_) => loader.add_not_utf8(&file.name),
            }
        }
        Self::finish(loader)
    }

    /// Loads files given as `(name, text)`, in that order; `name` is how
    /// problems and warnings name the file.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] with every problem of every file.
    pub fn from_sources<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, ConfigError> {
        let mut loader = schema::Loader::default();
        for (name, text) in files {
            loader.add(name, text);
        }
        Self::finish(loader)
    }

    fn finish(loader: schema::Loader) -> Result<Self, ConfigError> {
        let (domains, warnings) = loader
            .finish()
            .map_err(|problems| ConfigError::Invalid { problems })?;
        let leased = domains
            .values()
            .flat_map(Domain::rules)
            .filter(|rule| rule.lease)
            .filter_map(|rule| match &rule.limit {
                Limit::Limited { policy, .. } => Some(policy.id().clone()),
                _ => None,
            })
            .collect();
        Ok(Self {
            domains,
            warnings,
            leased,
        })
    }

    /// Whether `policy` is the policy of a limited rule with
    /// `rate_limit.runlimit.lease: true`, whose checks a shared backend
    /// admits from leases.
    #[must_use]
    pub fn is_leased(&self, policy: &PolicyId) -> bool {
        self.leased.contains(policy)
    }

    /// The domain named `name`.
    #[must_use]
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Every domain, by name.
    pub fn domains(&self) -> impl Iterator<Item = &Domain> {
        self.domains.values()
    }

    /// What loaded but is likely not what its author meant, in file order.
    #[must_use]
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// This configuration, continuing from `previous`, the one it replaces
    /// (see [reloading](self#reloading)).
    ///
    /// For each [`Limit::Limited`] rule whose domain and path `previous` has
    /// as a limited rule too: when the parameters differ, the policy
    /// continues from the previous rule's policy; when they are the same,
    /// it keeps the previous policy's own predecessor, so a reload does not
    /// cut short a carry still under way. Rules new in this configuration,
    /// and rules that were unlimited or blocked, start fresh.
    #[must_use]
    pub fn continuing_from(mut self, previous: &Config) -> Config {
        let before: HashMap<&PolicyId, &AnyPolicy> = previous
            .domains()
            .flat_map(Domain::rules)
            .filter_map(|rule| match &rule.limit {
                Limit::Limited { policy, .. } => Some((policy.id(), policy)),
                _ => None,
            })
            .collect();
        for domain in self.domains.values_mut() {
            domain.for_each_rule_mut(&mut |rule| {
                let Limit::Limited { policy, .. } = &mut rule.limit else {
                    return;
                };
                let Some(old) = before.get(policy.id()) else {
                    return;
                };
                let predecessor = if old.fingerprint() == policy.fingerprint() {
                    match old.predecessor() {
                        Some(predecessor) => predecessor,
                        None => return,
                    }
                } else {
                    old
                };
                // The ids are equal and every rule has the same scope, so
                // continuing cannot fail; the policy stays as it is if it did.
                if let Ok(continued) = policy.clone().continuing(predecessor) {
                    *policy = continued;
                }
            });
        }
        self
    }
}

/// A configuration file as read: its name relative to the directory, and
/// its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceFile {
    pub(crate) name: String,
    pub(crate) bytes: Vec<u8>,
}

/// Reads every configuration file under `dir` (see
/// [loading](self#loading)), in the order of their paths.
pub(crate) fn read_dir(dir: &Path) -> Result<Vec<SourceFile>, ConfigError> {
    let mut files = Vec::new();
    collect_files(dir, dir, &mut Vec::new(), &mut files)?;
    files.sort();
    files
        .into_iter()
        .map(|(name, path)| match fs::read(&path) {
            Ok(bytes) => Ok(SourceFile { name, bytes }),
            Err(source) => Err(ConfigError::Read { path, source }),
        })
        .collect()
}

/// Adds the YAML files under `dir` to `files` as (name relative to `root`,
/// path), skipping dot entries; `ancestors` are the directories being
/// walked, so that a symbolic link back to one of them is not followed.
fn collect_files(
    root: &Path,
    dir: &Path,
    ancestors: &mut Vec<PathBuf>,
    files: &mut Vec<(String, PathBuf)>,
) -> Result<(), ConfigError> {
    let read_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ConfigError::Read { path, source }
    };
    let canonical = fs::canonicalize(dir).map_err(read_error(dir))?;
    if ancestors.contains(&canonical) {
        return Ok(());
    }
    ancestors.push(canonical);
    for entry in fs::read_dir(dir).map_err(read_error(dir))? {
        let entry = entry.map_err(read_error(dir))?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        // Follows symbolic links. A broken link is an error only where a
        // configuration file should be.
        let metadata = match fs::metadata(&path) {
            Ok(metadata) => metadata,
            Err(_) if !is_yaml(&path) => continue,
            Err(source) => return Err(read_error(&path)(source)),
        };
        if metadata.is_dir() {
            collect_files(root, &path, ancestors, files)?;
        } else if metadata.is_file() && is_yaml(&path) {
            let relative = path.strip_prefix(root).unwrap_or(&path);
            let name = relative
                .components()
                .map(|part| part.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            files.push((name, path));
        }
    }
    ancestors.pop();
    Ok(())
}

fn is_yaml(path: &Path) -> bool {
    path.extension().is_some_and(|extension| {
        extension.eq_ignore_ascii_case("yaml") || extension.eq_ignore_ascii_case("yml")
    })
}
