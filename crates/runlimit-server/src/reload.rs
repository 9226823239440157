//! Reloading the configuration: the configuration in use, swapped whole,
//! and a watcher of its directory.
//!
//! A request sees one [`Config`] from start to end: [`SharedConfig`] hands
//! out the current one and swaps in a new one in a single step, so a request
//! sees the old configuration or the new one, never a mix. A new
//! configuration [continues from](Config::continuing_from) the one it
//! replaces: a rule whose limit did not change keeps its counters, and one
//! whose limit changed carries every subject's state over.
//!
//! [`Reloader`] reads the directory again when asked
//! ([`reload`](Reloader::reload)) and every interval while it
//! [watches](Reloader::watch). A valid configuration replaces the current
//! one; an invalid one is refused, logged with every problem, and counted
//! (`ratelimit_service_config_load_error`); the current one stays.
//!
//! # Why polling
//!
//! The watcher reads the directory's configuration files each interval
//! (one second by default) and reloads when their names or contents
//! changed, rather than waiting for file-system notifications. Reading a
//! few small files costs little, and polling sees every way a
//! configuration changes, alike on every platform: an edit in place, a file
//! renamed over another, a Kubernetes ConfigMap update (which swaps a
//! symbolic link to a new directory, an event inotify reports on the link's
//! directory only), the directory itself replaced through a symbolic link,
//! and file systems that send no notifications at all (NFS, FUSE, some
//! container mounts). Comparing contents rather than modification times
//! also sees a rewrite within one timestamp tick.

use std::{
    fmt,
    future::Future,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::{
    config::{self, Config, ConfigError},
    metrics::Metrics,
};

/// The configuration in use: read by every request, replaced whole.
pub struct SharedConfig {
    current: ArcSwap<Config>,
    /// Serializes replacements, so each continues from the one before.
    replacing: Mutex<()>,
    generation: watch::Sender<u64>,
}

impl fmt::Debug for SharedConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedConfig")
            .field("generation", &*self.generation.borrow())
            .finish_non_exhaustive()
    }
}

impl SharedConfig {
    /// `config` in use, as generation 0.
    #[must_use]
    pub fn new(config: Config) -> Self {
        Self {
            current: ArcSwap::from_pointee(config),
            replacing: Mutex::new(()),
            generation: watch::Sender::new(0),
        }
    }

    /// The configuration in use now.
    #[must_use]
    pub fn load(&self) -> Arc<Config> {
        self.current.load_full()
    }

    /// Puts `config` in use, [continuing from](Config::continuing_from) the
    /// configuration it replaces, and returns it.
    pub fn replace(&self, config: Config) -> Arc<Config> {
        let _serialized = self.replacing.lock().unwrap_or_else(|e| e.into_inner());
        let config = Arc::new(config.continuing_from(&self.current.load()));
        self.current.store(Arc::clone(&config));
        self.generation.send_modify(|generation| *generation += 1);
        config
    }

    /// A receiver whose value, the number of replacements so far, changes
    /// with each replacement.
    #[must_use]
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }
}

/// What a [`Reloader::reload`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reload {
    /// The files are as they were at the previous load or attempt: nothing
    /// was loaded.
    Unchanged,
    /// A new configuration is in use.
    Replaced {
        /// How many domains it has.
        domains: usize,
    },
}

/// Loads a directory's configuration, and again whenever it changes.
pub struct Reloader {
    dir: PathBuf,
    config: Arc<SharedConfig>,
    metrics: Metrics,
    /// What the last load or attempt read.
    seen: Mutex<Seen>,
}

/// The outcome of the last read, so the same files are not loaded (or
/// refused, and logged) again.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Files([u8; 32]),
    ReadError(String),
}

impl fmt::Debug for Reloader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloader")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Reloader {
    /// Loads the configuration under `dir` for the first time, counting
    /// the load in `metrics`.
    ///
    /// # Errors
    ///
    /// The configuration's error, when the directory cannot be read or a
    /// file is invalid.
    pub fn start(dir: impl Into<PathBuf>, metrics: Metrics) -> Result<Self, ConfigError> {
        let dir = dir.into();
        let loaded = config::read_dir(&dir).and_then(|files| {
            let config = Config::from_files(&files)?;
            Ok((config, digest(&files)))
        });
        let (config, digest) = match loaded {
            Ok(loaded) => loaded,
            Err(error) => {
                metrics.config_loaded(false);
                return Err(error);
            }
        };
        metrics.config_loaded(true);
        log_loaded(&dir, &config);
        Ok(Self {
            dir,
            config: Arc::new(SharedConfig::new(config)),
            metrics,
            seen: Mutex::new(Seen::Files(digest)),
        })
    }

    /// The configuration in use, which reloads replace.
    #[must_use]
    pub fn config(&self) -> &Arc<SharedConfig> {
        &self.config
    }

    /// The directory it loads.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads the directory and, if its files changed since the last load
    /// or attempt, loads them: a valid configuration replaces the one in
    /// use, an invalid one is refused and the one in use stays. Either is
    /// logged and counted.
    ///
    /// # Errors
    ///
    /// The configuration's error when the directory cannot be read or a
    /// file is invalid; nothing changed.
    pub fn reload(&self) -> Result<Reload, ConfigError> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let files = match config::read_dir(&self.dir) {
            Ok(files) => files,
            Err(error) => {
                let now = Seen::ReadError(error.to_string());
                if *seen != now {
                    *seen = now;
                    self.refused(&error);
                }
                return Err(error);
            }
        };
        let now = Seen::Files(digest(&files));
        if *seen == now {
            return Ok(Reload::Unchanged);
        }
        *seen = now;
        match Config::from_files(&files) {
            Ok(config) => {
                let config = self.config.replace(config);
                self.metrics.config_loaded(true);
                log_loaded(&self.dir, &config);
                Ok(Reload::Replaced {
                    domains: config.domains().count(),
                })
            }
            Err(error) => {
                self.refused(&error);
                Err(error)
            }
        }
    }

    fn refused(&self, error: &ConfigError) {
        self.metrics.config_loaded(false);
        tracing::error!(
            dir = %self.dir.display(),
            %error,
            "configuration refused; the one in use stays"
        );
        for problem in error.problems() {
            tracing::error!(%problem, "configuration problem");
        }
    }

    /// Calls [`reload`](Self::reload) every `interval` until `shutdown`
    /// completes. Errors are logged and counted by `reload` itself.
    ///
    /// # Panics
    ///
    /// When `interval` is zero, or outside a Tokio runtime with its timer
    /// enabled.
    pub async fn watch(&self, interval: Duration, shutdown: impl Future<Output = ()>) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick completes at once; the configuration was just loaded.
        ticks.tick().await;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = ticks.tick() => {
                    // Outcomes are logged and counted where they happen.
                    let _ = self.reload();
                }
            }
        }
    }
}

/// A digest of the files' names and contents.
fn digest(files: &[config::SourceFile]) -> [u8; 32] {
    let mut digest = Sha256::new();
    for file in files {
        for part in [file.name.as_bytes(), &file.bytes] {
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part);
        }
    }
    digest.finalize().into()
}

fn log_loaded(dir: &Path, config: &Config) {
    tracing::info!(
        dir = %dir.display(),
        domains = config.domains().count(),
        warnings = config.warnings().len(),
        "configuration loaded"
    );
    for warning in config.warnings() {
        tracing::warn!(%warning, "configuration warning");
    }
}
