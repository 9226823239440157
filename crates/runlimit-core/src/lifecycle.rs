//! Refund, peek and reset: what a backend offers beyond admission.
//!
//! [`Limiter`] only consumes. [`Lifecycle`] is the contract beside it for
//! backends that can also give an admission back (count only failed logins),
//! read a counter without touching it, and forget one (support unlocked an
//! account). It is a separate trait so application-owned `Limiter` enums and
//! test fakes need not implement it; generic code asks for
//! `L: Limiter + Lifecycle` only where it refunds, peeks or resets.

use std::{fmt, future::Future};

use smallvec::SmallVec;

use crate::{
    check::Check,
    decision::{BatchDecision, Decision},
    key::{CounterKey, SubjectKey},
    limiter::Limiter,
    policy::Policy,
};

/// What a backend records about one admitted check so it can refund it:
/// three words whose meaning only the issuing backend knows (the window the
/// check was counted in, the state it left behind, a version of the counter).
///
/// Backends build stamps; applications never look inside, they only hand a
/// [`Receipt`] back.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stamp([u64; 3]);

impl Stamp {
    /// A stamp of `words`, for backends.
    #[inline]
    #[must_use]
    pub const fn new(words: [u64; 3]) -> Self {
        Self(words)
    }

    /// The words the backend stored, for the backend that issued it.
    #[inline]
    #[must_use]
    pub const fn words(&self) -> [u64; 3] {
        self.0
    }
}

impl fmt::Debug for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Stamp(<opaque>)")
    }
}

/// One admitted check of a [`Receipt`]: which counter, how many units, and
/// the backend's stamp.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// A 64-bit fold of the counter key: enough to tell a refund handed the
    /// wrong check (a mismatch goes undetected with probability 2^-64), and
    /// small, so receipts stay cheap to move.
    counter: u64,
    cost: u64,
    stamp: Stamp,
}

/// The 64-bit fold of a counter key a receipt records.
#[inline]
fn fold(counter: &CounterKey) -> u64 {
    let word = |bytes: &[u8; 32], index: usize| {
        let mut word = [0; 8];
        word.copy_from_slice(&bytes[index * 8..index * 8 + 8]);
        u64::from_le_bytes(word)
    };
    let (fingerprint, subject) = (
        counter.fingerprint().as_bytes(),
        counter.subject().as_bytes(),
    );
    (0..4).fold(0, |folded: u64, index| {
        folded.rotate_left(17) ^ word(fingerprint, index) ^ word(subject, index).rotate_left(31)
    })
}

impl Admitted {
    /// The record of `check`'s admission, for backends.
    #[inline]
    #[must_use]
    pub fn new<P: Policy + ?Sized>(check: &Check<'_, P>, stamp: Stamp) -> Self {
        Self {
            counter: fold(&check.counter_key()),
            cost: check.cost(),
            stamp,
        }
    }

    /// Whether `check` is the check this records: the same counter and cost.
    #[inline]
    #[must_use]
    pub fn records<P: Policy + ?Sized>(&self, check: &Check<'_, P>) -> bool {
        self.cost == check.cost() && self.counter == fold(&check.counter_key())
    }

    /// The units it consumed.
    #[inline]
    #[must_use]
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// What the backend recorded about the admission.
    #[inline]
    #[must_use]
    pub fn stamp(&self) -> Stamp {
        self.stamp
    }
}

impl fmt::Debug for Admitted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The counter is derived from the subject: never shown.
        f.debug_struct("Admitted")
            .field("cost", &self.cost)
            .finish_non_exhaustive()
    }
}

/// Proof that checks were admitted, which [`Lifecycle::refund`] consumes.
///
/// A receipt is move-only (neither `Clone` nor `Copy`) and a refund takes it
/// by value, so one process cannot refund the same admission twice. Only an
/// allowed check or batch yields one: a denied or shadow-denied decision
/// consumed nothing and has nothing to give back, so refunding it cannot even
/// be written. Dropping a receipt keeps the charge.
///
/// Its contents are opaque: the counters, costs and whatever the issuing
/// backend needs to credit exactly that admission and no later one.
#[must_use = "dropping a receipt keeps the charge; pass it to `Lifecycle::refund` to give it back"]
pub struct Receipt {
    issuer: &'static str,
    admitted: SmallVec<[Admitted; 2]>,
    /// The receipts of each tier, for a tiered limiter's receipt.
    tiers: Option<Box<Tiers>>,
}

/// A tiered receipt's parts: the gate's and the shared backend's.
type Tiers = (Option<Receipt>, Option<Receipt>);

impl Receipt {
    /// A receipt for `admitted` (in check order), issued by the backend named
    /// `issuer`, for backends. The name lets a backend refuse receipts of
    /// another kind of backend.
    pub fn new(issuer: &'static str, admitted: impl IntoIterator<Item = Admitted>) -> Self {
        Self {
            issuer,
            admitted: admitted.into_iter().collect(),
            tiers: None,
        }
    }

    pub(crate) fn with_tiers(
        issuer: &'static str,
        admitted: impl IntoIterator<Item = Admitted>,
        tiers: Box<Tiers>,
    ) -> Self {
        Self {
            issuer,
            admitted: admitted.into_iter().collect(),
            tiers: Some(tiers),
        }
    }

    /// The parts of a tiered receipt, or the receipt itself.
    pub(crate) fn take_tiers(self) -> Result<Tiers, Self> {
        match self.tiers {
            Some(tiers) => Ok(*tiers),
            None => Err(self),
        }
    }

    /// The name of the backend that issued it.
    #[must_use]
    pub fn issuer(&self) -> &'static str {
        self.issuer
    }

    /// The admitted checks, in check order (for a tiered receipt, the
    /// gate's then the shared backend's).
    #[must_use]
    pub fn admitted(&self) -> &[Admitted] {
        &self.admitted
    }

    /// Checks that this receipt, issued by `issuer`, records exactly
    /// `checks`: the same number, in order, with the same counters and costs.
    /// Backends call it before touching storage, so a mismatched refund
    /// changes nothing.
    ///
    /// # Errors
    ///
    /// [`RefundError::ForeignReceipt`] or [`RefundError::Mismatch`].
    pub fn matches<P: Policy + ?Sized>(
        &self,
        issuer: &'static str,
        checks: &[Check<'_, P>],
    ) -> Result<(), RefundError> {
        if self.issuer != issuer {
            return Err(RefundError::ForeignReceipt);
        }
        if checks.len() != self.admitted.len() {
            return Err(RefundError::Mismatch {
                index: checks.len().min(self.admitted.len()),
            });
        }
        match checks
            .iter()
            .zip(&self.admitted)
            .position(|(check, admitted)| !admitted.records(check))
        {
            Some(index) => Err(RefundError::Mismatch { index }),
            None => Ok(()),
        }
    }
}

impl Receipt {
    /// Checks, as [`matches`](Self::matches) does, that this receipt records
    /// `checks`, and that `used` names at most each check's cost; returns the
    /// units a settlement gives back to each check (`cost - used`). Backends
    /// call it before touching storage, so a mismatched settlement changes
    /// nothing.
    ///
    /// # Errors
    ///
    /// As [`matches`](Self::matches), and [`RefundError::UsedExceedsCost`].
    pub fn unused<P: Policy + ?Sized>(
        &self,
        issuer: &'static str,
        checks: &[Check<'_, P>],
        used: &[u64],
    ) -> Result<SmallVec<[u64; 2]>, RefundError> {
        self.matches(issuer, checks)?;
        if used.len() != checks.len() {
            return Err(RefundError::UsedExceedsCost {
                index: used.len().min(checks.len()),
            });
        }
        self.admitted
            .iter()
            .zip(used)
            .enumerate()
            .map(|(index, (admitted, &used))| {
                admitted
                    .cost
                    .checked_sub(used)
                    .ok_or(RefundError::UsedExceedsCost { index })
            })
            .collect()
    }
}

/// What a refund or settlement gives back, for backends: the checks that
/// get units back, with their admissions and units, in check order; checks
/// that keep their whole cost are left out.
#[derive(Debug)]
pub struct Credits<'c, P: Policy + ?Sized> {
    /// The checks to credit.
    pub checks: Vec<Check<'c, P>>,
    /// Their admissions, as the receipt records them.
    pub admitted: Vec<Admitted>,
    /// The units each gets back (none zero).
    pub units: Vec<u64>,
}

impl Receipt {
    /// Checks that this receipt, issued by `issuer`, records `checks`, and
    /// says what giving it back credits: every check's cost for a refund
    /// (`used` of `None`), or `cost - used` for a settlement.
    ///
    /// # Errors
    ///
    /// As [`matches`](Self::matches) and [`unused`](Self::unused).
    pub fn credits<'c, P: Policy + ?Sized>(
        &self,
        issuer: &'static str,
        checks: &[Check<'c, P>],
        used: Option<&[u64]>,
    ) -> Result<Credits<'c, P>, RefundError> {
        let units: SmallVec<[u64; 2]> = match used {
            None => {
                self.matches(issuer, checks)?;
                self.admitted.iter().map(Admitted::cost).collect()
            }
            Some(used) => self.unused(issuer, checks, used)?,
        };
        let mut credits = Credits {
            checks: Vec::new(),
            admitted: Vec::new(),
            units: Vec::new(),
        };
        for ((check, admitted), units) in checks.iter().zip(&self.admitted).zip(units) {
            if units > 0 {
                credits.checks.push(*check);
                credits.admitted.push(*admitted);
                credits.units.push(units);
            }
        }
        Ok(credits)
    }
}

impl fmt::Debug for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receipt")
            .field("issuer", &self.issuer)
            .field("checks", &self.admitted.len())
            .finish_non_exhaustive()
    }
}

/// Why a refund was refused before anything was changed. Caller errors:
/// retrying the same refund cannot succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RefundError {
    /// The check at `index` is not the one the receipt records (another
    /// counter or cost), or the number of checks differs (then `index` is the
    /// first position only one side has).
    #[error("check {index} does not match the admission the receipt records")]
    Mismatch {
        /// The first position that differs.
        index: usize,
    },
    /// The receipt was issued by another kind of backend.
    #[error("the receipt was issued by another kind of backend")]
    ForeignReceipt,
    /// A settlement named more units used than the check at `index`
    /// consumed, or a number of used amounts other than the number of checks
    /// (then `index` is the first position only one side has).
    #[error("check {index} cannot keep more units than it consumed")]
    UsedExceedsCost {
        /// The first position that is out of range.
        index: usize,
    },
}

/// A decision together with the receipt that refunds it, when it consumed
/// quota.
#[derive(Debug)]
pub struct Admission<D = Decision> {
    decision: D,
    receipt: Option<Receipt>,
}

impl<D> Admission<D> {
    /// An admission, for backends: `receipt` must be present exactly when the
    /// decision consumed quota.
    #[must_use]
    pub fn new(decision: D, receipt: Option<Receipt>) -> Self {
        Self { decision, receipt }
    }

    /// The decision.
    #[must_use]
    pub fn decision(&self) -> &D {
        &self.decision
    }

    /// Takes the receipt out: `Some` only once, and only if the decision
    /// consumed quota.
    pub fn take_receipt(&mut self) -> Option<Receipt> {
        self.receipt.take()
    }

    /// The decision and the receipt.
    #[must_use]
    pub fn into_parts(self) -> (D, Option<Receipt>) {
        (self.decision, self.receipt)
    }
}

/// What a refund gave back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Refunded {
    credited: usize,
    checks: usize,
}

impl Refunded {
    /// A refund of `checks` checks of which `credited` got something back.
    #[must_use]
    pub fn new(credited: usize, checks: usize) -> Self {
        Self {
            credited: credited.min(checks),
            checks,
        }
    }

    /// How many checks got units back (all or part of their cost).
    #[must_use]
    pub fn credited(&self) -> usize {
        self.credited
    }

    /// How many checks the receipt covered.
    #[must_use]
    pub fn checks(&self) -> usize {
        self.checks
    }
}

/// Refund, peek and reset, beside [`Limiter`].
///
/// # Refunds
///
/// Quota is consumed at admission, so concurrent requests can never slip
/// past the limit, and given back afterwards when the application decides
/// the request should not count ("count only failed logins"). A refund:
///
/// * never credits more than the check consumed;
/// * never credits a window that has renewed since, or a counter that was
///   reset since;
/// * never leaves the subject better off than if the refunded check had never
///   been admitted; where a backend cannot tell exactly what that would be,
///   it credits less, never more (the algorithm's docs state the rule).
///   For GCRA, every backend credits only the subject's latest admission
///   (what is left of its increment); one that later admissions queued
///   behind credits nothing, since crediting it would move their increments
///   earlier.
///
/// Refunds of a batch credit each check independently, in one round trip.
/// [`Settle`] gives back part of a receipt under the same rules.
///
/// # Peek
///
/// [`peek`](Self::peek) reports what a check would get now (allowed with the
/// remaining units and reset time, or denied with the retry time) without
/// consuming anything, storing a new key or reserving capacity. A key never
/// seen reads as a full quota. It reports the quota only: a new key that a
/// full store would refuse still peeks as allowed.
///
/// # Reset
///
/// [`reset`](Self::reset) forgets one subject's counter for one policy
/// (support unlocked the account), reporting whether a live counter existed.
/// Receipts issued before the reset credit nothing afterwards.
///
/// Backends observe refunds, peeks and resets like admissions, without keys.
pub trait Lifecycle: Limiter {
    /// Like [`Limiter::check`], also returning the receipt that refunds the
    /// check when it was allowed.
    ///
    /// # Errors
    ///
    /// As [`Limiter::check`].
    fn admit(
        &self,
        check: &Check<'_, Self::Policy>,
    ) -> impl Future<Output = Result<Admission<Decision>, Self::Error>> + Send;

    /// Like [`Limiter::check_all`], also returning the receipt that refunds
    /// the batch when it was allowed.
    ///
    /// # Errors
    ///
    /// As [`Limiter::check_all`].
    fn admit_all(
        &self,
        checks: &[Check<'_, Self::Policy>],
    ) -> impl Future<Output = Result<Admission<BatchDecision>, Self::Error>> + Send;

    /// Gives back what `receipt` records for `checks` (the checks it was
    /// issued for, in the same order).
    ///
    /// # Errors
    ///
    /// The backend's error wrapping [`RefundError`] when the receipt does not
    /// match `checks` or comes from another kind of backend (nothing changed);
    /// otherwise the backend's failure, classified like a check's ("definitely
    /// not applied" or "may have applied").
    fn refund(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
    ) -> impl Future<Output = Result<Refunded, Self::Error>> + Send;

    /// What `check` would get now, consuming and storing nothing.
    ///
    /// # Errors
    ///
    /// The backend's failure.
    fn peek(
        &self,
        check: &Check<'_, Self::Policy>,
    ) -> impl Future<Output = Result<Decision, Self::Error>> + Send;

    /// Forgets `subject`'s counter for `policy`; returns whether a live
    /// counter existed.
    ///
    /// # Errors
    ///
    /// The backend's failure, classified like a check's.
    fn reset(
        &self,
        policy: &Self::Policy,
        subject: &SubjectKey,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;
}

/// Settling a reservation to its actual cost: a refund of part of a receipt,
/// beside [`Lifecycle`].
///
/// Where the cost of a request is known only after it ran (the tokens of a
/// model's answer, the rows a query returned), admit the largest cost you
/// accept and settle to what was used: [`settle`](Self::settle) gives back
/// `cost - used` of each check under the same rules as a
/// [refund](Lifecycle#refunds), so the subject ends no better off than if only
/// `used` had been consumed, and a window that renewed or a counter that was
/// reset gets nothing. `used` equal to the cost keeps the whole charge
/// (nothing is sent); `used` of zero is [`Lifecycle::refund`].
///
/// ```
/// use runlimit_core::{Check, FixedWindowPolicy, Lifecycle, Settle, SubjectKey};
///
/// async fn answer<L>(limiter: &L, policy: &FixedWindowPolicy) -> Result<(), Box<dyn std::error::Error>>
/// where
///     L: Settle<Policy = FixedWindowPolicy>,
///     L::Error: std::error::Error + 'static,
/// {
///     // Reserve the most a request may use: 4,000 tokens.
///     let check = Check::weighted(policy, SubjectKey::from_digest([7; 32]), 4_000)?;
///     let mut admission = limiter.admit(&check).await?;
///     if let Some(receipt) = admission.take_receipt() {
///         let tokens_used = 1_250; // what the model's answer took
///         limiter.settle(&[check], receipt, &[tokens_used]).await?;
///     }
///     Ok(())
/// }
/// ```
pub trait Settle: Lifecycle {
    /// Gives back what each of `checks` consumed beyond `used` (one amount
    /// per check, in order) from the `receipt` issued for them.
    ///
    /// # Errors
    ///
    /// The backend's error wrapping [`RefundError`] when the receipt does not
    /// match `checks`, comes from another kind of backend or a used amount
    /// exceeds its check's cost (nothing changed); otherwise the backend's
    /// failure, classified like a refund's.
    fn settle(
        &self,
        checks: &[Check<'_, Self::Policy>],
        receipt: Receipt,
        used: &[u64],
    ) -> impl Future<Output = Result<Refunded, Self::Error>> + Send;
}
