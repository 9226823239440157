//! A connection's TCP peer, with the subject keys derived from it kept for the
//! connection's life.
//!
//! Every request on a keep-alive HTTP/1.1 or an HTTP/2 connection comes from
//! the same peer, so a key derived from the peer's address is the same for
//! all of them. [`PeerIp`](crate::PeerIp) derives it once per connection when
//! the server hands requests a [`PeerConnection`] instead of a bare
//! `SocketAddr`; the HMAC, a few hundred cycles, then no longer runs per
//! request.

use std::{
    fmt,
    net::SocketAddr,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

use axum::{extract::connect_info::Connected, serve::IncomingStream};
use runlimit_core::SubjectKey;
use tokio::net::TcpListener;

/// How many keys one connection keeps: one per [`PeerIp`](crate::PeerIp)
/// check its requests pass. Keys past these are derived per request, as
/// without a [`PeerConnection`].
const KEPT_KEYS: usize = 4;

/// The TCP peer of a connection, as `axum`'s connect info: serve with
/// `into_make_service_with_connect_info::<PeerConnection>()` and
/// [`PeerIp`](crate::PeerIp) derives each check's key once per connection
/// instead of once per request. The keys are the same either way.
///
/// It is cloned into every request of its connection (as `ConnectInfo`
/// always is), sharing the kept keys, and dropped with the connection's last
/// request. It keeps at most four keys, each 32 bytes of HMAC output beside
/// the address the connection holds anyway; a request passing more
/// [`PeerIp`](crate::PeerIp) checks derives the rest per request. Handlers
/// read the address with `ConnectInfo<PeerConnection>` and
/// [`PeerConnection::address`]. Its `Debug` shows neither the address nor
/// the keys.
///
/// ```no_run
/// use axum::{Router, routing::get};
/// use runlimit_axum::{PeerConnection, PeerIp, RateLimitLayer};
/// use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
/// use runlimit_memory::{MemoryStore, MemoryStoreConfig};
/// use std::time::Duration;
///
/// # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
/// let hasher = KeyHasher::new(b"load a 32+ byte secret from secret storage")?;
/// let per_client = FixedWindowPolicy::new(
///     PolicyId::new("api")?,
///     ScopeId::new("client")?,
///     100,
///     Duration::from_secs(60),
/// )?;
/// let layer = RateLimitLayer::new(MemoryStore::new(MemoryStoreConfig::new(100_000)?))
///     .check(per_client, PeerIp::new(&hasher));
/// let app = Router::new().route("/", get(|| async { "hello" })).route_layer(layer);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// axum::serve(listener, app.into_make_service_with_connect_info::<PeerConnection>()).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PeerConnection {
    address: SocketAddr,
    keys: Arc<[OnceLock<(DeriverId, SubjectKey)>; KEPT_KEYS]>,
}

impl PeerConnection {
    /// A connection from `address`, keeping no keys yet. `axum::serve` makes
    /// one per accepted connection; tests without a server can provide one
    /// with `axum::extract::connect_info::MockConnectInfo`, layered outside
    /// the rate-limit layer:
    ///
    /// ```
    /// use axum::{Router, extract::connect_info::MockConnectInfo, routing::get};
    /// use runlimit_axum::{PeerConnection, PeerIp, RateLimitLayer};
    /// use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
    /// use runlimit_memory::{MemoryStore, MemoryStoreConfig};
    /// use std::{net::SocketAddr, time::Duration};
    ///
    /// let hasher = KeyHasher::new(b"load a 32+ byte secret from secret storage")?;
    /// let per_client = FixedWindowPolicy::new(
    ///     PolicyId::new("api")?,
    ///     ScopeId::new("client")?,
    ///     100,
    ///     Duration::from_secs(60),
    /// )?;
    /// let store = MemoryStore::new(MemoryStoreConfig::new(10_000)?);
    /// let app: Router = Router::new()
    ///     .route("/", get(|| async { "hello" }))
    ///     .route_layer(RateLimitLayer::new(store).check(per_client, PeerIp::new(&hasher)))
    ///     .layer(MockConnectInfo(PeerConnection::new(SocketAddr::from((
    ///         [192, 0, 2, 1],
    ///         40_000,
    ///     )))));
    /// # let _ = app;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn new(address: SocketAddr) -> Self {
        Self {
            address,
            keys: Arc::default(),
        }
    }

    /// The peer's address and port.
    #[must_use]
    pub const fn address(&self) -> SocketAddr {
        self.address
    }

    /// The key `deriver` derives for this connection: kept from an earlier
    /// request, or `derive`d now and kept while a slot is free.
    pub(crate) fn key(
        &self,
        deriver: DeriverId,
        derive: impl FnOnce() -> SubjectKey,
    ) -> SubjectKey {
        // Slots fill in order, so the first empty one ends the search.
        for slot in self.keys.iter() {
            match slot.get() {
                Some(&(kept_by, key)) if kept_by == deriver => return key,
                Some(_) => {}
                None => break,
            }
        }
        let key = derive();
        for slot in self.keys.iter() {
            // Another request of the connection (HTTP/2) may fill the slot
            // first, with its own deriver's key or with this one's.
            let &(kept_by, _) = slot.get_or_init(|| (deriver, key));
            if kept_by == deriver {
                break;
            }
        }
        key
    }
}

impl Connected<IncomingStream<'_, TcpListener>> for PeerConnection {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        Self::new(*stream.remote_addr())
    }
}

impl Connected<SocketAddr> for PeerConnection {
    fn connect_info(address: SocketAddr) -> Self {
        Self::new(address)
    }
}

impl fmt::Debug for PeerConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The address is the subject a check keys on: never shown.
        f.debug_struct("PeerConnection").finish_non_exhaustive()
    }
}

/// Names one prepared extractor's way of deriving keys (its hasher, policy
/// and subject encoding), so that a connection keeps each extractor's key
/// apart from the others'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeriverId(u64);

impl DeriverId {
    /// A name no other deriver in the process has.
    pub(crate) fn unique() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // A count: only uniqueness matters, not order with other memory.
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use std::{
        cell::Cell,
        net::{IpAddr, Ipv4Addr},
    };

    use super::*;

    fn connection() -> PeerConnection {
        PeerConnection::new(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 40_000))
    }

    fn key(byte: u8) -> SubjectKey {
        SubjectKey::from_digest([byte; 32])
    }

    #[test]
    fn a_deriver_derives_once_per_connection_across_its_requests() {
        let connection = connection();
        let deriver = DeriverId::unique();
        let derivations = Cell::new(0);
        for _ in 0..3 {
            // Each request holds its own clone, as `ConnectInfo` hands out.
            let request = connection.clone();
            let kept = request.key(deriver, || {
                derivations.set(derivations.get() + 1);
                key(1)
            });
            assert_eq!(kept, key(1));
        }
        assert_eq!(derivations.get(), 1);
        // Another connection from the same peer keeps its own.
        assert_eq!(self::connection().key(deriver, || key(2)), key(2));
    }

    #[test]
    fn derivers_keep_their_own_keys_and_those_past_the_slots_derive_each_time() {
        let connection = connection();
        let derivers: Vec<DeriverId> = (0..KEPT_KEYS + 2).map(|_| DeriverId::unique()).collect();
        let derivations = Cell::new(0);
        for _ in 0..2 {
            for (byte, &deriver) in (0u8..).zip(&derivers) {
                let kept = connection.key(deriver, || {
                    derivations.set(derivations.get() + 1);
                    key(byte)
                });
                assert_eq!(kept, key(byte));
            }
        }
        // The first KEPT_KEYS derivers derived once, the last two twice.
        assert_eq!(derivations.get(), KEPT_KEYS + 2 * 2);
    }

    #[test]
    fn debug_shows_neither_the_address_nor_the_keys() {
        let connection = connection();
        let _ = connection.key(DeriverId::unique(), || key(7));
        let shown = format!("{connection:?}");
        assert_eq!(shown, "PeerConnection { .. }");
    }
}
