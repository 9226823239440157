//! A run's memory follows its subjects and the stores' bounds, not the log's
//! length: counted with a counting global allocator (deterministic for a
//! build, not a timing test).

use std::alloc::System;

use runlimit_core::KeyHasher;
use runlimit_sim::{
    Format, GenerateOptions, InputSpec, PolicySet, Reader, Replay, ReplayOptions, SubjectSpec,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const POLICIES: &str = r#"
    max_keys = 2000

    [[policy]]
    algorithm = "fixed_window"
    id = "f"
    scope = "ip"
    limit = 60
    window = { secs = 60, nanos = 0 }

    [[policy]]
    algorithm = "sliding_window"
    id = "s"
    scope = "ip"
    limit = 60
    window = { secs = 60, nanos = 0 }

    [[policy]]
    algorithm = "gcra"
    id = "g"
    scope = "ip"
    quota = 60
    period = { secs = 60, nanos = 0 }
    burst_capacity = 20
"#;

/// Heap bytes a replay of `minutes` of the same users' traffic holds at its
/// end, and the lines it read.
fn held_after(minutes: u32) -> (i64, u64) {
    let mut log = Vec::new();
    let options = GenerateOptions {
        minutes,
        users: 300,
        ..GenerateOptions::default()
    };
    let lines = runlimit_sim::generate(&mut log, &options).expect("writing to a Vec");
    let set = PolicySet::from_toml(POLICIES).expect("valid policies");
    let spec = InputSpec::new(Format::Clf, SubjectSpec::client_address());

    let region = Region::new(ALLOCATOR);
    let hasher = KeyHasher::new(b"memory test secret of 32 bytes or more").expect("long");
    let mut replay = Replay::new(&set, ReplayOptions::new(hasher)).expect("valid");
    let mut reader = Reader::new(&log[..], &spec).expect("CLF needs no header");
    replay.run(&mut reader, |_| {}).expect("a valid log");
    let report = replay.report();
    assert_eq!(report.requests, lines);
    let change = region.change();
    drop((replay, reader, report));
    let held = i64::try_from(change.bytes_allocated).expect("fits")
        - i64::try_from(change.bytes_deallocated).expect("fits");
    (held, lines)
}

#[test]
fn ten_times_the_log_holds_about_the_same_memory() {
    let (short, short_lines) = held_after(12);
    let (long, long_lines) = held_after(120);
    assert!(
        long_lines > 5 * short_lines,
        "{short_lines} then {long_lines} lines"
    );
    // What may grow: one pair of counts per minute per policy for the chart
    // (108 more minutes), and the stores up to the subjects seen.
    assert!(
        long <= short + 64 * 1024,
        "{short} bytes after {short_lines} lines, {long} after {long_lines}"
    );
}
