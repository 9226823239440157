//! The response fields a layer sends: the draft-11 `RateLimit-Policy` and
//! `RateLimit`, and the legacy `X-RateLimit-*` with `Retry-After`.

use std::time::SystemTime;

use http::{
    HeaderMap, HeaderName, HeaderValue,
    header::{Entry, RETRY_AFTER},
};
use runlimit_core::Decision;
use runlimit_http::{
    draft_11::{
        QuotaPolicy, RATELIMIT, RATELIMIT_POLICY, policy_field, status_field_for, status_value,
    },
    legacy::{LegacyFields, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET},
};
use smallvec::SmallVec;

use crate::layer::PolicyMeta;

/// Which rate-limit fields a layer adds to the responses it lets through and
/// to its quota denials.
///
/// Only disclosed policies are reported (see
/// [`RateLimitLayer::withhold_fields`](crate::RateLimitLayer::withhold_fields)),
/// and `RateLimit-Policy` and `RateLimit` always list the same policies in the
/// same order: those of the layer's checks that applied, were decided on the
/// quota (not refused for storage capacity) and have a window of whole
/// seconds (advertised windows are never rounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ResponseFields {
    /// No rate-limit fields (a quota denial still gets `Retry-After` from the
    /// default rejection).
    None,
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11),
    /// the default.
    #[default]
    Draft,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (Unix
    /// seconds) and, on denials, `Retry-After`, the older de-facto shape many
    /// API clients read. The fields hold one quota, so they report the most
    /// restrictive reported policy: the fewest units remaining, then the
    /// latest reset.
    Legacy,
    /// Both.
    DraftAndLegacy,
}

impl ResponseFields {
    fn draft(self) -> bool {
        matches!(self, Self::Draft | Self::DraftAndLegacy)
    }

    fn legacy(self) -> bool {
        matches!(self, Self::Legacy | Self::DraftAndLegacy)
    }
}

/// The fields to add to one response, by kind: the draft fields are merged
/// with an inner layer's as lists, the legacy ones compete with an inner
/// layer's as one quota ([`prepend`]).
#[derive(Debug, Default)]
pub(crate) struct Fields {
    /// `RateLimit-Policy`.
    policy: Option<HeaderValue>,
    /// `RateLimit`.
    status: Option<HeaderValue>,
    /// `X-RateLimit-*` and, for a denial, `Retry-After`.
    legacy: Option<LegacyFields>,
}

impl Fields {
    pub(crate) fn new() -> Self {
        Self::default()
    }
}

/// Whether a decision says something about its quota: allowed, or denied on
/// the quota. A storage-capacity denial does not.
fn reports_quota(decision: &Decision) -> bool {
    decision.is_allowed()
        || decision
            .denial()
            .is_some_and(|denial| denial.is_quota_exceeded())
}

/// The fields for `reported` (disclosed policies and their decisions, in
/// composition order). `static_policy` is the layer's precomputed
/// `RateLimit-Policy`, valid when `reported` is every one of its checks.
pub(crate) fn fields_for(
    format: ResponseFields,
    reported: &[(&PolicyMeta, &Decision)],
    static_policy: Option<&HeaderValue>,
) -> Fields {
    let mut fields = Fields::new();
    if format == ResponseFields::None {
        return fields;
    }
    // The one list both draft fields describe.
    let listed = || {
        reported
            .iter()
            .filter(|(meta, decision)| meta.advertised.is_some() && reports_quota(decision))
    };
    if format.draft() {
        fields.policy = match static_policy {
            Some(value) => Some(value.clone()),
            None => {
                let advertised: SmallVec<[QuotaPolicy; 2]> = listed()
                    .filter_map(|(meta, _)| meta.advertised.clone())
                    .collect();
                policy_field(&advertised).ok().map(|(_, value)| value)
            }
        };
        if fields.policy.is_some() {
            fields.status = match reported {
                // One check, the common layer: the shorter path.
                [(meta, decision)] => listed()
                    .next()
                    .and_then(|_| status_value(&meta.name, decision)),
                _ => status_field_for(listed().map(|(meta, decision)| (&meta.name, *decision)))
                    .map(|(_, value)| value),
            };
        }
    }
    if format.legacy()
        && let Some((_, decision)) = reported
            .iter()
            .filter(|(_, decision)| reports_quota(decision))
            .min_by_key(|(_, decision)| {
                let remaining = decision.remaining().unwrap_or(0);
                let reset = decision.reset_after().or(decision.retry_after());
                (remaining, std::cmp::Reverse(reset))
            })
    {
        fields.legacy = LegacyFields::from_decision(decision, SystemTime::now());
    }
    fields
}

/// Adds this layer's `fields` to a response on its way out through the layer.
///
/// The draft fields are lists: this layer's members go before those inner
/// layers added, so members appear in composition order (outermost first)
/// even though responses travel inside-out. The legacy fields hold one quota:
/// the set with the fewer units remaining is kept, this layer's or an inner
/// layer's.
pub(crate) fn prepend(headers: &mut HeaderMap, fields: Fields) {
    let Fields {
        policy,
        status,
        legacy,
    } = fields;
    // One append per field, one lookup of its name, which is a constant
    // moved into the map (appending a borrowed name would clone it). It
    // returns whether an inner layer had added the field; only then is this
    // layer's member moved first.
    if let Some(value) = policy
        && headers.append(RATELIMIT_POLICY, value)
    {
        move_last_first(headers, RATELIMIT_POLICY);
    }
    if let Some(value) = status
        && headers.append(RATELIMIT, value)
    {
        move_last_first(headers, RATELIMIT);
    }
    if let Some(legacy) = legacy {
        let inner_remaining = headers
            .get(&X_RATELIMIT_REMAINING)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if inner_remaining.is_none_or(|inner| inner > legacy.remaining()) {
            headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(legacy.limit()));
            headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(legacy.remaining()));
            headers.insert(X_RATELIMIT_RESET, HeaderValue::from(legacy.reset_at()));
            if let Some(seconds) = legacy.retry_after_seconds() {
                headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
            }
        }
    }
}

/// Moves the last value of the list field `name`, this layer's member just
/// appended after an inner layer's, to the front.
fn move_last_first(headers: &mut HeaderMap, name: HeaderName) {
    let Entry::Occupied(mut entry) = headers.entry(name) else {
        unreachable!("the field is present")
    };
    let mut values: SmallVec<[HeaderValue; 3]> = entry.iter().cloned().collect();
    let ours = values.pop().expect("this layer's value was just appended");
    entry.insert(ours);
    for value in values {
        entry.append(value);
    }
}
