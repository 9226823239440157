//! From YAML files to domains.
//!
//! Each file goes through the reference service's three steps, and a file
//! that fails one does not reach the next, so a problem is reported in the
//! class the reference reports it in:
//!
//! 1. every mapping of the document: keys are strings of the schema, lists
//!    hold mappings, scalars are strings, integers, booleans or null;
//! 2. every field at its place decoded into its type (a raw form that mirrors
//!    the file), known keys elsewhere ignored with a warning;
//! 3. the raw form turned into rules and a matching tree, with the
//!    reference's checks (empty domain and keys, duplicates, units,
//!    `replaces`, `share_threshold`) and Runlimit's (its extensions, its
//!    bounds).
//!
//! Unlike the reference, which stops at the first problem, every problem of
//! a step is collected, with the file, YAML path and line.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use runlimit_core::{
    AnyPolicy, FixedWindowPolicy, GcraPolicy, MAX_LIMIT, MAX_WINDOW, PolicyError, PolicyField,
    PolicyId, QuotaMode, ScopeId, SlidingWindowPolicy,
};

use super::{
    domain::{Descriptor, Domain, Level, Pattern, composite},
    duration,
    error::{Location, Problem, ProblemKind, Warning, WarningKind},
    rule::{Limit, Rule, RulePath, Unit, policy_id},
    yaml::{self, Node, NodeKind, Pos, Value},
};

/// Every key the reference's schema has: anything else is refused wherever
/// it is. Runlimit's `runlimit` key is checked apart.
const SCHEMA_KEYS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "quota_mode",
    "metadata",
];

/// Runlimit's settings of a rule, a mapping inside `rate_limit`.
const EXTENSION_KEY: &str = "runlimit";

const ROOT_KEYS: &[&str] = &["domain", "descriptors"];
const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];
const RATE_LIMIT_KEYS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    EXTENSION_KEY,
];
const REPLACES_KEYS: &[&str] = &["name"];
const EXTENSION_KEYS: &[&str] = &["algorithm", "burst", "period", "lease"];

/// Where a key of the schema takes effect, for a warning about a key found
/// elsewhere.
fn belongs_in(key: &str) -> &'static str {
    match key {
        "domain" => "the top level",
        "descriptors" => "the top level or a descriptor",
        "unit" | "requests_per_unit" | "unlimited" | "replaces" => "rate_limit",
        "name" => "rate_limit or a replaces entry",
        _ => "a descriptor",
    }
}

/// The scope of every rule's policy.
const SCOPE: &str = "descriptor";

/// Domains by name.
pub(crate) type Domains = BTreeMap<Arc<str>, Domain>;

/// Collects domains, problems and warnings file by file.
#[derive(Debug, Default)]
pub(crate) struct Loader {
    domains: Domains,
    problems: Vec<Problem>,
    warnings: Vec<Warning>,
}

impl Loader {
    /// Reads the file `name` of text `source`.
    pub(crate) fn add(&mut self, name: &str, source: &str) {
        let mut file = File {
            name: name.into(),
            problems: Vec::new(),
            warnings: &mut self.warnings,
        };
        if let Some((domain, level)) = file.read(source, &self.domains) {
            let name: Arc<str> = domain.into();
            self.domains.insert(name.clone(), Domain::new(name, level));
        }
        self.problems.append(&mut file.problems);
    }

    /// Records that the file `name` is not text.
    pub(crate) fn add_not_utf8(&mut self, name: &str) {
        let location = Location::new(name.into(), String::new(), 1, 1);
        let kind = ProblemKind::Syntax {
            message: "the file is not valid UTF-8".to_owned(),
        };
        self.problems.push(Problem::new(location, kind));
    }

    /// The domains and warnings, or every problem found.
    pub(crate) fn finish(self) -> Result<(Domains, Vec<Warning>), Vec<Problem>> {
        if self.problems.is_empty() {
            Ok((self.domains, self.warnings))
        } else {
            Err(self.problems)
        }
    }
}

/// A node's place: its YAML path and position.
#[derive(Debug, Clone)]
struct Spot {
    path: String,
    pos: Pos,
}

/// A decoded value and its place.
#[derive(Debug, Clone)]
struct At<T> {
    value: T,
    spot: Spot,
}

/// A field of a mapping: its key, value node and path.
struct Field<'n, 's> {
    name: &'n str,
    node: &'n Node<'s>,
    path: String,
}

impl Field<'_, '_> {
    fn spot(&self) -> Spot {
        Spot {
            path: self.path.clone(),
            pos: self.node.pos,
        }
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn index(path: &str, index: usize) -> String {
    format!("{path}[{index}]")
}

/// The file as step 2 decodes it.
struct RawRoot {
    domain: Option<At<String>>,
    descriptors: Vec<RawDescriptor>,
}

struct RawDescriptor {
    spot: Spot,
    key: String,
    value: String,
    rate_limit: Option<RawRateLimit>,
    descriptors: Vec<RawDescriptor>,
    shadow_mode: bool,
    quota_mode: bool,
    detailed_metric: bool,
    value_to_metric: bool,
    share_threshold: Option<At<bool>>,
    metadata: Option<serde_json::Value>,
}

struct RawRateLimit {
    spot: Spot,
    unit: Option<At<String>>,
    requests_per_unit: Option<At<u32>>,
    unlimited: bool,
    name: String,
    replaces: Vec<At<String>>,
    runlimit: Option<RawExtension>,
}

struct RawExtension {
    algorithm: Option<At<String>>,
    burst: Option<At<u64>>,
    period: Option<At<String>>,
    lease: bool,
}

/// Runlimit's algorithms, by their names in `runlimit.algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algorithm {
    FixedWindow,
    SlidingWindow,
    Gcra,
}

/// A rule's validated `runlimit` settings.
struct Settings {
    algorithm: Algorithm,
    burst: Option<At<u64>>,
    period: Option<At<Duration>>,
    lease: bool,
}

/// A descriptor's flags that its rule takes.
struct Flags {
    shadow_mode: bool,
    quota_mode: bool,
    detailed_metric: bool,
    value_to_metric: bool,
    metadata: Option<serde_json::Value>,
}

/// One file being read.
struct File<'l> {
    name: Arc<str>,
    problems: Vec<Problem>,
    warnings: &'l mut Vec<Warning>,
}

impl File<'_> {
    fn location(&self, spot: &Spot) -> Location {
        Location::new(
            self.name.clone(),
            spot.path.clone(),
            spot.pos.line,
            spot.pos.column,
        )
    }

    fn problem(&mut self, spot: &Spot, kind: ProblemKind) {
        let problem = Problem::new(self.location(spot), kind);
        self.problems.push(problem);
    }

    fn problem_at(&mut self, node: &Node<'_>, path: &str, kind: ProblemKind) {
        let spot = Spot {
            path: path.to_owned(),
            pos: node.pos,
        };
        self.problem(&spot, kind);
    }

    fn warn(&mut self, spot: &Spot, kind: WarningKind) {
        let warning = Warning::new(self.location(spot), kind);
        self.warnings.push(warning);
    }

    /// The file's domain name and tree, if the file is valid.
    fn read(&mut self, source: &str, domains: &Domains) -> Option<(String, Level)> {
        let root = match yaml::parse(source) {
            Ok(root) => root,
            Err(error) => {
                let spot = Spot {
                    path: String::new(),
                    pos: error.pos,
                };
                self.problem(
                    &spot,
                    ProblemKind::Syntax {
                        message: error.message,
                    },
                );
                return None;
            }
        };
        let start = Spot {
            path: String::new(),
            pos: Pos { line: 1, column: 1 },
        };
        let Some(root) = root else {
            // An empty document has no domain.
            self.problem(&start, ProblemKind::EmptyDomain);
            return None;
        };
        if !matches!(root.kind, NodeKind::Mapping(_)) {
            self.type_error(&root, "", "a mapping");
            return None;
        }

        self.check_mapping(&root, "", false);
        if !self.problems.is_empty() {
            return None;
        }
        let raw = self.root(&root);
        if !self.problems.is_empty() {
            return None;
        }

        let (domain, domain_spot) = match raw.domain {
            Some(At { value, spot }) => (value, spot),
            None => (String::new(), start),
        };
        if domain.is_empty() {
            self.problem(&domain_spot, ProblemKind::EmptyDomain);
        } else if domains.contains_key(domain.as_str()) {
            self.problem(
                &domain_spot,
                ProblemKind::DuplicateDomain {
                    domain: domain.clone(),
                },
            );
        }
        // Checked even for a refused domain, to report every problem.
        let level = self.level(&domain, &mut Vec::new(), raw.descriptors, false);
        self.problems.is_empty().then_some((domain, level))
    }

    // Step 1: the keys and value types of every mapping.

    fn check_mapping(&mut self, node: &Node<'_>, path: &str, in_rate_limit: bool) {
        let entries = match node.entries() {
            Ok(entries) => entries,
            Err(merge) => {
                self.problem_at(merge, path, merge_problem());
                return;
            }
        };
        for entry in entries {
            let Some(name) = entry.name() else {
                let key = entry.key.render();
                self.problem_at(entry.key, path, ProblemKind::NonStringKey { key });
                continue;
            };
            let path = child(path, name);
            if name == EXTENSION_KEY {
                // Runlimit's settings are checked where they are read.
                if !in_rate_limit {
                    self.problem_at(entry.key, &path, ProblemKind::MisplacedExtension);
                }
                continue;
            }
            if name == "metadata" {
                // Free-form: its keys are the user's.
                continue;
            }
            if !SCHEMA_KEYS.contains(&name) {
                let kind = ProblemKind::UnknownKey {
                    key: name.to_owned(),
                };
                self.problem_at(entry.key, &path, kind);
                continue;
            }
            self.check_value(entry.value, &path, name == "rate_limit");
        }
    }

    fn check_value(&mut self, node: &Node<'_>, path: &str, is_rate_limit: bool) {
        match &node.kind {
            NodeKind::Sequence(items) => {
                for (i, item) in items.iter().enumerate() {
                    let path = index(path, i);
                    if matches!(item.kind, NodeKind::Mapping(_)) {
                        self.check_mapping(item, &path, false);
                    } else {
                        let element = item.render();
                        self.problem_at(item, &path, ProblemKind::ListOfNonMap { element });
                    }
                }
            }
            NodeKind::Mapping(_) => self.check_mapping(node, path, is_rate_limit),
            NodeKind::Scalar(scalar) => {
                if matches!(scalar.value, Value::Float(_) | Value::BigInt(_)) {
                    self.problem_at(node, path, ProblemKind::UnsupportedValue);
                }
            }
        }
    }

    // Step 2: decoding each field at its place.

    /// The fields of `node` among `keys`; other keys of the schema are
    /// ignored with a warning. Step 1 has refused every other key.
    fn fields<'n, 's>(
        &mut self,
        node: &'n Node<'s>,
        path: &str,
        keys: &[&str],
    ) -> Vec<Field<'n, 's>> {
        let mut fields = Vec::new();
        for entry in node.entries().unwrap_or_default() {
            let Some(name) = entry.name() else { continue };
            let field = Field {
                name,
                node: entry.value,
                path: child(path, name),
            };
            if keys.contains(&name) {
                fields.push(field);
            } else {
                let spot = Spot {
                    path: field.path,
                    pos: entry.key.pos,
                };
                let kind = WarningKind::MisplacedKey {
                    key: name.to_owned(),
                    belongs_in: belongs_in(name),
                };
                self.warn(&spot, kind);
            }
        }
        fields
    }

    /// The fields of Runlimit's settings, which step 1 left unchecked: only
    /// `EXTENSION_KEYS` are allowed.
    fn extension_fields<'n, 's>(&mut self, node: &'n Node<'s>, path: &str) -> Vec<Field<'n, 's>> {
        let entries = match node.entries() {
            Ok(entries) => entries,
            Err(merge) => {
                self.problem_at(merge, path, merge_problem());
                return Vec::new();
            }
        };
        let mut fields = Vec::new();
        for entry in entries {
            let Some(name) = entry.name() else {
                let key = entry.key.render();
                self.problem_at(entry.key, path, ProblemKind::NonStringKey { key });
                continue;
            };
            let path = child(path, name);
            if EXTENSION_KEYS.contains(&name) {
                fields.push(Field {
                    name,
                    node: entry.value,
                    path,
                });
            } else {
                let kind = ProblemKind::UnknownKey {
                    key: name.to_owned(),
                };
                self.problem_at(entry.key, &path, kind);
            }
        }
        fields
    }

    fn type_error(&mut self, node: &Node<'_>, path: &str, expected: &'static str) {
        let found = match node.scalar() {
            Some(scalar) => format!("{} `{}`", scalar.value.tag(), scalar.text),
            None => node.tag().to_owned(),
        };
        self.problem_at(node, path, ProblemKind::Type { found, expected });
    }

    /// A string field: any scalar's text; null is empty.
    fn string(&mut self, field: &Field<'_, '_>) -> Option<At<String>> {
        let Some(scalar) = field.node.scalar() else {
            self.type_error(field.node, &field.path, "string");
            return None;
        };
        let value = if scalar.value == Value::Null {
            String::new()
        } else {
            scalar.text.to_string()
        };
        Some(At {
            value,
            spot: field.spot(),
        })
    }

    /// A boolean field: YAML 1.1's booleans; null is false.
    fn flag(&mut self, field: &Field<'_, '_>) -> Option<At<bool>> {
        let value = match field.node.scalar().map(|scalar| scalar.value) {
            Some(Value::Bool(value)) => value,
            Some(Value::Null) => false,
            _ => {
                self.type_error(field.node, &field.path, "bool");
                return None;
            }
        };
        Some(At {
            value,
            spot: field.spot(),
        })
    }

    /// An unsigned integer field of at most `max`; null is 0.
    fn unsigned(
        &mut self,
        field: &Field<'_, '_>,
        max: u64,
        expected: &'static str,
    ) -> Option<At<u64>> {
        let value = match field.node.scalar().map(|scalar| scalar.value) {
            Some(Value::Int(value)) => u64::try_from(value).ok(),
            Some(Value::BigInt(value)) => Some(value),
            Some(Value::Null) => Some(0),
            _ => None,
        };
        match value.filter(|value| *value <= max) {
            Some(value) => Some(At {
                value,
                spot: field.spot(),
            }),
            None => {
                self.type_error(field.node, &field.path, expected);
                None
            }
        }
    }

    fn root(&mut self, node: &Node<'_>) -> RawRoot {
        let mut root = RawRoot {
            domain: None,
            descriptors: Vec::new(),
        };
        for field in self.fields(node, "", ROOT_KEYS) {
            match field.name {
                "domain" => root.domain = self.string(&field),
                "descriptors" => root.descriptors = self.descriptors(&field),
                _ => {}
            }
        }
        root
    }

    fn descriptors(&mut self, field: &Field<'_, '_>) -> Vec<RawDescriptor> {
        match &field.node.kind {
            NodeKind::Sequence(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| self.descriptor(item, index(&field.path, i)))
                .collect(),
            _ if field.node.is_null() => Vec::new(),
            _ => {
                self.type_error(field.node, &field.path, "a list of descriptors");
                Vec::new()
            }
        }
    }

    fn descriptor(&mut self, node: &Node<'_>, path: String) -> RawDescriptor {
        let mut descriptor = RawDescriptor {
            spot: Spot {
                path: path.clone(),
                pos: node.pos,
            },
            key: String::new(),
            value: String::new(),
            rate_limit: None,
            descriptors: Vec::new(),
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            value_to_metric: false,
            share_threshold: None,
            metadata: None,
        };
        for field in self.fields(node, &path, DESCRIPTOR_KEYS) {
            let flag = |file: &mut Self| file.flag(&field).is_some_and(|flag| flag.value);
            match field.name {
                "key" => descriptor.key = self.string(&field).map(|s| s.value).unwrap_or_default(),
                "value" => {
                    descriptor.value = self.string(&field).map(|s| s.value).unwrap_or_default();
                }
                "rate_limit" => descriptor.rate_limit = self.rate_limit(&field),
                "descriptors" => descriptor.descriptors = self.descriptors(&field),
                "shadow_mode" => descriptor.shadow_mode = flag(self),
                "quota_mode" => descriptor.quota_mode = flag(self),
                "detailed_metric" => descriptor.detailed_metric = flag(self),
                "value_to_metric" => descriptor.value_to_metric = flag(self),
                "share_threshold" => descriptor.share_threshold = self.flag(&field),
                "metadata" => descriptor.metadata = self.metadata(&field),
                _ => {}
            }
        }
        descriptor
    }

    fn rate_limit(&mut self, field: &Field<'_, '_>) -> Option<RawRateLimit> {
        if field.node.is_null() {
            // `rate_limit:` with nothing: no limit, as in the reference.
            return None;
        }
        if !matches!(field.node.kind, NodeKind::Mapping(_)) {
            self.type_error(field.node, &field.path, "a rate_limit mapping");
            return None;
        }
        let mut limit = RawRateLimit {
            spot: field.spot(),
            unit: None,
            requests_per_unit: None,
            unlimited: false,
            name: String::new(),
            replaces: Vec::new(),
            runlimit: None,
        };
        for field in self.fields(field.node, &field.path, RATE_LIMIT_KEYS) {
            match field.name {
                "unit" => limit.unit = self.string(&field),
                "requests_per_unit" => {
                    limit.requests_per_unit = self
                        .unsigned(&field, u64::from(u32::MAX), "uint32")
                        .and_then(|At { value, spot }| {
                            let value = u32::try_from(value).ok()?;
                            Some(At { value, spot })
                        });
                }
                "unlimited" => limit.unlimited = self.flag(&field).is_some_and(|f| f.value),
                "name" => limit.name = self.string(&field).map(|s| s.value).unwrap_or_default(),
                "replaces" => limit.replaces = self.replaces(&field),
                EXTENSION_KEY => limit.runlimit = self.extension(&field),
                _ => {}
            }
        }
        Some(limit)
    }

    fn replaces(&mut self, field: &Field<'_, '_>) -> Vec<At<String>> {
        let items = match &field.node.kind {
            NodeKind::Sequence(items) => items,
            _ if field.node.is_null() => return Vec::new(),
            _ => {
                self.type_error(field.node, &field.path, "a list of replaces");
                return Vec::new();
            }
        };
        let mut replaces = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let path = index(&field.path, i);
            let mut name = At {
                value: String::new(),
                spot: Spot {
                    path: path.clone(),
                    pos: item.pos,
                },
            };
            for field in self.fields(item, &path, REPLACES_KEYS) {
                if let Some(value) = self.string(&field) {
                    name = value;
                }
            }
            replaces.push(name);
        }
        replaces
    }

    fn extension(&mut self, field: &Field<'_, '_>) -> Option<RawExtension> {
        if field.node.is_null() {
            return None;
        }
        if !matches!(field.node.kind, NodeKind::Mapping(_)) {
            self.type_error(field.node, &field.path, "a runlimit mapping");
            return None;
        }
        let mut extension = RawExtension {
            algorithm: None,
            burst: None,
            period: None,
            lease: false,
        };
        for field in self.extension_fields(field.node, &field.path) {
            match field.name {
                "algorithm" => extension.algorithm = self.string(&field),
                "burst" => extension.burst = self.unsigned(&field, u64::MAX, "uint64"),
                "period" => extension.period = self.string(&field),
                "lease" => extension.lease = self.flag(&field).is_some_and(|f| f.value),
                _ => {}
            }
        }
        Some(extension)
    }

    /// `metadata`: a mapping, as JSON.
    fn metadata(&mut self, field: &Field<'_, '_>) -> Option<serde_json::Value> {
        if field.node.is_null() {
            return None;
        }
        if !matches!(field.node.kind, NodeKind::Mapping(_)) {
            self.type_error(field.node, &field.path, "a mapping");
            return None;
        }
        self.json(field.node, &field.path)
    }

    fn json(&mut self, node: &Node<'_>, path: &str) -> Option<serde_json::Value> {
        use serde_json::Value as Json;
        Some(match &node.kind {
            NodeKind::Scalar(scalar) => match scalar.value {
                Value::Null => Json::Null,
                Value::Bool(value) => Json::Bool(value),
                Value::Int(value) => Json::from(value),
                Value::BigInt(value) => Json::from(value),
                Value::Float(value) => match serde_json::Number::from_f64(value) {
                    Some(number) => Json::Number(number),
                    None => {
                        let text = scalar.text.to_string();
                        self.problem_at(node, path, ProblemKind::MetadataNumber { text });
                        return None;
                    }
                },
                Value::Str | Value::Merge => Json::String(scalar.text.to_string()),
            },
            NodeKind::Sequence(items) => Json::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| self.json(item, &index(path, i)))
                    .collect::<Option<_>>()?,
            ),
            NodeKind::Mapping(_) => {
                let entries = match node.entries() {
                    Ok(entries) => entries,
                    Err(merge) => {
                        self.problem_at(merge, path, merge_problem());
                        return None;
                    }
                };
                let mut object = serde_json::Map::new();
                for entry in entries {
                    let Some(key) = entry.key.scalar() else {
                        let key = entry.key.render();
                        self.problem_at(entry.key, path, ProblemKind::NonStringKey { key });
                        return None;
                    };
                    let value = self.json(entry.value, &child(path, &key.text))?;
                    object.insert(key.text.to_string(), value);
                }
                Json::Object(object)
            }
        })
    }

    // Step 3: rules and the matching tree.

    /// The descriptors `raws` under the composite keys `parents` of
    /// `domain`, as a level of the tree.
    fn level(
        &mut self,
        domain: &str,
        parents: &mut Vec<String>,
        raws: Vec<RawDescriptor>,
        value_to_metric: bool,
    ) -> Level {
        let mut level = Level::default();
        for raw in raws {
            if raw.key.is_empty() {
                self.problem(&raw.spot, ProblemKind::EmptyKey);
                continue;
            }
            let composite = composite(&raw.key, &raw.value);
            let duplicate = level.contains(&composite);
            if duplicate {
                let mut key = format!("{domain}.");
                for parent in parents.iter() {
                    key.push_str(parent);
                    key.push('.');
                }
                key.push_str(&composite);
                self.problem(&raw.spot, ProblemKind::DuplicateCompositeKey { key });
            }
            parents.push(composite);
            let value_to_metric = value_to_metric || raw.value_to_metric;
            let flags = Flags {
                shadow_mode: raw.shadow_mode,
                quota_mode: raw.quota_mode,
                detailed_metric: raw.detailed_metric,
                value_to_metric,
                metadata: raw.metadata,
            };
            let rule = raw
                .rate_limit
                .and_then(|limit| self.rule(domain, parents, limit, flags));
            let share_threshold = raw
                .share_threshold
                .as_ref()
                .is_some_and(|share| share.value);
            if let Some(share) = raw.share_threshold.as_ref().filter(|share| share.value)
                && Pattern::new(&raw.key, &raw.value).is_none()
            {
                let key = parents.last().cloned().unwrap_or_default();
                let kind = ProblemKind::ShareThresholdWithoutWildcard { key };
                self.problem(&share.spot, kind);
            }
            let children = self.level(domain, parents, raw.descriptors, value_to_metric);
            parents.pop();
            if !duplicate {
                let descriptor =
                    Descriptor::new(&raw.key, &raw.value, share_threshold, rule, children);
                level.push(descriptor);
            }
        }
        level
    }

    /// The rule of the descriptor at `composites` of `domain`.
    fn rule(
        &mut self,
        domain: &str,
        composites: &[String],
        raw: RawRateLimit,
        flags: Flags,
    ) -> Option<Rule> {
        let unit_text = raw.unit.as_ref().map_or("", |unit| unit.value.as_str());
        let unit = Unit::from_name(unit_text);
        let unit_spot = raw
            .unit
            .as_ref()
            .map_or(&raw.spot, |unit| &unit.spot)
            .clone();
        let mut valid = true;
        if raw.unlimited {
            if unit.is_some() {
                self.problem(&unit_spot, ProblemKind::UnitWithUnlimited);
                valid = false;
            }
        } else if unit.is_none() {
            let kind = ProblemKind::InvalidUnit {
                unit: unit_text.to_owned(),
            };
            self.problem(&unit_spot, kind);
            valid = false;
        }
        for replaced in &raw.replaces {
            if replaced.value.is_empty() {
                self.problem(&replaced.spot, ProblemKind::EmptyReplaces);
                valid = false;
            } else if replaced.value == raw.name {
                self.problem(&replaced.spot, ProblemKind::ReplacesOwnName);
                valid = false;
            }
        }
        let settings = match &raw.runlimit {
            Some(extension) => Some(self.settings(extension)?),
            None => None,
        };

        let limit = match (raw.unlimited, unit) {
            (true, _) => {
                if settings.is_some() {
                    self.warn(&raw.spot, WarningKind::UnusedExtension);
                }
                Limit::Unlimited
            }
            (false, Some(unit)) => {
                let requests_per_unit = match raw.requests_per_unit {
                    Some(requests_per_unit) => requests_per_unit,
                    None => {
                        self.warn(&raw.spot, WarningKind::MissingRequestsPerUnit);
                        At {
                            value: 0,
                            spot: raw.spot.clone(),
                        }
                    }
                };
                if requests_per_unit.value == 0 {
                    if settings.is_some() {
                        self.warn(&raw.spot, WarningKind::UnusedExtension);
                    }
                    Limit::Blocked { unit }
                } else {
                    let settings = settings.as_ref().unwrap_or(&DEFAULT_SETTINGS);
                    let id = policy_id(domain, composites.iter().map(String::as_str));
                    let policy = self.policy(id, &requests_per_unit, unit, &unit_spot, settings)?;
                    let policy = if flags.shadow_mode {
                        policy.with_quota_mode(QuotaMode::Shadow)
                    } else {
                        policy
                    };
                    Limit::Limited {
                        policy,
                        requests_per_unit: requests_per_unit.value,
                        unit,
                    }
                }
            }
            // Refused above.
            (false, None) => return None,
        };
        if !valid {
            return None;
        }
        Some(Rule {
            path: RulePath::new(composites.join(".")),
            limit,
            name: Some(raw.name).filter(|name| !name.is_empty()),
            replaces: raw.replaces.into_iter().map(|name| name.value).collect(),
            shadow_mode: flags.shadow_mode,
            quota_mode: flags.quota_mode,
            detailed_metric: flags.detailed_metric,
            value_to_metric: flags.value_to_metric,
            metadata: flags.metadata,
            lease: settings.is_some_and(|settings| settings.lease),
        })
    }

    /// Validates `runlimit` settings on their own: `None` after recording
    /// their problems.
    fn settings(&mut self, raw: &RawExtension) -> Option<Settings> {
        let mut valid = true;
        let algorithm = match &raw.algorithm {
            None => Some(Algorithm::FixedWindow),
            Some(name) => match name.value.to_ascii_lowercase().as_str() {
                "fixed_window" => Some(Algorithm::FixedWindow),
                "sliding_window" => Some(Algorithm::SlidingWindow),
                "gcra" => Some(Algorithm::Gcra),
                _ => {
                    let kind = ProblemKind::UnknownAlgorithm {
                        name: name.value.clone(),
                    };
                    self.problem(&name.spot, kind);
                    valid = false;
                    None
                }
            },
        };
        if let Some(burst) = &raw.burst {
            if algorithm.is_some_and(|algorithm| algorithm != Algorithm::Gcra) {
                self.problem(&burst.spot, ProblemKind::BurstWithoutGcra);
                valid = false;
            } else if !(1..=MAX_LIMIT).contains(&burst.value) {
                let error = PolicyError::CountOutOfRange {
                    field: PolicyField::BurstCapacity,
                    value: burst.value,
                    maximum: MAX_LIMIT,
                };
                self.problem(&burst.spot, ProblemKind::Policy(error));
                valid = false;
            }
        }
        let period = match &raw.period {
            None => None,
            Some(text) => match duration::parse(&text.value) {
                Some(value) if value.is_zero() || value > MAX_WINDOW => {
                    let error = PolicyError::DurationOutOfRange {
                        field: PolicyField::Period,
                        value,
                        maximum: MAX_WINDOW,
                    };
                    self.problem(&text.spot, ProblemKind::Policy(error));
                    valid = false;
                    None
                }
                Some(value) => Some(At {
                    value,
                    spot: text.spot.clone(),
                }),
                None => {
                    let kind = ProblemKind::InvalidDuration {
                        text: text.value.clone(),
                    };
                    self.problem(&text.spot, kind);
                    valid = false;
                    None
                }
            },
        };
        Some(Settings {
            algorithm: algorithm?,
            burst: raw.burst.clone(),
            period,
            lease: raw.lease,
        })
        .filter(|_| valid)
    }

    /// The policy counting `requests_per_unit` per `unit` (or per the
    /// settings' period) with the settings' algorithm.
    fn policy(
        &mut self,
        id: PolicyId,
        requests_per_unit: &At<u32>,
        unit: Unit,
        unit_spot: &Spot,
        settings: &Settings,
    ) -> Option<AnyPolicy> {
        // Invariant: "descriptor" is a valid scope id.
        let scope = ScopeId::new(SCOPE).expect("a valid scope id");
        let limit = u64::from(requests_per_unit.value);
        let window = settings
            .period
            .as_ref()
            .map_or(unit.duration(), |period| period.value);
        let policy = match settings.algorithm {
            Algorithm::FixedWindow => {
                FixedWindowPolicy::new(id, scope, limit, window).map(Into::into)
            }
            Algorithm::SlidingWindow => {
                SlidingWindowPolicy::new(id, scope, limit, window).map(Into::into)
            }
            Algorithm::Gcra => {
                let burst = settings.burst.as_ref().map_or(limit, |burst| burst.value);
                GcraPolicy::new(id, scope, limit, window, burst).map(Into::into)
            }
        };
        match policy {
            Ok(policy) => Some(policy),
            Err(error) => {
                let spot = match &error {
                    PolicyError::CountOutOfRange {
                        field: PolicyField::BurstCapacity,
                        ..
                    }
                    | PolicyError::ReplenishmentTooLong { .. } => settings
                        .burst
                        .as_ref()
                        .map_or(&requests_per_unit.spot, |burst| &burst.spot),
                    PolicyError::DurationOutOfRange { .. }
                    | PolicyError::DurationNotWholeMilliseconds { .. } => settings
                        .period
                        .as_ref()
                        .map_or(unit_spot, |period| &period.spot),
                    _ => &requests_per_unit.spot,
                }
                .clone();
                self.problem(&spot, ProblemKind::Policy(error));
                None
            }
        }
    }
}

/// The settings of a rule without `runlimit`: a fixed window per unit.
const DEFAULT_SETTINGS: Settings = Settings {
    algorithm: Algorithm::FixedWindow,
    burst: None,
    period: None,
    lease: false,
};

fn merge_problem() -> ProblemKind {
    ProblemKind::Syntax {
        message: "map merge requires map or sequence of maps as the value".to_owned(),
    }
}
