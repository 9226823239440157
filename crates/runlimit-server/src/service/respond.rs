//! From a decision to the response: statuses, the overall code, headers,
//! dynamic metadata, and the rules' counters.

use std::{collections::BTreeMap, time::Duration};

use runlimit_core::{PolicyKind, ceil_seconds};
use runlimit_http::draft_11::{self, PolicyName, QuotaPolicy, QuotaStatus};
use serde_json::Value as Json;

use super::{
    ResponseHeaders,
    decide::{Decided, Verdict},
    plan::{Limited, Plan, Target},
};
use crate::{
    config::Unit,
    metrics::Hits,
    proto::{
        HeaderValue, RateLimitRequest, RateLimitResponse,
        rate_limit_response::{Code, DescriptorStatus, RateLimit, rate_limit::Unit as ProtoUnit},
    },
};

/// What a response holds besides statuses, as configured.
#[derive(Debug, Clone, Copy)]
pub(super) struct Extras {
    pub(super) headers: ResponseHeaders,
    pub(super) dynamic_metadata: bool,
}

/// The response to `request`, decided as `decided`.
pub(super) fn respond(
    request: &RateLimitRequest,
    plan: &Plan<'_>,
    decided: &Decided,
    extras: Extras,
) -> RateLimitResponse {
    let statuses: Vec<DescriptorStatus> = plan
        .targets
        .iter()
        .zip(&decided.verdicts)
        .map(|(target, verdict)| status(target, *verdict))
        .collect();
    let overall_code = if decided.over {
        Code::OverLimit
    } else {
        Code::Ok
    };
    let mut response_headers_to_add = Vec::new();
    if extras.headers.legacy() {
        legacy_headers(plan, &statuses, &mut response_headers_to_add);
    }
    if extras.headers.draft_11() {
        draft_11_headers(plan, &statuses, &mut response_headers_to_add);
    }
    let dynamic_metadata = extras
        .dynamic_metadata
        .then(|| dynamic_metadata(request, plan, &statuses));
    RateLimitResponse {
        overall_code: overall_code.into(),
        statuses,
        response_headers_to_add,
        dynamic_metadata,
        ..RateLimitResponse::default()
    }
}

/// Adds each descriptor's hits to its rule's counters.
pub(super) fn count(plan: &Plan<'_>, decided: &Decided) {
    for (index, (target, verdict)) in plan.targets.iter().zip(&decided.verdicts).enumerate() {
        let Target::Limited(limited) = target else {
            continue;
        };
        if limited.cost == 0 {
            continue;
        }
        let cost = limited.cost;
        let mut hits = Hits {
            total: cost,
            ..Hits::default()
        };
        match verdict.unwrap_or(Verdict::Over { retry: None }) {
            Verdict::Within {
                remaining,
                capacity,
                ..
            } => {
                hits.within = cost;
                // Units admitted above 80 % of the capacity, counted once per
                // counter (by its first descriptor), and only when admitted.
                let group = limited.group.map(|group| &plan.groups[group]);
                if let Some(group) = group.filter(|group| group.members[0] == index)
                    && !decided.over
                {
                    let after = capacity.saturating_sub(remaining);
                    let before = after.saturating_sub(group.cost);
                    // 80 %, rounded down; capacities are at most 10⁹.
                    let threshold = capacity.saturating_mul(4) / 5;
                    hits.near = after.saturating_sub(before.max(threshold));
                }
            }
            Verdict::Over { .. } => {
                hits.over = cost;
                if limited.applied.shadow {
                    hits.shadow = cost;
                }
            }
        }
        limited.applied.counters.add(hits);
    }
}

fn status(target: &Target<'_>, verdict: Option<Verdict>) -> DescriptorStatus {
    let limited = match target {
        Target::Free => {
            return DescriptorStatus {
                code: Code::Ok.into(),
                ..DescriptorStatus::default()
            };
        }
        Target::Unlimited(_) => {
            return DescriptorStatus {
                code: Code::Ok.into(),
                limit_remaining: u32::MAX,
                ..DescriptorStatus::default()
            };
        }
        Target::Limited(limited) => limited,
    };
    let current_limit = Some(RateLimit {
        name: limited.applied.name.unwrap_or_default().to_owned(),
        requests_per_unit: limited.applied.requests_per_unit,
        unit: proto_unit(limited.applied.unit).into(),
    });
    // A limited descriptor always has a verdict; were it missing, it would
    // be over rather than admitted.
    let (code, remaining, reset) = match verdict.unwrap_or(Verdict::Over { retry: None }) {
        Verdict::Within {
            remaining, reset, ..
        } => (Code::Ok, remaining, reset),
        Verdict::Over { retry } => {
            let code = if limited.applied.shadow {
                Code::Ok
            } else {
                Code::OverLimit
            };
            (code, 0, retry.unwrap_or_else(|| limited.unit_wait()))
        }
    };
    DescriptorStatus {
        code: code.into(),
        current_limit,
        limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(whole_seconds(reset)),
    }
}

/// `duration` rounded up to whole seconds.
fn whole_seconds(duration: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(ceil_seconds(duration)).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

fn proto_unit(unit: Unit) -> ProtoUnit {
    match unit {
        Unit::Second => ProtoUnit::Second,
        Unit::Minute => ProtoUnit::Minute,
        Unit::Hour => ProtoUnit::Hour,
        Unit::Day => ProtoUnit::Day,
        Unit::Week => ProtoUnit::Week,
        Unit::Month => ProtoUnit::Month,
        Unit::Year => ProtoUnit::Year,
    }
}

/// The limited descriptors with their statuses.
fn limited<'a, 'c>(
    plan: &'a Plan<'c>,
    statuses: &'a [DescriptorStatus],
) -> impl Iterator<Item = (&'a Limited<'c>, &'a DescriptorStatus)> {
    plan.targets
        .iter()
        .zip(statuses)
        .filter_map(|(target, status)| match target {
            Target::Limited(limited) => Some((limited, status)),
            _ => None,
        })
}

/// `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` of one
/// descriptor, as the reference service chooses it: the last enforced one
/// over its limit, else the one with the fewest units left (the first of
/// equals).
fn legacy_headers(plan: &Plan<'_>, statuses: &[DescriptorStatus], out: &mut Vec<HeaderValue>) {
    let over = limited(plan, statuses)
        .filter(|(limited, status)| status.code() == Code::OverLimit && !limited.applied.quota)
        .last();
    let chosen = over.or_else(|| {
        limited(plan, statuses).reduce(|fewest, next| {
            if next.1.limit_remaining < fewest.1.limit_remaining {
                next
            } else {
                fewest
            }
        })
    });
    let Some((limited, status)) = chosen else {
        return;
    };
    let reset = status.duration_until_reset.map_or(0, |reset| reset.seconds);
    out.extend([
        HeaderValue::new(
            "RateLimit-Limit",
            limited.applied.requests_per_unit.to_string(),
        ),
        HeaderValue::new("RateLimit-Remaining", status.limit_remaining.to_string()),
        HeaderValue::new("RateLimit-Reset", reset.to_string()),
    ]);
}

/// The draft-11 `RateLimit-Policy` and `RateLimit` fields, one member per
/// limited descriptor, named by the rule's name (else its path); a member
/// the field cannot carry (a name outside printable ASCII and a window of
/// a fraction of a second) is left out.
fn draft_11_headers(plan: &Plan<'_>, statuses: &[DescriptorStatus], out: &mut Vec<HeaderValue>) {
    let mut policies = Vec::new();
    let mut quotas = Vec::new();
    for (limited, status) in limited(plan, statuses) {
        let counted = limited.counter.as_ref().map(|counter| &*counter.policy);
        let Some(name) = PolicyName::new(limited.applied.label.as_ref())
            .ok()
            .or_else(|| counted.map(PolicyName::of))
        else {
            continue;
        };
        let (quota, window) = match counted.map(runlimit_core::Policy::kind) {
            Some(PolicyKind::FixedWindow(policy)) => (policy.limit(), policy.window()),
            Some(PolicyKind::SlidingWindow(policy)) => (policy.limit(), policy.window()),
            Some(PolicyKind::Gcra(policy)) => (policy.quota(), policy.period()),
            None => (0, limited.applied.unit.duration()),
        };
        let reset = status
            .duration_until_reset
            .map_or(0, |reset| u64::try_from(reset.seconds).unwrap_or(0));
        let (Ok(policy), Ok(quota)) = (
            QuotaPolicy::new(name.clone(), quota, window),
            QuotaStatus::new(
                name,
                u64::from(status.limit_remaining),
                Duration::from_secs(reset),
            ),
        ) else {
            continue;
        };
        policies.push(policy);
        quotas.push(quota);
    }
    // Both fail only when empty: then there is nothing to add.
    for (name, value) in [
        draft_11::policy_field(&policies),
        draft_11::status_field(&quotas),
    ]
    .into_iter()
    .flatten()
    {
        if let Ok(value) = value.to_str() {
            out.push(HeaderValue::new(name.as_str(), value));
        }
    }
}

/// The dynamic metadata the reference service returns: the domain, the
/// descriptors' entries (`key=value`, as the proxy sent them) and costs,
/// the request's cost, quota mode's violations, and the configured
/// `metadata` of the descriptors within their limits, merged (nested
/// mappings merge, the first descriptor's scalar wins).
fn dynamic_metadata(
    request: &RateLimitRequest,
    plan: &Plan<'_>,
    statuses: &[DescriptorStatus],
) -> prost_types::Struct {
    let mut fields = serde_json::Map::new();
    fields.insert("domain".into(), request.domain.clone().into());
    let descriptors = request
        .descriptors
        .iter()
        .map(|descriptor| {
            let mut fields = serde_json::Map::new();
            let entries = descriptor
                .entries
                .iter()
                .map(|entry| Json::String(format!("{}={}", entry.key, entry.value)))
                .collect();
            fields.insert("entries".into(), Json::Array(entries));
            if let Some(hits) = descriptor.hits_addend {
                fields.insert("hitsAddend".into(), hits.into());
            }
            Json::Object(fields)
        })
        .collect();
    fields.insert("descriptors".into(), Json::Array(descriptors));
    if request.hits_addend != 0 {
        fields.insert("hitsAddend".into(), request.hits_addend.into());
    }
    let quota: Vec<(usize, bool)> = plan
        .targets
        .iter()
        .zip(statuses)
        .enumerate()
        .filter_map(|(index, (target, status))| match target {
            Target::Limited(limited) if limited.applied.quota => {
                Some((index, status.code() == Code::OverLimit))
            }
            _ => None,
        })
        .collect();
    if !quota.is_empty() {
        fields.insert("quotaModeEnabled".into(), true.into());
        let violations = quota
            .iter()
            .filter(|(_, over)| *over)
            .map(|(index, _)| Json::from(*index))
            .collect();
        fields.insert("quotaModeViolations".into(), Json::Array(violations));
    }
    let mut merged = Json::Object(serde_json::Map::new());
    for (target, status) in plan.targets.iter().zip(statuses) {
        let metadata = match target {
            Target::Unlimited(rule) => rule.metadata.as_ref(),
            Target::Limited(limited) if status.code() == Code::Ok => limited.applied.metadata,
            _ => None,
        };
        if let Some(metadata) = metadata {
            merge(&mut merged, metadata);
        }
    }
    if merged.as_object().is_some_and(|merged| !merged.is_empty()) {
        fields.insert("metadata".into(), merged);
    }
    to_struct(fields)
}

/// Merges `from` into `into`: mappings key by key, recursively; anything
/// else only where `into` has nothing.
fn merge(into: &mut Json, from: &Json) {
    // Anything but two mappings: the first value wins.
    if let (Json::Object(into), Json::Object(from)) = (into, from) {
        for (key, value) in from {
            match into.get_mut(key) {
                Some(existing) => merge(existing, value),
                None => {
                    into.insert(key.clone(), value.clone());
                }
            }
        }
    }
}

fn to_struct(fields: serde_json::Map<String, Json>) -> prost_types::Struct {
    prost_types::Struct {
        fields: fields
            .into_iter()
            .map(|(key, value)| (key, to_value(value)))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn to_value(value: Json) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match value {
        Json::Null => Kind::NullValue(prost_types::NullValue::NullValue.into()),
        Json::Bool(value) => Kind::BoolValue(value),
        // Struct numbers are doubles; metadata holds no NaN (the
        // configuration refuses it).
        Json::Number(number) => Kind::NumberValue(number.as_f64().unwrap_or_default()),
        Json::String(text) => Kind::StringValue(text),
        Json::Array(values) => Kind::ListValue(prost_types::ListValue {
            values: values.into_iter().map(to_value).collect(),
        }),
        Json::Object(fields) => Kind::StructValue(to_struct(fields)),
    };
    prost_types::Value { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_metadata_keeps_the_first_scalar_and_merges_mappings() {
        let mut merged = serde_json::json!({});
        merge(&mut merged, &serde_json::json!({"a": 1, "m": {"x": 1}}));
        merge(
            &mut merged,
            &serde_json::json!({"a": 2, "b": 3, "m": {"x": 2, "y": 2}}),
        );
        assert_eq!(
            merged,
            serde_json::json!({"a": 1, "b": 3, "m": {"x": 1, "y": 2}})
        );
    }

    #[test]
    fn resets_round_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_millis(41_001)).seconds, 42);
        assert_eq!(whole_seconds(Duration::from_secs(42)).seconds, 42);
        assert_eq!(whole_seconds(Duration::ZERO).seconds, 0);
    }
}
