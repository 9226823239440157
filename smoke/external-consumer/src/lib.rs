//! README examples, compiled as an independent consumer would write them.
//!
//! The binaries in `src/bin` hold the README's complete programs verbatim; this
//! library holds its fragments.

pub mod axum_layer;
pub mod shared_backends;

/// README "Generic backend API".
pub mod generic_backend {
    use runlimit_core::{BatchDecision, Check, Limiter};

    /// Admits a batch with any backend.
    ///
    /// # Errors
    ///
    /// The backend's error.
    pub async fn admit<L: Limiter>(
        limiter: &L,
        checks: &[Check<'_, L::Policy>],
    ) -> Result<BatchDecision, L::Error> {
        limiter.check_all(checks).await
    }
}
