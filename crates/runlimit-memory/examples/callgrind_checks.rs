//! Instruction counts of the normal check path, for `valgrind --tool=callgrind`:
//! `callgrind_checks <hot|random|new|full> <checks> [overflow]`: one stored
//! key, stored keys at random, a new key per check (the table never fills),
//! or a new key per check of a full table.
//!
//! Count only `run_checks` (`--toggle-collect='*run_checks*'`): setup
//! and clock calibration vary between runs, the checks do not.

use std::{error::Error, time::Duration};

use runlimit_core::{Check, FixedWindowPolicy, PolicyId, ScopeId, SubjectKey};
use runlimit_memory::{ManualClock, MemoryStore, MemoryStoreConfig, OverflowConfig};

/// Keys the random scenario spreads its checks over (stored before counting).
const KEYS: u64 = 10_000;

fn subject(index: u64) -> SubjectKey {
    let mut digest = [0u8; 32];
    let mut word = index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    for chunk in digest.chunks_mut(8) {
        word = word.rotate_left(17).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ index;
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

/// The measured checks; returns how many were allowed.
#[inline(never)]
fn run_checks(
    store: &MemoryStore,
    policy: &FixedWindowPolicy,
    keys: &[SubjectKey],
    scenario: &str,
    checks: u64,
) -> Result<u64, Box<dyn Error>> {
    let mut allowed = 0u64;
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for index in 0..checks {
        let new;
        let key = if scenario == "hot" {
            &keys[0]
        } else if scenario == "new" || scenario == "full" {
            new = subject(KEYS + index);
            &new
        } else {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            &keys[usize::try_from(state % KEYS)?]
        };
        allowed += u64::from(store.check(&Check::new(policy, *key))?.is_allowed());
    }
    Ok(allowed)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let scenario = args.get(1).map_or("hot", String::as_str);
    let checks: u64 = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let overflow = args.get(3).is_some_and(|arg| arg == "overflow");
    let policy = FixedWindowPolicy::new(
        PolicyId::new("bench")?,
        ScopeId::new("key")?,
        1_000_000,
        Duration::from_secs(60),
    )?;
    // "full": the stored keys fill the table, so every new key overflows.
    let max_keys = if scenario == "full" {
        usize::try_from(KEYS)?
    } else {
        1 << 17
    };
    let config = with_overflow(MemoryStoreConfig::new(max_keys)?, overflow)?;
    let store = MemoryStore::new(config).with_clock(ManualClock::new());
    let keys: Vec<SubjectKey> = (0..KEYS).map(subject).collect();
    for key in &keys {
        store.check(&Check::new(&policy, *key))?;
    }
    let allowed = run_checks(&store, &policy, &keys, scenario, checks)?;
    println!("{scenario} {checks} overflow={overflow} allowed={allowed}");
    Ok(())
}

/// The store with an overflow tier sized for a flood of a million units per
/// window, when asked for; the table never fills here, so it is never used.
fn with_overflow(
    config: MemoryStoreConfig,
    overflow: bool,
) -> Result<MemoryStoreConfig, Box<dyn Error>> {
    Ok(if overflow {
        config.with_overflow(OverflowConfig::new(1 << 20, 4)?)
    } else {
        config
    })
}
