//! A change of policies during a log: the candidates of one set replaced by
//! those of another at a given time.

use std::{fmt, str::FromStr, time::Duration};

use runlimit_core::{AnyPolicy, PolicyError};
use runlimit_memory::MemoryStoreConfig;

use crate::{
    input::time::{format_rfc3339, parse_rfc3339},
    policies::{Candidate, PolicySet, Span},
};

/// When the policies change: a time, or an offset from the log's first
/// request.
///
/// Parsed from an RFC 3339 time (`2026-01-01T00:30:00Z`) or `+` and an
/// offset in days, hours, minutes, seconds and milliseconds (`+30m`,
/// `+1h30m`, `+90s`, `+250ms`).
///
/// ```
/// use std::time::Duration;
/// use runlimit_sim::ChangeAt;
///
/// let offset: ChangeAt = "+1h30m".parse()?;
/// assert_eq!(offset, ChangeAt::AfterFirstRequest(Duration::from_secs(5_400)));
/// assert_eq!(offset.to_string(), "+90m");
/// let time: ChangeAt = "2026-01-01T00:30:00Z".parse()?;
/// assert_eq!(time, ChangeAt::Time(1_767_227_400_000_000_000));
/// # Ok::<(), runlimit_sim::ChangeAtError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChangeAt {
    /// At this time, nanoseconds since the Unix epoch.
    Time(i64),
    /// This long after the log's first request.
    AfterFirstRequest(Duration),
}

/// A change time that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is neither an RFC 3339 time (such as 2026-01-01T00:30:00Z) nor an offset \
     from the first request (such as +30m or +1h30m)"
)]
pub struct ChangeAtError(String);

impl ChangeAt {
    /// The change's time, nanoseconds since the Unix epoch, for a log whose
    /// first request is at `first`.
    pub(crate) fn resolve(self, first: i64) -> i64 {
        match self {
            Self::Time(at) => at,
            // Offsets are below `i64::MAX` nanoseconds when parsed.
            Self::AfterFirstRequest(offset) => {
                first.saturating_add(i64::try_from(offset.as_nanos()).unwrap_or(i64::MAX))
            }
        }
    }
}

impl FromStr for ChangeAt {
    type Err = ChangeAtError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refused = || ChangeAtError(text.to_owned());
        let Some(mut rest) = text.trim().strip_prefix('+') else {
            return parse_rfc3339(text.as_bytes())
                .map(Self::Time)
                .ok_or_else(refused);
        };
        if rest.is_empty() {
            return Err(refused());
        }
        let mut nanos: u128 = 0;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let (number, after) = rest.split_at(digits);
            let unit = after
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(after.len());
            let (unit, after) = after.split_at(unit);
            let size: u128 = match unit {
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                "m" => 60_000_000_000,
                "h" => 3_600_000_000_000,
                "d" => 86_400_000_000_000,
                _ => return Err(refused()),
            };
            let number: u128 = number.parse().map_err(|_| refused())?;
            nanos = number
                .checked_mul(size)
                .and_then(|part| nanos.checked_add(part))
                .filter(|&nanos| i64::try_from(nanos).is_ok())
                .ok_or_else(refused)?;
            rest = after;
        }
        // Below `i64::MAX` nanoseconds, as checked above.
        Ok(Self::AfterFirstRequest(Duration::from_nanos(
            u64::try_from(nanos).map_err(|_| refused())?,
        )))
    }
}

/// `2026-01-01T00:30:00Z` or `+30m`.
impl fmt::Display for ChangeAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Time(at) => f.write_str(&format_rfc3339(*at)),
            Self::AfterFirstRequest(offset) => write!(f, "+{}", Span(*offset)),
        }
    }
}

/// The change time does not fall within the log, so one side of the change
/// would replay nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChangeOutsideLog {
    /// The change is before the first request: found at that request.
    #[error(
        "the change at {change_at} is before the log's first request, at {first_request}: \
         no request would be replayed under the old policies"
    )]
    BeforeFirstRequest {
        /// When the change is (RFC 3339).
        change_at: String,
        /// When the first request is (RFC 3339).
        first_request: String,
    },
    /// The change is after the last request: found at the end of the log.
    #[error(
        "the change at {change_at} is after the log's last request, at {last_request}: \
         no request would be replayed under the new policies"
    )]
    AfterLastRequest {
        /// When the change is (RFC 3339).
        change_at: String,
        /// When the last request is (RFC 3339).
        last_request: String,
    },
}

/// Why a change was refused. Nothing is replayed with an invalid change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChangeError {
    /// A new candidate has the id of an old one but another scope, so it
    /// cannot continue from it: subject keys are derived from both.
    #[error(
        "invalid [[policy]]{}: `{id}` has scope `{scope}` but the policy it replaces has \
         scope `{replaced_scope}`: {source}; give it another id to start it afresh",
        line.map(|line| format!(" at line {line}")).unwrap_or_default()
    )]
    Predecessor {
        /// The new candidate's id, which the old one shares.
        id: String,
        /// The 1-based line of its `[[policy]]` header, for a set read from
        /// TOML.
        line: Option<usize>,
        /// Its scope.
        scope: String,
        /// The old candidate's scope.
        replaced_scope: String,
        /// What the core refused: [`PolicyError::PredecessorIdentity`].
        source: Box<PolicyError>,
    },
}

/// The candidates of one set replaced by those of another at a given time:
/// a deploy that changes policies, replayed.
///
/// Candidates are matched by id. A new candidate with an old one's id
/// continues from it ([`AnyPolicy::continuing`]: a subject's state under the
/// old policy is carried into the new counter the first time the subject is
/// checked under it, whatever the two algorithms); one whose id is new
/// starts from the change, and an old one whose id the new set lacks is
/// retired at the change.
///
/// ```
/// use runlimit_sim::{ChangeAt, PolicyChange, PolicySet};
///
/// let before = PolicySet::from_toml(r#"
///     [[policy]]
///     algorithm = "fixed_window"
///     id = "login.ip"
///     scope = "ip"
///     limit = 5
///     window = { secs = 900, nanos = 0 }
/// "#)?;
/// let after = PolicySet::from_toml(r#"
///     [[policy]]
///     algorithm = "gcra"
///     id = "login.ip"
///     scope = "ip"
///     quota = 3
///     period = { secs = 900, nanos = 0 }
///     burst_capacity = 3
/// "#)?;
/// let change = PolicyChange::new(before, "+30m".parse()?, after)?;
/// assert_eq!(change.predecessor(0).map(|old| old.to_string()), Some("5 per 15m".to_owned()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct PolicyChange {
    before: PolicySet,
    after: PolicySet,
    at: ChangeAt,
    /// For each new candidate, the position of the old one it replaces.
    predecessors: Vec<Option<usize>>,
    /// For each new candidate, its policy continuing from that old one.
    continuing: Vec<AnyPolicy>,
    /// The positions of the old candidates no new one replaces.
    retired: Vec<usize>,
}

impl PolicyChange {
    /// The candidates of `before` replaced by those of `after` at `at`.
    ///
    /// # Errors
    ///
    /// [`ChangeError::Predecessor`] for a new candidate whose id an old one
    /// has with another scope, naming its line.
    pub fn new(before: PolicySet, at: ChangeAt, after: PolicySet) -> Result<Self, ChangeError> {
        let old = before.candidates();
        let mut predecessors = Vec::with_capacity(after.candidates().len());
        let mut continuing = Vec::with_capacity(after.candidates().len());
        for (index, candidate) in after.candidates().iter().enumerate() {
            let predecessor = old.iter().position(|old| old.id() == candidate.id());
            let policy = match predecessor {
                Some(position) => candidate
                    .to_any()
                    .continuing(&old[position].to_any())
                    .map_err(|source| ChangeError::Predecessor {
                        id: candidate.id().to_owned(),
                        line: after.line(index),
                        scope: candidate.scope().to_owned(),
                        replaced_scope: old[position].scope().to_owned(),
                        source: Box::new(source),
                    })?,
                None => candidate.to_any(),
            };
            predecessors.push(predecessor);
            continuing.push(policy);
        }
        let retired = (0..old.len())
            .filter(|position| !predecessors.contains(&Some(*position)))
            .collect();
        Ok(Self {
            before,
            after,
            at,
            predecessors,
            continuing,
            retired,
        })
    }

    /// The candidates before the change.
    #[must_use]
    pub fn before(&self) -> &PolicySet {
        &self.before
    }

    /// The candidates from the change on.
    #[must_use]
    pub fn after(&self) -> &PolicySet {
        &self.after
    }

    /// When the change happens.
    #[must_use]
    pub fn at(&self) -> ChangeAt {
        self.at
    }

    /// The old candidate the new one at `index` replaces: `None` for a new
    /// id (or an `index` past the new set).
    #[must_use]
    pub fn predecessor(&self, index: usize) -> Option<&Candidate> {
        let position = self.predecessors.get(index).copied().flatten()?;
        self.before.candidates().get(position)
    }

    /// The old candidates no new one replaces, in file order.
    pub fn retired(&self) -> impl Iterator<Item = &Candidate> + '_ {
        self.retired
            .iter()
            .map(|&position| &self.before.candidates()[position])
    }

    /// The new candidate at `index` as a policy continuing from the one it
    /// replaces (or, for a new id, as it is).
    pub(crate) fn continuing(&self, index: usize) -> &AnyPolicy {
        &self.continuing[index]
    }

    /// Where verdicts place the old candidate at `position`: at the new
    /// candidate replacing it, else after the new set, in the order of
    /// [`retired`](Self::retired).
    pub(crate) fn position_of_old(&self, position: usize) -> usize {
        match self.predecessors.iter().position(|p| *p == Some(position)) {
            Some(index) => index,
            None => {
                let retired = self.retired.iter().position(|&p| p == position);
                // Every old candidate is replaced or retired.
                self.after.candidates().len() + retired.unwrap_or(0)
            }
        }
    }

    /// The ids verdicts' positions name: the new set's, then the retired.
    pub(crate) fn names(&self) -> Vec<String> {
        self.after
            .candidates()
            .iter()
            .chain(self.retired())
            .map(|candidate| candidate.id().to_owned())
            .collect()
    }

    /// The stores' configuration: the larger `max_keys` of the two sets, as
    /// a store running both sets' policies keeps the old keys until they
    /// expire.
    pub(crate) fn store_config(&self) -> MemoryStoreConfig {
        let (old, new) = (self.before.store_config(), self.after.store_config());
        if old.max_keys() > new.max_keys() {
            *old
        } else {
            *new
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_add_their_units_and_times_read_as_rfc_3339() {
        let offset = |text: &str| text.parse::<ChangeAt>();
        assert_eq!(
            offset("+1d2h3m4s5ms"),
            Ok(ChangeAt::AfterFirstRequest(Duration::from_millis(
                93_784_005
            )))
        );
        assert_eq!(
            offset("+0s"),
            Ok(ChangeAt::AfterFirstRequest(Duration::ZERO))
        );
        assert_eq!(
            offset("2026-01-01T01:00:00+01:00"),
            Ok(ChangeAt::Time(1_767_225_600_000_000_000))
        );
        for refused in [
            "",
            "+",
            "+30",
            "+m",
            "+30x",
            "30m",
            "+-1s",
            "+999999999999d",
        ] {
            assert_eq!(
                offset(refused),
                Err(ChangeAtError(refused.to_owned())),
                "{refused}"
            );
        }
    }

    #[test]
    fn change_times_print_as_they_parse_and_offsets_count_from_the_first_request() {
        for text in ["+30m", "+90s", "+250ms", "2026-01-01T00:30:00Z"] {
            let at: ChangeAt = text.parse().expect("a change time");
            assert_eq!(at.to_string(), text);
        }
        let first = 1_767_225_600_000_000_000;
        let offset: ChangeAt = "+30m".parse().expect("an offset");
        assert_eq!(offset.resolve(first), first + 1_800_000_000_000);
        let time: ChangeAt = "2026-01-01T00:30:00Z".parse().expect("a time");
        assert_eq!(time.resolve(0), first + 1_800_000_000_000);
    }
}
