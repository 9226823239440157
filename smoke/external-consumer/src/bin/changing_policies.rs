//! README "Changing policies and rotating secrets".

use std::time::Duration;

use runlimit_core::{Check, FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
use runlimit_memory::{MemoryStore, MemoryStoreConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Load both secrets from secret storage.
    let (old_secret, new_secret) = (b"the secret until today, 32 bytes+", b"the secret from today on, 32 bytes+");
    let limiter = MemoryStore::new(MemoryStoreConfig::new(50_000)?);
    let (reset, recipient) = (PolicyId::new("auth.reset")?, ScopeId::new("recipient")?);

    let before = FixedWindowPolicy::new(reset.clone(), recipient.clone(), 5, Duration::from_secs(900))?;
    let hasher = KeyHasher::new(old_secret)?;
    for _ in 0..5 {
        let key = hasher.hash_for(&before, b"victim@example.test");
        assert!(limiter.check(&Check::new(&before, key))?.is_allowed());
    }

    // One deploy lowers the limit and rotates the secret: still denied.
    let after = FixedWindowPolicy::new(reset, recipient, 3, Duration::from_secs(900))?.continuing(&before)?;
    let hasher = KeyHasher::new(new_secret)?.with_previous_secret(old_secret)?;
    let key = hasher.hash_for(&after, b"victim@example.test");
    assert!(limiter.check(&Check::new(&after, key))?.is_denied());
    Ok(())
}
