//! A flood of distinct client keys against a tiered limiter whose gate has an
//! overflow tier: new legitimate clients are still served, and the shared
//! backend sees no more than an exact gate would let through.

use std::time::Duration;

use runlimit_core::{
    Check, Denial, FixedWindowPolicy, Limiter, PolicyId, ScopeId, SubjectKey, TieredPolicy,
};
use runlimit_memory::{ManualClock, MemoryStore, MemoryStoreConfig, OverflowConfig, Tiered};

const GATE_KEYS: usize = 16;
const ATTACKERS: u64 = 400;
const ATTEMPTS_PER_ATTACKER: u64 = 5;
const GATE_LIMIT: u64 = 2;

fn subject(population: u64, index: u64) -> SubjectKey {
    let mut digest = [0u8; 32];
    let mut word = (population << 40 | index).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for chunk in digest.chunks_mut(8) {
        word ^= word >> 29;
        word = word.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

fn policies() -> (
    TieredPolicy<FixedWindowPolicy, FixedWindowPolicy>,
    TieredPolicy<FixedWindowPolicy, FixedWindowPolicy>,
) {
    let client = FixedWindowPolicy::new(
        PolicyId::new("login.gate").expect("valid"),
        ScopeId::new("client").expect("valid"),
        GATE_LIMIT,
        Duration::from_secs(60),
    )
    .expect("valid");
    let account = FixedWindowPolicy::new(
        PolicyId::new("login.shared").expect("valid"),
        ScopeId::new("account").expect("valid"),
        8,
        Duration::from_secs(60),
    )
    .expect("valid");
    (TieredPolicy::Gate(client), TieredPolicy::Shared(account))
}

type Limited = Tiered<MemoryStore, MemoryStore>;

/// Floods the tiered limiter; returns the flood's admissions, and the denial
/// a new legitimate client's login got, if any.
async fn flood(limiter: &Limited) -> (u64, Option<Denial>) {
    let (client, account) = policies();
    let mut admitted = 0;
    for attacker in 0..ATTACKERS {
        for attempt in 0..ATTEMPTS_PER_ATTACKER {
            // Every attempt names a fresh account.
            let checks = [
                Check::new(&client, subject(1, attacker)),
                Check::new(
                    &account,
                    subject(2, attacker * ATTEMPTS_PER_ATTACKER + attempt),
                ),
            ];
            let batch = limiter.check_all(&checks).await.expect("healthy");
            admitted += u64::from(batch.is_allowed());
        }
    }
    let legitimate = [
        Check::new(&client, subject(3, 0)),
        Check::new(&account, subject(4, 0)),
    ];
    let batch = limiter.check_all(&legitimate).await.expect("healthy");
    (admitted, batch.denial().map(|(_, denial)| *denial))
}

fn limiter(gate: MemoryStoreConfig) -> Limited {
    let clock = ManualClock::new();
    let shared =
        MemoryStore::new(MemoryStoreConfig::new(1 << 16).expect("valid")).with_clock(clock.clone());
    Tiered::new(MemoryStore::new(gate).with_clock(clock), shared)
}

#[tokio::test]
async fn without_the_tier_a_full_gate_locks_new_clients_out() {
    let limiter = limiter(MemoryStoreConfig::new(GATE_KEYS).expect("valid"));
    let (_, denial) = flood(&limiter).await;
    assert!(
        matches!(denial, Some(Denial::StorageCapacity { .. })),
        "{denial:?}"
    );
}

#[tokio::test]
async fn with_the_tier_new_clients_are_served_and_the_shared_store_sees_no_more_than_an_exact_gate_passes()
 {
    let limiter = limiter(
        MemoryStoreConfig::new(GATE_KEYS)
            .expect("valid")
            .with_overflow(OverflowConfig::new(4_096, 4).expect("valid")),
    );
    let (admitted, denial) = flood(&limiter).await;
    assert_eq!(denial, None, "a new legitimate client was turned away");
    // An exact gate admits each attacker's first GATE_LIMIT attempts; the
    // sketch at most as many. Every other attempt was turned away locally and
    // cost the shared store nothing: it holds one row per admitted login.
    assert!(admitted <= ATTACKERS * GATE_LIMIT, "{admitted}");
    assert_eq!(limiter.shared().stats().entries as u64, admitted + 1);
    let overflow = limiter.gate().stats().overflow.expect("configured");
    assert!(overflow.checks >= (ATTACKERS - GATE_KEYS as u64) * ATTEMPTS_PER_ATTACKER);
}
