//! What the memory benchmarks share: keys spread like HMAC output, and
//! policies (and governor's equivalent quota) that every check stays within.

use std::{num::NonZeroU32, time::Duration};

use governor::Quota;
use runlimit_core::{
    FixedWindowPolicy, GcraPolicy, MAX_LIMIT, PolicyId, ScopeId, SlidingWindowPolicy, SubjectKey,
};

/// Distinct keys in the random-key benchmarks.
pub(crate) const RANDOM_KEYS: usize = 100_000;

/// `len` pseudo-random indices below [`RANDOM_KEYS`], the same sequence on
/// every call, so every contender sees the same key order.
pub(crate) fn random_indices(len: usize) -> Vec<usize> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            usize::try_from(state % RANDOM_KEYS as u64).expect("fits")
        })
        .collect()
}

/// The subject key numbered `n`.
pub(crate) fn subject(n: u64) -> SubjectKey {
    // Spread like HMAC output: every byte depends on n.
    let mut digest = [0u8; 32];
    let mut state = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    for chunk in digest.chunks_mut(8) {
        state ^= state >> 30;
        state = state.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        state ^= state >> 27;
        state = state.wrapping_mul(0x94D0_49BB_1331_11EB);
        state ^= state >> 31;
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

/// A year-long window of the largest limit: every check is allowed.
pub(crate) fn fixed_policy(scope: &str) -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("bench").expect("valid"),
        ScopeId::new(scope).expect("valid"),
        MAX_LIMIT,
        Duration::from_secs(366 * 24 * 3_600),
    )
    .expect("valid")
}

/// [`fixed_policy`]'s limit and window as a sliding window.
#[allow(dead_code)]
pub(crate) fn sliding_policy(scope: &str) -> SlidingWindowPolicy {
    SlidingWindowPolicy::new(
        PolicyId::new("bench").expect("valid"),
        ScopeId::new(scope).expect("valid"),
        MAX_LIMIT,
        Duration::from_secs(366 * 24 * 3_600),
    )
    .expect("valid")
}

/// Ten per second with a burst no benchmark exhausts: every check is allowed and
/// no entry replenishes (expires) while the benchmark runs.
pub(crate) fn gcra_policy() -> GcraPolicy {
    GcraPolicy::new(
        PolicyId::new("bench").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        Duration::from_secs(1),
        1_000_000,
    )
    .expect("valid")
}

/// governor's equivalent of [`gcra_policy`].
pub(crate) fn governor_quota() -> Quota {
    Quota::per_second(NonZeroU32::new(10).expect("non-zero"))
        .allow_burst(NonZeroU32::new(1_000_000).expect("non-zero"))
}
