//! The leased comparison every shared backend's bench runs: one hot key
//! shared by four limiters, 32 tasks, against the backend's floor and its
//! unleased check, rounds alternating; then cold keys, leased and not.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use runlimit_core::{
    Check, FixedWindowPolicy, Grant, Limiter, MAX_LIMIT, MAX_WINDOW, PolicyId, ScopeId, SubjectKey,
};
use runlimit_memory::{LeaseConfig, Leased};

/// One operation of a task: the limiter it belongs to and a counter.
pub(crate) type Op =
    Arc<dyn Fn(usize, u64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

pub(crate) const LIMITERS: usize = 4;
pub(crate) const TASKS: usize = 32;
const COLD_KEYS: u64 = 100_000;

pub(crate) fn subject(n: u64) -> SubjectKey {
    let mut digest = [0u8; 32];
    let mut state = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    for chunk in digest.chunks_mut(8) {
        state ^= state >> 31;
        state = state.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    SubjectKey::from_digest(digest)
}

/// A limit far above any demand.
pub(crate) fn unlimited(name: &str) -> Arc<FixedWindowPolicy> {
    Arc::new(
        FixedWindowPolicy::new(
            PolicyId::new(name).expect("valid"),
            ScopeId::new("tenant").expect("valid"),
            MAX_LIMIT,
            MAX_WINDOW,
        )
        .expect("valid"),
    )
}

/// Operations per second of `op` on `TASKS` tasks spread over `LIMITERS`.
pub(crate) async fn rate(seconds: f64, op: &Op) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (stop, done, op) = (Arc::clone(&stop), Arc::clone(&done), Arc::clone(op));
            tokio::spawn(async move {
                let mut n = task as u64 * 1_000_003;
                while !stop.load(Ordering::Relaxed) {
                    op(task % LIMITERS, n).await;
                    n = n.wrapping_add(1);
                    // A local admission never waits, so a task of nothing but
                    // admissions would never give its worker to the others
                    // (a request's own I/O does that in a service).
                    if n.is_multiple_of(64) {
                        tokio::task::yield_now().await;
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    for task in tasks {
        task.await.expect("task");
    }
    done.load(Ordering::Relaxed) as f64 / elapsed
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn range(values: &[f64]) -> String {
    format!("{:.0}–{:.0}", values[0], values[values.len() - 1])
}

/// Runs the comparison and prints one table.
pub(crate) async fn compare<L>(
    backend: &str,
    floor_name: &str,
    floor: Op,
    plain: Vec<Arc<L>>,
    shared_for_leases: Vec<L>,
    rounds: usize,
    seconds: f64,
) where
    L: Grant<Policy = FixedWindowPolicy> + 'static,
{
    let hot = unlimited("bench.leased.hot");
    let cold = unlimited("bench.leased.cold");
    let config = LeaseConfig::new(2 * COLD_KEYS as usize)
        .and_then(|config| config.with_max_grant(1_000))
        .and_then(|config| config.with_remaining_share(100))
        .expect("valid");
    let leased: Vec<Arc<Leased<L>>> = shared_for_leases
        .into_iter()
        .map(|shared| Arc::new(Leased::new(shared, config)))
        .collect();
    let plain_hot: Op = {
        let (plain, hot) = (plain.clone(), Arc::clone(&hot));
        Arc::new(move |limiter, _| {
            let (limiter, hot) = (Arc::clone(&plain[limiter]), Arc::clone(&hot));
            Box::pin(async move {
                let decision = limiter.check(&Check::new(&*hot, subject(0))).await;
                assert!(decision.expect("no error").is_allowed());
            })
        })
    };
    let leased_hot: Op = {
        let (leased, hot) = (leased.clone(), Arc::clone(&hot));
        Arc::new(move |limiter, _| {
            let (limiter, hot) = (Arc::clone(&leased[limiter]), Arc::clone(&hot));
            Box::pin(async move {
                let decision = limiter.check(&Check::new(&*hot, subject(0))).await;
                assert!(decision.expect("no error").is_allowed());
            })
        })
    };
    let plain_cold: Op = {
        let (plain, cold) = (plain.clone(), Arc::clone(&cold));
        Arc::new(move |limiter, n| {
            let (limiter, cold) = (Arc::clone(&plain[limiter]), Arc::clone(&cold));
            Box::pin(async move {
                let key = subject(1 + n.wrapping_mul(0x2545_F491) % COLD_KEYS);
                let decision = limiter.check(&Check::new(&*cold, key)).await;
                assert!(decision.expect("no error").is_allowed());
            })
        })
    };
    let leased_cold: Op = {
        let (leased, cold) = (leased.clone(), Arc::clone(&cold));
        Arc::new(move |limiter, n| {
            let (limiter, cold) = (Arc::clone(&leased[limiter]), Arc::clone(&cold));
            Box::pin(async move {
                let key = subject(1 + n.wrapping_mul(0x2545_F491) % COLD_KEYS);
                let decision = limiter.check(&Check::new(&*cold, key)).await;
                assert!(decision.expect("no error").is_allowed());
            })
        })
    };
    let grants = || leased.iter().map(|l| l.stats().grants).sum::<u64>();
    let local = || leased.iter().map(|l| l.stats().local_hits).sum::<u64>();
    let (mut floors, mut plains, mut leases, mut trips, mut colds, mut cold_leases) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut held = vec![];
    for round in 0..rounds {
        // Alternate the order of the cells from round to round.
        let order: [usize; 5] = if round % 2 == 0 {
            [0, 1, 2, 3, 4]
        } else {
            [2, 1, 0, 4, 3]
        };
        for cell in order {
            match cell {
                0 => floors.push(rate(seconds, &floor).await),
                1 => plains.push(rate(seconds, &plain_hot).await),
                2 => {
                    // Start from no leases, so what is held afterwards is
                    // the hot key's alone.
                    for limiter in &leased {
                        limiter.flush().await.expect("flush");
                    }
                    let (g, l) = (grants(), local());
                    leases.push(rate(seconds, &leased_hot).await);
                    let (g, l) = (grants() - g, local() - l);
                    trips.push(g as f64 / (g + l).max(1) as f64);
                    // Demand stops mid-window: what the leases hold unspent.
                    held.push(leased.iter().map(|l| l.stats().units_held).sum::<u64>() as f64);
                    for limiter in &leased {
                        limiter.flush().await.expect("flush");
                    }
                }
                3 => colds.push(rate(seconds, &plain_cold).await),
                _ => cold_leases.push(rate(seconds, &leased_cold).await),
            }
        }
    }
    let ratios: Vec<f64> = leases.iter().zip(&floors).map(|(l, f)| l / f).collect();
    let mut ratios = ratios;
    let mut cold_ratios: Vec<f64> = cold_leases.iter().zip(&colds).map(|(l, c)| c / l).collect();
    println!(
        "{backend}: one hot key, {LIMITERS} limiters, {TASKS} tasks, median of {rounds} rounds of {seconds} s (range)"
    );
    println!("| workload | ops/s |");
    println!("|---|---|");
    println!(
        "| {floor_name} (floor) | {:.0} ({}) |",
        median(&mut floors.clone()),
        range(&{
            let mut v = floors.clone();
            v.sort_by(f64::total_cmp);
            v
        })
    );
    println!(
        "| check, unleased | {:.0} ({}) |",
        median(&mut plains.clone()),
        range(&{
            let mut v = plains.clone();
            v.sort_by(f64::total_cmp);
            v
        })
    );
    println!(
        "| check, leased | {:.0} ({}) |",
        median(&mut leases.clone()),
        range(&{
            let mut v = leases.clone();
            v.sort_by(f64::total_cmp);
            v
        })
    );
    println!(
        "| cold keys, unleased | {:.0} ({}) |",
        median(&mut colds.clone()),
        range(&{
            let mut v = colds.clone();
            v.sort_by(f64::total_cmp);
            v
        })
    );
    println!(
        "| cold keys, leased | {:.0} ({}) |",
        median(&mut cold_leases.clone()),
        range(&{
            let mut v = cold_leases.clone();
            v.sort_by(f64::total_cmp);
            v
        })
    );
    println!(
        "leased / floor: {:.1}× (median of per-round ratios); round trips per admitted check: {:.4}; cold keys leased / unleased time per check: {:.3}×; units held when demand stopped: {:.0} (median)",
        median(&mut ratios),
        median(&mut trips),
        median(&mut cold_ratios),
        median(&mut held),
    );
}
