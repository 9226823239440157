//! Ready-made key extractors for the common cases.
//!
//! Both hash with a [`KeyHasher`] prepared for the check's policy when the
//! check is added ([`KeyHasher::prepared_for`]), and neither ever reads
//! forwarding headers: which peers may set `X-Forwarded-For` is the
//! application's decision, made in a layer before this one.

use std::{
    fmt,
    marker::PhantomData,
    net::{IpAddr, SocketAddr},
};

use axum::extract::{ConnectInfo, connect_info::MockConnectInfo};
use http::request::Parts;
use runlimit_core::{KeyHasher, Policy, PolicyFingerprint, PreparedKeyHasher, SubjectKey};

use crate::{
    connection::{DeriverId, PeerConnection},
    extract::{KeyExtractor, MissingMetadata},
};

/// A hasher, and the same hasher prepared for the one policy it was added for.
#[derive(Clone)]
pub(crate) struct Hashing {
    hasher: KeyHasher,
    prepared: Option<Prepared>,
}

/// The hasher prepared for one policy, and the name its keys are kept under
/// on a [`PeerConnection`].
#[derive(Clone)]
struct Prepared {
    fingerprint: PolicyFingerprint,
    hasher: PreparedKeyHasher,
    deriver: DeriverId,
}

impl Hashing {
    pub(crate) fn new(hasher: &KeyHasher) -> Self {
        Self {
            hasher: hasher.clone(),
            prepared: None,
        }
    }

    pub(crate) fn prepare<P: Policy>(&mut self, policy: &P) {
        self.prepared = Some(Prepared {
            fingerprint: *policy.fingerprint(),
            hasher: self.hasher.prepared_for(policy),
            // A new name even for a clone prepared again: its policy differs.
            deriver: DeriverId::unique(),
        });
    }

    /// The preparation for `policy`, if this is the policy it was made for.
    fn prepared_for<P: Policy>(&self, policy: &P) -> Option<&Prepared> {
        self.prepared
            .as_ref()
            .filter(|prepared| prepared.fingerprint == *policy.fingerprint())
    }

    pub(crate) fn hash<P: Policy>(&self, policy: &P, subject: &[u8]) -> SubjectKey {
        match self.prepared_for(policy) {
            // The prepared hasher derives the same keys, faster, for its policy.
            Some(prepared) => prepared.hasher.hash_for(policy, subject),
            None => self.hasher.hash_for(policy, subject),
        }
    }
}

/// Why an IPv6 prefix length was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrefixError {
    /// The length was zero or above 128 bits.
    #[error("IPv6 prefix length {0} is outside 1..=128")]
    OutOfRange(u8),
}

/// Keys a check on the TCP peer's address, from axum's
/// `ConnectInfo<PeerConnection>` (serve with
/// `into_make_service_with_connect_info::<PeerConnection>()`) or
/// `ConnectInfo<SocketAddr>`, found wherever axum's `ConnectInfo` extractor
/// finds it: a `MockConnectInfo` layer outside the rate-limit layer provides
/// it as well.
///
/// With a [`PeerConnection`], each connection derives its key once and its
/// later requests reuse it; with a bare `SocketAddr`, every request derives
/// it. The keys are the same.
///
/// IPv4 peers are keyed by their /32, IPv6 peers by a prefix, /64 by default:
/// one IPv6 host usually owns a whole /64, so keying on the /128 would give a
/// caller 2<sup>64</sup> quotas. IPv4-mapped IPv6 addresses count as IPv4. The
/// subject hashed is, for reproduction in other services:
///
/// * IPv4: the byte `4` and the four address bytes;
/// * IPv6: the byte `6`, the prefix length, and the sixteen address bytes with
///   every bit past the prefix cleared.
///
/// It reads the TCP peer only: behind a reverse proxy every request comes
/// from the proxy, so establish the client address in a trusted-proxy layer
/// and key on that extension with [`FromExtension`] instead.
///
/// ```
/// use runlimit_axum::PeerIp;
/// use runlimit_core::KeyHasher;
///
/// let hasher = KeyHasher::new(b"load a 32+ byte secret from secret storage")?;
/// let per_network = PeerIp::new(&hasher).with_ipv6_prefix(56)?;
/// # let _ = per_network;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct PeerIp {
    hashing: Hashing,
    ipv6_prefix: u8,
}

impl PeerIp {
    /// Keys on the peer's /32 (IPv4) or /64 (IPv6).
    #[must_use]
    pub fn new(hasher: &KeyHasher) -> Self {
        Self {
            hashing: Hashing::new(hasher),
            ipv6_prefix: 64,
        }
    }

    /// Keys IPv6 peers on their first `bits` bits instead.
    ///
    /// # Errors
    ///
    /// [`PrefixError::OutOfRange`] unless `1 <= bits <= 128`.
    pub fn with_ipv6_prefix(mut self, bits: u8) -> Result<Self, PrefixError> {
        if !(1..=128).contains(&bits) {
            return Err(PrefixError::OutOfRange(bits));
        }
        self.ipv6_prefix = bits;
        Ok(self)
    }

    /// The IPv6 prefix length peers are keyed on.
    pub(crate) fn ipv6_prefix(&self) -> u8 {
        self.ipv6_prefix
    }

    /// The subject bytes for `address`.
    fn subject(&self, address: IpAddr) -> SmallSubject {
        match address.to_canonical() {
            IpAddr::V4(v4) => {
                let mut subject = [0; 18];
                subject[0] = 4;
                subject[1..5].copy_from_slice(&v4.octets());
                SmallSubject(subject, 5)
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.ipv6_prefix))
                    .unwrap_or(0);
                let mut subject = [0; 18];
                subject[0] = 6;
                subject[1] = self.ipv6_prefix;
                subject[2..].copy_from_slice(&(bits & mask).to_be_bytes());
                SmallSubject(subject, 18)
            }
        }
    }
}

/// A subject of at most 18 bytes, built without allocating.
struct SmallSubject([u8; 18], usize);

impl SmallSubject {
    fn as_bytes(&self) -> &[u8] {
        &self.0[..self.1]
    }
}

/// The connection information of type `T` wherever axum's own `ConnectInfo`
/// extractor finds it: the `ConnectInfo<T>` that serving with connect info
/// inserts, or else the value a `MockConnectInfo<T>` layer provides to tests
/// and to servers that accept connections themselves.
fn connect_info<T: Clone + Send + Sync + 'static>(parts: &Parts) -> Option<&T> {
    parts
        .extensions
        .get::<ConnectInfo<T>>()
        .map(|ConnectInfo(info)| info)
        .or_else(|| {
            parts
                .extensions
                .get::<MockConnectInfo<T>>()
                .map(|MockConnectInfo(info)| info)
        })
}

/// The request's peer address as [`PeerIp`] finds it, IPv4-mapped IPv6
/// addresses as IPv4; `None` without one.
pub(crate) fn peer_address(parts: &Parts) -> Option<IpAddr> {
    let address = match connect_info::<PeerConnection>(parts) {
        Some(connection) => connection.address().ip(),
        None => connect_info::<SocketAddr>(parts)?.ip(),
    };
    Some(address.to_canonical())
}

impl<P: Policy + 'static> KeyExtractor<P> for PeerIp {
    fn extract(&self, parts: &Parts, policy: &P) -> Result<SubjectKey, MissingMetadata> {
        if let Some(connection) = connect_info::<PeerConnection>(parts) {
            let subject = || self.subject(connection.address().ip());
            return Ok(match self.hashing.prepared_for(policy) {
                Some(prepared) => connection.key(prepared.deriver, || {
                    prepared.hasher.hash_for(policy, subject().as_bytes())
                }),
                None => self.hashing.hash(policy, subject().as_bytes()),
            });
        }
        let peer = connect_info::<SocketAddr>(parts).ok_or(MissingMetadata::new(
            "peer address (ConnectInfo<PeerConnection> or ConnectInfo<SocketAddr>)",
        ))?;
        Ok(self
            .hashing
            .hash(policy, self.subject(peer.ip()).as_bytes()))
    }

    fn prepare(&mut self, policy: &P) {
        self.hashing.prepare(policy);
    }
}

impl fmt::Debug for PeerIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerIp")
            .field("ipv6_prefix", &self.ipv6_prefix)
            .finish_non_exhaustive()
    }
}

/// Keys a check on a request extension of type `T` that an earlier,
/// trusted layer inserted with a value it normalized (a client address it
/// resolved behind trusted proxies, a tenant it authenticated): the subject
/// hashed is `value.as_ref()`. A request without the extension is the
/// service's own failure (500 by default), never admitted unkeyed. For
/// values the caller sends itself, [`FromHeader`](crate::FromHeader) and
/// [`BodyField`](crate::BodyField) read them directly.
///
/// The earlier layer is the application's: a middleware that establishes
/// the value and inserts it, applied outside the rate-limit layer, so that
/// it runs first. With axum, a `middleware::from_fn` added with `.layer`
/// after the rate-limit layer's `.route_layer`:
///
/// ```
/// use std::{net::{IpAddr, SocketAddr}, time::Duration};
///
/// use axum::{
///     Router,
///     extract::{ConnectInfo, Request},
///     middleware::{self, Next},
///     response::Response,
///     routing::post,
/// };
/// use runlimit_axum::{FromExtension, RateLimitLayer};
/// use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
/// use runlimit_memory::{MemoryStore, MemoryStoreConfig};
///
/// /// The client's network, resolved behind the service's own proxies.
/// #[derive(Clone)]
/// struct ClientAddress([u8; 16]);
///
/// impl AsRef<[u8]> for ClientAddress {
///     fn as_ref(&self) -> &[u8] {
///         &self.0
///     }
/// }
///
/// /// Believes `X-Forwarded-For` only from a trusted proxy (here: loopback).
/// async fn resolve_client(mut request: Request, next: Next) -> Response {
///     let peer = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(peer)| peer.ip());
///     if let Some(peer) = peer {
///         let forwarded = request
///             .headers()
///             .get("x-forwarded-for")
///             .and_then(|value| value.to_str().ok())
///             .and_then(|value| value.rsplit(',').next())
///             .and_then(|value| value.trim().parse::<IpAddr>().ok());
///         let client = forwarded.filter(|_| peer.is_loopback()).unwrap_or(peer);
///         let client = match client {
///             IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
///             // One IPv6 host usually owns a whole /64: key on that.
///             IpAddr::V6(v6) => (u128::from(v6) & !u128::from(u64::MAX)).to_be_bytes(),
///         };
///         request.extensions_mut().insert(ClientAddress(client));
///     }
///     next.run(request).await
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let hasher = KeyHasher::new(b"load a 32+ byte secret from secret storage")?;
/// let per_client = FixedWindowPolicy::new(PolicyId::new("auth.login")?, ScopeId::new("client")?, 40, Duration::from_secs(60))?;
/// let app: Router = Router::new()
///     .route("/login", post(|| async { "welcome" }))
///     .route_layer(
///         RateLimitLayer::new(MemoryStore::new(MemoryStoreConfig::new(50_000)?))
///             .check(per_client, FromExtension::<ClientAddress>::new(&hasher)),
///     )
///     // Added last, so it runs first.
///     .layer(middleware::from_fn(resolve_client));
/// # let _ = app;
/// # Ok(())
/// # }
/// ```
pub struct FromExtension<T> {
    hashing: Hashing,
    extension: PhantomData<fn() -> T>,
}

impl<T> FromExtension<T> {
    /// Keys on the `T` extension.
    #[must_use]
    pub fn new(hasher: &KeyHasher) -> Self {
        Self {
            hashing: Hashing::new(hasher),
            extension: PhantomData,
        }
    }
}

impl<T> Clone for FromExtension<T> {
    fn clone(&self) -> Self {
        Self {
            hashing: self.hashing.clone(),
            extension: PhantomData,
        }
    }
}

impl<P, T> KeyExtractor<P> for FromExtension<T>
where
    P: Policy + 'static,
    T: AsRef<[u8]> + Send + Sync + 'static,
{
    fn extract(&self, parts: &Parts, policy: &P) -> Result<SubjectKey, MissingMetadata> {
        let value = parts.extensions.get::<T>().ok_or(MissingMetadata::new(
            "the request extension a check keys on",
        ))?;
        Ok(self.hashing.hash(policy, value.as_ref()))
    }

    fn prepare(&mut self, policy: &P) {
        self.hashing.prepare(policy);
    }
}

impl<T> fmt::Debug for FromExtension<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FromExtension")
            .field("extension", &std::any::type_name::<T>())
            .finish_non_exhaustive()
    }
}
