//! The leased comparison every shared backend's bench runs: one hot key
//! shared by four limiters, 32 tasks, against the backend's floor and its
//! unleased check, rounds alternating; then cold keys, leased and not, beside
//! an unleased control cell.

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

/// One of `COLD_KEYS` keys of the cell whose counters `n` belongs to.
fn cold_key(n: u64) -> SubjectKey {
    let cell = n >> 40;
    subject(1 + cell * COLD_KEYS + (n & ((1 << 40) - 1)).wrapping_mul(0x2545_F491) % COLD_KEYS)
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

/// How many cells have run: each starts its counters where no earlier cell
/// did, so cold-key cells never find rows another cell stored.
static CELLS: AtomicU64 = AtomicU64::new(0);

/// Operations per second of `op` on `TASKS` tasks spread over `LIMITERS`.
pub(crate) async fn rate(seconds: f64, op: &Op) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let cell = CELLS.fetch_add(1, Ordering::Relaxed);
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (stop, done, op) = (Arc::clone(&stop), Arc::clone(&done), Arc::clone(op));
            tokio::spawn(async move {
                let mut n = (cell << 40) | (task as u64 * 1_000_003);
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

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

/// One table row: the median and the range of `values`.
fn row(name: &str, values: &[f64]) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match (sorted.first(), sorted.last()) {
        (Some(low), Some(high)) => {
            println!("| {name} | {:.0} ({low:.0}–{high:.0}) |", median(values));
        }
        _ => println!("| {name} | not run |"),
    }
}

/// The cells; `BENCH_CELLS` (names separated by commas) runs only some of
/// them.
const CELLS_RUN: [&str; 6] = [
    "floor",
    "hot unleased",
    "hot leased",
    "cold unleased",
    "cold leased",
    "cold control",
];

/// Rounds and seconds per cell of the cold-key phase: `BENCH_COLD_ROUNDS`
/// (default 21) and `BENCH_COLD_SECONDS` (default 0.5).
fn cold_schedule() -> (usize, f64) {
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse::<f64>().ok())
    };
    (
        env("BENCH_COLD_ROUNDS").map_or(21, |rounds| rounds as usize),
        env("BENCH_COLD_SECONDS").unwrap_or(0.5),
    )
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
                let key = cold_key(n);
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
                let key = cold_key(n);
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
    let only = std::env::var("BENCH_CELLS").ok();
    let runs = |cell: usize| {
        only.as_deref()
            .is_none_or(|only| only.split(',').any(|name| name.trim() == CELLS_RUN[cell]))
    };
    for round in 0..rounds {
        // Alternate the order of the cells from round to round.
        let order: [usize; 3] = if round % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] };
        for cell in order.into_iter().filter(|&cell| runs(cell)) {
            match cell {
                0 => floors.push(rate(seconds, &floor).await),
                1 => plains.push(rate(seconds, &plain_hot).await),
                _ => {
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
            }
        }
        eprintln!(
            "hot round {round}: floor {:?}, unleased {:?}, leased {:?}",
            floors.last(),
            plains.last(),
            leases.last()
        );
    }
    // Cold keys insert rows, and a database's insert rate drifts over
    // seconds (checkpoints, the table's growth): short slices, many rounds,
    // and an unleased control cell measure that drift beside the ratio.
    let (cold_rounds, cold_seconds) = cold_schedule();
    let mut controls = vec![];
    for round in 0..cold_rounds {
        let order: [usize; 3] = match round % 3 {
            0 => [3, 4, 5],
            1 => [4, 5, 3],
            _ => [5, 3, 4],
        };
        for cell in order.into_iter().filter(|&cell| runs(cell)) {
            match cell {
                3 => colds.push(rate(cold_seconds, &plain_cold).await),
                4 => cold_leases.push(rate(cold_seconds, &leased_cold).await),
                _ => controls.push(rate(cold_seconds, &plain_cold).await),
            }
        }
    }
    let control_ratios: Vec<f64> = controls.iter().zip(&colds).map(|(a, c)| c / a).collect();
    let ratios: Vec<f64> = leases.iter().zip(&floors).map(|(l, f)| l / f).collect();
    let cold_ratios: Vec<f64> = cold_leases.iter().zip(&colds).map(|(l, c)| c / l).collect();
    println!(
        "{backend}: one hot key, {LIMITERS} limiters, {TASKS} tasks, median of {rounds} rounds of {seconds} s (range)"
    );
    println!("| workload | ops/s |");
    println!("|---|---|");
    row(&format!("{floor_name} (floor)"), &floors);
    row("check, unleased", &plains);
    row("check, leased", &leases);
    row("cold keys, unleased", &colds);
    row("cold keys, leased", &cold_leases);
    row("cold keys, unleased again (control)", &controls);
    println!(
        "leased / floor: {:.1}× (median of per-round ratios); round trips per admitted check: {:.4}; cold keys, time per check over the unleased check: leased {:.3}×, control {:.3}× ({cold_rounds} rounds of {cold_seconds} s); units held when demand stopped: {:.0} (median)",
        median(&ratios),
        median(&trips),
        median(&cold_ratios),
        median(&control_ratios),
        median(&held),
    );
}
