//! Requests on Redis Cluster: a batch split by hash slot, one atomic script
//! per slot, all in parallel, with refunds so that a request stays all or
//! nothing.

use std::{
    fmt,
    future::{Future, poll_fn},
    pin::Pin,
    task::Poll,
};

use redis::aio::ConnectionLike;
use runlimit_core::{
    Admission, AnyPolicy, Backend, BatchDecision, Check, Decision, Denial, Grant, Granted,
    Lifecycle, Limiter, Receipt, Refunded, Settle, Storage, SubjectKey,
};
use runlimit_redis::{CheckError, RedisLimiter};
use smallvec::SmallVec;

/// The issuer of receipts of batches that spanned slots: a chain of the
/// slots' own receipts, one per slot in order of first appearance.
const ISSUER: &str = "runlimit-server/slots";

/// A Redis Cluster limiter whose batches may span hash slots.
///
/// A batch's checks are grouped by the hash slot of their counter's key;
/// a batch within one slot is one script, as on the limiter itself. A
/// batch over several slots is one atomic batch per slot, sent at once
/// (the cluster connection takes each to its slot's node in parallel), so
/// a request costs one round trip per slot, concurrently. When a slot
/// denies, or fails, the slots that admitted are refunded with their
/// receipts, so nothing stays counted.
///
/// Within a slot the batch is atomic. Across slots it is all or nothing in
/// what stays counted, but not isolated: between a slot's admission and
/// its refund, a concurrent request may find that slot's units taken and
/// be denied. The error is always toward denying, never an admission over
/// a limit. A refund that fails leaves its units counted until its window
/// passes (also toward denying).
pub struct SlotBatches<C> {
    redis: RedisLimiter<C, AnyPolicy>,
}

impl<C> fmt::Debug for SlotBatches<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotBatches")
            .field("redis", &self.redis)
            .finish()
    }
}

/// The checks of one slot: their indices in the batch, in order.
type Group = SmallVec<[usize; 4]>;

impl<C> SlotBatches<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Splits `redis`'s batches by slot.
    #[must_use]
    pub fn new(redis: RedisLimiter<C, AnyPolicy>) -> Self {
        Self { redis }
    }

    /// The limiter.
    #[must_use]
    pub fn redis(&self) -> &RedisLimiter<C, AnyPolicy> {
        &self.redis
    }

    /// `checks` grouped by slot, in order of each slot's first check.
    fn groups(&self, checks: &[Check<'_, AnyPolicy>]) -> SmallVec<[Group; 4]> {
        let mut slots: SmallVec<[u16; 4]> = SmallVec::new();
        let mut groups: SmallVec<[Group; 4]> = SmallVec::new();
        for (index, check) in checks.iter().enumerate() {
            let slot = self.redis.config().hash_slot(&check.counter_key());
            match slots.iter().position(|known| *known == slot) {
                Some(group) => groups[group].push(index),
                None => {
                    slots.push(slot);
                    groups.push(SmallVec::from_elem(index, 1));
                }
            }
        }
        groups
    }

    /// Admits `checks`, split by slot.
    async fn admit_split(
        &self,
        checks: &[Check<'_, AnyPolicy>],
    ) -> Result<Admission<BatchDecision>, CheckError> {
        let groups = self.groups(checks);
        if groups.len() <= 1 {
            return self.redis.admit_all(checks).await;
        }
        // The caller errors of the whole batch, as one script would find
        // them (duplicates share a slot; mixed modes may not).
        runlimit_core::validate_batch(checks, self.redis.config().max_batch_size())?;
        let parts: Vec<Vec<Check<'_, AnyPolicy>>> = groups
            .iter()
            .map(|group| group.iter().map(|&index| checks[index]).collect())
            .collect();
        let results = join_all(parts.iter().map(|part| self.redis.admit_all(part))).await;

        let mut admitted: Vec<Option<Receipt>> = Vec::with_capacity(groups.len());
        let mut decisions: Vec<Option<Decision>> = vec![None; checks.len()];
        let mut denied: Option<(usize, Denial, bool)> = None;
        let mut failed: Option<CheckError> = None;
        for (group, result) in groups.iter().zip(results) {
            match result {
                Ok(admission) => {
                    let (batch, receipt) = admission.into_parts();
                    admitted.push(receipt);
                    if let BatchDecision::Allowed(allowed) = batch {
                        for (&index, decision) in group.iter().zip(allowed) {
                            decisions[index] = Some(decision);
                        }
                    } else if let Some((index, denial)) = batch.denial() {
                        // A shadow denial permits the request.
                        let shadow = batch.permits_request();
                        note_denial(&mut denied, group[index], *denial, shadow);
                    }
                }
                Err(error) => {
                    admitted.push(None);
                    // The most doubtful error: one that may have consumed.
                    if failed
                        .as_ref()
                        .is_none_or(|kept| !kept.may_have_consumed_quota())
                    {
                        failed = Some(error);
                    }
                }
            }
        }
        if failed.is_none() && denied.is_none() {
            let decisions = decisions.into_iter().flatten().collect();
            return Ok(Admission::new(
                BatchDecision::Allowed(decisions),
                Some(chain(admitted)),
            ));
        }
        // Give back what the other slots admitted: the request is denied
        // or failed as a whole.
        let refunds = join_all(
            parts
                .iter()
                .zip(admitted)
                .filter_map(|(part, receipt)| Some(self.redis.refund(part, receipt?))),
        )
        .await;
        let refund_failed = refunds.into_iter().find_map(Result::err);
        if let Some(error) = failed {
            return Err(error);
        }
        if let Some(error) = refund_failed {
            tracing::warn!(error = %error, "a slot's refund failed: its units stay counted");
        }
        let Some((index, denial, shadow)) = denied else {
            // Not reached: without a failure there was a denial.
            return Err(CheckError::UnexpectedReply);
        };
        let batch = if shadow {
            BatchDecision::ShadowDenied { index, denial }
        } else {
            BatchDecision::Denied { index, denial }
        };
        Ok(Admission::new(batch, None))
    }

    /// Gives back a receipt of [`admit_split`](Self::admit_split), slot by
    /// slot in parallel; with `used`, settles instead.
    async fn give_back(
        &self,
        checks: &[Check<'_, AnyPolicy>],
        receipt: Receipt,
        used: Option<&[u64]>,
    ) -> Result<Refunded, CheckError> {
        let groups = self.groups(checks);
        if groups.len() <= 1 || receipt.issuer() != ISSUER {
            return match used {
                Some(used) => self.redis.settle(checks, receipt, used).await,
                None => self.redis.refund(checks, receipt).await,
            };
        }
        if used.is_some_and(|used| used.len() != checks.len()) {
            return Err(CheckError::InvalidRefund(
                runlimit_core::RefundError::UsedExceedsCost {
                    index: used.map_or(0, <[u64]>::len).min(checks.len()),
                },
            ));
        }
        let mut rest = Some(receipt);
        let mut work = Vec::with_capacity(groups.len());
        for group in &groups {
            let Some(link) = rest.take() else {
                return Err(CheckError::InvalidRefund(
                    runlimit_core::RefundError::Mismatch { index: group[0] },
                ));
            };
            let (own, next) = link.into_tiers(ISSUER).map_err(|_| {
                CheckError::InvalidRefund(runlimit_core::RefundError::ForeignReceipt)
            })?;
            rest = next;
            let part: Vec<Check<'_, AnyPolicy>> =
                group.iter().map(|&index| checks[index]).collect();
            let part_used: Vec<u64> = used
                .map(|used| group.iter().map(|&index| used[index]).collect())
                .unwrap_or_default();
            work.push((part, part_used, own));
        }
        let results = join_all(work.iter_mut().map(|(part, part_used, own)| {
            let own = own.take();
            let used = used.map(|_| part_used.as_slice());
            async move {
                match (own, used) {
                    (None, _) => Ok(Refunded::new(0, part.len())),
                    (Some(own), Some(used)) => self.redis.settle(part, own, used).await,
                    (Some(own), None) => self.redis.refund(part, own).await,
                }
            }
        }))
        .await;
        let mut credited = 0;
        for result in results {
            credited += result?.credited();
        }
        Ok(Refunded::new(credited, checks.len()))
    }
}

/// Keeps the denial a single batch would report: a storage-capacity denial
/// first, else the first in the batch's order.
fn note_denial(
    kept: &mut Option<(usize, Denial, bool)>,
    index: usize,
    denial: Denial,
    shadow: bool,
) {
    let replace = match kept {
        None => true,
        Some((kept_index, kept_denial, _)) => {
            (denial.is_storage_capacity() && !kept_denial.is_storage_capacity())
                || (denial.is_storage_capacity() == kept_denial.is_storage_capacity()
                    && index < *kept_index)
        }
    };
    if replace {
        *kept = Some((index, denial, shadow));
    }
}

/// The slots' receipts as one: each link holds a slot's receipt and the
/// rest of the chain.
fn chain(receipts: Vec<Option<Receipt>>) -> Receipt {
    let mut rest: Option<Receipt> = None;
    for receipt in receipts.into_iter().rev() {
        rest = Some(Receipt::tiered(ISSUER, receipt, rest));
    }
    rest.unwrap_or_else(|| Receipt::tiered(ISSUER, None, None))
}

/// Runs `futures` concurrently and returns their outputs in order.
async fn join_all<F: Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut done = true;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => done = false,
                }
            }
        }
        if done { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

impl<C> Limiter for SlotBatches<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    type Policy = AnyPolicy;
    type Error = CheckError;

    async fn check(&self, check: &Check<'_, AnyPolicy>) -> Result<Decision, CheckError> {
        self.redis.check(check).await
    }

    async fn check_all(
        &self,
        checks: &[Check<'_, AnyPolicy>],
    ) -> Result<BatchDecision, CheckError> {
        if self.groups(checks).len() <= 1 {
            return self.redis.check_all(checks).await;
        }
        let (batch, _kept) = self.admit_split(checks).await?.into_parts();
        Ok(batch)
    }
}

impl<C> Lifecycle for SlotBatches<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn admit(&self, check: &Check<'_, AnyPolicy>) -> Result<Admission, CheckError> {
        self.redis.admit(check).await
    }

    async fn admit_all(
        &self,
        checks: &[Check<'_, AnyPolicy>],
    ) -> Result<Admission<BatchDecision>, CheckError> {
        self.admit_split(checks).await
    }

    async fn refund(
        &self,
        checks: &[Check<'_, AnyPolicy>],
        receipt: Receipt,
    ) -> Result<Refunded, CheckError> {
        self.give_back(checks, receipt, None).await
    }

    async fn peek(&self, check: &Check<'_, AnyPolicy>) -> Result<Decision, CheckError> {
        self.redis.peek(check).await
    }

    async fn reset(&self, policy: &AnyPolicy, subject: &SubjectKey) -> Result<bool, CheckError> {
        self.redis.reset(policy, subject).await
    }
}

impl<C> Settle for SlotBatches<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn settle(
        &self,
        checks: &[Check<'_, AnyPolicy>],
        receipt: Receipt,
        used: &[u64],
    ) -> Result<Refunded, CheckError> {
        self.give_back(checks, receipt, Some(used)).await
    }
}

impl<C> Grant for SlotBatches<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn grant(&self, check: &Check<'_, AnyPolicy>, up_to: u64) -> Result<Granted, CheckError> {
        self.redis.grant(check, up_to).await
    }
}

impl<C> Backend for SlotBatches<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn storage(&self, policy: &AnyPolicy) -> Storage {
        self.redis.storage(policy)
    }
}
