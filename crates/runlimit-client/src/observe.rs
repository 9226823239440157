//! What the layer tells an observer about its waits, retries and refusals.

use std::time::Duration;

use http::StatusCode;

/// Told of the layer's waits, retries and refusals, for metrics or logs.
/// Never told which partition (a partition may stand for a token); every
/// method does nothing unless implemented.
pub trait HoldObserver: Send + Sync + 'static {
    /// A request waited `waited` before it was sent: a hold, its pace, or
    /// both.
    fn on_wait(&self, waited: Duration) {
        let _ = waited;
    }

    /// A refused request is being sent again.
    fn on_retry(&self) {}

    /// A refusal (`status`, 429 or 503) is returned to the caller.
    fn on_refused(&self, status: StatusCode) {
        let _ = status;
    }
}
