//! Choosing and building the limiter the server decides on.
//!
//! [`with_backend`] builds the limiter [`BackendArgs`] name and hands it to
//! a [`WithLimiter`], generic over the limiter's type, so each backend is
//! one match arm and the server is built once per backend type:
//!
//! * `memory`: an [`AnyStore`] in this process (all three algorithms).
//!   Its quotas are this process's own: with several replicas, each
//!   counts alone.
//!
//! A backend shared by replicas goes in front of a
//! [`DenialCache`](runlimit_memory::DenialCache)
//! (`cache.in_front_of(limiter)`), so denied keys are answered without a
//! round trip, and its connection and operation timeouts stay below the
//! request budget, so that nothing waits past it.

use std::future::Future;

use runlimit_core::{AnyPolicy, Backend, Lifecycle, Limiter};
use runlimit_memory::{AnyStore, ConfigError as MemoryConfigError, MemoryStoreConfig};

/// The backends the server can decide on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
#[non_exhaustive]
pub enum BackendKind {
    /// In this process's memory.
    Memory,
}

impl BackendKind {
    /// Whether its counters live in this process only: a restart forgets
    /// them, and replicas count apart.
    #[must_use]
    pub fn is_process_local(self) -> bool {
        matches!(self, Self::Memory)
    }

    /// Its name on the command line: `memory`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Memory => "memory",
        }
    }
}

/// The backend's settings, as flags and environment variables.
#[derive(Debug, Clone, clap::Args)]
#[non_exhaustive]
pub struct BackendArgs {
    /// Where counters are kept.
    #[arg(long, env = "RUNLIMIT_SERVER_BACKEND", value_enum, default_value_t = BackendKind::Memory)]
    pub backend: BackendKind,
    /// memory: the most counters kept at once; a new counter beyond them is
    /// over its limit until others expire.
    #[arg(
        long,
        env = "RUNLIMIT_SERVER_MEMORY_MAX_KEYS",
        default_value_t = 1_000_000
    )]
    pub memory_max_keys: usize,
    /// memory: the store's shards, each behind its own lock; the counters
    /// are divided evenly among them.
    #[arg(long, env = "RUNLIMIT_SERVER_MEMORY_SHARDS", default_value_t = 16)]
    pub memory_shards: usize,
}

/// Why a backend could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The memory store's settings are invalid.
    #[error("invalid memory store settings")]
    Memory(#[source] MemoryConfigError),
}

/// What runs with the limiter [`with_backend`] built, whatever its type.
pub trait WithLimiter {
    /// What it returns.
    type Output;

    /// Runs with `limiter`.
    fn with<L>(self, limiter: L) -> impl Future<Output = Self::Output>
    where
        L: Limiter<Policy = AnyPolicy> + Lifecycle + Backend + 'static;
}

/// Builds the limiter `args` choose, accepting batches of
/// `max_descriptors` checks, and runs `user` with it.
///
/// # Errors
///
/// [`BackendError`] when the backend's settings are invalid.
pub async fn with_backend<W: WithLimiter>(
    args: &BackendArgs,
    max_descriptors: usize,
    user: W,
) -> Result<W::Output, BackendError> {
    match args.backend {
        BackendKind::Memory => {
            let store = memory(args, max_descriptors).map_err(BackendError::Memory)?;
            Ok(user.with(store).await)
        }
    }
}

/// The memory store `args` describe.
fn memory(args: &BackendArgs, max_descriptors: usize) -> Result<AnyStore, MemoryConfigError> {
    let config = MemoryStoreConfig::new(args.memory_max_keys)?
        .with_shard_count(args.memory_shards)?
        .with_max_batch_size(max_descriptors)?;
    Ok(AnyStore::new(config))
}
