//! The client's side: reading the rate-limit fields a server sent.
//!
//! A service calling a rate-limited API learns its quota from the response:
//! the draft `RateLimit-Policy` and `RateLimit` fields ([`policies`],
//! [`statuses`], and [`draft_7_status`] for the Dictionary that revision 7
//! of the draft sent), `Retry-After` ([`retry_after`]), the older
//! `X-RateLimit-*` fields many APIs still send and the separate
//! `RateLimit-Limit`/`-Remaining`/`-Reset` of revision 6 ([`legacy`]), and
//! gRPC's `grpc-retry-pushback-ms` ([`grpc_pushback`]). These readers take a
//! response's [`HeaderMap`] and never panic, whatever the server sent, and
//! where a value is unclear they read it the cautious way, so a client waits
//! longer rather than sends early:
//!
//! * a draft field or `Retry-After` that is not valid at all (not text, not a
//!   Structured Field List, not an integer or a date) is a typed
//!   [`ReadError`] naming the field, never its value, which is the server's
//!   and may be hostile; an unreadable legacy field is named in
//!   [`LegacyQuota::malformed`], and an unreadable pushback means "do not
//!   retry";
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
use sfv::{BareItem, Dictionary, List, ListEntry, Parameters, Parser};

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
    /// The policy's name (a String, or a Token as early drafts allowed);
    /// empty for the unnamed policies of revisions 6 and 7 (`20;w=1`).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `q`: the units the policy allows per window.
    #[must_use]
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// `w`: the window, when the server sent one other than zero.
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

/// Reads `RateLimit-Policy` (every field line, as one List): named members
/// (`"api";q=100;w=60`) and the unnamed ones of revisions 6 and 7 of the
/// draft, whose Integer is the quota (`20;w=1`).
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
        |item, params| {
            let (name, quota) = match text(item) {
                Some(name) => (name.to_owned(), non_negative(params.get("q")?)?),
                None => (String::new(), non_negative(item)?),
            };
            Some(AdvertisedPolicy {
                name,
                quota,
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
    read_list(headers, &RATELIMIT, "RateLimit", |item, params| {
        Some(AdvertisedStatus {
            name: text(item)?.to_owned(),
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
/// reads (from the member's item and parameters).
fn read_list<T>(
    headers: &HeaderMap,
    name: &HeaderName,
    field: &'static str,
    member: impl Fn(&BareItem, &Parameters) -> Option<T>,
) -> Result<Members<T>, ReadError> {
    let mut read = Members {
        members: Vec::new(),
        skipped: 0,
    };
    let Some(joined) = joined_lines(headers, name, field)? else {
        return Ok(read);
    };
    let list: List = Parser::new(joined.as_str())
        .parse()
        .map_err(|_| ReadError::Syntax { field })?;
    for entry in list {
        let parsed = match entry {
            ListEntry::Item(item) => member(&item.bare_item, &item.params),
            ListEntry::InnerList(_) => None,
        };
        match parsed {
            Some(parsed) => read.members.push(parsed),
            None => read.skipped += 1,
        }
    }
    Ok(read)
}

/// Every non-empty line of `name`, joined as RFC 9110 combines them; `None`
/// when there is none.
fn joined_lines(
    headers: &HeaderMap,
    name: &HeaderName,
    field: &'static str,
) -> Result<Option<String>, ReadError> {
    let mut lines = Vec::new();
    for value in headers.get_all(name) {
        let line = value.to_str().map_err(|_| ReadError::NotText { field })?;
        // An empty line adds no member (RFC 9110 5.6.1) and would otherwise
        // leave an empty member that fails the whole field.
        if !line.trim().is_empty() {
            lines.push(line);
        }
    }
    Ok((!lines.is_empty()).then(|| lines.join(", ")))
}

/// The `RateLimit` field as revision 7 of the IETF draft wrote it: one
/// Dictionary, `limit=20, remaining=19, reset=1`, where later revisions
/// send a List of named members ([`statuses`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draft7Status {
    limit: Option<u64>,
    remaining: u64,
    reset: Option<Duration>,
}

impl Draft7Status {
    /// `limit`: the units the quota allows per window, when sent.
    #[must_use]
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// `remaining`: the units left.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// `reset`: the time until the quota resets, when sent.
    #[must_use]
    pub fn reset(&self) -> Option<Duration> {
        self.reset
    }
}

/// Reads `RateLimit` as revision 7's Dictionary (every field line as one
/// Dictionary; a key sent twice keeps its last value, as RFC 9651 says).
/// `None` when the field is absent or is not a Dictionary with a
/// `remaining` key: a List of named members, which [`statuses`] reads, is
/// not one.
///
/// # Errors
///
/// [`ReadError::NotText`] when the field is not text;
/// [`ReadError::Malformed`] when `limit`, `remaining` or `reset` is not a
/// non-negative Integer.
pub fn draft_7_status(headers: &HeaderMap) -> Result<Option<Draft7Status>, ReadError> {
    const FIELD: &str = "RateLimit";
    let Some(joined) = joined_lines(headers, &RATELIMIT, FIELD)? else {
        return Ok(None);
    };
    let Ok(dictionary) = Parser::new(joined.as_str()).parse::<Dictionary>() else {
        return Ok(None);
    };
    let read = |key: &str| -> Result<Option<u64>, ReadError> {
        match dictionary.get(key) {
            None => Ok(None),
            // Parameters, which revision 7 defines none of, are ignored.
            Some(ListEntry::Item(item)) => non_negative(&item.bare_item)
                .map(Some)
                .ok_or(ReadError::Malformed { field: FIELD }),
            Some(ListEntry::InnerList(_)) => Err(ReadError::Malformed { field: FIELD }),
        }
    };
    let Some(remaining) = read("remaining")? else {
        return Ok(None);
    };
    Ok(Some(Draft7Status {
        limit: read("limit")?,
        remaining,
        reset: read("reset")?.map(Duration::from_secs),
    }))
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
/// HTTP-date (a date already past reads as zero). `None` when absent. Pass
/// the server's time as `now` ([`server_date`], when the response has one):
/// against the client's own clock, one running ahead would wait too little.
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

    /// The time left from `now`, which should be the server's time (see
    /// [`server_date`]). A moment already past is zero, unless it lies more
    /// than a day before `now`: then the value was more likely a delay of 31
    /// years or more than an epoch time, and it is read as that delay.
    #[must_use]
    pub fn remaining_from(&self, now: SystemTime) -> Duration {
        match *self {
            Self::After(after) => after,
            Self::At(at) => match at.duration_since(now) {
                Ok(left) => left,
                Err(past) if past.duration() > Duration::from_secs(86_400) => {
                    at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)
                }
                Err(_) => Duration::ZERO,
            },
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

/// The older quota fields: `X-RateLimit-Limit`, `-Remaining`, `-Reset`,
/// `-Reset-After` and `-Used`, or the same names without `X-` (GitLab's
/// `RateLimit-Limit`, and the separate fields of revision 6 of the IETF
/// draft, whose `RateLimit-Reset` is delta-seconds).
///
/// Each field is read on its own: one that cannot be read is `None` and
/// named in [`malformed`](Self::malformed), and the others are kept. A field
/// sent on several lines (stacked limiters) reads as its most cautious
/// value: the lowest limit and remaining, the highest used, the latest reset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LegacyQuota {
    /// The units allowed per window.
    pub limit: Option<u64>,
    /// The units left.
    pub remaining: Option<u64>,
    /// When the quota resets: delta-seconds or Unix epoch seconds, told apart
    /// by size ([`Reset::EPOCH_FROM`]); fractions of a second round up.
    pub reset: Option<Reset>,
    /// `X-RateLimit-Reset-After`: the time until the quota resets, in
    /// seconds with a decimal fraction (as Discord sends it), read to the
    /// millisecond, rounded up. More precise than an epoch
    /// [`reset`](Self::reset) read against a `Date` truncated to the second.
    pub reset_after: Option<Duration>,
    /// The units used.
    pub used: Option<u64>,
    /// The fields sent that could not be read.
    pub malformed: Vec<&'static str>,
}

impl LegacyQuota {
    /// Whether none of the fields was sent.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Reads the older quota fields; each is `None` when absent or unreadable.
#[must_use]
pub fn legacy(headers: &HeaderMap) -> LegacyQuota {
    let mut quota = LegacyQuota::default();
    let mut read = |prefixed: &'static str,
                    bare: &'static str,
                    parse: fn(&str) -> Option<u64>,
                    cautious: fn(u64, u64) -> u64|
     -> Option<u64> {
        let field = if headers.contains_key(prefixed) {
            prefixed
        } else {
            bare
        };
        let mut value: Option<u64> = None;
        for line in headers.get_all(field) {
            let Some(parsed) = line.to_str().ok().and_then(|line| parse(line.trim())) else {
                quota.malformed.push(field);
                return None;
            };
            value = Some(value.map_or(parsed, |earlier| cautious(earlier, parsed)));
        }
        value
    };
    quota.limit = read(
        "x-ratelimit-limit",
        "ratelimit-limit",
        delta_seconds,
        u64::min,
    );
    quota.remaining = read(
        "x-ratelimit-remaining",
        "ratelimit-remaining",
        delta_seconds,
        u64::min,
    );
    quota.used = read(
        "x-ratelimit-used",
        "ratelimit-used",
        delta_seconds,
        u64::max,
    );
    quota.reset_after = read(
        "x-ratelimit-reset-after",
        "ratelimit-reset-after",
        millis_up,
        u64::max,
    )
    .map(Duration::from_millis);
    let reset = read("x-ratelimit-reset", "ratelimit-reset", seconds_up, u64::max);
    quota.reset = match reset.map(Reset::from_seconds) {
        Some(None) => {
            // A moment this system's clock cannot hold.
            let field = if headers.contains_key("x-ratelimit-reset") {
                "x-ratelimit-reset"
            } else {
                "ratelimit-reset"
            };
            quota.malformed.push(field);
            None
        }
        Some(reset) => reset,
        None => None,
    };
    quota
}

/// Seconds with an optional decimal fraction, as whole milliseconds rounded
/// up, saturating.
fn millis_up(value: &str) -> Option<u64> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let whole = delta_seconds(whole)?;
    if (value.contains('.') && fraction.is_empty())
        || !fraction.bytes().all(|byte| byte.is_ascii_digit())
    {
        return None;
    }
    let digits = fraction.as_bytes();
    let mut millis = 0;
    for index in 0..3 {
        millis = millis * 10 + digits.get(index).map_or(0, |digit| u64::from(digit - b'0'));
    }
    let up = u64::from(digits.iter().skip(3).any(|&digit| digit != b'0'));
    Some(whole.saturating_mul(1_000).saturating_add(millis + up))
}

/// Seconds, with any fraction rounded up (Discord sends milliseconds as a
/// decimal fraction).
fn seconds_up(value: &str) -> Option<u64> {
    match value.split_once('.') {
        None => delta_seconds(value),
        Some((whole, fraction)) => {
            let whole = delta_seconds(whole)?;
            if fraction.is_empty() || !fraction.bytes().all(|byte| byte.is_ascii_digit()) {
                return None;
            }
            let up = u64::from(fraction.bytes().any(|digit| digit != b'0'));
            Some(whole.saturating_add(up))
        }
    }
}

/// The response's `Date`, the server's time when it answered: the `now` to
/// measure an HTTP-date `Retry-After` or an epoch [`Reset`] against, so that
/// a client whose clock runs ahead of the server's does not send early.
/// `None` when absent or not an HTTP-date.
#[must_use]
pub fn server_date(headers: &HeaderMap) -> Option<SystemTime> {
    let value = headers.get(http::header::DATE)?.to_str().ok()?;
    httpdate::parse_http_date(value.trim()).ok()
}

/// What `grpc-retry-pushback-ms` asks of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Retry no earlier than this.
    After(Duration),
    /// Do not retry: a negative value, or one that is not a signed 32-bit
    /// integer, as gRPC's retry design says.
    DoNotRetry,
}

/// Reads gRPC's `grpc-retry-pushback-ms`. `None` when absent. Pass the
/// trailers, and the headers too: a call that fails at once answers with
/// headers only (Trailers-Only).
///
/// A value that is not one signed 32-bit integer (unreadable, out of range,
/// or several lines that disagree) means [`Pushback::DoNotRetry`], the
/// cautious reading gRPC prescribes.
#[must_use]
pub fn grpc_pushback(metadata: &HeaderMap) -> Option<Pushback> {
    const FIELD: &str = "grpc-retry-pushback-ms";
    let value = match single(metadata, &HeaderName::from_static(FIELD), FIELD) {
        Ok(None) => return None,
        Ok(Some(value)) => value,
        Err(_) => return Some(Pushback::DoNotRetry),
    };
    Some(match value.parse::<i32>() {
        Ok(millis) if millis >= 0 => {
            Pushback::After(Duration::from_millis(u64::from(millis.unsigned_abs())))
        }
        _ => Pushback::DoNotRetry,
    })
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
