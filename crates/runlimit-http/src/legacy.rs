//! The legacy `X-RateLimit-*` fields and `Retry-After`.
//!
//! Many clients still read the older de-facto shape, before the draft fields:
//!
//! ```text
//! X-RateLimit-Limit: 40
//! X-RateLimit-Remaining: 0
//! X-RateLimit-Reset: 1767225660     (Unix seconds)
//! Retry-After: 60                   (RFC 9110 delay-seconds)
//! ```
//!
//! Durations are always rounded up to whole seconds, the same rounding the
//! [`draft_11`](crate::draft_11) `t` parameter uses, so `Retry-After` is never
//! earlier than a `RateLimit` reset sent for the same decision.
//!
//! # Examples
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use runlimit_core::{Decision, Denial};
//! use runlimit_http::legacy::LegacyFields;
//!
//! let denied = Decision::denied(Denial::QuotaExceeded {
//!     capacity: 40,
//!     retry_after: Duration::from_millis(1_500),
//! });
//! let now = UNIX_EPOCH + Duration::from_secs(1_000);
//! let fields = LegacyFields::from_decision(&denied, now).expect("a quota decision");
//! let mut headers = http::HeaderMap::new();
//! fields.append_to(&mut headers);
//! assert_eq!(headers["x-ratelimit-limit"], "40");
//! assert_eq!(headers["x-ratelimit-remaining"], "0");
//! assert_eq!(headers["x-ratelimit-reset"], "1002");
//! assert_eq!(headers["retry-after"], "2");
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, header::RETRY_AFTER};
use runlimit_core::{Decision, ceil_seconds};

/// `X-RateLimit-Limit`.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`, in Unix seconds.
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// A `Retry-After` value: `retry_after` rounded up to whole seconds.
#[must_use]
pub fn retry_after_value(retry_after: Duration) -> HeaderValue {
    HeaderValue::from(ceil_seconds(retry_after))
}

/// The legacy fields for one decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LegacyFields {
    limit: u64,
    remaining: u64,
    reset_at: u64,
    retry_after: Option<u64>,
}

impl LegacyFields {
    /// The fields a decision implies at wall-clock time `now`: limit, remaining
    /// and reset for an allowed decision; the capacity, zero remaining, the reset
    /// and `Retry-After` for a quota denial (enforced or shadow). `None` for a
    /// storage-capacity denial.
    #[must_use]
    pub fn from_decision(decision: &Decision, now: SystemTime) -> Option<Self> {
        let unix_now = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        if let (Some(limit), Some(remaining), Some(reset)) = (
            decision.limit(),
            decision.remaining(),
            decision.reset_after(),
        ) {
            return Some(Self {
                limit,
                remaining,
                reset_at: ceil_seconds(unix_now + reset),
                retry_after: None,
            });
        }
        match decision.denial()? {
            runlimit_core::Denial::QuotaExceeded {
                capacity,
                retry_after,
            } => Some(Self {
                limit: *capacity,
                remaining: 0,
                reset_at: ceil_seconds(unix_now + *retry_after),
                retry_after: Some(ceil_seconds(*retry_after)),
            }),
            _ => None,
        }
    }

    /// `X-RateLimit-Limit`: the quota's capacity.
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// `X-RateLimit-Remaining`: the units left, zero for a denial.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// `X-RateLimit-Reset`: when the quota resets, in Unix seconds (rounded up).
    #[must_use]
    pub fn reset_at(&self) -> u64 {
        self.reset_at
    }

    /// `Retry-After` in whole seconds, for denials.
    #[must_use]
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after
    }

    /// Appends the fields to `headers`; `Retry-After` only for denials.
    pub fn append_to(&self, headers: &mut HeaderMap) {
        headers.append(X_RATELIMIT_LIMIT, HeaderValue::from(self.limit));
        headers.append(X_RATELIMIT_REMAINING, HeaderValue::from(self.remaining));
        headers.append(X_RATELIMIT_RESET, HeaderValue::from(self.reset_at));
        if let Some(seconds) = self.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
    }
}
