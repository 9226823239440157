//! Which quota a request spends: its partition.

use std::{
    fmt,
    hash::{BuildHasher, Hasher, RandomState},
    sync::OnceLock,
};

use http::Request;

/// A quota a request spends, kept as a hash of what named it (an origin, a
/// token, a tenant), so the layer never holds the value itself.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Partition(u64);

/// A map's hasher for partitions: a partition is already a keyed hash, so
/// hashing it again would only cost time.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PartitionHasher(u64);

impl Hasher for PartitionHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is called (a partition hashes its one word).
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = word;
    }
}

/// The process's keys for partition hashes.
fn keys() -> &'static RandomState {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    KEYS.get_or_init(RandomState::new)
}

impl Partition {
    /// The partition named by `name`: equal names give equal partitions
    /// within this process.
    #[must_use]
    pub fn of(name: &[u8]) -> Self {
        Self(keys().hash_one(name))
    }

    /// The partition of an origin, its host in any case: without building
    /// the lowercase name.
    pub(crate) fn of_origin(scheme: &str, authority: &[u8]) -> Self {
        let mut hasher = keys().build_hasher();
        hasher.write(scheme.as_bytes());
        hasher.write(b"://");
        for byte in authority {
            hasher.write_u8(byte.to_ascii_lowercase());
        }
        Self(hasher.finish())
    }
}

/// Redacted: a partition may be derived from a secret.
impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Partition(<redacted>)")
    }
}

/// Names the partition a request spends; `None` leaves it untracked (never
/// held). Implemented for functions of the request.
pub trait PartitionKey<B>: Clone + Send + Sync + 'static {
    /// The partition `request` spends.
    fn partition(&self, request: &Request<B>) -> Option<Partition>;
}

impl<B, F> PartitionKey<B> for F
where
    F: Fn(&Request<B>) -> Option<Partition> + Clone + Send + Sync + 'static,
{
    fn partition(&self, request: &Request<B>) -> Option<Partition> {
        self(request)
    }
}

/// The default partition: the request's origin (scheme and authority of an
/// absolute URI, or the `Host` field), one quota per API host.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByOrigin;

impl<B> PartitionKey<B> for ByOrigin {
    fn partition(&self, request: &Request<B>) -> Option<Partition> {
        let uri = request.uri();
        match uri.authority() {
            Some(authority) => Some(Partition::of_origin(
                uri.scheme_str().unwrap_or(""),
                authority.as_str().as_bytes(),
            )),
            None => request
                .headers()
                .get(http::header::HOST)
                .map(|host| Partition::of_origin("", host.as_bytes())),
        }
    }
}
