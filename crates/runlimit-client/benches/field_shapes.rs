//! Fifty callers against every field shape the client reads (the servers
//! of `tests/shapes`), for ten seconds of real time over loopback TCP,
//! through hyper-util's client behind `HoldLayer` and reqwest behind
//! `HoldMiddleware`, on the fields alone and paced: the table BENCHMARKS.md
//! reports (refusals in each window after the first, admitted of what the
//! server allowed), with each token's windows as admitted/refused.
//!
//! The sixteen shapes of a client and mode run at once on their own ports;
//! clients and modes take turns. Run with
//! `cargo bench -p runlimit-client --all-features --bench field_shapes`
//! (`SECONDS=N`, `CALLERS=N`).
#![allow(missing_docs)]

#[path = "../tests/shapes/mod.rs"]
mod shapes;

use shapes::{Client, Mode};

fn main() {
    let number = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(default)
    };
    let seconds = number("SECONDS", 10);
    let callers = u8::try_from(number("CALLERS", 50)).expect("at most 255 callers");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut outcomes = Vec::new();
    for &client in Client::ALL {
        for mode in [Mode::Fields, Mode::Paced] {
            outcomes.extend(runtime.block_on(shapes::run_all(
                &[client],
                &[mode],
                callers,
                seconds,
            )));
        }
    }
    println!("{callers} callers, {seconds} s, 20 requests per 1 s window\n");
    println!("{}", shapes::table(&outcomes));
    let missed = outcomes.iter().filter(|outcome| !outcome.holds()).count();
    println!("{missed} of {} runs missed a bound", outcomes.len());
}
