//! Caller-error validation shared by every backend's atomic batches.

use crate::{check::Check, key::CounterKey, policy::Policy};

/// The batch size backends allow unless configured otherwise.
pub const DEFAULT_MAX_BATCH_SIZE: usize = 16;

/// Why a batch was refused before any counter was read or consumed.
///
/// Every variant is a caller error: retrying the same batch cannot succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// The batch held no checks; admitting it would silently bypass every limit.
    #[error("the batch holds no checks")]
    Empty,
    /// The batch held more checks than the backend's configured maximum.
    #[error("the batch holds {size} checks; at most {maximum} are allowed")]
    TooLarge {
        /// Number of checks in the batch.
        size: usize,
        /// The backend's maximum batch size.
        maximum: usize,
    },
    /// Two checks shared a counter key (the same policy and subject).
    #[error("checks {first} and {second} use the same counter key")]
    DuplicateKey {
        /// Index of the first check with the key.
        first: usize,
        /// Index of the second check with the key.
        second: usize,
    },
    /// Enforcing and shadow policies were mixed in one atomic batch.
    #[error("check {index} uses a different quota mode from check 0")]
    MixedQuotaModes {
        /// Index of the first check whose mode differs from the first check's.
        index: usize,
    },
}

/// Checks a batch for the caller errors every backend refuses: emptiness, more
/// than `maximum` checks, duplicate counter keys and mixed quota modes.
///
/// Backends call this before touching storage, so a refused batch consumes nothing.
///
/// # Errors
///
/// The first [`BatchError`] found, in the order listed above.
pub fn validate_batch<P: Policy + ?Sized>(
    checks: &[Check<'_, P>],
    maximum: usize,
) -> Result<(), BatchError> {
    let Some(first) = checks.first() else {
        return Err(BatchError::Empty);
    };
    if checks.len() > maximum {
        return Err(BatchError::TooLarge {
            size: checks.len(),
            maximum,
        });
    }
    let mode = first.policy().quota_mode();
    if let Some(index) = checks
        .iter()
        .position(|check| check.policy().quota_mode() != mode)
    {
        return Err(BatchError::MixedQuotaModes { index });
    }
    if let Some((first, second)) = find_duplicate(checks) {
        return Err(BatchError::DuplicateKey { first, second });
    }
    Ok(())
}

fn find_duplicate<P: Policy + ?Sized>(checks: &[Check<'_, P>]) -> Option<(usize, usize)> {
    // Pairwise comparison beats sorting for the small batches admission uses.
    const PAIRWISE_LIMIT: usize = 32;
    if checks.len() <= PAIRWISE_LIMIT {
        let same = |a: &Check<'_, P>, b: &Check<'_, P>| {
            a.subject() == b.subject() && a.policy().fingerprint() == b.policy().fingerprint()
        };
        for (second, check) in checks.iter().enumerate() {
            if let Some(first) = checks[..second]
                .iter()
                .position(|earlier| same(earlier, check))
            {
                return Some((first, second));
            }
        }
        return None;
    }
    let mut keyed: Vec<(CounterKey, usize)> = checks
        .iter()
        .enumerate()
        .map(|(index, check)| (check.counter_key(), index))
        .collect();
    keyed.sort_unstable();
    keyed
        .windows(2)
        .filter(|pair| pair[0].0 == pair[1].0)
        .map(|pair| (pair[0].1, pair[1].1))
        .min_by_key(|&(_, second)| second)
}
