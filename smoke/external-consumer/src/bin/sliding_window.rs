//! The sliding-window program of `runlimit_memory::SlidingWindowStore`'s docs.

use std::time::Duration;

use runlimit_core::{Check, PolicyId, ScopeId, SlidingWindowPolicy, SubjectKey};
use runlimit_memory::{MemoryStoreConfig, SlidingWindowStore};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // At most 5 password resets per recipient in any 15 minutes.
    let policy = SlidingWindowPolicy::new(
        PolicyId::new("auth.reset")?,
        ScopeId::new("recipient")?,
        5,
        Duration::from_secs(15 * 60),
    )?;
    let limiter = SlidingWindowStore::new(MemoryStoreConfig::new(50_000)?);
    let decision = limiter.check(&Check::new(&policy, SubjectKey::from_digest([7; 32])))?;
    assert_eq!(decision.remaining(), Some(4));
    Ok(())
}
