//! End-to-end replay speed: a Combined Log Format log read, parsed, keyed and
//! evaluated by three policies (fixed window, sliding window, GCRA), against
//! reading and parsing alone in the same run. No other tool replays logs
//! through a limiter, so the comparison is the floor: the parse alone.
//!
//! ```text
//! cargo bench -p runlimit-sim --bench replay
//! ```
//!
//! Throughput is in log lines per second on one thread (the simulator is
//! single-threaded).

// criterion's macros generate undocumented items.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
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

fn replay(c: &mut Criterion) {
    // About 200k lines: 1,500 users for 30 minutes, the burst and the crawler.
    let mut log = Vec::new();
    let options = GenerateOptions {
        minutes: 30,
        users: 1_500,
        ..GenerateOptions::default()
    };
    let lines = runlimit_sim::generate(&mut log, &options).expect("writing to a Vec");
    let set = PolicySet::from_toml(POLICIES).expect("valid policies");
    let spec = InputSpec::new(Format::Clf, SubjectSpec::client_address());
    let secret = b"benchmark secret of at least 32 bytes";

    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Elements(lines));
    group.sample_size(20);
    group.bench_function("parse only", |b| {
        b.iter(|| {
            let mut reader = Reader::new(&log[..], &spec).expect("CLF needs no header");
            let mut total = 0u64;
            while let Some((_, request)) = reader.next_request().expect("reading a slice") {
                total += request.map_or(0, |request| request.cost);
            }
            black_box(total)
        });
    });
    group.bench_function("parse, key and three policies", |b| {
        b.iter(|| {
            let hasher = KeyHasher::new(secret).expect("a long secret");
            let mut replay = Replay::new(&set, ReplayOptions::new(hasher)).expect("valid set");
            let mut reader = Reader::new(&log[..], &spec).expect("CLF needs no header");
            replay.run(&mut reader, |_| {}).expect("a valid log");
            black_box(replay.report())
        });
    });
    group.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
