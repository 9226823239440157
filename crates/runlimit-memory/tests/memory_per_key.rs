//! Heap bytes per stored key, counted with a counting global allocator.
//!
//! Not a timing test: allocation counts are deterministic for a given build.

use std::{alloc::System, time::Duration};

use runlimit_core::{
    Check, FixedWindowPolicy, GcraPolicy, PolicyId, ScopeId, SlidingWindowPolicy, SubjectKey,
};
use runlimit_memory::{GcraStore, MemoryStore, MemoryStoreConfig, SlidingWindowStore};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const KEYS: u32 = 1_000_000;

fn key(n: u32) -> SubjectKey {
    let mut digest = [0u8; 32];
    for (index, chunk) in (0u32..).zip(digest.chunks_mut(4)) {
        let word = n.wrapping_mul(0x9E37_79B9).rotate_left(index * 5) ^ index;
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

/// Heap bytes per stored entry of the store `fill` builds. With several shards a
/// full shard may refuse some keys, so the divisor is the entries actually stored.
fn bytes_per_key(fill: impl FnOnce() -> (Box<dyn std::any::Any>, usize)) -> f64 {
    let region = Region::new(ALLOCATOR);
    let (store, entries) = fill();
    let change = region.change();
    drop(store);
    // Reallocation deltas are already folded into the allocated and deallocated
    // byte counts.
    let live = change.bytes_allocated as f64 - change.bytes_deallocated as f64;
    live / entries as f64
}

#[test]
fn a_million_keys_cost_at_most_100_bytes_each_and_sliding_windows_at_most_twice_that() {
    let fixed = FixedWindowPolicy::new(
        PolicyId::new("mem").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        Duration::from_secs(3_600),
    )
    .expect("valid");
    let gcra = GcraPolicy::new(
        PolicyId::new("mem").expect("valid"),
        ScopeId::new("client").expect("valid"),
        1,
        Duration::from_secs(3_600),
        10,
    )
    .expect("valid");
    let sliding = SlidingWindowPolicy::new(
        PolicyId::new("mem").expect("valid"),
        ScopeId::new("client").expect("valid"),
        10,
        Duration::from_secs(3_600),
    )
    .expect("valid");
    for shards in [1, 64] {
        let config = MemoryStoreConfig::new(KEYS as usize)
            .and_then(|config| config.with_shard_count(shards))
            .expect("valid");
        let fixed_bytes = bytes_per_key(|| {
            let store = MemoryStore::new(config);
            for n in 0..KEYS {
                store.check(&Check::new(&fixed, key(n))).expect("ok");
            }
            let entries = store.stats().entries;
            (Box::new(store), entries)
        });
        let gcra_bytes = bytes_per_key(|| {
            let store = GcraStore::new(config);
            for n in 0..KEYS {
                store.check(&Check::new(&gcra, key(n))).expect("ok");
            }
            let entries = store.stats().entries;
            (Box::new(store), entries)
        });
        let sliding_bytes = bytes_per_key(|| {
            let store = SlidingWindowStore::new(config);
            for n in 0..KEYS {
                store.check(&Check::new(&sliding, key(n))).expect("ok");
            }
            let entries = store.stats().entries;
            (Box::new(store), entries)
        });
        println!(
            "{shards} shard(s): fixed window {fixed_bytes:.1} B/key, GCRA {gcra_bytes:.1} B/key, \
             sliding window {sliding_bytes:.1} B/key"
        );
        assert!(
            fixed_bytes <= 100.0,
            "fixed window: {fixed_bytes} bytes per key"
        );
        assert!(gcra_bytes <= 100.0, "GCRA: {gcra_bytes} bytes per key");
        assert!(
            sliding_bytes <= 2.0 * fixed_bytes,
            "sliding window: {sliding_bytes} bytes per key, fixed window {fixed_bytes}"
        );
    }
}
