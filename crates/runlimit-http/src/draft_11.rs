//! The `RateLimit-Policy` and `RateLimit` fields of
//! draft-ietf-httpapi-ratelimit-headers-11.
//!
//! Both fields are RFC 9651 Structured Field Lists. Each member is a String
//! naming a policy, with parameters:
//!
//! ```text
//! RateLimit-Policy: "auth.login/client";q=40;w=60, "auth.login/identity";q=8;w=60
//! RateLimit: "auth.login/client";r=39;t=60, "auth.login/identity";r=7;t=60
//! ```
//!
//! * `RateLimit-Policy` parameters: `q` quota (required), `w` window in seconds,
//!   `qu` quota unit (a String such as `"requests"`), `pk` partition key (a Byte
//!   Sequence).
//! * `RateLimit` parameters: `r` remaining quota (required), `t` seconds until
//!   the quota resets, `pk` partition key.
//!
//! Notes on uncertainty, since the draft is not yet an RFC: earlier drafts
//! allowed policy names as Tokens as well as Strings; this module always emits
//! Strings, which every draft since 06 accepts. `qu` is emitted as a String per
//! the current text. Field names are lowercase on the wire (HTTP/2 and HTTP/3
//! require it; HTTP/1.1 is case-insensitive). Integers are limited to RFC 9651's
//! 15 digits; windows advertised in `RateLimit-Policy` must be exact whole
//! seconds, while dynamic durations (`t`) are rounded up, never down, so a
//! client never retries early.
//!
//! Partition keys are opaque bytes the caller supplies; never pass a raw subject
//! (an address or account name) here, since the field is sent to clients.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use runlimit_http::draft_11::{PolicyName, QuotaPolicy, QuotaStatus, policy_field, status_field};
//!
//! let name = PolicyName::new("auth.login/client")?;
//! let policy = QuotaPolicy::new(name.clone(), 40, Duration::from_secs(60))?;
//! let (field, value) = policy_field(&[policy])?;
//! assert_eq!(field, "ratelimit-policy");
//! assert_eq!(value, r#""auth.login/client";q=40;w=60"#);
//!
//! let status = QuotaStatus::new(name, 39, Duration::from_millis(59_001))?;
//! let (field, value) = status_field(&[status])?;
//! assert_eq!(field, "ratelimit");
//! assert_eq!(value, r#""auth.login/client";r=39;t=60"#);
//! # Ok::<(), runlimit_http::FieldError>(())
//! ```

use std::time::Duration;

use http::{HeaderName, HeaderValue};
use runlimit_core::{
    Decision, FixedWindowPolicy, GcraPolicy, Policy, SlidingWindowPolicy, ceil_seconds,
};

use sfv::{Integer, ItemSerializer, KeyRef, ListSerializer, StringRef};
use smallvec::SmallVec;

use crate::FieldError;

/// The `RateLimit-Policy` field name.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// The `RateLimit` field name.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The largest RFC 9651 Integer.
pub const MAX_INTEGER: u64 = 999_999_999_999_999;

const Q: &KeyRef = KeyRef::constant("q");
const QU: &KeyRef = KeyRef::constant("qu");
const W: &KeyRef = KeyRef::constant("w");
const PK: &KeyRef = KeyRef::constant("pk");
const R: &KeyRef = KeyRef::constant("r");
const T: &KeyRef = KeyRef::constant("t");

fn integer(value: u64) -> Result<Integer, FieldError> {
    if value > MAX_INTEGER {
        return Err(FieldError::IntegerOutOfRange { value });
    }
    Integer::try_from(value).map_err(|_| FieldError::IntegerOutOfRange { value })
}

/// The `(remaining, reset)` a decision reports for its quota: remaining and
/// reset for an allowed decision; zero and the retry time for a quota denial,
/// enforced or shadow. `None` for a storage-capacity denial, which says nothing
/// about the quota.
fn quota_state(decision: &Decision) -> Option<(u64, Duration)> {
    if let (Some(remaining), Some(reset)) = (decision.remaining(), decision.reset_after()) {
        return Some((remaining, reset));
    }
    decision
        .denial()
        .filter(|denial| denial.is_quota_exceeded())
        .map(|denial| (0, denial.retry_after().unwrap_or_default()))
}

/// A policy name: a non-empty RFC 9651 String (printable ASCII).
///
/// The name keeps its serialized (quoted and escaped) form, so encoding a field
/// per response needs no escaping work.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PolicyName {
    name: String,
    serialized: String,
}

impl PolicyName {
    /// Validates `name`.
    ///
    /// # Errors
    ///
    /// [`FieldError::InvalidName`] if `name` is empty or holds a character outside
    /// printable ASCII (`0x20..=0x7E`).
    pub fn new(name: impl Into<String>) -> Result<Self, FieldError> {
        let name = name.into();
        let serialized = match StringRef::from_str(&name) {
            Ok(string) if !name.is_empty() => ItemSerializer::new().bare_item(string).finish(),
            _ => return Err(FieldError::InvalidName),
        };
        Ok(Self { name, serialized })
    }

    /// `"{policy id}/{scope id}"`, which is always valid because identifiers use
    /// a subset of printable ASCII.
    #[must_use]
    pub fn of<P: Policy + ?Sized>(policy: &P) -> Self {
        let name = format!("{}/{}", policy.id(), policy.scope());
        // Identifiers need no escaping: quoting is all serialization adds.
        let serialized = format!("\"{name}\"");
        Self { name, serialized }
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.name
    }

    fn as_sf(&self) -> &StringRef {
        // Validated in the constructors; `of` only joins validated identifiers.
        StringRef::from_str(&self.name).unwrap_or(StringRef::EMPTY)
    }
}

/// The unit a quota counts, the `qu` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuotaUnit {
    /// Requests (the draft's default when `qu` is absent).
    Requests,
    /// Bytes of content.
    ContentBytes,
    /// Concurrent requests.
    ConcurrentRequests,
}

impl QuotaUnit {
    fn as_str(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::ContentBytes => "content-bytes",
            Self::ConcurrentRequests => "concurrent-requests",
        }
    }
}

/// One member of `RateLimit-Policy`: a named quota per window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QuotaPolicy {
    name: PolicyName,
    quota: Integer,
    window: Option<Integer>,
    unit: Option<QuotaUnit>,
    partition_key: Option<Vec<u8>>,
}

impl QuotaPolicy {
    /// `quota` units per `window`.
    ///
    /// # Errors
    ///
    /// [`FieldError::IntegerOutOfRange`] for a quota or window beyond RFC 9651
    /// integers; [`FieldError::WindowNotWholeSeconds`] for a zero or fractional
    /// window (advertised windows are never rounded).
    pub fn new(name: PolicyName, quota: u64, window: Duration) -> Result<Self, FieldError> {
        if window.is_zero() || window.subsec_nanos() != 0 {
            return Err(FieldError::WindowNotWholeSeconds { window });
        }
        Ok(Self {
            name,
            quota: integer(quota)?,
            window: Some(integer(window.as_secs())?),
            unit: None,
            partition_key: None,
        })
    }

    /// A fixed-window policy as `q` = limit, `w` = window.
    ///
    /// # Errors
    ///
    /// [`FieldError::WindowNotWholeSeconds`] if the window has a sub-second part.
    pub fn for_fixed_window(
        name: PolicyName,
        policy: &FixedWindowPolicy,
    ) -> Result<Self, FieldError> {
        Self::new(name, policy.limit(), policy.window())
    }

    /// A sliding-window policy as `q` = limit, `w` = window: at most `q` in
    /// any `w` seconds. A decision's `r` is the units a check would be
    /// admitted now and `t` the time until every counted unit is released
    /// (the whole quota free again), as for GCRA.
    ///
    /// # Errors
    ///
    /// [`FieldError::WindowNotWholeSeconds`] if the window has a sub-second part.
    pub fn for_sliding_window(
        name: PolicyName,
        policy: &SlidingWindowPolicy,
    ) -> Result<Self, FieldError> {
        Self::new(name, policy.limit(), policy.window())
    }

    /// A GCRA policy as `q` = quota, `w` = period.
    ///
    /// # Errors
    ///
    /// [`FieldError::WindowNotWholeSeconds`] if the period has a sub-second part.
    pub fn for_gcra(name: PolicyName, policy: &GcraPolicy) -> Result<Self, FieldError> {
        Self::new(name, policy.quota(), policy.period())
    }

    /// Adds the `qu` parameter.
    #[must_use]
    pub fn with_unit(mut self, unit: QuotaUnit) -> Self {
        self.unit = Some(unit);
        self
    }

    /// Adds an opaque, caller-supplied `pk` partition key.
    #[must_use]
    pub fn with_partition_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.partition_key = Some(key.into());
        self
    }

    /// The policy name.
    #[must_use]
    pub fn name(&self) -> &PolicyName {
        &self.name
    }
}

/// One member of `RateLimit`: the current state of a named quota.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QuotaStatus {
    name: PolicyName,
    remaining: Integer,
    reset: Option<Integer>,
    partition_key: Option<Vec<u8>>,
}

impl QuotaStatus {
    /// `remaining` units left, resetting after `reset_after` (rounded up to whole
    /// seconds).
    ///
    /// # Errors
    ///
    /// [`FieldError::IntegerOutOfRange`] beyond RFC 9651 integers.
    pub fn new(
        name: PolicyName,
        remaining: u64,
        reset_after: Duration,
    ) -> Result<Self, FieldError> {
        Ok(Self {
            name,
            remaining: integer(remaining)?,
            reset: Some(integer(ceil_seconds(reset_after))?),
            partition_key: None,
        })
    }

    /// The status a decision implies: remaining and reset for an allowed
    /// decision; zero remaining and the retry time for a denied or shadow-denied
    /// one. `None` for a storage-capacity denial, which says nothing about the
    /// quota.
    ///
    /// # Errors
    ///
    /// [`FieldError::IntegerOutOfRange`] beyond RFC 9651 integers.
    pub fn from_decision(
        name: PolicyName,
        decision: &Decision,
    ) -> Result<Option<Self>, FieldError> {
        quota_state(decision)
            .map(|(remaining, reset)| Self::new(name, remaining, reset))
            .transpose()
    }

    /// Adds an opaque, caller-supplied `pk` partition key.
    #[must_use]
    pub fn with_partition_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.partition_key = Some(key.into());
        self
    }

    /// The policy name.
    #[must_use]
    pub fn name(&self) -> &PolicyName {
        &self.name
    }

    /// The `t` value in whole seconds.
    #[must_use]
    pub fn reset_seconds(&self) -> Option<u64> {
        self.reset.and_then(|reset| u64::try_from(reset).ok())
    }
}

fn finish(serializer: ListSerializer<String>) -> Result<HeaderValue, FieldError> {
    let text = serializer.finish().ok_or(FieldError::Empty)?;
    // RFC 9651 output is printable ASCII, always a valid header value.
    HeaderValue::from_str(&text).map_err(|_| FieldError::InvalidName)
}

/// Encodes `RateLimit-Policy` with one member per policy, in order.
///
/// # Errors
///
/// [`FieldError::Empty`] for an empty slice.
pub fn policy_field(policies: &[QuotaPolicy]) -> Result<(HeaderName, HeaderValue), FieldError> {
    let mut list = ListSerializer::new();
    for policy in policies {
        let mut item = list
            .bare_item(policy.name.as_sf())
            .parameter(Q, policy.quota);
        if let Some(unit) = policy.unit {
            item = item.parameter(QU, StringRef::constant(unit.as_str()));
        }
        if let Some(window) = policy.window {
            item = item.parameter(W, window);
        }
        if let Some(key) = &policy.partition_key {
            item = item.parameter(PK, key.as_slice());
        }
        let _ = item;
    }
    Ok((RATELIMIT_POLICY, finish(list)?))
}

/// Encodes `RateLimit` with one member per status, in order.
///
/// # Errors
///
/// [`FieldError::Empty`] for an empty slice.
pub fn status_field(statuses: &[QuotaStatus]) -> Result<(HeaderName, HeaderValue), FieldError> {
    let mut list = ListSerializer::new();
    for status in statuses {
        let mut item = list
            .bare_item(status.name.as_sf())
            .parameter(R, status.remaining);
        if let Some(reset) = status.reset {
            item = item.parameter(T, reset);
        }
        if let Some(key) = &status.partition_key {
            item = item.parameter(PK, key.as_slice());
        }
        let _ = item;
    }
    Ok((RATELIMIT, finish(list)?))
}

/// Encodes `RateLimit` straight from decisions: one member per quota decision
/// (allowed, denied or shadow-denied), in order; storage-capacity denials and
/// values beyond RFC 9651 integers are left out. `None` when no member remains.
///
/// This is the per-response fast path middleware uses; it produces exactly what
/// [`status_field`] produces for the equivalent [`QuotaStatus`] values.
#[must_use]
pub fn status_field_for<'a>(
    decisions: impl IntoIterator<Item = (&'a PolicyName, &'a Decision)>,
) -> Option<(HeaderName, HeaderValue)> {
    // The members are gathered first so the value can be written into a
    // buffer of exactly its length, which the value then keeps as its own:
    // no copy, and no second allocation (a `Vec` whose capacity exceeds its
    // length would cost `Bytes` a shared header). Written with `Vec` appends,
    // which copy only what is appended.
    let mut members: SmallVec<[(&PolicyName, u64, u64); 2]> = SmallVec::new();
    let mut length = 0;
    for (name, decision) in decisions {
        let Some((remaining, reset)) = member_of(decision) else {
            continue;
        };
        let separator = if members.is_empty() { 0 } else { ", ".len() };
        length += separator + member_len(name, remaining, reset);
        members.push((name, remaining, reset));
    }
    if members.is_empty() {
        return None;
    }
    let mut text = Vec::with_capacity(length);
    for (name, remaining, reset) in members {
        if !text.is_empty() {
            text.extend_from_slice(b", ");
        }
        write_member(&mut text, name, remaining, reset);
    }
    debug_assert_eq!(text.len(), length, "the length was counted exactly");
    // Printable ASCII by construction.
    HeaderValue::try_from(text)
        .ok()
        .map(|value| (RATELIMIT, value))
}

/// Encodes `RateLimit` for one policy's decision: exactly what
/// [`status_field_for`] produces for that one pair, with less code on the way
/// (a layer of one check encodes this per response). `None` for a
/// storage-capacity denial or values beyond RFC 9651 integers.
///
/// ```
/// use std::time::Duration;
/// use runlimit_core::Decision;
/// use runlimit_http::draft_11::{PolicyName, status_value};
///
/// let name = PolicyName::new("login")?;
/// let decision = Decision::allowed(10, 3, Duration::from_millis(4_500))?;
/// let value = status_value(&name, &decision).expect("a quota decision");
/// assert_eq!(value, r#""login";r=3;t=5"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn status_value(name: &PolicyName, decision: &Decision) -> Option<HeaderValue> {
    let (remaining, reset) = member_of(decision)?;
    // Exactly its length, as in `status_field_for`.
    let mut text = Vec::with_capacity(member_len(name, remaining, reset));
    write_member(&mut text, name, remaining, reset);
    // Printable ASCII by construction.
    HeaderValue::try_from(text).ok()
}

/// The units remaining and whole seconds to reset a `RateLimit` member
/// reports for `decision`: `None` for a storage-capacity denial or values
/// beyond RFC 9651 integers.
fn member_of(decision: &Decision) -> Option<(u64, u64)> {
    let (remaining, reset) = quota_state(decision)?;
    let reset = ceil_seconds(reset);
    (remaining <= MAX_INTEGER && reset <= MAX_INTEGER).then_some((remaining, reset))
}

/// The length of the member [`write_member`] writes.
fn member_len(name: &PolicyName, remaining: u64, reset: u64) -> usize {
    name.serialized.len()
        + ";r=".len()
        + decimal_digits(remaining)
        + ";t=".len()
        + decimal_digits(reset)
}

/// Appends the member `name;r=remaining;t=reset`.
fn write_member(text: &mut Vec<u8>, name: &PolicyName, remaining: u64, reset: u64) {
    let mut integers = itoa::Buffer::new();
    text.extend_from_slice(name.serialized.as_bytes());
    text.extend_from_slice(b";r=");
    text.extend_from_slice(integers.format(remaining).as_bytes());
    text.extend_from_slice(b";t=");
    text.extend_from_slice(integers.format(reset).as_bytes());
}

/// How many decimal digits `n` is written with.
fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// Policies that can be advertised in `RateLimit-Policy`.
pub trait Advertise {
    /// This policy as a `RateLimit-Policy` member named `name`.
    ///
    /// # Errors
    ///
    /// [`FieldError::WindowNotWholeSeconds`] when the window or period has a
    /// sub-second part, since advertised windows are never rounded.
    fn quota_policy(&self, name: PolicyName) -> Result<QuotaPolicy, FieldError>;
}

impl Advertise for FixedWindowPolicy {
    fn quota_policy(&self, name: PolicyName) -> Result<QuotaPolicy, FieldError> {
        QuotaPolicy::for_fixed_window(name, self)
    }
}

impl Advertise for SlidingWindowPolicy {
    fn quota_policy(&self, name: PolicyName) -> Result<QuotaPolicy, FieldError> {
        QuotaPolicy::for_sliding_window(name, self)
    }
}

/// A tiered limiter's policy is advertised as the policy of its tier.
impl<G: Advertise, S: Advertise> Advertise for runlimit_core::TieredPolicy<G, S> {
    fn quota_policy(&self, name: PolicyName) -> Result<QuotaPolicy, FieldError> {
        match self {
            Self::Gate(policy) => policy.quota_policy(name),
            Self::Shared(policy) => policy.quota_policy(name),
        }
    }
}

impl Advertise for GcraPolicy {
    fn quota_policy(&self, name: PolicyName) -> Result<QuotaPolicy, FieldError> {
        QuotaPolicy::for_gcra(name, self)
    }
}
