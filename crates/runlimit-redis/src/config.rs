//! Validated backend configuration.

use std::time::Duration;

use runlimit_core::DEFAULT_MAX_BATCH_SIZE;

/// The longest accepted key prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 64;

/// The largest configurable batch.
pub const MAX_BATCH_SIZE: usize = 256;

/// The most checks or batches one coalesced invocation may carry.
pub const MAX_COALESCED: usize = 256;

/// The default bound on checks or batches per coalesced invocation.
pub const DEFAULT_COALESCED: usize = 32;

/// Why a [`RedisConfig`] value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The prefix was longer than [`MAX_PREFIX_LEN`] or held a byte outside
    /// printable ASCII, or a `{` or `}` (which would change cluster hash slots).
    #[error("the key prefix must be at most {MAX_PREFIX_LEN} printable ASCII bytes without braces")]
    InvalidPrefix,
    /// The operation timeout was zero or over a day.
    #[error("operation timeout {0:?} must be between 1 ms and 24 hours")]
    TimeoutOutOfRange(Duration),
    /// The maximum batch size was zero or above [`MAX_BATCH_SIZE`].
    #[error("maximum batch size {0} is outside 1..={MAX_BATCH_SIZE}")]
    BatchSizeOutOfRange(usize),
    /// The coalescing bound was zero or above [`MAX_COALESCED`].
    #[error("coalescing bound {0} is outside 1..={MAX_COALESCED}")]
    CoalescingOutOfRange(usize),
    /// The hash tag was empty, too long, or held braces or non-printable bytes.
    #[error("the hash tag must be 1 to 64 printable ASCII bytes without braces")]
    InvalidHashTag,
    /// The connect timeout or the maximum reconnection delay was zero or over
    /// a minute.
    #[error("{name} {value:?} must be between 1 ms and 60 s")]
    ConnectionSettingOutOfRange {
        /// Which setting.
        name: &'static str,
        /// The refused value.
        value: Duration,
    },
}

/// How keys map to Redis Cluster hash slots.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum KeyRouting {
    /// Every counter hashes on its subject key, the hash tag of its key (the
    /// default): load spreads over the whole cluster, single checks work for
    /// any key, and an atomic batch whose keys fall in different slots is
    /// refused with [`CheckError::CrossSlot`](crate::CheckError::CrossSlot)
    /// before anything is sent. A subject key is derived per policy id and
    /// scope, so a subject's counters under the versions of one policy share
    /// a slot: a policy's successor reads its predecessor's counter in the
    /// same script (see the crate's docs on carrying).
    #[default]
    PerSubject,
    /// Every counter carries one fixed hash tag, so every key, and so every
    /// batch, lives in one slot. Batches always work, but all rate-limit traffic
    /// lands on the single node owning that slot: a deliberate hot slot, only for
    /// deployments whose limiter traffic one node can carry.
    ///
    /// Tagging every key of a batch by one of its subjects (say, the identity
    /// of a login batch) instead would store a shared counter, such as a
    /// client limit, under a different key for each identity, silently
    /// splitting it; that is why no such routing is offered.
    /// [`PerSubject`](Self::PerSubject) tags each counter by its own subject
    /// key, which splits nothing.
    SingleSlot(String),
}

/// How [`RedisLimiter`](crate::RedisLimiter) names keys and bounds operations.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RedisConfig {
    prefix: String,
    operation_timeout: Duration,
    max_batch_size: usize,
    routing: KeyRouting,
    connect_timeout: Duration,
    max_reconnect_delay: Duration,
    max_coalesced: usize,
}

impl Default for RedisConfig {
    /// Prefix `runlimit:`, a one-second operation timeout, batches of up to 16,
    /// per-counter routing, coalescing of up to [`DEFAULT_COALESCED`]
    /// concurrent checks per invocation; for connections built by
    /// [`RedisLimiter::connect`](crate::RedisLimiter::connect), a 250 ms connect
    /// timeout and reconnection attempts at most 500 ms apart.
    fn default() -> Self {
        Self {
            prefix: "runlimit:".to_owned(),
            operation_timeout: Duration::from_secs(1),
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
            routing: KeyRouting::PerSubject,
            connect_timeout: Duration::from_millis(250),
            max_reconnect_delay: Duration::from_millis(500),
            max_coalesced: DEFAULT_COALESCED,
        }
    }
}

fn connection_setting(name: &'static str, value: Duration) -> Result<Duration, ConfigError> {
    if value < Duration::from_millis(1) || value > Duration::from_secs(60) {
        return Err(ConfigError::ConnectionSettingOutOfRange { name, value });
    }
    Ok(value)
}

fn valid_text(value: &str) -> bool {
    value
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) && b != b'{' && b != b'}')
}

impl RedisConfig {
    /// Sets the prefix every key starts with, to keep Runlimit's keys apart from
    /// the application's. Keys are `prefix` plus the hex counter key; subjects
    /// never appear in them.
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidPrefix`].
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Result<Self, ConfigError> {
        let prefix = prefix.into();
        if prefix.len() > MAX_PREFIX_LEN || !valid_text(&prefix) {
            return Err(ConfigError::InvalidPrefix);
        }
        self.prefix = prefix;
        Ok(self)
    }

    /// Bounds each operation, from sending to reply. An expired operation may
    /// still run on the server, so it is reported as possibly consumed.
    ///
    /// # Errors
    ///
    /// [`ConfigError::TimeoutOutOfRange`].
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Result<Self, ConfigError> {
        if timeout < Duration::from_millis(1) || timeout > Duration::from_secs(86_400) {
            return Err(ConfigError::TimeoutOutOfRange(timeout));
        }
        self.operation_timeout = timeout;
        Ok(self)
    }

    /// The largest atomic batch accepted.
    ///
    /// # Errors
    ///
    /// [`ConfigError::BatchSizeOutOfRange`].
    pub fn with_max_batch_size(mut self, size: usize) -> Result<Self, ConfigError> {
        if !(1..=MAX_BATCH_SIZE).contains(&size) {
            return Err(ConfigError::BatchSizeOutOfRange(size));
        }
        self.max_batch_size = size;
        Ok(self)
    }

    /// Coalesces at most `members` concurrent checks or batches into one
    /// script invocation (1 turns coalescing off).
    ///
    /// Checks issued through one limiter while an invocation of their group
    /// (the server, or on a cluster the hash slot) is in flight wait for it
    /// and are then sent together, each decided on its own, all-or-nothing
    /// within itself, with its own decision and error; a check with nothing
    /// in flight ahead of it is sent at once, alone. Under load this trades
    /// the wait for the invocation ahead (at most one invocation's time) for
    /// far less server time per check; a lone check is unaffected.
    ///
    /// # Errors
    ///
    /// [`ConfigError::CoalescingOutOfRange`] unless `1 <= members <=`
    /// [`MAX_COALESCED`].
    pub fn with_coalescing(mut self, members: usize) -> Result<Self, ConfigError> {
        if !(1..=MAX_COALESCED).contains(&members) {
            return Err(ConfigError::CoalescingOutOfRange(members));
        }
        self.max_coalesced = members;
        Ok(self)
    }

    /// Chooses how keys map to cluster slots; see [`KeyRouting`].
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidHashTag`] for a [`KeyRouting::SingleSlot`] tag that
    /// is empty, longer than 64 bytes, or not printable ASCII without braces.
    pub fn with_routing(mut self, routing: KeyRouting) -> Result<Self, ConfigError> {
        if let KeyRouting::SingleSlot(tag) = &routing
            && (tag.is_empty() || tag.len() > 64 || !valid_text(tag))
        {
            return Err(ConfigError::InvalidHashTag);
        }
        self.routing = routing;
        Ok(self)
    }

    /// Bounds each attempt to connect (the first and every reconnection) of
    /// connections built by [`RedisLimiter::connect`](crate::RedisLimiter::connect)
    /// and [`RedisLimiter::connect_cluster`](crate::RedisLimiter::connect_cluster).
    ///
    /// Admission cannot wait for a slow connect: a check arriving while the
    /// server is unreachable fails at once (nothing sent) whatever this is, so
    /// the timeout only decides how long an attempt may take on a slow or
    /// lossy network before the next one. Keep it above the network's
    /// connection set-up time, well below the operation timeout.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ConnectionSettingOutOfRange`] outside 1 ms to 60 s.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Result<Self, ConfigError> {
        self.connect_timeout = connection_setting("connect timeout", timeout)?;
        Ok(self)
    }

    /// The longest pause between two reconnection attempts. Pauses start at
    /// 25 ms and double up to this bound, so after an outage the limiter
    /// admits again at most this long (plus a connect) after the server is
    /// back. A shorter bound recovers sooner; a longer one sends fewer
    /// connection attempts (one per replica per pause) at a server that is
    /// struggling to come back.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ConnectionSettingOutOfRange`] outside 1 ms to 60 s.
    pub fn with_max_reconnect_delay(mut self, delay: Duration) -> Result<Self, ConfigError> {
        self.max_reconnect_delay = connection_setting("maximum reconnect delay", delay)?;
        Ok(self)
    }

    /// The Redis Cluster hash slot (0 to 16383) of `counter`'s key under
    /// this configuration's prefix and routing: checks whose counters share
    /// a slot can be one atomic batch on a cluster, others are refused with
    /// [`CheckError::CrossSlot`](crate::CheckError::CrossSlot). For callers
    /// that split a batch by slot.
    #[must_use]
    pub fn hash_slot(&self, counter: &runlimit_core::CounterKey) -> u16 {
        crate::keys::hash_slot(&crate::keys::redis_key(self, counter))
    }

    /// The key prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The operation timeout.
    #[must_use]
    pub fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// The largest accepted batch.
    #[must_use]
    pub fn max_batch_size(&self) -> usize {
        self.max_batch_size
    }

    /// The most checks or batches one invocation carries (1: no coalescing).
    #[must_use]
    pub fn max_coalesced(&self) -> usize {
        self.max_coalesced
    }

    /// The key routing.
    #[must_use]
    pub fn routing(&self) -> &KeyRouting {
        &self.routing
    }

    /// See [`with_connect_timeout`](Self::with_connect_timeout).
    #[must_use]
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// See [`with_max_reconnect_delay`](Self::with_max_reconnect_delay).
    #[must_use]
    pub fn max_reconnect_delay(&self) -> Duration {
        self.max_reconnect_delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_validated() {
        let config = RedisConfig::default();
        assert_eq!(config.prefix(), "runlimit:");
        assert_eq!(config.routing(), &KeyRouting::PerSubject);
        for prefix in [
            "with space",
            "brace{",
            "}",
            "tab\t",
            &"x".repeat(MAX_PREFIX_LEN + 1),
        ] {
            assert_eq!(
                config.clone().with_prefix(prefix),
                Err(ConfigError::InvalidPrefix),
                "{prefix:?}"
            );
        }
        assert!(config.clone().with_prefix("app:limits:").is_ok());
        assert_eq!(
            config.clone().with_operation_timeout(Duration::ZERO),
            Err(ConfigError::TimeoutOutOfRange(Duration::ZERO))
        );
        assert_eq!(
            config.clone().with_max_batch_size(0),
            Err(ConfigError::BatchSizeOutOfRange(0))
        );
        assert_eq!(
            config.clone().with_connect_timeout(Duration::ZERO),
            Err(ConfigError::ConnectionSettingOutOfRange {
                name: "connect timeout",
                value: Duration::ZERO
            })
        );
        assert!(
            config
                .clone()
                .with_max_reconnect_delay(Duration::from_secs(61))
                .is_err()
        );
        assert_eq!(
            config
                .clone()
                .with_max_reconnect_delay(Duration::from_millis(100))
                .map(|c| c.max_reconnect_delay()),
            Ok(Duration::from_millis(100))
        );
        for tag in ["", "a{b", "x y"] {
            assert_eq!(
                config
                    .clone()
                    .with_routing(KeyRouting::SingleSlot(tag.to_owned())),
                Err(ConfigError::InvalidHashTag)
            );
        }
    }
}
