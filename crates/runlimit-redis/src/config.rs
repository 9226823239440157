//! Validated backend configuration.

use std::time::Duration;

use runlimit_core::DEFAULT_MAX_BATCH_SIZE;

/// The longest accepted key prefix, in bytes.
pub const MAX_PREFIX_LEN: usize = 64;

/// The largest configurable batch.
pub const MAX_BATCH_SIZE: usize = 256;

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
    /// The hash tag was empty, too long, or held braces or non-printable bytes.
    #[error("the hash tag must be 1 to 64 printable ASCII bytes without braces")]
    InvalidHashTag,
}

/// How keys map to Redis Cluster hash slots.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum KeyRouting {
    /// Every counter hashes on its own key (the default): load spreads over the
    /// whole cluster, single checks work for any key, and an atomic batch whose
    /// keys fall in different slots is refused with
    /// [`CheckError::CrossSlot`](crate::CheckError::CrossSlot) before anything is
    /// sent.
    #[default]
    PerCounter,
    /// Every counter carries one fixed hash tag, so every key, and so every
    /// batch, lives in one slot. Batches always work, but all rate-limit traffic
    /// lands on the single node owning that slot: a deliberate hot slot, only for
    /// deployments whose limiter traffic one node can carry.
    ///
    /// Tagging keys by a *subject* (say, the identity of a login batch) instead
    /// would store a shared counter, such as a client limit, under a different
    /// key for each identity, silently splitting it; that is why no such routing
    /// is offered.
    SingleSlot(String),
}

/// How [`RedisLimiter`](crate::RedisLimiter) names keys and bounds operations.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RedisConfig {
    prefix: String,
    operation_timeout: Duration,
    max_batch_size: usize,
    routing: KeyRouting,
}

impl Default for RedisConfig {
    /// Prefix `runlimit:`, a one-second operation timeout, batches of up to 16,
    /// per-counter routing.
    fn default() -> Self {
        Self {
            prefix: "runlimit:".to_owned(),
            operation_timeout: Duration::from_secs(1),
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
            routing: KeyRouting::PerCounter,
        }
    }
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

    /// The key routing.
    #[must_use]
    pub fn routing(&self) -> &KeyRouting {
        &self.routing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_validated() {
        let config = RedisConfig::default();
        assert_eq!(config.prefix(), "runlimit:");
        assert_eq!(config.routing(), &KeyRouting::PerCounter);
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
