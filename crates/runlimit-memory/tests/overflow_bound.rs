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

use runlimit_core::{Check, FixedWindowPolicy, GcraPolicy, PolicyId, ScopeId, SubjectKey};
use runlimit_memory::{
    Algorithm, FixedWindow, Gcra, ManualClock, MemoryStoreConfig, OverflowConfig, Store,
};

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

fn fixed_window() -> FixedWindowPolicy {
    FixedWindowPolicy::new(
        PolicyId::new("login").expect("valid"),
        ScopeId::new("account").expect("valid"),
        LIMIT,
        Duration::from_secs(60),
    )
    .expect("valid")
}

/// The GCRA counterpart: a burst of the limit, replenished over the window.
fn gcra() -> GcraPolicy {
    GcraPolicy::new(
        PolicyId::new("login").expect("valid"),
        ScopeId::new("account").expect("valid"),
        LIMIT,
        Duration::from_secs(60),
        LIMIT,
    )
    .expect("valid")
}

/// Users with at least one check falsely denied, and flood checks admitted,
/// for fixed windows.
fn measure(width: usize, depth: usize) -> (u64, u64) {
    measure_with::<FixedWindow>(&fixed_window(), width, depth)
}

fn measure_with<A: Algorithm>(policy: &A::Policy, width: usize, depth: usize) -> (u64, u64) {
    let clock = ManualClock::new();
    let store = Store::<A>::new(
        MemoryStoreConfig::new(MAX_KEYS)
            .expect("valid")
            .with_overflow(OverflowConfig::new(width, depth).expect("valid")),
    )
    .with_clock(clock.clone());
    let mut flood_admitted = 0;
    for index in 0..FLOOD_KEYS {
        let decision = store
            .check(&Check::new(policy, subject(1, index)))
            .expect("healthy");
        flood_admitted += u64::from(decision.is_allowed());
        clock.advance(Duration::from_millis(1));
    }
    let mut denied_users = 0;
    for user in 0..USERS {
        let mut denied = false;
        for _ in 0..CHECKS_PER_USER {
            let decision = store
                .check(&Check::new(policy, subject(2, user)))
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
    // e to six decimals, in integers.
    let cells = (UNITS * 2_718_282).div_ceil((LIMIT - CHECKS_PER_USER) * 1_000_000);
    usize::try_from(cells).expect("small")
}

/// The units counted in the window: the flood's and the users'.
const UNITS: u64 = FLOOD_KEYS + USERS * CHECKS_PER_USER;

fn ratio(part: u64, whole: u64) -> f64 {
    f64::from(u32::try_from(part).expect("small")) / f64::from(u32::try_from(whole).expect("small"))
}

/// The count-min bound on the share of estimates above `e·N/width`.
fn bound(depth: usize) -> f64 {
    (-f64::from(u32::try_from(depth).expect("small"))).exp()
}

#[test]
fn false_denials_stay_within_the_count_min_bound() {
    let width = sized_width();
    for depth in [2, 4] {
        let (denied, flood_admitted) = measure(width, depth);
        let bound = bound(depth);
        let share = ratio(denied, USERS);
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

/// GCRA keeps arrival times rather than counts, but a cell's time runs ahead
/// of a key's by the replenishment of the units the keys sharing it spent,
/// so the same width bounds its false denials (with the burst as the limit).
#[test]
fn gcra_false_denials_stay_within_the_same_bound() {
    let width = sized_width();
    for depth in [2, 4] {
        let (denied, flood_admitted) = measure_with::<Gcra>(&gcra(), width, depth);
        let share = ratio(denied, USERS);
        println!(
            "GCRA width {width} depth {depth}: {denied} of {USERS} users falsely denied \
             ({:.2}%, bound {:.2}%); flood checks admitted {flood_admitted} of {FLOOD_KEYS}",
            share * 100.0,
            bound(depth) * 100.0,
        );
        assert!(share <= bound(depth), "{share} above the bound");
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
