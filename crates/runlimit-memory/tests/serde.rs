//! Serde support for configuration and telemetry values.
#![cfg(feature = "serde")]

use runlimit_memory::{MemoryStore, MemoryStoreConfig, MemoryStoreStats, OverflowConfig};
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

#[test]
fn an_overflow_tier_round_trips_and_is_validated_when_deserialized() {
    let config = MemoryStoreConfig::new(100)
        .expect("valid")
        .with_overflow(OverflowConfig::new(1_024, 4).expect("valid"));
    let value = serde_json::to_value(config).expect("serializes");
    assert_eq!(value["overflow"], json!({"width": 1_024, "depth": 4}));
    let back: MemoryStoreConfig = serde_json::from_value(value.clone()).expect("deserializes");
    assert_eq!(back, config);
    for invalid in [
        json!({"width": 0, "depth": 4}),
        json!({"width": 8, "depth": 9}),
    ] {
        let mut value = value.clone();
        value["overflow"] = invalid;
        assert!(serde_json::from_value::<MemoryStoreConfig>(value).is_err());
    }

    let stats = serde_json::to_value(MemoryStore::new(config).stats()).expect("serializes");
    assert_eq!(
        stats["overflow"],
        json!({"checks": 0, "admitted": 0, "refused": 0, "sketches": 0, "bytes": 0})
    );
}
