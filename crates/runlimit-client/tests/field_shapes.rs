//! Fifty callers against a server allowing 20 requests a second, for every
//! field shape the client reads (see `shapes`), through `HoldLayer` on the
//! fields alone and paced, in process on Tokio's paused clock: ten seconds
//! per shape in milliseconds, exactly what the server saw, the same every
//! run. `field_shapes_over_tcp` runs the same servers over loopback TCP.

mod shapes;

use std::time::Duration;

use shapes::{Mode, Shape};

/// At most one refusal per window after the first, none by a second quota,
/// and at least 90% of what the server allowed admitted: for every shape,
/// at two phases of the epoch second (windows aligned to it begin just
/// after the first request, or a quarter of a second before it).
#[tokio::test(start_paused = true)]
async fn every_shape_is_refused_at_most_once_a_window_near_the_allowed_rate() {
    let mut missed = Vec::new();
    for phase in [Duration::ZERO, Duration::from_millis(750)] {
        for mode in [Mode::Fields, Mode::Paced] {
            for shape in Shape::ALL {
                let outcome = shapes::run_in_process(shape, mode, phase, 50, 10).await;
                if !outcome.holds() {
                    missed.push(outcome);
                }
            }
        }
    }
    assert!(missed.is_empty(), "\n{}", shapes::table(&missed));
}
