//! End-to-end replay speed: a Combined Log Format log read, parsed, keyed and
//! evaluated by three policies (fixed window, sliding window, GCRA) with the
//! report's tallies, against reading and parsing alone, in alternating
//! rounds over the same in-memory log; the median over the rounds of lines
//! per second on one thread (the simulator is single-threaded). No other tool
//! replays logs through a limiter, so the comparison is the floor: the parse.
//!
//! Run with `cargo bench -p runlimit-sim --bench replay` (`ROUNDS=N`).
#![allow(missing_docs, clippy::cast_precision_loss)]

use std::{hint::black_box, time::Instant};

use runlimit_core::KeyHasher;
use runlimit_sim::{
    Format, GenerateOptions, InputSpec, PolicySet, Reader, Replay, ReplayOptions, SubjectSpec,
};

const POLICIES: &str = r#"
    [[policy]]
    algorithm = "fixed_window"
    id = "api.fixed"
    scope = "ip"
    limit = 60
    window = { secs = 60, nanos = 0 }

    [[policy]]
    algorithm = "sliding_window"
    id = "api.sliding"
    scope = "ip"
    limit = 60
    window = { secs = 60, nanos = 0 }

    [[policy]]
    algorithm = "gcra"
    id = "api.gcra"
    scope = "ip"
    quota = 60
    period = { secs = 60, nanos = 0 }
    burst_capacity = 20
"#;

fn parse_only(log: &[u8], spec: &InputSpec) -> u64 {
    let mut reader = Reader::new(log, spec).expect("CLF needs no header");
    let mut total = 0u64;
    while let Some((_, request)) = reader.next_request().expect("reading a slice") {
        total += request.map_or(0, |request| request.cost + request.subject.len() as u64);
    }
    total
}

fn full_replay(log: &[u8], spec: &InputSpec, set: &PolicySet) -> u64 {
    let hasher = KeyHasher::new(b"benchmark secret of at least 32 bytes").expect("long");
    let mut replay = Replay::new(set, ReplayOptions::new(hasher)).expect("a valid set");
    let mut reader = Reader::new(log, spec).expect("CLF needs no header");
    replay.run(&mut reader, |_| {}).expect("a valid log");
    replay.report().rows.iter().map(|row| row.denied).sum()
}

fn median_and_range(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        println!("replay: benchmark");
        return;
    }
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|rounds| rounds.parse().ok())
        .unwrap_or(9)
        .max(1);
    let mut log = Vec::new();
    let options = GenerateOptions {
        minutes: 30,
        users: 5_000,
        ..GenerateOptions::default()
    };
    let lines = runlimit_sim::generate(&mut log, &options).expect("writing to a Vec");
    let set = PolicySet::from_toml(POLICIES).expect("valid policies");
    let spec = InputSpec::new(Format::Clf, SubjectSpec::client_address());
    println!(
        "{lines} lines ({} MiB) of `runlimit-sim generate --minutes 30 --users 5000`, {rounds} rounds",
        log.len() >> 20
    );

    let (mut parse, mut full) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let start = Instant::now();
        black_box(parse_only(&log, &spec));
        parse.push(lines as f64 / start.elapsed().as_secs_f64());
        let start = Instant::now();
        black_box(full_replay(&log, &spec, &set));
        full.push(lines as f64 / start.elapsed().as_secs_f64());
    }
    let ratios: Vec<f64> = full.iter().zip(&parse).map(|(f, p)| f / p).collect();
    for (name, values, unit) in [
        ("parse only", parse, 1e6),
        ("parse, key, three policies, report", full, 1e6),
        ("full replay / parse only", ratios, 1.0),
    ] {
        let (median, low, high) = median_and_range(values);
        let suffix = if unit == 1.0 { "×" } else { "M lines/s" };
        println!(
            "{name:<36} {:>7.3} {suffix} ({:.3}–{:.3})",
            median / unit,
            low / unit,
            high / unit
        );
    }
}
