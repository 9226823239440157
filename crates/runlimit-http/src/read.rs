//! The client's side: reading the rate-limit fields a server sent.
//!
//! A service calling a rate-limited API learns its quota from the response:
//! the draft `RateLimit-Policy` and `RateLimit` fields ([`policies`],
//! [`statuses`]), `Retry-After` ([`retry_after`]), the older
//! `X-RateLimit-*` fields many APIs still send ([`legacy`]), and gRPC's
//! `grpc-retry-pushback-ms` ([`grpc_pushback`]). These readers take a
//! response's [`HeaderMap`] and never panic, whatever the server sent:
//!
//! * a field that is not valid at all (not text, not a Structured Field List,
//!   not an integer or a date) is a typed [`ReadError`] naming the field, never
//!   its value, which is the server's and may be hostile;
//! * in the draft's Lists, a member that is not a policy or status (an inner
//!   list, a missing or negative quota, a parameter of the wrong type) is
//!   skipped and counted, and the rest are kept; unknown parameters are
//!   ignored, and several field lines are one List, as RFC 9110 combines
//!   them.
//!
//! ```
//! use std::time::Duration;
//!
//! use http::{HeaderMap, HeaderValue};
//! use runlimit_http::read;
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("ratelimit-policy", HeaderValue::from_static(r#""api";q=100;w=60"#));
//! headers.insert("ratelimit", HeaderValue::from_static(r#""api";r=0;t=12"#));
//! let policies = read::policies(&headers)?;
//! assert_eq!(policies.members()[0].quota(), 100);
//! let statuses = read::statuses(&headers)?;
//! assert_eq!(statuses.members()[0].remaining(), 0);
//! assert_eq!(statuses.members()[0].reset(), Some(Duration::from_secs(12)));
//! # Ok::<(), read::ReadError>(())
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName};
use sfv::{BareItem, List, ListEntry, Parameters, Parser};

use crate::draft_11::{RATELIMIT, RATELIMIT_POLICY};

/// Why a field a server sent could not be read. It names the field, never the
/// value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The field's bytes are not visible ASCII text.
    #[error("the {field} field is not text")]
    NotText {
        /// The field's name.
        field: &'static str,
    },
    /// The field is not an RFC 9651 Structured Field List.
    #[error("the {field} field is not a Structured Field List")]
    Syntax {
        /// The field's name.
        field: &'static str,
    },
    /// The field's value is not what the field holds (a non-negative integer,
    /// or an HTTP-date).
    #[error("the {field} field's value is malformed")]
    Malformed {
        /// The field's name.
        field: &'static str,
    },
    /// The field was sent several times with different values.
    #[error("the {field} field was sent with conflicting values")]
    Conflicting {
        /// The field's name.
        field: &'static str,
    },
}

/// The members of a draft field that could be read, and how many could not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members<T> {
    members: Vec<T>,
    skipped: usize,
}

impl<T> Members<T> {
    /// The members read, in the order the server sent them.
    #[must_use]
    pub fn members(&self) -> &[T] {
        &self.members
    }

    /// How many members were skipped as invalid.
    #[must_use]
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Whether the field was absent or held no valid member.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// One member of `RateLimit-Policy`: a quota the server enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvertisedPolicy {
    name: String,
    quota: u64,
    window: Option<Duration>,
    quota_unit: Option<String>,
    partition_key: Option<Vec<u8>>,
}

impl AdvertisedPolicy {
    /// The policy's name (a String, or a Token as early drafts allowed).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `q`: the units the policy allows per window.
    #[must_use]
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// `w`: the window, when the server sent one.
    #[must_use]
    pub fn window(&self) -> Option<Duration> {
        self.window
    }

    /// `qu`: what a unit counts (`"requests"`, `"content-bytes"`), when sent.
    #[must_use]
    pub fn quota_unit(&self) -> Option<&str> {
        self.quota_unit.as_deref()
    }

    /// `pk`: the partition key the quota applies to, when sent.
    #[must_use]
    pub fn partition_key(&self) -> Option<&[u8]> {
        self.partition_key.as_deref()
    }
}

/// One member of `RateLimit`: what is left of a quota now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvertisedStatus {
    name: String,
    remaining: u64,
    reset: Option<Duration>,
    partition_key: Option<Vec<u8>>,
}

impl AdvertisedStatus {
    /// The policy's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `r`: the units left.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// `t`: the time until the quota resets, when the server sent it.
    #[must_use]
    pub fn reset(&self) -> Option<Duration> {
        self.reset
    }

    /// `pk`: the partition key, when sent.
    #[must_use]
    pub fn partition_key(&self) -> Option<&[u8]> {
        self.partition_key.as_deref()
    }
}

/// Reads `RateLimit-Policy` (every field line, as one List).
///
/// # Errors
///
/// [`ReadError::NotText`] or [`ReadError::Syntax`] when the field as a whole
/// cannot be read; invalid members are skipped instead.
pub fn policies(headers: &HeaderMap) -> Result<Members<AdvertisedPolicy>, ReadError> {
    read_list(
        headers,
        &RATELIMIT_POLICY,
        "RateLimit-Policy",
        |name, params| {
            Some(AdvertisedPolicy {
                name,
                quota: non_negative(params.get("q")?)?,
                window: match params.get("w") {
                    None => None,
                    Some(item) => {
                        Some(Duration::from_secs(non_negative(item)?)).filter(|w| !w.is_zero())
                    }
                },
                quota_unit: match params.get("qu") {
                    None => None,
                    Some(item) => Some(text(item)?.to_owned()),
                },
                partition_key: partition_key(params)?,
            })
        },
    )
}

/// Reads `RateLimit` (every field line, as one List).
///
/// # Errors
///
/// As [`policies`].
pub fn statuses(headers: &HeaderMap) -> Result<Members<AdvertisedStatus>, ReadError> {
    read_list(headers, &RATELIMIT, "RateLimit", |name, params| {
        Some(AdvertisedStatus {
            name,
            remaining: non_negative(params.get("r")?)?,
            reset: match params.get("t") {
                None => None,
                Some(item) => Some(Duration::from_secs(non_negative(item)?)),
            },
            partition_key: partition_key(params)?,
        })
    })
}

/// Parses every line of `name` as one List and keeps the members `member`
/// reads (from the member's name and parameters).
fn read_list<T>(
    headers: &HeaderMap,
    name: &HeaderName,
    field: &'static str,
    member: impl Fn(String, &Parameters) -> Option<T>,
) -> Result<Members<T>, ReadError> {
    let mut lines = Vec::new();
    for value in headers.get_all(name) {
        lines.push(value.to_str().map_err(|_| ReadError::NotText { field })?);
    }
    let mut read = Members {
        members: Vec::new(),
        skipped: 0,
    };
    if lines.is_empty() {
        return Ok(read);
    }
    let list: List = Parser::new(lines.join(", ").as_str())
        .parse()
        .map_err(|_| ReadError::Syntax { field })?;
    for entry in list {
        let parsed = match entry {
            ListEntry::Item(item) => text(&item.bare_item)
                .map(str::to_owned)
                .and_then(|name| member(name, &item.params)),
            ListEntry::InnerList(_) => None,
        };
        match parsed {
            Some(parsed) => read.members.push(parsed),
            None => read.skipped += 1,
        }
    }
    Ok(read)
}

/// A String or a Token, as text.
fn text(item: &BareItem) -> Option<&str> {
    item.as_string()
        .map(|string| string.as_str())
        .or_else(|| item.as_token().map(|token| token.as_str()))
}

/// A non-negative Integer.
fn non_negative(item: &BareItem) -> Option<u64> {
    u64::try_from(i64::from(item.as_integer()?)).ok()
}

/// `pk`, when present: `Some(None)` when absent, `None` (skip the member)
/// when not a Byte Sequence.
#[allow(clippy::option_option)]
fn partition_key(params: &Parameters) -> Option<Option<Vec<u8>>> {
    match params.get("pk") {
        None => Some(None),
        Some(item) => item.as_byte_sequence().map(|bytes| Some(bytes.to_vec())),
    }
}

/// Reads `Retry-After` as the time to wait from `now`: delay-seconds, or an
/// HTTP-date (a date already past reads as zero). `None` when absent.
///
/// # Errors
///
/// [`ReadError::Malformed`] when the value is neither;
/// [`ReadError::Conflicting`] when several lines disagree.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Result<Option<Duration>, ReadError> {
    const FIELD: &str = "Retry-After";
    let Some(value) = single(headers, &http::header::RETRY_AFTER, FIELD)? else {
        return Ok(None);
    };
    if let Some(seconds) = delta_seconds(value) {
        return Ok(Some(Duration::from_secs(seconds)));
    }
    let at = httpdate::parse_http_date(value).map_err(|_| ReadError::Malformed { field: FIELD })?;
    Ok(Some(at.duration_since(now).unwrap_or(Duration::ZERO)))
}

/// When the quota of an older `X-RateLimit-Reset` resets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    /// A number of seconds from the response (delta-seconds).
    After(Duration),
    /// A moment (Unix epoch seconds, as GitHub and GitLab send).
    At(SystemTime),
}

impl Reset {
    /// Values at or above this are Unix epoch seconds (2001-09-09 onwards);
    /// below, seconds from now. No API advertises a window of 31 years, and
    /// no epoch time is that early any more.
    pub const EPOCH_FROM: u64 = 1_000_000_000;

    /// The time left from `now` (zero for a moment already past).
    #[must_use]
    pub fn remaining_from(&self, now: SystemTime) -> Duration {
        match *self {
            Self::After(after) => after,
            Self::At(at) => at.duration_since(now).unwrap_or(Duration::ZERO),
        }
    }

    /// `None` for a moment this system's clock cannot represent.
    fn from_seconds(seconds: u64) -> Option<Self> {
        if seconds >= Self::EPOCH_FROM {
            UNIX_EPOCH
                .checked_add(Duration::from_secs(seconds))
                .map(Self::At)
        } else {
            Some(Self::After(Duration::from_secs(seconds)))
        }
    }
}

/// The older quota fields: `X-RateLimit-Limit`, `-Remaining`, `-Reset` and
/// `-Used`, or the same names without `X-` (GitLab's `RateLimit-Limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LegacyQuota {
    /// The units allowed per window.
    pub limit: Option<u64>,
    /// The units left.
    pub remaining: Option<u64>,
    /// When the quota resets: delta-seconds or Unix epoch seconds, told apart
    /// by size ([`Reset::EPOCH_FROM`]).
    pub reset: Option<Reset>,
    /// The units used.
    pub used: Option<u64>,
}

impl LegacyQuota {
    /// Whether none of the fields was sent.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Reads the older quota fields; each is `None` when absent.
///
/// # Errors
///
/// [`ReadError::Malformed`] when a field sent is not a non-negative integer;
/// [`ReadError::Conflicting`] when one is sent several times with different
/// values.
pub fn legacy(headers: &HeaderMap) -> Result<LegacyQuota, ReadError> {
    let integer = |prefixed: &'static str, bare: &'static str| -> Result<Option<u64>, ReadError> {
        let (name, field) = if headers.contains_key(prefixed) {
            (prefixed, prefixed)
        } else {
            (bare, bare)
        };
        let Some(value) = single(headers, &HeaderName::from_static(name), field)? else {
            return Ok(None);
        };
        delta_seconds(value)
            .map(Some)
            .ok_or(ReadError::Malformed { field })
    };
    Ok(LegacyQuota {
        limit: integer("x-ratelimit-limit", "ratelimit-limit")?,
        remaining: integer("x-ratelimit-remaining", "ratelimit-remaining")?,
        reset: match integer("x-ratelimit-reset", "ratelimit-reset")? {
            None => None,
            Some(seconds) => Some(Reset::from_seconds(seconds).ok_or(ReadError::Malformed {
                field: reset_field(headers),
            })?),
        },
        used: integer("x-ratelimit-used", "ratelimit-used")?,
    })
}

/// The name the reset was read under.
fn reset_field(headers: &HeaderMap) -> &'static str {
    if headers.contains_key("x-ratelimit-reset") {
        "x-ratelimit-reset"
    } else {
        "ratelimit-reset"
    }
}

/// What `grpc-retry-pushback-ms` asks of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Retry no earlier than this.
    After(Duration),
    /// Do not retry (a negative value).
    DoNotRetry,
}

/// Reads gRPC's `grpc-retry-pushback-ms` (a trailer; pass the trailers' map).
/// `None` when absent.
///
/// # Errors
///
/// [`ReadError::Malformed`] when it is not an integer;
/// [`ReadError::Conflicting`] when several lines disagree.
pub fn grpc_pushback(metadata: &HeaderMap) -> Result<Option<Pushback>, ReadError> {
    const FIELD: &str = "grpc-retry-pushback-ms";
    let Some(value) = single(metadata, &HeaderName::from_static(FIELD), FIELD)? else {
        return Ok(None);
    };
    if let Some(rest) = value.strip_prefix('-') {
        return delta_seconds(rest)
            .map(|_| Some(Pushback::DoNotRetry))
            .ok_or(ReadError::Malformed { field: FIELD });
    }
    delta_seconds(value)
        .map(|millis| Some(Pushback::After(Duration::from_millis(millis))))
        .ok_or(ReadError::Malformed { field: FIELD })
}

/// The one value of `name` (trimmed), `None` when absent.
fn single<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
    field: &'static str,
) -> Result<Option<&'h str>, ReadError> {
    let mut found: Option<&str> = None;
    for value in headers.get_all(name) {
        let value = value
            .to_str()
            .map_err(|_| ReadError::NotText { field })?
            .trim();
        match found {
            Some(earlier) if earlier != value => return Err(ReadError::Conflicting { field }),
            _ => found = Some(value),
        }
    }
    Ok(found)
}

/// A non-negative decimal integer of digits only (RFC 9110 delta-seconds),
/// saturating rather than overflowing.
fn delta_seconds(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    Some(value.bytes().fold(0_u64, |total, digit| {
        total
            .saturating_mul(10)
            .saturating_add(u64::from(digit - b'0'))
    }))
}
