//! What a descriptor's `rate_limit` becomes: a [`Rule`] with its [`Limit`].

use std::{fmt, sync::Arc, time::Duration};

use runlimit_core::{AnyPolicy, PolicyId};
use sha2::{Digest, Sha256};

/// The unit of a rule's `requests_per_unit`, as the protocol names it.
///
/// A month is 30 days and a year 365 days, as in the reference service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3 600 seconds.
    Hour,
    /// 86 400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// The unit named `text`, in any case (`minute`, `Minute`, `MINUTE`);
    /// `None` for anything else, `unknown` included.
    pub(crate) fn from_name(text: &str) -> Option<Self> {
        // Upper-cased with Unicode's rules, as the reference does before it
        // looks the name up.
        Some(match text.to_uppercase().as_str() {
            "SECOND" => Self::Second,
            "MINUTE" => Self::Minute,
            "HOUR" => Self::Hour,
            "DAY" => Self::Day,
            "WEEK" => Self::Week,
            "MONTH" => Self::Month,
            "YEAR" => Self::Year,
            _ => return None,
        })
    }

    /// The unit's name in lowercase: `second`, `minute`, ….
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Second => "second",
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::Day => "day",
            Self::Week => "week",
            Self::Month => "month",
            Self::Year => "year",
        }
    }

    /// The unit's length.
    #[must_use]
    pub const fn duration(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            Self::Second => 1,
            Self::Minute => 60,
            Self::Hour => 3_600,
            Self::Day => DAY,
            Self::Week => 7 * DAY,
            Self::Month => 30 * DAY,
            Self::Year => 365 * DAY,
        })
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rule's place in its domain: the descriptors' composite keys (`key`, or
/// `key_value` as written, wildcard patterns included) from the top level
/// down, joined by `.`, as in `message_type_marketing.to_number`.
///
/// It is the reference service's statistics key without the domain, bounded
/// by the configuration (never a request's value), and what metrics label a
/// rule with.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RulePath(Arc<str>);

impl RulePath {
    pub(crate) fn new(path: String) -> Self {
        Self(path.into())
    }

    /// The path as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RulePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for RulePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a rule does with a request that matches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// `unlimited: true`: every request is within the limit and nothing is
    /// counted; the protocol reports `limit_remaining` as `u32::MAX`.
    Unlimited,
    /// `requests_per_unit: 0`: every request that costs anything is over the
    /// limit, and nothing is counted.
    Blocked {
        /// The unit the response reports.
        unit: Unit,
    },
    /// Requests are counted by `policy`.
    Limited {
        /// The policy that counts: a fixed window of `requests_per_unit` per
        /// `unit` unless the rule chose another algorithm or period; in
        /// [`QuotaMode::Shadow`](runlimit_core::QuotaMode::Shadow) for a
        /// `shadow_mode` rule. Its id is stable across reloads (see
        /// [`Rule`]).
        policy: AnyPolicy,
        /// The limit as written, which the response reports.
        requests_per_unit: u32,
        /// The unit as written, which the response reports.
        unit: Unit,
    },
}

/// The limit a descriptor of the configuration carries, with everything the
/// service needs to apply it.
///
/// A [`Limit::Limited`] rule's policy has the id `r.` followed by 32 hex
/// digits of the SHA-256 digest of the domain and the composite keys of
/// [`path`](Self::path), each preceded by its length as 8 bytes big-endian,
/// and the scope `descriptor`: the id depends only on where the rule is, so
/// a reload that keeps a rule's parameters keeps its counters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Rule {
    /// Where the rule is in its domain; the metrics label.
    pub path: RulePath,
    /// What the rule does.
    pub limit: Limit,
    /// `rate_limit.name`, which other rules' `replaces` name and the
    /// response reports; `None` when absent or empty.
    pub name: Option<String>,
    /// `rate_limit.replaces`: names of the rules this one drops from a
    /// request that matches both.
    pub replaces: Vec<String>,
    /// `shadow_mode`: over-limit requests are reported within the limit.
    pub shadow_mode: bool,
    /// `quota_mode`: the request is over the limit only when every
    /// quota-mode descriptor of it is.
    pub quota_mode: bool,
    /// `detailed_metric`, recorded; metrics never add request values to
    /// their labels.
    pub detailed_metric: bool,
    /// Whether `value_to_metric` is set on a descriptor along the rule's
    /// path, recorded; metrics never add request values to their labels.
    pub value_to_metric: bool,
    /// `metadata`, as JSON: returned to the proxy for a request within the
    /// limit.
    pub metadata: Option<serde_json::Value>,
    /// `rate_limit.runlimit.lease`: admit this hot rule's requests from
    /// leases of the shared quota.
    pub lease: bool,
}

/// The policy id of the rule at `composites` of `domain`; see [`Rule`].
pub(crate) fn policy_id<'a>(
    domain: &'a str,
    composites: impl IntoIterator<Item = &'a str>,
) -> PolicyId {
    digest_id(RULE_PREFIX, std::iter::once(domain).chain(composites))
}

/// The prefix of a rule's policy id.
const RULE_PREFIX: IdPrefix = IdPrefix("r.");

/// The first characters of a digest id: a letter and a dot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdPrefix(pub(crate) &'static str);

/// `prefix` followed by 32 hex digits of the SHA-256 digest of `parts`,
/// each preceded by its length as 8 bytes big-endian.
pub(crate) fn digest_id<'a>(
    prefix: IdPrefix,
    parts: impl IntoIterator<Item = &'a str>,
) -> PolicyId {
    let mut digest = Sha256::new();
    for part in parts {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part.as_bytes());
    }
    let digest = digest.finalize();
    let mut id = String::with_capacity(prefix.0.len() + 32);
    id.push_str(prefix.0);
    for byte in &digest[..16] {
        id.push(char::from(HEX[usize::from(byte >> 4)]));
        id.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    // Invariant: every prefix is a letter and a dot, and 34 characters of
    // [a-z0-9.] are always a valid id.
    PolicyId::new(id).expect("a valid policy id")
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_read_in_any_case_and_have_the_reference_lengths() {
        assert_eq!(Unit::from_name("minute"), Some(Unit::Minute));
        assert_eq!(Unit::from_name("Minute"), Some(Unit::Minute));
        assert_eq!(Unit::from_name("WEEK"), Some(Unit::Week));
        assert_eq!(Unit::from_name("unknown"), None);
        assert_eq!(Unit::from_name(""), None);
        assert_eq!(Unit::from_name("minutes"), None);
        assert_eq!(Unit::Month.duration(), Duration::from_secs(30 * 86_400));
        assert_eq!(Unit::Year.duration(), Duration::from_secs(365 * 86_400));
        assert!(Unit::Year.duration() <= runlimit_core::MAX_WINDOW);
    }

    #[test]
    fn policy_ids_are_stable_and_tell_paths_apart() {
        let id = policy_id("d", ["k_v", "s"]);
        assert_eq!(id, policy_id("d", ["k_v", "s"]));
        assert_eq!(id.as_str().len(), 34);
        assert!(id.as_str().starts_with("r."));
        // The same dotted path from other composite keys is another rule.
        assert_ne!(id, policy_id("d", ["k_v.s"]));
        assert_ne!(id, policy_id("e", ["k_v", "s"]));
    }
}
