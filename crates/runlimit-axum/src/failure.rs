//! What to do when the backend cannot decide.

use std::{error::Error, fmt, sync::Arc};

type FailOpenHook = Arc<dyn Fn(&(dyn Error + Send + Sync + 'static)) + Send + Sync>;

/// How the layer treats a backend error (as distinct from a quota denial).
///
/// The default fails closed: the request is rejected through the
/// [`RejectionMapper`](crate::RejectionMapper). Failing open trades the limit's
/// guarantee for availability; it can only be chosen with a hook that observes
/// every request admitted that way, so an outage is never silent.
#[derive(Clone, Default)]
pub struct FailureMode {
    fail_open: Option<FailOpenHook>,
}

impl FailureMode {
    /// Reject requests the backend cannot decide (the default).
    #[must_use]
    pub fn fail_closed() -> Self {
        Self { fail_open: None }
    }

    /// Admit requests the backend cannot decide, calling `observe` with the
    /// error for every one of them (log it, count it, alert on it). Admitted
    /// requests carry no [`RateLimitContext`](crate::RateLimitContext).
    #[must_use]
    pub fn fail_open(
        observe: impl Fn(&(dyn Error + Send + Sync + 'static)) + Send + Sync + 'static,
    ) -> Self {
        Self {
            fail_open: Some(Arc::new(observe)),
        }
    }

    /// Whether this mode fails open.
    #[must_use]
    pub fn is_fail_open(&self) -> bool {
        self.fail_open.is_some()
    }

    /// Returns whether to admit the request despite `error`, after observing it.
    pub(crate) fn admits_after(&self, error: &(dyn Error + Send + Sync + 'static)) -> bool {
        match &self.fail_open {
            Some(observe) => {
                // A panicking hook must not turn a fail-open into a crash.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| observe(error)));
                true
            }
            None => false,
        }
    }
}

impl fmt::Debug for FailureMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_fail_open() {
            "FailureMode::FailOpen"
        } else {
            "FailureMode::FailClosed"
        })
    }
}
