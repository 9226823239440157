//! Serde support for configuration and telemetry values.
#![cfg(feature = "serde")]

use runlimit_memory::{MemoryStore, MemoryStoreConfig, MemoryStoreStats};
use serde_json::json;

#[test]
fn config_round_trips_and_deserializes_through_validation() {
    let config = MemoryStoreConfig::new(50_000)
        .and_then(|c| c.with_shard_count(64))
        .and_then(|c| c.with_cleanup_per_check(4))
        .expect("valid");
    let value = serde_json::to_value(config).expect("serializes");
    assert_eq!(
        value,
        json!({"max_keys": 50_000, "shard_count": 64, "cleanup_per_check": 4, "max_batch_size": 16})
    );
    let back: MemoryStoreConfig = serde_json::from_value(value).expect("deserializes");
    assert_eq!(back, config);

    for invalid in [
        json!({"max_keys": 0, "shard_count": 1, "cleanup_per_check": 4, "max_batch_size": 16}),
        json!({"max_keys": 4, "shard_count": 5, "cleanup_per_check": 4, "max_batch_size": 16}),
        json!({"max_keys": 4, "shard_count": 1, "cleanup_per_check": 0, "max_batch_size": 16}),
        json!({"max_keys": 4, "shard_count": 1, "cleanup_per_check": 4, "max_batch_size": 0}),
        json!({"max_keys": 4, "shard_count": 1, "cleanup_per_check": 4, "max_batch_size": 16, "x": 1}),
    ] {
        assert!(
            serde_json::from_value::<MemoryStoreConfig>(invalid.clone()).is_err(),
            "{invalid}"
        );
    }
}

#[test]
fn stats_serialize_for_telemetry() {
    let store = MemoryStore::new(
        MemoryStoreConfig::new(3)
            .and_then(|c| c.with_shard_count(2))
            .expect("valid"),
    );
    let value = serde_json::to_value(store.stats()).expect("serializes");
    assert_eq!(
        value,
        json!({"entries": 0, "capacity": 3, "shards": [
            {"index": 0, "entries": 0, "capacity": 2, "poisoned": false},
            {"index": 1, "entries": 0, "capacity": 1, "poisoned": false},
        ]})
    );
    let back: MemoryStoreStats = serde_json::from_value(value).expect("deserializes");
    assert_eq!(back, store.stats());
}
