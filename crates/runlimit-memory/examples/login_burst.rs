//! A simulated credential-stuffing burst against a login form, admitted by a
//! client limit and an identity limit checked as one atomic batch.
//!
//! Run with `cargo run -p runlimit-memory --example login_burst`.

use std::{collections::BTreeMap, error::Error, time::Duration};

use runlimit_core::{BatchDecision, Check, FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};

fn main() -> Result<(), Box<dyn Error>> {
    let client_policy = FixedWindowPolicy::new(
        PolicyId::new("auth.login")?,
        ScopeId::new("client")?,
        40,
        Duration::from_secs(60),
    )?;
    let identity_policy = FixedWindowPolicy::new(
        PolicyId::new("auth.login")?,
        ScopeId::new("identity")?,
        8,
        Duration::from_secs(60),
    )?;
    // A real service loads this from secret storage; the demo uses a fixed one.
    let hasher = KeyHasher::new(b"demo secret: replace with 32+ random bytes")?;
    let limiter = MemoryStore::new(MemoryStoreConfig::new(50_000)?.with_shard_count(16)?);

    // Three attacking networks spray twenty victim accounts (with varying
    // capitalization); one legitimate user logs in a few times in between.
    let attackers = ["198.51.100.7", "203.0.113.9", "192.0.2.44"];
    let victims: Vec<String> = (1..=20)
        .map(|n| format!("Victim{n}@Example.test"))
        .collect();
    let mut attempts: Vec<(&str, &str, bool)> = Vec::new();
    for round in 0..60 {
        for (index, network) in attackers.iter().enumerate() {
            let victim = &victims[(round + index) % victims.len()];
            attempts.push((network, victim, true));
        }
        // A fourth network targets one account, which its identity limit protects
        // even though that network stays under its client limit.
        if round % 5 == 0 {
            attempts.push(("198.51.100.99", "Alice@Example.test", true));
        }
        if round % 20 == 0 {
            attempts.push(("192.0.2.200", "frank@example.test", false));
        }
    }

    let mut by_reason: BTreeMap<String, usize> = BTreeMap::new();
    let (mut allowed, mut denied, mut legitimate_allowed) = (0, 0, 0);
    for (network, identity, attacker) in &attempts {
        // Normalization (here: the address and the lowercased e-mail) belongs to
        // the application; only HMAC-derived keys reach the store.
        let client = hasher.hash_for(
            &client_policy,
            format!("client-network:{network}").as_bytes(),
        );
        let account = hasher.hash_for(&identity_policy, identity.to_lowercase().as_bytes());
        let checks = [
            Check::new(&client_policy, client),
            Check::new(&identity_policy, account),
        ];
        match limiter.check_all(&checks)? {
            BatchDecision::Allowed(_) => {
                allowed += 1;
                legitimate_allowed += usize::from(!attacker);
            }
            BatchDecision::Denied { index, denial } => {
                denied += 1;
                let scope = checks[index].policy().scope();
                let retry = denial
                    .retry_after_seconds()
                    .map_or("?".into(), |s| s.to_string());
                *by_reason
                    .entry(format!("{scope} limit (retry after {retry} s)"))
                    .or_default() += 1;
            }
            other => return Err(format!("unexpected batch decision: {other:?}").into()),
        }
    }

    println!("Runlimit demo: credential-stuffing burst against /login (memory backend)");
    println!("  policies: auth.login/client 40 per 60 s, auth.login/identity 8 per 60 s");
    println!("  requests: {}", attempts.len());
    println!("  allowed:  {allowed} (legitimate user: {legitimate_allowed} of 3)");
    println!("  denied:   {denied}");
    for (reason, count) in &by_reason {
        println!("    {count:>3} by the {reason}");
    }
    let stats = limiter.stats();
    println!(
        "  stored keys: {} of {} (smallest shard headroom {})",
        stats.entries,
        stats.capacity,
        stats.min_shard_headroom()
    );
    Ok(())
}
