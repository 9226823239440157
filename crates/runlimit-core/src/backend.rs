//! What a backend says about itself: where its counters live.

use crate::limiter::Limiter;

/// Where a backend keeps a policy's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Storage {
    /// In this process's memory: each replica counts on its own, so a quota of
    /// N per replica is N × replicas for the fleet, and a restart forgets it.
    ProcessLocal,
    /// In a store every replica shares (PostgreSQL, Redis): one quota for the
    /// fleet.
    Shared,
    /// In this process's memory by design: the local gate of a tiered limiter,
    /// a coarse per-replica first line in front of a shared quota that every
    /// request it admits is also checked against. Code that requires shared
    /// quotas accepts it.
    LocalGate,
}

impl Storage {
    /// Whether every replica sharing the backend counts against one quota.
    #[must_use]
    pub const fn is_shared(self) -> bool {
        matches!(self, Self::Shared)
    }

    /// Whether a fleet that requires shared quotas may use it: shared, or a
    /// deliberate local gate in front of a shared quota.
    #[must_use]
    pub const fn serves_a_fleet(self) -> bool {
        matches!(self, Self::Shared | Self::LocalGate)
    }

    /// A stable lowercase name, suitable for logs and metric labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ProcessLocal => "process_local",
            Self::Shared => "shared",
            Self::LocalGate => "local_gate",
        }
    }
}

/// A backend that can say where it keeps each policy's counters, so code that
/// needs a fleet-wide quota can refuse a process-local store when it is built
/// (the Axum layer's `require_shared` does), rather than discover in
/// production that every replica counted alone.
///
/// A separate trait beside [`Limiter`], so application-owned limiters and test
/// fakes need not implement it.
pub trait Backend: Limiter {
    /// Where `policy`'s counters live. Most backends answer the same for
    /// every policy; a backend that routes policies to different stores (a
    /// local gate in front of a shared quota) answers per policy.
    fn storage(&self, policy: &Self::Policy) -> Storage;
}
