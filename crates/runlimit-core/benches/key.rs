//! The cost of deriving one subject key: HMAC-SHA-256 over the framed domain,
//! policy id, scope and subject (three SHA-256 compressions for the short
//! names and 18-byte subject the HTTP benchmarks use), from scratch and with
//! a hasher prepared for the policy (two compressions).
//!
//! Run with `cargo bench -p runlimit-core --bench key`.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use runlimit_core::{FixedWindowPolicy, KeyHasher, MAX_LIMIT, PolicyId, ScopeId};

fn key(c: &mut Criterion) {
    let policy = FixedWindowPolicy::new(
        PolicyId::new("bench").expect("valid"),
        ScopeId::new("client").expect("valid"),
        MAX_LIMIT,
        Duration::from_secs(3_600),
    )
    .expect("valid");
    let hasher = KeyHasher::new(b"benchmark secret of at least 32 bytes").expect("valid");
    // An IPv4-mapped address and a port, as the HTTP benchmarks key their peers.
    let subject = [7u8; 18];
    let prepared = hasher.prepared_for(&policy);
    c.bench_function("hash_for_peer_address", |b| {
        b.iter(|| hasher.hash_for(black_box(&policy), black_box(&subject)));
    });
    c.bench_function("prepared_hash_for_peer_address", |b| {
        b.iter(|| prepared.hash_for(black_box(&policy), black_box(&subject)));
    });
}

criterion_group!(benches, key);
criterion_main!(benches);
