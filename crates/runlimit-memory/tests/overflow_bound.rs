//! How many legitimate checks the overflow tier denies that an exact limiter
//! would admit, measured against the count-min bound.
//!
//! A table of 1,000 keys is flooded by ten times as many distinct keys in
//! one window, each checked once; then 1,000 new legitimate users, also
//! finding the table full, are checked three times each against a limit of
//! ten. An exact limiter admits every legitimate check, so every denial is a
//! false one, caused by flood keys sharing the user's cells.
//!
//! The count-min bound: with `N` units counted in the window, a key's
//! estimate exceeds its own count by more than `e·N/width` with probability
//! at most `e^-depth`. A user with `k` checks of a limit `L` is denied falsely
//! only when the excess passes `L - k`, so a width of at least
//! `e·N/(L - k)` keeps the share of falsely denied users below `e^-depth`.

use std::time::Duration;

use runlimit_core::{Check, FixedWindowPolicy, PolicyId, ScopeId, SubjectKey};
use runlimit_memory::{ManualClock, MemoryStore, MemoryStoreConfig, OverflowConfig};

const MAX_KEYS: usize = 1_000;
const FLOOD_KEYS: u64 = 10 * MAX_KEYS as u64;
const USERS: u64 = 1_000;
const CHECKS_PER_USER: u64 = 3;
const LIMIT: u64 = 10;

fn subject(population: u64, index: u64) -> SubjectKey {
    let mut digest = [0u8; 32];
    let mut word = (population << 40 | index).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for chunk in digest.chunks_mut(8) {
        word ^= word >> 31;
        word = word.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

/// Users with at least one check falsely denied, and flood checks admitted.
fn measure(width: usize, depth: usize) -> (u64, u64) {
    let policy = FixedWindowPolicy::new(
        PolicyId::new("login").expect("valid"),
        ScopeId::new("account").expect("valid"),
        LIMIT,
        Duration::from_secs(60),
    )
    .expect("valid");
    let clock = ManualClock::new();
    let store = MemoryStore::new(
        MemoryStoreConfig::new(MAX_KEYS)
            .expect("valid")
            .with_overflow(OverflowConfig::new(width, depth).expect("valid")),
    )
    .with_clock(clock.clone());
    let mut flood_admitted = 0;
    for index in 0..FLOOD_KEYS {
        let decision = store
            .check(&Check::new(&policy, subject(1, index)))
            .expect("healthy");
        flood_admitted += u64::from(decision.is_allowed());
        clock.advance(Duration::from_millis(1));
    }
    let mut denied_users = 0;
    for user in 0..USERS {
        let mut denied = false;
        for _ in 0..CHECKS_PER_USER {
            let decision = store
                .check(&Check::new(&policy, subject(2, user)))
                .expect("healthy");
            denied |= !decision.is_allowed();
        }
        denied_users += u64::from(denied);
    }
    (denied_users, flood_admitted)
}

/// The width the count-min bound asks for: `e·N/(L - k)` with `N` the flood's
/// units (the users' own add at most a tenth more).
fn sized_width() -> usize {
    let units = (FLOOD_KEYS + USERS * CHECKS_PER_USER) as f64;
    (std::f64::consts::E * units / (LIMIT - CHECKS_PER_USER) as f64).ceil() as usize
}

#[test]
fn false_denials_stay_within_the_count_min_bound() {
    let width = sized_width();
    for depth in [2, 4] {
        let (denied, flood_admitted) = measure(width, depth);
        let bound = (-(depth as f64)).exp();
        let share = denied as f64 / USERS as f64;
        println!(
            "width {width} depth {depth}: {denied} of {USERS} users falsely denied \
             ({:.2}%, bound {:.2}%); flood checks admitted {flood_admitted} of {FLOOD_KEYS}",
            share * 100.0,
            bound * 100.0,
        );
        assert!(share <= bound, "{share} above the bound {bound}");
        // Each flood key is within its own limit: the exact limiter admits
        // every flood check, the sketch at most as many.
        assert!(flood_admitted <= FLOOD_KEYS);
    }
}

/// A table of measurements for the crate documentation's sizing advice:
/// `cargo test -p runlimit-memory --test overflow_bound -- --nocapture --ignored`.
#[test]
#[ignore = "prints a sizing table; the bound is asserted above"]
fn sizing_table() {
    for width in [1_024, 4_096, sized_width(), 16_384, 65_536] {
        for depth in [1, 2, 4] {
            let (denied, flood_admitted) = measure(width, depth);
            println!(
                "| {width} | {depth} | {:.1} | {:.2}% | {:.2}% | {flood_admitted} |",
                std::f64::consts::E * (FLOOD_KEYS + USERS * CHECKS_PER_USER) as f64 / width as f64,
                denied as f64 / USERS as f64 * 100.0,
                (-(depth as f64)).exp() * 100.0,
            );
        }
    }
}
