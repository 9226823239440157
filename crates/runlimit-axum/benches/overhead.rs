//! The layer's socket-free overhead against tower_governor's, in alternating
//! rounds: the hello-world router called through `tower::ServiceExt::oneshot`
//! bare, behind `RateLimitLayer` on the memory backend with its defaults, and
//! behind tower_governor with its headers (and without, for what its headers
//! cost), plus the application's prepared HMAC key derivation alone, and
//! behind `RateLimitLayer` keyed on the unhashed peer (what the layer costs
//! apart from the HMAC), and the limited router again with its requests on
//! `PeerConnection`s, which keep each connection's key (what the layer costs
//! when the key is derived once per connection). Each round measures every
//! target (the order reversed every other round) and reports
//!
//! - Runlimit's overhead: limited − bare;
//! - what it may cost: (tower_governor with headers − bare) + one key
//!   derivation, since Runlimit's keys are HMACs and tower_governor's the raw
//!   address;
//! - the layer keyed on the unhashed peer, over bare, against tower_governor
//!   with headers over bare; and the HMAC key in place (limited − unhashed)
//!   against the key derivation alone;
//! - the layer with keys kept per connection, over bare, against
//!   tower_governor with headers over bare;
//!
//! and the median of each over the rounds.
//!
//! Run with `cargo bench -p runlimit-axum --bench overhead` (`ROUNDS=N` for
//! other than nine rounds). `PROFILE_TARGET=T` (0 bare, 1 Runlimit, 2 and 3
//! tower_governor with and without headers, 4 the key, 5 Runlimit with the
//! unhashed key, 6 Runlimit with keys kept per connection) runs `PROFILE_CALLS`
//! requests (20 000 by default) of that target alone and no rounds, for
//! `perf` or `valgrind --tool=callgrind`: the setup is the same whatever the
//! target, so two profiles' difference is the targets'.
#![allow(missing_docs)]

#[path = "../examples/support/governed.rs"]
mod governed;
#[path = "../examples/support/peer_key.rs"]
mod peer_key;
mod support;

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use support::hello::{connected_request, connections, hasher, policy, request, routers};
use tower::ServiceExt;

/// Each target runs about this long per round...
const TARGET_TIME: Duration = Duration::from_millis(400);
/// ...in this many slices, taking turns with the others, so that a slow
/// patch of this shared VM falls on every target alike.
const SLICES: u32 = 40;
/// Bare, limited, tower_governor with and without headers, the key alone,
/// limited with the unhashed key, limited with keys kept per connection.
const TARGETS: usize = 7;

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One request through `router`.
fn serve(runtime: &tokio::runtime::Runtime, router: &axum::Router, port: u16) {
    let response = runtime
        .block_on(router.clone().oneshot(request(port)))
        .expect("infallible");
    assert!(response.status().is_success());
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(9);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let [
        (_, bare),
        (_, limited),
        (_, headerless),
        (_, governor),
        (_, unhashed),
    ] = routers();
    let policy = policy();
    // The application's key derivation, prepared for the policy, alone.
    let (hasher, connections) = (hasher().prepared_for(&policy), connections());
    // Target `target` called `calls` times (from port `first` on); seconds.
    let run = |target: usize, calls: u32, first: &mut u16| {
        let started = Instant::now();
        for _ in 0..calls {
            let port = *first;
            *first = first.wrapping_add(1);
            match target {
                0 => serve(&runtime, &bare, port),
                1 => serve(&runtime, &limited, port),
                2 => serve(&runtime, &governor, port),
                3 => serve(&runtime, &headerless, port),
                5 => serve(&runtime, &unhashed, port),
                6 => {
                    let response = runtime
                        .block_on(
                            limited
                                .clone()
                                .oneshot(connected_request(&connections, port)),
                        )
                        .expect("infallible");
                    assert!(response.status().is_success());
                }
                _ => {
                    // `PeerIp`'s subject for an IPv4 peer: 4 and the address.
                    let mut subject = [4, 127, 0, 0, 0];
                    subject[4] = port.to_be_bytes()[1];
                    black_box(hasher.hash_for(&policy, black_box(&subject)));
                }
            }
        }
        started.elapsed().as_secs_f64()
    };

    let mut port = 0u16;
    // One target alone, for a profiler (see the module documentation).
    if let Some(target) = std::env::var("PROFILE_TARGET")
        .ok()
        .and_then(|target| target.parse().ok())
    {
        let calls = std::env::var("PROFILE_CALLS")
            .ok()
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(20_000);
        run(target, calls, &mut port);
        return;
    }
    // Calls per slice, from a warm-up of each target.
    let calls: Vec<u32> = (0..TARGETS)
        .map(|target| {
            let seconds = run(target, 2_000, &mut port);
            let per_slice = TARGET_TIME.as_secs_f64() / f64::from(SLICES);
            // At most a few thousand calls a slice: the cast cannot truncate.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let calls = (per_slice * 2_000.0 / seconds).clamp(1.0, 1e6) as u32;
            calls
        })
        .collect();
    let (mut ours, mut allowed, mut ratios, mut headers) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut layer_ratios, mut keys_in_place) = (Vec::new(), Vec::new());
    let (mut kept_overheads, mut kept_ratios) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let mut seconds = [0.0f64; TARGETS];
        for slice in 0..SLICES {
            let mut order: [usize; TARGETS] = std::array::from_fn(|target| target);
            if (slice + u32::try_from(round).unwrap_or(0)) % 2 == 1 {
                order.reverse();
            }
            for target in order {
                seconds[target] += run(target, calls[target], &mut port);
            }
        }
        let times: Vec<f64> = (0..TARGETS)
            .map(|target| seconds[target] * 1e9 / (f64::from(calls[target]) * f64::from(SLICES)))
            .collect();
        let (bare, limited, governor, headerless, key, unhashed, kept) = (
            times[0], times[1], times[2], times[3], times[4], times[5], times[6],
        );
        let (overhead, budget) = (limited - bare, governor - bare + key);
        println!(
            "round {round}: bare {bare:.0} ns, limited {limited:.0} ns, tower_governor with headers \
             {governor:.0} ns (without {headerless:.0} ns), key {key:.0} ns: overhead \
             {overhead:.0} ns against {:.0} + {key:.0} = {budget:.0} ns ({:.2}x); unhashed key \
             {unhashed:.0} ns: layer without the HMAC {:.0} ns ({:.2}x tower_governor with \
             headers), the HMAC in place {:.0} ns; keys kept per connection {kept:.0} ns: \
             overhead {:.0} ns ({:.2}x tower_governor with headers')",
            governor - bare,
            overhead / budget,
            unhashed - bare,
            (unhashed - bare) / (governor - bare),
            limited - unhashed,
            kept - bare,
            (kept - bare) / (governor - bare),
        );
        kept_overheads.push(kept - bare);
        kept_ratios.push((kept - bare) / (governor - bare));
        layer_ratios.push((unhashed - bare) / (governor - bare));
        keys_in_place.push(limited - unhashed);
        headers.push(governor - headerless);
        ours.push(overhead);
        allowed.push(budget);
        ratios.push(overhead / budget);
    }
    println!(
        "median over {rounds} rounds: overhead {:.0} ns, tower_governor with headers' plus the key \
         {:.0} ns, ratio {:.2}x (tower_governor's headers alone: {:.0} ns); the layer without \
         the HMAC {:.2}x tower_governor with headers; the HMAC in place {:.0} ns; with keys kept \
         per connection: overhead {:.0} ns, {:.2}x tower_governor with headers'",
        median(&mut ours),
        median(&mut allowed),
        median(&mut ratios),
        median(&mut headers),
        median(&mut layer_ratios),
        median(&mut keys_in_place),
        median(&mut kept_overheads),
        median(&mut kept_ratios),
    );
}
