//! Runlimit's documented examples, compiled as an independent consumer would
//! write them.
//!
//! The binaries in `src/bin` hold complete programs: the README's
//! (`memory_backend`, `topology`) verbatim, the README's layer example served
//! over TCP (`axum_layer`) and its testing section's test (`testing_handlers`),
//! and the GCRA and sliding-window programs of the memory crate's docs. This
//! library holds the README's fragments and the patterns users write around
//! them.

pub mod axum_layer;
pub mod closure_extractors;
pub mod shared_backends;

/// Code generic over the backend (README "A first admission").
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
