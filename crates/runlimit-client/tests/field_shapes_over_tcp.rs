//! Fifty callers against a server allowing 20 requests a second, for every
//! field shape the client reads (see `shapes`), over loopback TCP in real
//! time: through hyper-util's client behind `HoldLayer` and reqwest behind
//! `HoldMiddleware`, on the fields alone and paced. After the first window
//! (where the client learns the server), at most one refusal per window and
//! at least 90% of what the server allowed admitted.
//!
//! Real sockets need real time, so each run is five windows, not ten
//! seconds: the sixteen shapes of a client and mode run at once on their
//! own ports, five seconds a test, and the tests take turns, so that no two
//! compete for the machine's cores, which would stretch every round trip
//! and with it each window's turn. In so short a run what the client pays
//! to learn a server would weigh as much as the rest, so the share admitted
//! is counted from the second window on, of the whole windows that fit
//! before the end; the `field_shapes` tests (ten seconds in process on a
//! paused clock) and the bench of the same name (ten seconds over TCP)
//! count it from the first.

mod shapes;

use std::sync::{Mutex, PoisonError};

use shapes::{Client, Mode, Outcome};

/// Held by the test running: one at a time.
static TURN: Mutex<()> = Mutex::new(());

/// Runs every shape through `client` in `mode` for five seconds, and fails
/// with the table of those that missed.
fn every_shape(client: Client, mode: Mode) {
    let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let outcomes = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(shapes::run_all(&[client], &[mode], 50, 5));
    let missed: Vec<Outcome> = outcomes
        .into_iter()
        .filter(|outcome| !outcome.holds_after_the_first_window())
        .collect();
    assert!(missed.is_empty(), "\n{}", shapes::table(&missed));
}

#[test]
fn on_the_fields_alone_through_hyper_every_shape_is_refused_at_most_once_a_window() {
    every_shape(Client::Hyper, Mode::Fields);
}

#[test]
fn paced_through_hyper_every_shape_is_refused_at_most_once_a_window() {
    every_shape(Client::Hyper, Mode::Paced);
}

#[cfg(feature = "reqwest")]
#[test]
fn on_the_fields_alone_through_reqwest_every_shape_is_refused_at_most_once_a_window() {
    every_shape(Client::Reqwest, Mode::Fields);
}

#[cfg(feature = "reqwest")]
#[test]
fn paced_through_reqwest_every_shape_is_refused_at_most_once_a_window() {
    every_shape(Client::Reqwest, Mode::Paced);
}
