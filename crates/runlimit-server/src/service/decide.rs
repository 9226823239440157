//! Deciding a plan on the limiter: the enforced batch, quota-mode
//! descriptors, shadow rules and peeks, with refunds so that a request
//! answered `OVER_LIMIT` consumes nothing.

use std::time::Duration;

use runlimit_core::{AnyPolicy, BatchDecision, Check, Decision, Lifecycle, Limiter, Receipt};

use super::plan::{Class, Group, Limited, Plan, Target};

/// Where a limit stands for one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Within the limit: `remaining` units left of `capacity`, all of them
    /// again after `reset`.
    Within {
        remaining: u64,
        capacity: u64,
        reset: Duration,
    },
    /// Over the limit, for `retry` (unknown: `None`).
    Over { retry: Option<Duration> },
}

impl Verdict {
    fn of(decision: &Decision) -> Self {
        match (decision.remaining(), decision.limit()) {
            (Some(remaining), Some(capacity)) => Self::Within {
                remaining,
                capacity,
                reset: decision.reset_after().unwrap_or_default(),
            },
            _ => Self::Over {
                retry: decision.retry_after(),
            },
        }
    }

    fn is_over(self) -> bool {
        matches!(self, Self::Over { .. })
    }
}

/// The decision on a plan: a verdict per limited descriptor (in request
/// order; `None` for the others), and whether the request is over.
#[derive(Debug)]
pub(super) struct Decided {
    pub(super) verdicts: Vec<Option<Verdict>>,
    pub(super) over: bool,
}

/// What a refund that failed leaves behind; the response stands.
#[derive(Debug)]
pub(super) struct RefundFailed<E>(pub(super) E);

/// Decides `plan` on `limiter`.
///
/// 1. Limits that block everything, and costs above a policy's capacity,
///    are over without asking the limiter; descriptors of cost 0 are
///    peeked.
/// 2. Enforced descriptors are one atomic batch, admitted only when no
///    enforced descriptor is already over; otherwise they are peeked.
/// 3. Quota-mode descriptors are each checked on their own (each may be
///    over while the request is not), unless the request is already over.
/// 4. A request over because every quota-mode descriptor is over gives
///    back the enforced batch, and peeks it again for its statuses.
/// 5. Shadow rules are one batch, counted only for a request within its
///    limits; otherwise they are peeked.
///
/// Peeks give the statuses of descriptors that were not counted.
pub(super) async fn decide<L>(
    limiter: &L,
    plan: &Plan<'_>,
    refund_failed: impl Fn(RefundFailed<L::Error>),
) -> Result<Decided, L::Error>
where
    L: Limiter<Policy = AnyPolicy> + Lifecycle,
{
    let mut decision = Progress {
        plan,
        singles: vec![None; plan.targets.len()],
        groups: vec![None; plan.groups.len()],
    };

    // 1. What needs no counting.
    for (index, target) in plan.targets.iter().enumerate() {
        let Target::Limited(limited) = target else {
            continue;
        };
        match &limited.counter {
            None => decision.singles[index] = Some(over_for(limited)),
            Some(counter) if limited.cost == 0 => {
                let check = Check::new(&*counter.policy, counter.subject);
                let peeked = limiter.peek(&check).await?;
                decision.singles[index] = Some(Verdict::of(&peeked));
            }
            Some(_) => {}
        }
    }
    for (index, group) in plan.groups.iter().enumerate() {
        if plan.counter(group).check(group.cost).is_none() {
            let Target::Limited(first) = &plan.targets[group.members[0]] else {
                continue;
            };
            decision.groups[index] = Some(over_for(first));
        }
    }

    // 2. The enforced batch.
    // The enforced batch's admission, to give back if the request is over.
    let mut counted: Option<(Vec<Check<'_, AnyPolicy>>, Receipt)> = None;
    let enforced = decision.pending(Class::Enforced);
    if !enforced.is_empty() {
        if decision.enforced_over() {
            decision.peek(limiter, &enforced).await?;
        } else if !decision.limited().any(|(_, limited)| limited.applied.quota) {
            // Without quota-mode descriptors (counted, peeked or blocking)
            // nothing can make the request over once the batch is admitted,
            // so nothing will be given back: no receipt is needed, and a
            // lone check takes the backend's cheapest path (coalesced on
            // Redis).
            let checks = decision.checks(&enforced);
            if let ([group], [check]) = (enforced.as_slice(), checks.as_slice()) {
                let decided = limiter.check(check).await?;
                decision.groups[*group] = Some(Verdict::of(&decided));
            } else {
                let batch = limiter.check_all(&checks).await?;
                decision.settle_batch(limiter, &enforced, &batch).await?;
            }
        } else {
            let checks = decision.checks(&enforced);
            let (batch, receipt) = limiter.admit_all(&checks).await?.into_parts();
            decision.settle_batch(limiter, &enforced, &batch).await?;
            counted = receipt.map(|receipt| (checks, receipt));
        }
    }

    // 3. Quota-mode descriptors, each on its own. Once one is admitted the
    // request is not over: none of them is ever given back.
    let quota = decision.pending(Class::Quota);
    if decision.enforced_over() {
        decision.peek(limiter, &quota).await?;
    } else {
        for group in quota {
            for check in decision.checks(&[group]) {
                let decided = limiter.check(&check).await?;
                decision.groups[group] = Some(Verdict::of(&decided));
            }
        }
    }

    // 4. A request over consumes nothing: when every quota-mode descriptor
    // is over, the enforced batch is given back.
    let over = decision.enforced_over() || decision.quota_over();
    if let Some((checks, receipt)) = counted.filter(|_| over) {
        if let Err(error) = limiter.refund(&checks, receipt).await {
            refund_failed(RefundFailed(error));
        }
        // The statuses say what is left after the refund.
        decision.peek(limiter, &enforced).await?;
    }

    // 5. Shadow rules.
    let shadow = decision.pending(Class::Shadow);
    if !shadow.is_empty() {
        if over {
            decision.peek(limiter, &shadow).await?;
        } else {
            let checks = decision.checks(&shadow);
            let batch = limiter.check_all(&checks).await?;
            decision.settle_batch(limiter, &shadow, &batch).await?;
        }
    }

    let verdicts = plan
        .targets
        .iter()
        .enumerate()
        .map(|(index, _)| decision.verdict(index))
        .collect();
    Ok(Decided { verdicts, over })
}

/// The verdict of a limit that cannot be met: over, for a unit.
fn over_for(limited: &Limited<'_>) -> Verdict {
    Verdict::Over {
        retry: Some(limited.unit_wait()),
    }
}

/// The verdicts so far: of descriptors decided on their own, and of
/// groups.
struct Progress<'p, 'c> {
    plan: &'p Plan<'c>,
    singles: Vec<Option<Verdict>>,
    groups: Vec<Option<Verdict>>,
}

impl<'p, 'c> Progress<'p, 'c> {
    fn verdict(&self, target: usize) -> Option<Verdict> {
        match &self.plan.targets[target] {
            Target::Limited(Limited {
                group: Some(group), ..
            }) => self.groups[*group],
            _ => self.singles[target],
        }
    }

    /// Whether the descriptor's status says over: shadow rules never do.
    fn status_over(&self, target: usize) -> bool {
        match &self.plan.targets[target] {
            Target::Limited(limited) if !limited.applied.shadow => {
                self.verdict(target).is_some_and(Verdict::is_over)
            }
            _ => false,
        }
    }

    fn limited(&self) -> impl Iterator<Item = (usize, &'p Limited<'c>)> + '_ {
        self.plan
            .targets
            .iter()
            .enumerate()
            .filter_map(|(index, target)| match target {
                Target::Limited(limited) => Some((index, limited)),
                _ => None,
            })
    }

    /// Whether an enforced descriptor is over.
    fn enforced_over(&self) -> bool {
        self.limited().any(|(index, limited)| {
            limited.applied.class() == Class::Enforced && self.status_over(index)
        })
    }

    /// Whether the request has quota-mode descriptors and all are over.
    fn quota_over(&self) -> bool {
        let mut quota = self
            .limited()
            .filter(|(_, limited)| limited.applied.quota)
            .peekable();
        quota.peek().is_some() && quota.all(|(index, _)| self.status_over(index))
    }

    /// The groups of `class` without a verdict.
    fn pending(&self, class: Class) -> Vec<usize> {
        self.plan
            .groups
            .iter()
            .enumerate()
            .filter(|(index, group)| group.class == class && self.groups[*index].is_none())
            .map(|(index, _)| index)
            .collect()
    }

    /// The checks of `groups`, in order. Pending groups all have a cost
    /// their policy can admit: the others were found over in step 1.
    fn checks(&self, groups: &[usize]) -> Vec<Check<'p, AnyPolicy>> {
        groups
            .iter()
            .filter_map(|group| {
                let group: &Group = &self.plan.groups[*group];
                self.plan.counter(group).check(group.cost)
            })
            .collect()
    }

    /// Peeks `groups`, for their statuses.
    async fn peek<L>(&mut self, limiter: &L, groups: &[usize]) -> Result<(), L::Error>
    where
        L: Limiter<Policy = AnyPolicy> + Lifecycle,
    {
        let checks = self.checks(groups);
        for (group, check) in groups.iter().zip(&checks) {
            let peeked = limiter.peek(check).await?;
            self.groups[*group] = Some(Verdict::of(&peeked));
        }
        Ok(())
    }

    /// Records a batch's outcome for `groups`: every group within its
    /// limit, or the failing one over and the others peeked.
    async fn settle_batch<L>(
        &mut self,
        limiter: &L,
        groups: &[usize],
        batch: &BatchDecision,
    ) -> Result<(), L::Error>
    where
        L: Limiter<Policy = AnyPolicy> + Lifecycle,
    {
        if let Some(decisions) = batch.decisions() {
            for (group, decision) in groups.iter().zip(decisions) {
                self.groups[*group] = Some(Verdict::of(decision));
            }
            return Ok(());
        }
        let (failed, denial) = batch.denial().map_or((0, None), |(index, denial)| {
            (index, Some(denial.retry_after()))
        });
        self.groups[groups[failed]] = Some(Verdict::Over {
            retry: denial.flatten(),
        });
        let rest: Vec<usize> = groups
            .iter()
            .enumerate()
            .filter(|(index, _)| *index != failed)
            .map(|(_, group)| *group)
            .collect();
        self.peek(limiter, &rest).await
    }
}
