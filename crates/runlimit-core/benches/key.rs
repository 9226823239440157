//! The cost of deriving one subject key: HMAC-SHA-256 over the framed domain,
//! policy id, scope and subject (three SHA-256 compressions for the short
//! names and 18-byte subject the HTTP benchmarks use), from scratch and with
//! a hasher prepared for the policy (two compressions), and, as the floor
//! the prepared hasher is measured against, two dependent SHA-256
//! compressions alone.
//!
//! Run with `cargo bench -p runlimit-core --bench key`.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use runlimit_core::{FixedWindowPolicy, KeyHasher, MAX_LIMIT, PolicyId, ScopeId};
use sha2::block_api::compress256;

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
    // What any HMAC-SHA-256 of a short message costs from precomputed pad
    // states: the inner block, then the outer block holding its result.
    c.bench_function("two_dependent_sha256_compressions", |b| {
        b.iter(|| {
            let mut inner = black_box([0x6a09_e667_u32; 8]);
            compress256(&mut inner, &[black_box([7u8; 64])]);
            let mut block = [0u8; 64];
            for (bytes, word) in block.as_chunks_mut::<4>().0.iter_mut().zip(&inner) {
                *bytes = word.to_be_bytes();
            }
            let mut outer = black_box([0xbb67_ae85_u32; 8]);
            compress256(&mut outer, &[block]);
            outer
        });
    });
}

criterion_group!(benches, key);
criterion_main!(benches);
