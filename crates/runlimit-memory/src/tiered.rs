//! One admission over two tiers: a cheap local gate in front of a shared
//! quota.
//!
//! The production topology puts a coarse, hard-bounded memory gate (per
//! client network, say) in front of the shared PostgreSQL or Redis quota (per
//! account), so a flood is turned away before it costs the shared store a
//! round trip. [`Tiered`] makes the two one [`Limiter`]: its checks carry a
//! [`TieredPolicy`] naming their tier, so one batch (and one
//! `RateLimitLayer`) holds both.

use std::fmt;

use runlimit_core::{
    Admission, Admitted, Backend, BatchDecision, BatchError, Check, DEFAULT_MAX_BATCH_SIZE,
    Decision, Lifecycle, Limiter, MayHaveConsumed, Receipt, RefundError, Refunded, Settle, Storage,
    SubjectKey, TierCheck, TieredPolicy, validate_batch,
};
use smallvec::SmallVec;

/// The issuer of a tiered limiter's receipts (which hold each tier's own).
const ISSUER: &str = "runlimit-memory/tiered";

/// Checks of one tier, with their positions in the batch.
type Split<'a, P> = (SmallVec<[Check<'a, P>; 4]>, SmallVec<[usize; 4]>);

/// A local gate and a shared backend, evaluated as one admission.
///
/// * The gate's checks run first and are consumed; the shared checks run
///   only if the gate allowed, so a request the gate turns away never reaches
///   the shared backend.
/// * When the shared backend denies, or fails, the gate's consumption is
///   refunded: a denied request consumes nothing anywhere. (If that refund
///   itself fails, the gate keeps the charge: the error is the shared
///   backend's, and the gate errs on the side of denying. A GCRA gate's
///   refund credits nothing when another admission of the same key came in
///   between, as every GCRA refund; the gate then keeps the charge too.)
/// * Batches follow the rules of a single backend: all-or-nothing, input
///   order kept, duplicate keys, mixed quota modes and empty or oversized
///   batches refused before anything is consumed. A gate denial is reported
///   at its check's position in the batch, as is a shared one.
/// * Errors say which tier failed ([`TieredError`]) and keep the shared
///   backend's error, with its "may have consumed" classification.
///
/// A gate whose table is full denies every new client for capacity, which
/// keeps a flood of distinct keys away from the shared backend but locks new
/// legitimate clients out with it. Build the gate store with an
/// [overflow tier](crate#a-flood-of-distinct-keys)
/// ([`MemoryStoreConfig::with_overflow`](crate::MemoryStoreConfig::with_overflow))
/// and it keeps deciding new clients, each held to its own limit: the shared
/// backend then sees no more checks (and stores no more rows) than an exact,
/// unbounded gate would let through, and none of what the sketch denies. A
/// shared denial cannot refund what the sketch counted: the gate keeps that
/// charge.
///
/// The gate must implement [`Lifecycle`] (every memory store does), since a
/// shared denial refunds it; the shared backend may be any [`Limiter`]. With a
/// shared backend implementing [`Lifecycle`] too, so does `Tiered`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use runlimit_core::{
///     Check, FixedWindowPolicy, KeyHasher, PolicyId, ScopeId, TieredPolicy,
/// };
/// use runlimit_memory::{MemoryStore, MemoryStoreConfig, Tiered};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let gate = MemoryStore::new(MemoryStoreConfig::new(100_000)?);
/// // In production: a PostgresLimiter or RedisLimiter.
/// let shared = MemoryStore::new(MemoryStoreConfig::new(100_000)?);
/// let limiter = Tiered::new(gate, shared);
///
/// let client = TieredPolicy::Gate(FixedWindowPolicy::new(
///     PolicyId::new("auth.login.local")?,
///     ScopeId::new("client")?,
///     40,
///     Duration::from_secs(60),
/// )?);
/// let identity = TieredPolicy::Shared(FixedWindowPolicy::new(
///     PolicyId::new("auth.login.shared")?,
///     ScopeId::new("identity")?,
///     8,
///     Duration::from_secs(60),
/// )?);
/// let hasher = KeyHasher::new(b"0123456789abcdef0123456789abcdef")?;
/// let checks = [
///     Check::new(&client, hasher.hash_for(&client, b"203.0.113.0/24")),
///     Check::new(&identity, hasher.hash_for(&identity, b"user@example.test")),
/// ];
/// use runlimit_core::Limiter;
/// assert!(limiter.check_all(&checks).await?.is_allowed());
/// # Ok(())
/// # }
/// ```
pub struct Tiered<G, S> {
    gate: G,
    shared: S,
    max_batch_size: usize,
}

impl<G: fmt::Debug, S: fmt::Debug> fmt::Debug for Tiered<G, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tiered")
            .field("gate", &self.gate)
            .field("shared", &self.shared)
            .field("max_batch_size", &self.max_batch_size)
            .finish()
    }
}

/// Why a tiered admission failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TieredError<GE, SE> {
    /// The batch was empty, too large, held duplicate keys or mixed quota
    /// modes. Nothing was consumed.
    #[error("invalid batch: {0}")]
    InvalidBatch(BatchError),
    /// A refund's receipt was not this limiter's, or did not match its
    /// checks. Nothing was changed.
    #[error("invalid refund: {0}")]
    InvalidRefund(RefundError),
    /// The local gate failed; the shared backend was not asked.
    #[error("the local gate failed")]
    Gate(#[source] GE),
    /// The shared backend failed; the gate's consumption was refunded.
    #[error("the shared backend failed")]
    Shared(#[source] SE),
}

impl<GE: MayHaveConsumed, SE: MayHaveConsumed> MayHaveConsumed for TieredError<GE, SE> {
    /// The failing tier's classification: a shared failure may have consumed
    /// quota exactly when the shared backend says so.
    fn may_have_consumed_quota(&self) -> bool {
        match self {
            Self::InvalidBatch(_) | Self::InvalidRefund(_) => false,
            Self::Gate(error) => error.may_have_consumed_quota(),
            Self::Shared(error) => error.may_have_consumed_quota(),
        }
    }
}

impl<G, S> Tiered<G, S> {
    /// `gate` in front of `shared`, with batches of at most
    /// [`DEFAULT_MAX_BATCH_SIZE`] checks.
    #[must_use]
    pub fn new(gate: G, shared: S) -> Self {
        Self {
            gate,
            shared,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
        }
    }

    /// The largest batch accepted (each tier also applies its own limit).
    #[must_use]
    pub fn with_max_batch_size(mut self, max_batch_size: usize) -> Self {
        self.max_batch_size = max_batch_size;
        self
    }

    /// The local gate.
    #[must_use]
    pub fn gate(&self) -> &G {
        &self.gate
    }

    /// The shared backend.
    #[must_use]
    pub fn shared(&self) -> &S {
        &self.shared
    }
}

type Tp<G, S> = TieredPolicy<<G as Limiter>::Policy, <S as Limiter>::Policy>;
type Te<G, S> = TieredError<<G as Limiter>::Error, <S as Limiter>::Error>;

/// Splits `checks` by tier, keeping each check's batch position.
#[allow(clippy::type_complexity)]
fn split<'a, GP: runlimit_core::Policy, SP: runlimit_core::Policy>(
    checks: &[Check<'a, TieredPolicy<GP, SP>>],
) -> (Split<'a, GP>, Split<'a, SP>) {
    let (mut gate, mut shared) = (Split::default(), Split::default());
    for (index, check) in checks.iter().enumerate() {
        match check.tier() {
            TierCheck::Gate(check) => {
                gate.0.push(check);
                gate.1.push(index);
            }
            TierCheck::Shared(check) => {
                shared.0.push(check);
                shared.1.push(index);
            }
        }
    }
    (gate, shared)
}

/// A tier's denial of its sub-batch, at the denied check's batch position.
fn at_batch_position(batch: BatchDecision, positions: &[usize]) -> BatchDecision {
    let position = |index: usize| positions.get(index).copied().unwrap_or(index);
    match batch {
        BatchDecision::Denied { index, denial } => BatchDecision::Denied {
            index: position(index),
            denial,
        },
        BatchDecision::ShadowDenied { index, denial } => BatchDecision::ShadowDenied {
            index: position(index),
            denial,
        },
        other => other,
    }
}

/// Both tiers' allowed decisions, in batch order.
fn merged(size: usize, tiers: [(Option<BatchDecision>, &[usize]); 2]) -> BatchDecision {
    let mut decisions: Vec<Option<Decision>> = vec![None; size];
    for (batch, positions) in tiers {
        if let Some(allowed) = batch.as_ref().and_then(BatchDecision::decisions) {
            for (decision, &position) in allowed.iter().zip(positions) {
                decisions[position] = Some(*decision);
            }
        }
    }
    BatchDecision::Allowed(decisions.into_iter().flatten().collect())
}

impl<G: Lifecycle, S: Limiter> Tiered<G, S> {
    /// The batch over both tiers; `shared` runs the shared tier's part (with
    /// or without a receipt). Returns the batch and, when it was allowed, each
    /// tier's receipt.
    async fn admit_tiers(
        &self,
        checks: &[Check<'_, Tp<G, S>>],
        shared: impl AsyncFnOnce(
            &[Check<'_, S::Policy>],
        ) -> Result<(BatchDecision, Option<Receipt>), S::Error>,
    ) -> Result<(BatchDecision, Option<Receipt>, Option<Receipt>), Te<G, S>> {
        validate_batch(checks, self.max_batch_size).map_err(TieredError::InvalidBatch)?;
        let ((gate_checks, gate_positions), (shared_checks, shared_positions)) = split(checks);
        let (gate_batch, gate_receipt) = if gate_checks.is_empty() {
            (None, None)
        } else {
            let (batch, receipt) = self
                .gate
                .admit_all(&gate_checks)
                .await
                .map_err(TieredError::Gate)?
                .into_parts();
            if !batch.is_allowed() {
                // Turned away locally: the shared backend is never asked.
                return Ok((at_batch_position(batch, &gate_positions), None, None));
            }
            (Some(batch), receipt)
        };
        let (shared_batch, shared_receipt) = if shared_checks.is_empty() {
            (None, None)
        } else {
            match shared(&shared_checks).await {
                Ok((batch, receipt)) if batch.is_allowed() => (Some(batch), receipt),
                decided => {
                    // Denied or failed: give the gate back what it consumed.
                    if let Some(receipt) = gate_receipt {
                        let _ = self.gate.refund(&gate_checks, receipt).await;
                    }
                    let (batch, _) = decided.map_err(TieredError::Shared)?;
                    return Ok((at_batch_position(batch, &shared_positions), None, None));
                }
            }
        };
        let batch = merged(
            checks.len(),
            [
                (gate_batch, &gate_positions),
                (shared_batch, &shared_positions),
            ],
        );
        Ok((batch, gate_receipt, shared_receipt))
    }
}

impl<G: Lifecycle, S: Limiter> Limiter for Tiered<G, S> {
    type Policy = Tp<G, S>;
    type Error = Te<G, S>;

    /// A single check goes to its own tier alone.
    async fn check(&self, check: &Check<'_, Self::Policy>) -> Result<Decision, Self::Error> {
        match check.tier() {
            TierCheck::Gate(check) => self.gate.check(&check).await.map_err(TieredError::Gate),
            TierCheck::Shared(check) => {
                self.shared.check(&check).await.map_err(TieredError::Shared)
            }
        }
    }

    async fn check_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> Result<BatchDecision, Self::Error> {
        self.admit_tiers(checks, async |checks| {
            Ok((self.shared.check_all(checks).await?, None))
        })
        .await
        .map(|(batch, ..)| batch)
    }

    /// At once when the check's own tier decides at once (the in-process
    /// gate does).
    fn check_now(&self, check: &Check<'_, Self::Policy>) -> Option<Result<Decision, Self::Error>> {
        match check.tier() {
            TierCheck::Gate(check) => self
                .gate
                .check_now(&check)
                .map(|decided| decided.map_err(TieredError::Gate)),
            TierCheck::Shared(check) => self
                .shared
                .check_now(&check)
                .map(|decided| decided.map_err(TieredError::Shared)),
        }
    }
}

/// Shared policies are where the shared backend keeps them; gate policies
/// kept in process memory are a [`Storage::LocalGate`], which a layer that
/// requires shared quotas accepts.
impl<G: Lifecycle + Backend, S: Backend> Backend for Tiered<G, S> {
    fn storage(&self, policy: &Self::Policy) -> Storage {
        match policy {
            TieredPolicy::Gate(policy) => match self.gate.storage(policy) {
                Storage::ProcessLocal => Storage::LocalGate,
                other => other,
            },
            TieredPolicy::Shared(policy) => self.shared.storage(policy),
        }
    }
}

/// Whether each of `checks` is what `receipt` (a tier's part) records.
fn records<P: runlimit_core::Policy>(receipt: Option<&Receipt>, checks: &[Check<'_, P>]) -> bool {
    let admitted: &[Admitted] = receipt.map_or(&[], Receipt::admitted);
    admitted.len() == checks.len()
        && admitted
            .iter()
            .zip(checks)
            .all(|(admitted, check)| admitted.records(check))
}

/// A tiered receipt taken apart, with the checks of each tier, after both
/// parts were found to record their checks.
struct TierParts<'a, GP, SP> {
    gate: Split<'a, GP>,
    shared: Split<'a, SP>,
    gate_receipt: Option<Receipt>,
    shared_receipt: Option<Receipt>,
}

impl<'a, GP: runlimit_core::Policy, SP: runlimit_core::Policy> TierParts<'a, GP, SP> {
    /// Both parts are checked before either tier changes anything.
    fn of<GE, SE>(
        checks: &[Check<'a, TieredPolicy<GP, SP>>],
        receipt: Receipt,
    ) -> Result<Self, TieredError<GE, SE>> {
        let (gate_receipt, shared_receipt) = receipt
            .into_tiers(ISSUER)
            .map_err(|_| TieredError::InvalidRefund(RefundError::ForeignReceipt))?;
        let (gate, shared) = split(checks);
        for (matches, positions) in [
            (records(gate_receipt.as_ref(), &gate.0), &gate.1),
            (records(shared_receipt.as_ref(), &shared.0), &shared.1),
        ] {
            if !matches {
                let index = positions.first().copied().unwrap_or(checks.len());
                return Err(TieredError::InvalidRefund(RefundError::Mismatch { index }));
            }
        }
        Ok(Self {
            gate,
            shared,
            gate_receipt,
            shared_receipt,
        })
    }
}

/// The used amounts of the checks at `positions`.
fn used_at(used: &[u64], positions: &[usize]) -> SmallVec<[u64; 4]> {
    positions.iter().map(|&position| used[position]).collect()
}

/// A settlement hands each tier the used amounts of its own checks, after
/// every amount was found within its check's cost.
impl<G: Settle, S: Settle> Settle for Tiered<G, S> {
    async fn settle(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
        used: &[u64],
    ) -> Result<Refunded, Self::Error> {
        let parts = TierParts::of(checks, receipt)?;
        if used.len() != checks.len() {
            let index = used.len().min(checks.len());
            return Err(TieredError::InvalidRefund(RefundError::UsedExceedsCost {
                index,
            }));
        }
        if let Some(index) = checks
            .iter()
            .zip(used)
            .position(|(check, &used)| used > check.cost())
        {
            return Err(TieredError::InvalidRefund(RefundError::UsedExceedsCost {
                index,
            }));
        }
        let mut credited = 0;
        if let Some(receipt) = parts.gate_receipt {
            let used = used_at(used, &parts.gate.1);
            credited += self
                .gate
                .settle(&parts.gate.0, receipt, &used)
                .await
                .map_err(TieredError::Gate)?
                .credited();
        }
        if let Some(receipt) = parts.shared_receipt {
            let used = used_at(used, &parts.shared.1);
            credited += self
                .shared
                .settle(&parts.shared.0, receipt, &used)
                .await
                .map_err(TieredError::Shared)?
                .credited();
        }
        Ok(Refunded::new(credited, checks.len()))
    }
}

/// A receipt holds each tier's receipt; a refund hands each tier its own.
/// Peeks and resets go to the policy's tier.
impl<G: Lifecycle, S: Lifecycle> Lifecycle for Tiered<G, S> {
    async fn admit(&self, check: &Check<'_, Self::Policy>) -> Result<Admission, Self::Error> {
        match check.tier() {
            TierCheck::Gate(check) => {
                let (decision, receipt) = self
                    .gate
                    .admit(&check)
                    .await
                    .map_err(TieredError::Gate)?
                    .into_parts();
                let receipt = receipt.map(|receipt| Receipt::tiered(ISSUER, Some(receipt), None));
                Ok(Admission::new(decision, receipt))
            }
            TierCheck::Shared(check) => {
                let (decision, receipt) = self
                    .shared
                    .admit(&check)
                    .await
                    .map_err(TieredError::Shared)?
                    .into_parts();
                let receipt = receipt.map(|receipt| Receipt::tiered(ISSUER, None, Some(receipt)));
                Ok(Admission::new(decision, receipt))
            }
        }
    }

    async fn admit_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> Result<Admission<BatchDecision>, Self::Error> {
        let (batch, gate, shared) = self
            .admit_tiers(checks, async |checks| {
                Ok(self.shared.admit_all(checks).await?.into_parts())
            })
            .await?;
        let receipt = batch
            .is_allowed()
            .then(|| Receipt::tiered(ISSUER, gate, shared));
        Ok(Admission::new(batch, receipt))
    }

    async fn refund(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
    ) -> Result<Refunded, Self::Error> {
        let parts = TierParts::of(checks, receipt)?;
        let mut credited = 0;
        if let Some(receipt) = parts.gate_receipt {
            credited += self
                .gate
                .refund(&parts.gate.0, receipt)
                .await
                .map_err(TieredError::Gate)?
                .credited();
        }
        if let Some(receipt) = parts.shared_receipt {
            credited += self
                .shared
                .refund(&parts.shared.0, receipt)
                .await
                .map_err(TieredError::Shared)?
                .credited();
        }
        Ok(Refunded::new(credited, checks.len()))
    }

    async fn peek(&self, check: &Check<'_, Self::Policy>) -> Result<Decision, Self::Error> {
        match check.tier() {
            TierCheck::Gate(check) => self.gate.peek(&check).await.map_err(TieredError::Gate),
            TierCheck::Shared(check) => self.shared.peek(&check).await.map_err(TieredError::Shared),
        }
    }

    async fn reset(
        &self,
        policy: &Self::Policy,
        subject: &SubjectKey,
    ) -> Result<bool, Self::Error> {
        match policy {
            TieredPolicy::Gate(policy) => self
                .gate
                .reset(policy, subject)
                .await
                .map_err(TieredError::Gate),
            TieredPolicy::Shared(policy) => self
                .shared
                .reset(policy, subject)
                .await
                .map_err(TieredError::Shared),
        }
    }
}
