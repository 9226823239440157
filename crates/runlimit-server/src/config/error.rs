//! Why a configuration was refused, and what loaded with a warning.

use std::{fmt, io, path::PathBuf, sync::Arc};

use runlimit_core::PolicyError;

/// Where in the configuration a problem or warning is: the file (named by
/// its path relative to the loaded directory, or as given to
/// [`Config::from_sources`](super::Config::from_sources)), the YAML path
/// (`descriptors[0].rate_limit.unit`; empty for the whole document) and the
/// 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    file: Arc<str>,
    path: String,
    line: usize,
    column: usize,
}

impl Location {
    pub(crate) fn new(file: Arc<str>, path: String, line: usize, column: usize) -> Self {
        Self {
            file,
            path,
            line,
            column,
        }
    }

    /// The file's name.
    #[must_use]
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The YAML path of the node, empty for the whole document.
    #[must_use]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The 1-based line.
    #[must_use]
    pub fn line(&self) -> usize {
        self.line
    }

    /// The 1-based column.
    #[must_use]
    pub fn column(&self) -> usize {
        self.column
    }
}

impl fmt::Display for Location {
    /// `file`, `path` and `line` as a message's suffix: `(at path, line 3,
    /// column 5)`; the file is the message's prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "(line {}, column {})", self.line, self.column)
        } else {
            write!(
                f,
                "(at {}, line {}, column {})",
                self.path, self.line, self.column
            )
        }
    }
}

/// One reason a configuration file is invalid, and where.
///
/// Its [`Display`](fmt::Display) reads `file: message (at path, line N,
/// column M)`, where `message` is worded as the reference service words it
/// (see [`ProblemKind`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    location: Location,
    kind: ProblemKind,
}

impl Problem {
    pub(crate) fn new(location: Location, kind: ProblemKind) -> Self {
        Self { location, kind }
    }

    /// Where the problem is.
    #[must_use]
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// What the problem is.
    #[must_use]
    pub fn kind(&self) -> &ProblemKind {
        &self.kind
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} {}", self.location.file, self.kind, self.location)
    }
}

/// What is wrong. The variants the reference service also refuses carry its
/// wording in their [`Display`](fmt::Display); the others are Runlimit's own
/// (its extensions and its bounds).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The file is not YAML (or not UTF-8), or a merge key or tag is misused.
    #[error("error loading config file: yaml: {message}")]
    Syntax {
        /// The reader's description.
        message: String,
    },
    /// A field holds a value of the wrong type: `shadow_mode: 1`, a quoted
    /// `requests_per_unit`, a list where a string belongs.
    #[error(
        "error loading config file: yaml: unmarshal errors: cannot unmarshal {found} into {expected}"
    )]
    Type {
        /// The value's YAML tag and, for a scalar, its text: ``!!str `yes` ``.
        found: String,
        /// The type the field holds: `bool`, `uint32`, `string`, ….
        expected: &'static str,
    },
    /// A mapping key is not a string (`1: x`, `yes: x`).
    #[error("config error, key is not of type string: {key}")]
    NonStringKey {
        /// The key as the reference renders it.
        key: String,
    },
    /// A key outside the schema.
    #[error("config error, unknown key '{key}'")]
    UnknownKey {
        /// The key.
        key: String,
    },
    /// A list holds something other than mappings.
    #[error("config error, yaml file contains list of type other than map: {element}")]
    ListOfNonMap {
        /// The element as the reference renders it.
        element: String,
    },
    /// A value of a type no field takes: a float, or an integer beyond
    /// `i64`.
    #[error("error checking config")]
    UnsupportedValue,
    /// `domain` is empty or missing.
    #[error("config file cannot have empty domain")]
    EmptyDomain,
    /// Another file already defines the domain.
    #[error("duplicate domain '{domain}' in config file")]
    DuplicateDomain {
        /// The domain.
        domain: String,
    },
    /// A descriptor's `key` is empty or missing.
    #[error("descriptor has empty key")]
    EmptyKey,
    /// Two siblings have the same composite key (`key`, or `key_value`).
    #[error("duplicate descriptor composite key '{key}'")]
    DuplicateCompositeKey {
        /// `domain.path`, the reference's statistics key of the second one.
        key: String,
    },
    /// `unlimited: true` beside a valid `unit`.
    #[error("should not specify rate limit unit when unlimited")]
    UnitWithUnlimited,
    /// A limited rule's unit is missing, empty or not a unit.
    #[error("invalid rate limit unit '{unit}'")]
    InvalidUnit {
        /// The unit as written.
        unit: String,
    },
    /// A `replaces` entry has an empty name.
    #[error("should not have an empty replaces entry")]
    EmptyReplaces,
    /// A rule replaces its own name.
    #[error("replaces should not contain name of same descriptor")]
    ReplacesOwnName,
    /// `share_threshold: true` on a descriptor whose value has no `*`.
    #[error(
        "share_threshold can only be used with wildcard values (ending with '*'), but found key '{key}'"
    )]
    ShareThresholdWithoutWildcard {
        /// The descriptor's composite key.
        key: String,
    },
    /// The `runlimit` key outside a `rate_limit` mapping.
    #[error("the runlimit key belongs inside rate_limit")]
    MisplacedExtension,
    /// An `algorithm` Runlimit does not have.
    #[error("unknown algorithm '{name}'; expected fixed_window, sliding_window or gcra")]
    UnknownAlgorithm {
        /// The algorithm as written.
        name: String,
    },
    /// `burst` without `algorithm: gcra`.
    #[error("burst applies only to algorithm gcra")]
    BurstWithoutGcra,
    /// A `period` that is not a duration.
    #[error("period '{text}' is not a duration such as 500ms, 90s, 15m, 2h, 1d or 1h30m")]
    InvalidDuration {
        /// The period as written.
        text: String,
    },
    /// A rule's parameters are outside what a Runlimit policy holds: a
    /// `requests_per_unit` above 10⁹, a `burst` of 0, a period over 366
    /// days, a burst that takes longer than that to replenish.
    #[error("invalid limit: {0}")]
    Policy(PolicyError),
    /// A number in `metadata` that JSON cannot hold (`.inf`, `.nan`).
    #[error("metadata cannot hold the number {text}")]
    MetadataNumber {
        /// The number as written.
        text: String,
    },
}

/// Something that loads but is likely not what its author meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    location: Location,
    kind: WarningKind,
}

impl Warning {
    pub(crate) fn new(location: Location, kind: WarningKind) -> Self {
        Self { location, kind }
    }

    /// Where the warning is.
    #[must_use]
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// What the warning is.
    #[must_use]
    pub fn kind(&self) -> &WarningKind {
        &self.kind
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} {}", self.location.file, self.kind, self.location)
    }
}

/// What a [`Warning`] is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WarningKind {
    /// A key of the schema where it has no effect (`unit` beside `key`,
    /// `shadow_mode` inside `rate_limit`): ignored, as the reference
    /// ignores it.
    #[error("key '{key}' has no effect here and is ignored (it belongs in {belongs_in})")]
    MisplacedKey {
        /// The key.
        key: String,
        /// Where the key takes effect: `rate_limit`, `a descriptor`, ….
        belongs_in: &'static str,
    },
    /// A limited rule without `requests_per_unit`: it is 0, and the rule
    /// blocks every request.
    #[error("requests_per_unit is missing, so the rule blocks every request")]
    MissingRequestsPerUnit,
    /// `runlimit` settings on a rule that never counts (unlimited, or
    /// `requests_per_unit: 0`).
    #[error("runlimit settings have no effect on a rule that does not count requests")]
    UnusedExtension,
}

/// Why a configuration could not be loaded. Nothing is loaded: a server
/// keeps its previous configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The directory, or a file or directory in it, could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// What could not be read.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// One or more files are invalid; every problem found, in file order.
    #[error("{}", summary(problems))]
    Invalid {
        /// The problems, at least one.
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// The problems of an invalid configuration; empty for a read error.
    #[must_use]
    pub fn problems(&self) -> &[Problem] {
        match self {
            Self::Invalid { problems } => problems,
            Self::Read { .. } => &[],
        }
    }
}

fn summary(problems: &[Problem]) -> String {
    match problems {
        [] => "invalid configuration".to_owned(),
        [only] => only.to_string(),
        [first, second] => format!("{first}; and 1 more problem: {second}"),
        [first, rest @ ..] => format!("{first}; and {} more problems", rest.len()),
    }
}
