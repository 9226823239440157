//! The flood scenario, scaled down so that it runs in seconds: the README's
//! layer on a store of 1,000 keys, flooded with more than ten times that many
//! distinct keys per window, beside a steady stream of new legitimate users.
//! The network levels are scaled with the store (a /56 40, a /48 100 a
//! window), so that the keys one /48 may store fit it as the README's fit
//! 50,000.

use runlimit_demo::flood::{Attack, Flood, Newcomers, PER_CLIENT, Protection, Report};

const MAX_KEYS: usize = 1_000;
const PER_56: u64 = 40;
const PER_48: u64 = 100;

/// A /48 spread over 256 /64s (one in each of its /56s), 40 logins per /64
/// per window, each naming a fresh account: 10,496 distinct keys a window.
fn ipv6_flood(protection: Protection) -> Flood {
    Flood {
        attack: Attack::Ipv6Prefix {
            subnets: 256,
            per_subnet: 40,
        },
        max_keys: MAX_KEYS,
        shards: 16,
        overflow: (1 << 16, 4),
        per_56: PER_56,
        per_48: PER_48,
        legitimate_per_window: 100,
        newcomers: Newcomers::Mixed,
        windows: 2,
        protection,
    }
}

/// 1,000 IPv4 addresses, 10 logins each per window, each naming a fresh
/// account: 11,000 distinct keys a window.
fn ipv4_flood(protection: Protection) -> Flood {
    Flood {
        attack: Attack::Ipv4Botnet {
            addresses: 1_000,
            per_address: 10,
        },
        ..ipv6_flood(protection)
    }
}

async fn run(flood: Flood) -> Report {
    assert!(flood.attack_keys_per_window() >= 10 * MAX_KEYS as u64);
    let report = flood.run().await.expect("the scenario runs");
    // The numbers, for `--nocapture`.
    println!("{:?} {:?}: {report:?}", flood.attack, flood.protection);
    assert_eq!(
        report.legitimate.other + report.attack.other,
        0,
        "{report:?}"
    );
    assert!(report.peak_keys <= report.capacity, "{report:?}");
    report
}

#[tokio::test]
async fn unprotected_an_ipv6_48_locks_new_users_out() {
    let report = run(ipv6_flood(Protection::OFF)).await;
    // Most new users find the store full of the attacker's keys.
    assert!(report.legitimate.admitted_share() < 0.5, "{report:?}");
    assert!(report.legitimate.at_capacity > 0, "{report:?}");
}

#[tokio::test]
async fn unprotected_an_ipv4_botnet_locks_new_users_out() {
    let report = run(ipv4_flood(Protection::OFF)).await;
    assert!(report.legitimate.admitted_share() < 0.5, "{report:?}");
    assert!(report.legitimate.at_capacity > 0, "{report:?}");
}

#[tokio::test]
async fn with_network_levels_an_ipv6_48_cannot_lock_anyone_out() {
    let flood = ipv6_flood(Protection {
        escalation: true,
        overflow: false,
    });
    let report = run(flood).await;
    assert!(report.legitimate.admitted_share() >= 0.99, "{report:?}");
    // The /48 as a whole: at most PER_48 per window of its key, plus what it
    // sent before its levels escalated (a peer's limit, per span); a run of
    // `windows` windows meets at most one more window's start.
    assert!(
        report.attack.admitted <= (PER_48 + PER_CLIENT) * u64::from(flood.windows + 1),
        "{report:?}"
    );
}

#[tokio::test]
async fn with_the_overflow_tier_an_ipv4_botnet_cannot_lock_anyone_out() {
    let flood = ipv4_flood(Protection::ON);
    let report = run(flood).await;
    assert!(report.legitimate.admitted_share() >= 0.99, "{report:?}");
    assert_eq!(report.legitimate.at_capacity, 0, "{report:?}");
    // Each address as a whole: at most PER_CLIENT per window of its key.
    let Attack::Ipv4Botnet { addresses, .. } = flood.attack else {
        unreachable!("an IPv4 flood")
    };
    assert!(
        report.attack.admitted <= PER_CLIENT * u64::from(addresses) * u64::from(flood.windows + 1),
        "{report:?}"
    );
    // Memory: the table's keys and one sketch of the configured size.
    let (width, depth) = flood.overflow;
    assert_eq!(report.overflow_bytes, width * depth * 8, "{report:?}");
}

#[tokio::test]
async fn with_every_protection_on_an_ipv6_48_is_still_held_to_its_aggregate() {
    let flood = ipv6_flood(Protection::ON);
    let report = run(flood).await;
    assert!(report.legitimate.admitted_share() >= 0.99, "{report:?}");
    assert!(
        report.attack.admitted <= (PER_48 + PER_CLIENT) * u64::from(flood.windows + 1),
        "{report:?}"
    );
}

/// The production topology: the per-client limit and the network levels in
/// a memory gate, the per-account limit in a shared store behind it. Without
/// the levels, every login the /48's /64s send within their own limits
/// reaches the shared store, each naming a fresh account: a row per attacker
/// key. With them, the gate refuses the /48 past its aggregate, so the
/// shared store sees at most that many of its logins.
#[tokio::test]
async fn behind_a_tiered_gate_an_ipv6_48_cannot_write_a_row_per_key_to_the_shared_store() {
    let unprotected = ipv6_flood(Protection::OFF)
        .run_tiered()
        .await
        .expect("the scenario runs");
    println!("tiered, unprotected: {unprotected:?}");
    assert!(
        unprotected.shared_checks >= unprotected.attack.sent / 2,
        "{unprotected:?}"
    );

    let flood = ipv6_flood(Protection::ON);
    let report = flood.run_tiered().await.expect("the scenario runs");
    println!("tiered, protected: {report:?}");
    assert_eq!(
        report.legitimate.other + report.attack.other,
        0,
        "{report:?}"
    );
    assert!(report.peak_keys <= report.capacity, "{report:?}");
    assert!(report.legitimate.admitted_share() >= 0.99, "{report:?}");
    let attack_bound = (PER_48 + PER_CLIENT) * u64::from(flood.windows + 1);
    assert!(report.attack.admitted <= attack_bound, "{report:?}");
    // The shared store saw the legitimate logins and the /48's aggregate.
    assert!(
        report.shared_checks <= report.legitimate.sent + attack_bound,
        "{report:?}"
    );
}

/// A botnet of IPv4 addresses shares no prefix: each address is held to its
/// own limit, and the gate's overflow tier keeps new users served while its
/// table is full.
#[tokio::test]
async fn behind_a_tiered_gate_an_ipv4_botnet_cannot_lock_anyone_out() {
    let flood = ipv4_flood(Protection::ON);
    let report = flood.run_tiered().await.expect("the scenario runs");
    assert_eq!(
        report.legitimate.other + report.attack.other,
        0,
        "{report:?}"
    );
    assert!(report.peak_keys <= report.capacity, "{report:?}");
    assert!(report.legitimate.admitted_share() >= 0.99, "{report:?}");
    assert_eq!(report.legitimate.at_capacity, 0, "{report:?}");
}
