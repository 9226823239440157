//! Limits on a peer and, for IPv6, on the wider networks it belongs to.
//!
//! One IPv6 host usually owns a /64, but one party often owns far more: a
//! tunnel broker or a hosting provider hands out a /48 (65,536 /64s) for free.
//! Keyed per /64 alone, such a party gets 65,536 quotas, and with each request
//! naming a fresh account it can fill a bounded store with keys of its own.
//! [`PeerLimits`] adds limits on wider prefixes, checked in the same atomic
//! batch as the peer's own: every request from a /48 also counts against the
//! /48's aggregate (and a /56's, if configured), so the /48 as a whole is held
//! to its limit however many /64s it spreads over. A single /64 never meets
//! the wider limits (they are at least its own); they bind only while many
//! children of one network are active at once.

use std::sync::Arc;

use http::request::Parts;
use runlimit_core::Policy;

use crate::extractors::{PeerIp, is_ipv6_peer};

/// Why a [`PeerLimits`] network level was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NetworkLimitError {
    /// The network's prefix is not wider than every level before it (the
    /// peer's own prefix included): a level must aggregate the ones before.
    #[error("an IPv6 network level must be wider than /{narrowest}, got /{bits}")]
    NotWider {
        /// The prefix length refused.
        bits: u8,
        /// The narrowest prefix it had to be wider than.
        narrowest: u8,
    },
    /// The prefix length was zero.
    #[error("an IPv6 network level needs a prefix of at least one bit")]
    Empty,
    /// The network's policy allows less than a level it aggregates: the
    /// narrower limit could never be reached.
    #[error("an IPv6 network level's policy must allow at least the narrower level's {narrower}, got {capacity}")]
    SmallerThanNarrower {
        /// The network policy's capacity.
        capacity: u64,
        /// The capacity of the level before it.
        narrower: u64,
    },
    /// The network's policy is one another level already uses: give each
    /// level a policy of its own (its own scope), so that responses, the
    /// request context and metrics tell the levels apart.
    #[error("each IPv6 network level needs a policy of its own")]
    SamePolicy,
}

/// A limit on the peer's address and on the wider IPv6 networks it belongs
/// to, added with [`RateLimitLayer::check_peer`](crate::RateLimitLayer::check_peer).
///
/// The peer level keys as its [`PeerIp`] does (an IPv4 /32, an IPv6 /64 by
/// default). Each network level adds a check keyed on the peer's first `bits`
/// bits under a policy of its own, for IPv6 peers only: an IPv4 peer is checked
/// at its own level alone, since IPv4 prefixes are not owned the way IPv6
/// ones are (a botnet's addresses share no prefix, and one NAT gateway
/// serves a whole network). All levels go into the request's one atomic batch:
/// when any level is spent, none is consumed, and a request refused by a
/// network level stores no new key for its peer or the account it names.
///
/// What a network level guarantees: whatever number of peers a network
/// spreads its requests over, the network as a whole is admitted at most its
/// level's policy allows (for a fixed window, `limit` per window). What it
/// costs: neighbours in a busy network share that limit, so size it for the
/// largest legitimate population one network holds (a university or a mobile
/// carrier's /48), and each network level stores one more key per active
/// network. Since a refused request stores nothing, a network flooding the
/// layer stores per window at most its widest level's limit of keys for
/// each other check of the batch (its /64s, the accounts it names), plus a
/// key per narrower network it admitted from: size the store to hold that
/// for as many flooding networks as it should absorb.
///
/// ```
/// use std::time::Duration;
///
/// use runlimit_axum::{PeerIp, PeerLimits, RateLimitLayer};
/// use runlimit_core::{FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
/// use runlimit_memory::{MemoryStore, MemoryStoreConfig};
///
/// let hasher = KeyHasher::new(b"load a 32+ byte secret from secret storage")?;
/// let login = PolicyId::new("auth.login")?;
/// let minute = Duration::from_secs(60);
/// let per_client = FixedWindowPolicy::new(login.clone(), ScopeId::new("client")?, 40, minute)?;
/// let per_site = FixedWindowPolicy::new(login.clone(), ScopeId::new("client.56")?, 200, minute)?;
/// let per_network = FixedWindowPolicy::new(login, ScopeId::new("client.48")?, 1_000, minute)?;
///
/// let peers = PeerLimits::new(per_client, PeerIp::new(&hasher))
///     .with_ipv6_network(56, per_site)?
///     .with_ipv6_network(48, per_network)?;
/// let layer = RateLimitLayer::new(MemoryStore::new(MemoryStoreConfig::new(50_000)?))
///     .check_peer(peers);
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct PeerLimits<P> {
    peer: (Arc<P>, PeerIp),
    networks: Vec<(Arc<P>, PeerIp)>,
}

impl<P: Policy> PeerLimits<P> {
    /// The peer's own limit, `per_peer`, keyed by `peer`; no network levels yet.
    #[must_use]
    pub fn new(per_peer: impl Into<Arc<P>>, peer: PeerIp) -> Self {
        Self {
            peer: (per_peer.into(), peer),
            networks: Vec::new(),
        }
    }

    /// Adds a level: every IPv6 peer's first `bits` bits, in aggregate,
    /// limited by `policy`. Levels go from narrow to wide (a /56, then a /48).
    ///
    /// # Errors
    ///
    /// [`NetworkLimitError::Empty`] for zero bits;
    /// [`NetworkLimitError::NotWider`] unless `bits` is shorter than the
    /// previous level's prefix (the peer's own: 64 by default);
    /// [`NetworkLimitError::SmallerThanNarrower`] when `policy` allows less
    /// than the previous level's; [`NetworkLimitError::SamePolicy`] when
    /// another level has the same policy. Nothing changes on an error.
    pub fn with_ipv6_network(
        mut self,
        bits: u8,
        policy: impl Into<Arc<P>>,
    ) -> Result<Self, NetworkLimitError> {
        let policy = policy.into();
        let (narrower_policy, narrower_peer) = self.networks.last().unwrap_or(&self.peer);
        let narrowest = narrower_peer.ipv6_prefix();
        if bits == 0 {
            return Err(NetworkLimitError::Empty);
        }
        if bits >= narrowest {
            return Err(NetworkLimitError::NotWider { bits, narrowest });
        }
        if policy.capacity() < narrower_policy.capacity() {
            return Err(NetworkLimitError::SmallerThanNarrower {
                capacity: policy.capacity(),
                narrower: narrower_policy.capacity(),
            });
        }
        let taken = std::iter::once(&self.peer)
            .chain(&self.networks)
            .any(|(level, _)| level.fingerprint() == policy.fingerprint());
        if taken {
            return Err(NetworkLimitError::SamePolicy);
        }
        let network = narrower_peer
            .clone()
            .with_ipv6_prefix(bits)
            .map_err(|_| NetworkLimitError::Empty)?;
        self.networks.push((policy, network));
        Ok(self)
    }

    /// The peer level, then each network level from narrow to wide.
    pub(crate) fn into_levels(self) -> (Level<P>, Vec<Level<P>>) {
        (self.peer, self.networks)
    }
}

/// One level: its policy and the extractor keying it.
pub(crate) type Level<P> = (Arc<P>, PeerIp);

/// Whether a network level applies to the request: to IPv6 peers, and to
/// requests whose peer is unknown, so that the missing address is reported
/// by the level's extractor instead of being admitted unchecked.
pub(crate) fn network_level_applies(parts: &Parts) -> bool {
    is_ipv6_peer(parts).unwrap_or(true)
}
