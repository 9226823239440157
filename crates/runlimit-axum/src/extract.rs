//! Turning a request into subject keys: application-owned.

use std::{fmt, sync::Arc};

use http::request::Parts;
use runlimit_core::SubjectKey;

/// The request lacked the trusted metadata a key extractor needs (for example a
/// peer address extension, or an authenticated identity).
///
/// The reason is a static string chosen by the application, so it can be logged
/// without leaking request data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MissingMetadata {
    reason: &'static str,
}

impl MissingMetadata {
    /// A missing-metadata rejection with a static, non-sensitive reason.
    #[must_use]
    pub const fn new(reason: &'static str) -> Self {
        Self { reason }
    }

    /// The reason given.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        self.reason
    }
}

impl fmt::Display for MissingMetadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "missing trusted request metadata: {}", self.reason)
    }
}

impl std::error::Error for MissingMetadata {}

/// Derives the [`SubjectKey`] a policy counts a request under.
///
/// Runs synchronously on the request head, before any body is read. The layer
/// never interprets `Forwarded`, `X-Forwarded-For`, `ConnectInfo`, cookies or
/// identities itself: establishing trust and normalizing subjects is the
/// application's job, typically by reading an extension an earlier,
/// trusted-proxy-aware layer inserted, then hashing the normalized subject with
/// a [`KeyHasher`](runlimit_core::KeyHasher). An extractor for one fixed policy
/// can hold [`KeyHasher::prepared_for`](runlimit_core::KeyHasher::prepared_for)
/// that policy instead: the same keys, derived faster.
///
/// Closures `Fn(&Parts, &P) -> Result<SubjectKey, MissingMetadata>` implement it.
pub trait KeyExtractor<P>: Send + Sync + 'static {
    /// The key for `policy`, or why the request cannot be keyed.
    ///
    /// # Errors
    ///
    /// [`MissingMetadata`] when the trusted metadata is absent; the request is
    /// then rejected, never admitted unkeyed.
    fn extract(&self, parts: &Parts, policy: &P) -> Result<SubjectKey, MissingMetadata>;

    /// Called once when the extractor is added for one fixed `policy`, before
    /// any request, so it can prepare per-policy work (the ready-made
    /// extractors prepare their [`KeyHasher`](runlimit_core::KeyHasher) for
    /// it). It must still derive correct keys if later handed another policy.
    /// Does nothing by default.
    fn prepare(&mut self, policy: &P) {
        let _ = policy;
    }
}

impl<P, F> KeyExtractor<P> for F
where
    F: Fn(&Parts, &P) -> Result<SubjectKey, MissingMetadata> + Send + Sync + 'static,
{
    fn extract(&self, parts: &Parts, policy: &P) -> Result<SubjectKey, MissingMetadata> {
        self(parts, policy)
    }
}

pub(crate) type SharedExtractor<P> = Arc<dyn KeyExtractor<P>>;
