//! README "Production topology".

use std::sync::Arc;

use runlimit_memory::{DenialCache, MemoryStore, MemoryStoreConfig, Tiered};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // In production the shared tier is a PostgresLimiter or RedisLimiter.
    let shared = MemoryStore::new(MemoryStoreConfig::new(100_000)?);
    let cache = Arc::new(DenialCache::new(MemoryStoreConfig::new(100_000)?));
    let gate = MemoryStore::new(MemoryStoreConfig::new(100_000)?);
    let limiter = Tiered::new(gate, cache.in_front_of(shared));
    assert_eq!(limiter.shared().cache().stats().hits, 0);
    Ok(())
}
