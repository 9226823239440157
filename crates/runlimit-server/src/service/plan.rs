//! From a request to what to check: validation, matching, `replaces`,
//! costs, subject keys, and counters shared by several descriptors.

use std::{borrow::Cow, collections::HashSet, sync::Arc, time::Duration};

use runlimit_core::{
    AnyPolicy, Check, CounterKey, FixedWindowPolicy, KeyHasher, MAX_LIMIT, ScopeId, SubjectKey,
};
use smallvec::SmallVec;

use super::InvalidRequest;
use crate::{
    config::{Config, Domain, Entry, IdPrefix, Limit, Rule, Unit, digest_id},
    metrics::{Metrics, RuleCounters, override_label},
    proto::{RateLimitRequest, RateLimitUnit, rate_limit_descriptor::RateLimitOverride},
};

/// The prefix of an override's policy id.
const OVERRIDE_PREFIX: IdPrefix = IdPrefix("o.");

/// The scope of an override's policy.
const OVERRIDE_SCOPE: &str = "override";

/// What a request asks of the limiter: one target per descriptor, and the
/// counters the counted ones share.
pub(super) struct Plan<'c> {
    pub(super) targets: Vec<Target<'c>>,
    /// The counters descriptors with a cost count against, each once.
    pub(super) groups: Vec<Group>,
}

/// What applies to one request descriptor.
#[expect(
    clippy::large_enum_variant,
    reason = "a request's few targets live in one vector; boxing would allocate per descriptor"
)]
pub(super) enum Target<'c> {
    /// No limit: no rule matched, the rule was replaced, or the domain is
    /// unknown.
    Free,
    /// An unlimited rule.
    Unlimited(&'c Rule),
    /// A limit.
    Limited(Limited<'c>),
}

/// A descriptor a limit applies to.
pub(super) struct Limited<'c> {
    /// The limit, as the response reports it and metrics count it.
    pub(super) applied: Applied<'c>,
    /// The units it costs; 0 checks without counting.
    pub(super) cost: u64,
    /// The counter, unless the limit blocks everything.
    pub(super) counter: Option<Counter<'c>>,
    /// The group it counts in, when it has a counter and a cost.
    pub(super) group: Option<usize>,
}

/// A counter: a policy and a subject.
pub(super) struct Counter<'c> {
    pub(super) policy: Cow<'c, AnyPolicy>,
    pub(super) subject: SubjectKey,
}

impl Counter<'_> {
    /// A check of `cost` units, or `None` for a cost the policy can never
    /// admit (or 0).
    pub(super) fn check(&self, cost: u64) -> Option<Check<'_, AnyPolicy>> {
        Check::weighted(&*self.policy, self.subject, cost).ok()
    }

    fn key(&self) -> CounterKey {
        Check::new(&*self.policy, self.subject).counter_key()
    }
}

/// A limit as it applies to a descriptor.
pub(super) struct Applied<'c> {
    pub(super) counters: Arc<RuleCounters>,
    /// The name other rules' `replaces` use, reported in the status.
    pub(super) name: Option<&'c str>,
    /// The name of its policy in `RateLimit` headers.
    pub(super) label: Cow<'c, str>,
    pub(super) requests_per_unit: u32,
    pub(super) unit: Unit,
    pub(super) shadow: bool,
    pub(super) quota: bool,
    pub(super) metadata: Option<&'c serde_json::Value>,
}

impl Applied<'_> {
    /// How the limiter treats it.
    pub(super) fn class(&self) -> Class {
        if self.shadow {
            Class::Shadow
        } else if self.quota {
            Class::Quota
        } else {
            Class::Enforced
        }
    }
}

/// How a limit takes part in the request's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// Over: the request is over.
    Enforced,
    /// Over: the request is over only if every quota-mode descriptor is.
    Quota,
    /// Never makes the request over; counted only when the request is
    /// admitted.
    Shadow,
}

/// Descriptors counting against one counter: checked once, at the sum of
/// their costs.
pub(super) struct Group {
    /// The descriptors, in request order; the first one's counter is the
    /// group's.
    pub(super) members: SmallVec<[usize; 1]>,
    pub(super) cost: u64,
    pub(super) class: Class,
}

impl<'c> Plan<'c> {
    /// The plan for `request` under `config`.
    ///
    /// # Errors
    ///
    /// [`InvalidRequest`] for a malformed request (checked before anything
    /// else, whatever the configuration).
    pub(super) fn new<'r>(
        config: &'c Config,
        request: &'r RateLimitRequest,
        hasher: &KeyHasher,
        metrics: &Metrics,
        max_descriptors: usize,
    ) -> Result<Self, InvalidRequest>
    where
        'c: 'r,
    {
        validate(request, max_descriptors)?;
        let Some(domain) = config.domain(&request.domain) else {
            return Ok(Self {
                targets: request.descriptors.iter().map(|_| Target::Free).collect(),
                groups: Vec::new(),
            });
        };
        let default_cost = u64::from(request.hits_addend.max(1));
        let mut matched: Vec<Option<Match<'c, 'r>>> = request
            .descriptors
            .iter()
            .map(|descriptor| {
                let entries: SmallVec<[Entry<'_>; 4]> = descriptor
                    .entries
                    .iter()
                    .map(|entry| Entry::new(&entry.key, &entry.value))
                    .collect();
                let cost = descriptor.hits_addend.unwrap_or(default_cost);
                match &descriptor.limit {
                    Some(limit) => Some(Match::overriding(domain, entries, limit, cost)),
                    None => Match::resolving(domain, entries, cost),
                }
            })
            .collect();
        drop_replaced(&mut matched);

        let mut subject = Vec::new();
        let mut groups: Vec<Group> = Vec::new();
        let mut keys: Vec<CounterKey> = Vec::new();
        let mut targets = Vec::with_capacity(matched.len());
        for (index, found) in matched.into_iter().enumerate() {
            let Some(found) = found else {
                targets.push(Target::Free);
                continue;
            };
            let (applied, policy) = match found.limit {
                Found::Rule(rule) => match &rule.limit {
                    Limit::Unlimited => {
                        targets.push(Target::Unlimited(rule));
                        continue;
                    }
                    Limit::Blocked { unit } => (applied(domain, rule, 0, *unit, metrics), None),
                    Limit::Limited {
                        policy,
                        requests_per_unit,
                        unit,
                    } => (
                        applied(domain, rule, *requests_per_unit, *unit, metrics),
                        Some(Cow::Borrowed(policy)),
                    ),
                },
                Found::Override { policy, unit, rpu } => {
                    let label = override_label(found.entries.iter().map(|entry| entry.key));
                    let applied = Applied {
                        counters: metrics.override_rule(domain.name(), &label),
                        name: None,
                        label: Cow::Owned(label),
                        requests_per_unit: rpu,
                        unit,
                        shadow: false,
                        quota: false,
                        metadata: None,
                    };
                    (applied, Some(Cow::Owned(policy)))
                }
            };
            let counter = policy.map(|policy| {
                encode_subject(&found.entries, &found.subject, &mut subject);
                let key = hasher.hash_for(&*policy, &subject);
                Counter {
                    policy,
                    subject: key,
                }
            });
            let group = match &counter {
                Some(counter) if found.cost > 0 => {
                    let key = counter.key();
                    Some(match keys.iter().position(|known| *known == key) {
                        Some(group) => {
                            groups[group].members.push(index);
                            groups[group].cost = groups[group].cost.saturating_add(found.cost);
                            group
                        }
                        None => {
                            keys.push(key);
                            groups.push(Group {
                                members: SmallVec::from_elem(index, 1),
                                cost: found.cost,
                                class: applied.class(),
                            });
                            groups.len() - 1
                        }
                    })
                }
                _ => None,
            };
            targets.push(Target::Limited(Limited {
                applied,
                cost: found.cost,
                counter,
                group,
            }));
        }
        Ok(Self { targets, groups })
    }

    /// The counter of `group`.
    pub(super) fn counter(&self, group: &Group) -> &Counter<'c> {
        match &self.targets[group.members[0]] {
            Target::Limited(Limited {
                counter: Some(counter),
                ..
            }) => counter,
            // Invariant: groups are built of limited targets with a counter.
            _ => unreachable!("a group's members have a counter"),
        }
    }
}

/// Checks what the protocol's validation rules demand and the decoder does
/// not enforce, and what this service refuses.
fn validate(request: &RateLimitRequest, max_descriptors: usize) -> Result<(), InvalidRequest> {
    if request.domain.is_empty() {
        return Err(InvalidRequest::EmptyDomain);
    }
    if request.descriptors.is_empty() {
        return Err(InvalidRequest::NoDescriptors);
    }
    if request.descriptors.len() > max_descriptors {
        return Err(InvalidRequest::TooManyDescriptors {
            count: request.descriptors.len(),
            max: max_descriptors,
        });
    }
    for (descriptor, entries) in request.descriptors.iter().enumerate() {
        if entries.entries.is_empty() {
            return Err(InvalidRequest::NoEntries { descriptor });
        }
        if let Some(entry) = entries
            .entries
            .iter()
            .position(|entry| entry.key.is_empty())
        {
            return Err(InvalidRequest::EmptyKey { descriptor, entry });
        }
        if entries.is_negative_hits {
            return Err(InvalidRequest::NegativeHits { descriptor });
        }
        if let Some(limit) = &entries.limit {
            override_unit(limit).ok_or(InvalidRequest::OverrideUnit {
                descriptor,
                unit: limit.unit,
            })?;
            if !(1..=MAX_LIMIT).contains(&u64::from(limit.requests_per_unit)) {
                return Err(InvalidRequest::OverrideLimit {
                    descriptor,
                    requests_per_unit: limit.requests_per_unit,
                });
            }
        }
    }
    Ok(())
}

/// The unit of an override, `None` for `UNKNOWN` and numbers the protocol
/// does not define.
fn override_unit(limit: &RateLimitOverride) -> Option<Unit> {
    Some(match RateLimitUnit::try_from(limit.unit).ok()? {
        RateLimitUnit::Unknown => return None,
        RateLimitUnit::Second => Unit::Second,
        RateLimitUnit::Minute => Unit::Minute,
        RateLimitUnit::Hour => Unit::Hour,
        RateLimitUnit::Day => Unit::Day,
        RateLimitUnit::Month => Unit::Month,
        RateLimitUnit::Year => Unit::Year,
    })
}

/// The limit a descriptor found, before `replaces` are applied.
struct Match<'c, 'r> {
    limit: Found<'c>,
    entries: SmallVec<[Entry<'r>; 4]>,
    /// The values that key the counter, one per entry.
    subject: SmallVec<[&'r str; 4]>,
    cost: u64,
}

enum Found<'c> {
    Rule(&'c Rule),
    Override {
        policy: AnyPolicy,
        unit: Unit,
        rpu: u32,
    },
}

impl<'c, 'r> Match<'c, 'r> {
    /// The rule `entries` match in `domain`, if any.
    fn resolving(domain: &'c Domain, entries: SmallVec<[Entry<'r>; 4]>, cost: u64) -> Option<Self>
    where
        'c: 'r,
    {
        let matched = domain.resolve(&entries)?;
        Some(Self {
            limit: Found::Rule(matched.rule),
            subject: matched.subject,
            entries,
            cost,
        })
    }

    /// The limit the request gives (validated), as a fixed window per unit
    /// whose id depends on the domain and the entries' keys.
    fn overriding(
        domain: &Domain,
        entries: SmallVec<[Entry<'r>; 4]>,
        limit: &RateLimitOverride,
        cost: u64,
    ) -> Self {
        // Invariant: `validate` refused other units and limits, and the id
        // and scope are valid.
        let unit = override_unit(limit).expect("a validated unit");
        let id = digest_id(
            OVERRIDE_PREFIX,
            std::iter::once(domain.name()).chain(entries.iter().map(|entry| entry.key)),
        );
        let scope = ScopeId::new(OVERRIDE_SCOPE).expect("a valid scope id");
        let policy = FixedWindowPolicy::new(
            id,
            scope,
            u64::from(limit.requests_per_unit),
            unit.duration(),
        )
        .expect("a validated limit")
        .into();
        Self {
            limit: Found::Override {
                policy,
                unit,
                rpu: limit.requests_per_unit,
            },
            subject: entries.iter().map(|entry| entry.value).collect(),
            entries,
            cost,
        }
    }
}

/// Drops the matched rules that another matched rule `replaces`, as if
/// they had not matched.
fn drop_replaced(matched: &mut [Option<Match<'_, '_>>]) {
    let rules = || {
        matched
            .iter()
            .flatten()
            .filter_map(|found| match found.limit {
                Found::Rule(rule) => Some(rule),
                Found::Override { .. } => None,
            })
    };
    let replaced: HashSet<&str> = rules()
        .flat_map(|rule| rule.replaces.iter().map(String::as_str))
        .collect();
    if replaced.is_empty() {
        return;
    }
    let names: Vec<bool> = matched
        .iter()
        .map(|found| {
            found.as_ref().is_some_and(|found| match found.limit {
                Found::Rule(rule) => rule
                    .name
                    .as_deref()
                    .is_some_and(|name| replaced.contains(name)),
                Found::Override { .. } => false,
            })
        })
        .collect();
    for (found, replaced) in matched.iter_mut().zip(names) {
        if replaced {
            *found = None;
        }
    }
}

fn applied<'c>(
    domain: &Domain,
    rule: &'c Rule,
    requests_per_unit: u32,
    unit: Unit,
    metrics: &Metrics,
) -> Applied<'c> {
    Applied {
        counters: metrics.rule(domain.name(), rule.path.as_str()),
        name: rule.name.as_deref(),
        label: Cow::Borrowed(rule.name.as_deref().unwrap_or(rule.path.as_str())),
        requests_per_unit,
        unit,
        shadow: rule.shadow_mode,
        quota: rule.quota_mode,
        metadata: rule.metadata.as_ref(),
    }
}

/// Writes the canonical encoding of a counter's subject into `out`: each
/// entry's key and subject value, each preceded by its length as 8 bytes
/// big-endian, so that no two lists of entries encode alike.
fn encode_subject(entries: &[Entry<'_>], values: &[&str], out: &mut Vec<u8>) {
    out.clear();
    for (entry, value) in entries.iter().zip(values) {
        for part in [entry.key, value] {
            out.extend_from_slice(&(part.len() as u64).to_be_bytes());
            out.extend_from_slice(part.as_bytes());
        }
    }
}

impl Limited<'_> {
    /// How long the response says to wait when the limit can never be met
    /// right away: one unit.
    pub(super) fn unit_wait(&self) -> Duration {
        self.applied.unit.duration()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_length_prefixed_so_entries_cannot_run_into_each_other() {
        let mut first = Vec::new();
        let mut second = Vec::new();
        encode_subject(&[Entry::new("a", "bc")], &["bc"], &mut first);
        encode_subject(&[Entry::new("ab", "c")], &["c"], &mut second);
        assert_ne!(first, second);
        encode_subject(
            &[Entry::new("k", "v"), Entry::new("s", "")],
            &["v", ""],
            &mut second,
        );
        encode_subject(&[Entry::new("k", "v")], &["v"], &mut first);
        assert_ne!(first, second);
        assert_eq!(&first[..8], &1u64.to_be_bytes());
    }
}
