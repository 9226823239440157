//! The flood scenario at the README's sizes, protection off against on in
//! alternating rounds: for an IPv6 /48 (65,536 /64s, 40 logins each a minute,
//! each naming a fresh account) and a 50,000-address IPv4 botnet (40 logins
//! each a minute), beside 1,000 new legitimate users a minute, on a store of
//! 50,000 keys. Each round reports the legitimate users' admitted share, the
//! attacker's admitted logins, the store's peak keys and the wall time per
//! login; the medians over the rounds close the run.
//!
//! Run with `cargo bench -p runlimit-demo --bench flood` (`ROUNDS=N` for
//! other than three rounds, `WINDOWS=N` for other than one minute of flood,
//! `ATTACK=ipv6` or `ATTACK=ipv4` for one attack only).
//!
//! `PROFILE=off`, `escalation`, `overflow` or `on` runs no rounds:
//! `PROFILE_LOGINS` logins (20,000 by default) of new users with no flood,
//! from `PROFILE_PEERS` (`ipv6`, `ipv4` or `mixed`, the default), with no
//! protection, the network levels, the overflow tier or both,
//! for `valgrind --tool=callgrind`: the setup is the same either way, so
//! two profiles' difference over two login counts is the cost per login.
#![allow(missing_docs)]

use std::env;

use runlimit_demo::flood::{Attack, Flood, Newcomers, Protection, Report};

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn env_number(name: &str, default: u32) -> u32 {
    env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

fn profile(protection: &str) {
    let protection = match protection {
        "on" => Protection::ON,
        "escalation" => Protection {
            escalation: true,
            overflow: false,
        },
        "overflow" => Protection {
            escalation: false,
            overflow: true,
        },
        _ => Protection::OFF,
    };
    let newcomers = match env::var("PROFILE_PEERS").as_deref() {
        Ok("ipv6") => Newcomers::Ipv6,
        Ok("ipv4") => Newcomers::Ipv4,
        _ => Newcomers::Mixed,
    };
    let flood = Flood {
        attack: Attack::Ipv6Prefix {
            subnets: 0,
            per_subnet: 0,
        },
        legitimate_per_window: env_number("PROFILE_LOGINS", 20_000),
        newcomers,
        windows: 1,
        protection,
        ..Flood::readme_ipv6()
    };
    let report = runtime().block_on(flood.run()).expect("the scenario runs");
    println!(
        "{} logins, {} admitted",
        report.legitimate.sent, report.legitimate.admitted
    );
}

fn print(name: &str, protection: &str, report: &Report) {
    println!(
        "{name:>4} {protection:>3}: legitimate {:>6}/{:<6} admitted ({:>6.2}%), {:>6} refused at capacity; \
         attacker {:>8} of {:>8} admitted; peak keys {:>6}/{}, overflow sketch {} MiB; {:>6.0} ns per login",
        report.legitimate.admitted,
        report.legitimate.sent,
        report.legitimate.admitted_share() * 100.0,
        report.legitimate.at_capacity,
        report.attack.admitted,
        report.attack.sent,
        report.peak_keys,
        report.capacity,
        report.overflow_bytes >> 20,
        report.per_login().as_secs_f64() * 1e9,
    );
}

fn main() {
    if let Ok(protection) = env::var("PROFILE") {
        profile(&protection);
        return;
    }
    let rounds = env_number("ROUNDS", 3).max(1);
    let windows = env_number("WINDOWS", 1).max(1);
    let attacks: Vec<(&str, Flood)> = [
        ("ipv6", Flood::readme_ipv6()),
        ("ipv4", Flood::readme_ipv4()),
    ]
    .into_iter()
    .filter(|(name, _)| env::var("ATTACK").map_or(true, |only| only == *name))
    .map(|(name, flood)| (name, Flood { windows, ..flood }))
    .collect();
    let runtime = runtime();
    for (name, flood) in attacks {
        println!(
            "{name}: {} attacking logins and {} distinct attacking keys a minute, {} new users a minute, \
             max_keys {}, {windows} minute(s), {rounds} rounds",
            flood.attack.per_window(),
            flood.attack_keys_per_window(),
            flood.legitimate_per_window,
            flood.max_keys,
        );
        let mut shares = [Vec::new(), Vec::new()];
        let mut admitted = [Vec::new(), Vec::new()];
        let mut per_login = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            // Alternate which goes first, so a slow patch of the machine
            // falls on both alike.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                let (label, protection) = [("off", Protection::OFF), ("on", Protection::ON)][side];
                let report = runtime
                    .block_on(flood.with_protection(protection).run())
                    .expect("the scenario runs");
                print(name, label, &report);
                shares[side].push(report.legitimate.admitted_share() * 100.0);
                #[expect(clippy::cast_precision_loss, reason = "a count for a report")]
                admitted[side].push(report.attack.admitted as f64);
                per_login[side].push(report.per_login().as_secs_f64() * 1e9);
            }
        }
        for (side, label) in [(0, "off"), (1, "on")] {
            println!(
                "{name} {label:>3} median: legitimate admitted {:.2}%, attacker admitted {:.0}, {:.0} ns per login",
                median(&mut shares[side]),
                median(&mut admitted[side]),
                median(&mut per_login[side]),
            );
        }
    }
}
