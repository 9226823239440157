//! Limits on a peer and, for IPv6, on the wider networks it belongs to.
//!
//! One IPv6 host usually owns a /64, but one party often owns far more: a
//! tunnel broker or a hosting provider hands out a /48 (65,536 /64s) for free.
//! Keyed per /64 alone, such a party gets 65,536 quotas, and with each request
//! naming a fresh account it can fill a bounded store with keys of its own.
//! [`PeerLimits`] adds limits on wider prefixes, checked in the same atomic
//! batch as the peer's own: every request from a /48 also counts against the
//! /48's aggregate (and a /56's, if configured), so the /48 as a whole is held
//! to its limit however many /64s it spreads over.
//!
//! The levels escalate: a network is checked at a level only once it has sent
//! more than the peer's limit in the level's current and previous window,
//! as counted by a small fixed-size sketch per level (`Escalation`). A
//! network of one busy host, and every network on the normal path, costs
//! a few atomic increments and no keys; a network whose children flood is
//! checked at every level from then on.
//!
//! The bound: per span of a level, a network is admitted at most the
//! level's limit plus the requests it sent before escalating, which number
//! at most the peer's limit (counted in requests: where checks cost more
//! than one unit, by [`reserve`](crate::RateLimitLayer::reserve) or
//! weights, those requests may take up to their cost each). The sketch's
//! spans start when the layer is built and do not follow a sliding level's
//! eighths, so a sliding-window level may see up to two spans' worth of
//! unescalated requests in one of its windows; a fixed-window or GCRA
//! level, with a span equal to its window or period, sees one. The sketch
//! counts up to 2²⁴ − 1 requests a span per cell, so a peer limit above
//! that is refused when a level is added.

use std::{
    hash::BuildHasher,
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use http::request::Parts;
use runlimit_core::{Policy, PolicyKind};
use tokio::time::Instant;

use crate::extractors::{PeerIp, peer_address};

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
    #[error(
        "an IPv6 network level's policy must allow at least the narrower level's {narrower}, got {capacity}"
    )]
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
    /// The peer's limit is beyond what the escalation sketch counts in a
    /// span ([`MAX_ESCALATING_PEER_LIMIT`]): its network would never
    /// escalate.
    #[error(
        "a peer limit with IPv6 network levels must be at most {MAX_ESCALATING_PEER_LIMIT}, got {capacity}"
    )]
    PeerLimitTooLarge {
        /// The peer policy's capacity.
        capacity: u64,
    },
}

/// The largest peer limit [`PeerLimits::with_ipv6_network`] accepts: the
/// most requests a span the escalation sketch counts per cell.
pub const MAX_ESCALATING_PEER_LIMIT: u64 = COUNT_MAX as u64;

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
/// The levels escalate: a network's requests are counted per level in a
/// fixed-size, seeded sketch (64 KiB per level) that never under-counts, and
/// a network is checked at a level once it has sent more than the peer
/// policy's capacity in the level's current and previous window (its
/// period, for GCRA). Until then it adds no check and no key. The sketch
/// has 4,096 cells a row: with many more networks active per window than
/// that, unrelated networks share cells and escalate sooner, which costs
/// them the levels' checks and keys but never a quota of their own.
///
/// What a network level guarantees: whatever number of peers a network
/// spreads its requests over, the network as a whole is admitted, in any
/// window of the level, at most the level's quota for the requests checked
/// against it (for a fixed window, `limit` per window of its key) plus the
/// peer policy's capacity for the requests sent before it escalated. What it
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
        let peer_limit = self.peer.0.capacity();
        if peer_limit > MAX_ESCALATING_PEER_LIMIT {
            return Err(NetworkLimitError::PeerLimitTooLarge {
                capacity: peer_limit,
            });
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

    /// The peer level, then each network level from narrow to wide with the
    /// escalation that decides when it applies.
    pub(crate) fn into_levels(self) -> (Level<P>, Vec<(Level<P>, Escalation)>) {
        let threshold = self.peer.0.capacity();
        let networks = self
            .networks
            .into_iter()
            .map(|(policy, peer)| {
                let escalation = Escalation::new(peer.ipv6_prefix(), span_of(&*policy), threshold);
                ((policy, peer), escalation)
            })
            .collect();
        (self.peer, networks)
    }
}

/// One level: its policy and the extractor keying it.
pub(crate) type Level<P> = (Arc<P>, PeerIp);

/// The span a level's escalation counts in: its window, or its period for
/// GCRA.
fn span_of<P: Policy>(policy: &P) -> Duration {
    match policy.kind() {
        PolicyKind::FixedWindow(policy) => policy.window(),
        PolicyKind::SlidingWindow(policy) => policy.window(),
        PolicyKind::Gcra(policy) => policy.period(),
    }
}

/// Rows of an escalation sketch.
const ROWS: usize = 2;
/// Cells per row: a power of two.
const WIDTH: usize = 4_096;
/// The largest count a cell holds: it saturates there, never wraps.
const COUNT_MAX: u32 = (1 << 24) - 1;

/// When a network level applies: a count-min sketch of each network's
/// requests in epochs of the level's span, the current and the previous one.
///
/// A cell holds the low eight bits of the epoch it counts in, above a 24-bit
/// saturating count; a cell of another epoch counts nothing for this one and
/// starts over when next incremented. A network's estimate is the least,
/// over the rows, of its cells' counts in the current and the previous
/// epoch, which is never below what it sent since the previous epoch began
/// (a cell left from 256 epochs ago can only add to that), so a network that
/// has sent more than the threshold within any span is always escalated.
#[derive(Clone)]
pub(crate) struct Escalation {
    shared: Arc<Sketch>,
}

struct Sketch {
    /// `[epoch parity][row][cell]`.
    cells: Box<[AtomicU32]>,
    seeds: [u64; ROWS],
    origin: Instant,
    span_nanos: u128,
    bits: u8,
    threshold: u64,
}

impl Escalation {
    fn new(bits: u8, span: Duration, threshold: u64) -> Self {
        let random = std::collections::hash_map::RandomState::new();
        let seeds = [random.hash_one(0_u8) | 1, random.hash_one(1_u8) | 1];
        Self {
            shared: Arc::new(Sketch {
                cells: (0..2 * ROWS * WIDTH).map(|_| AtomicU32::new(0)).collect(),
                seeds,
                origin: Instant::now(),
                span_nanos: span.as_nanos().max(1),
                bits,
                threshold,
            }),
        }
    }

    /// Whether the level applies to the request: to IPv6 peers whose network
    /// has sent more than the threshold (this request counted), and to
    /// requests whose peer is unknown, so that the missing address is
    /// reported by the level's extractor instead of being admitted unchecked.
    pub(crate) fn applies(&self, parts: &Parts) -> bool {
        match peer_address(parts) {
            None => true,
            Some(IpAddr::V4(_)) => false,
            Some(IpAddr::V6(address)) => {
                let bits = u32::from(self.shared.bits);
                // The network's prefix: every bit past it cleared. `bits` is
                // below 64 (validated), so the prefix fits the high half.
                let high = u64::try_from(u128::from(address) >> 64).unwrap_or(u64::MAX);
                let network = high & u64::MAX.checked_shl(64 - bits).unwrap_or(0);
                self.shared.observe(network) > self.shared.threshold
            }
        }
    }
}

impl Sketch {
    /// Counts one request from `network`; its estimate afterwards.
    fn observe(&self, network: u64) -> u64 {
        let epoch = self.origin.elapsed().as_nanos() / self.span_nanos;
        // The low bits of epoch numbers: tags, compared only for equality.
        let low = |epoch: u128| u32::try_from(epoch & 0xff).unwrap_or(0);
        let (tag, previous_tag) = (low(epoch), low(epoch.wrapping_sub(1)));
        let parity = usize::from(epoch & 1 == 1);
        let mut estimate = u64::MAX;
        for (row, seed) in self.seeds.iter().enumerate() {
            // Multiplicative hashing of the seeded prefix: the top 12 bits.
            let cell = usize::try_from((network ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52)
                .unwrap_or(0);
            let current = &self.cells[(parity * ROWS + row) * WIDTH + cell];
            let previous = &self.cells[((parity ^ 1) * ROWS + row) * WIDTH + cell];
            let counted = increment(current, tag);
            let before = match previous.load(Ordering::Relaxed) {
                value if value >> 24 == previous_tag => value & COUNT_MAX,
                _ => 0,
            };
            estimate = estimate.min(u64::from(counted) + u64::from(before));
        }
        estimate
    }
}

/// Adds one to `cell`'s count for the epoch tagged `tag` (starting over if it
/// counted another epoch); the count afterwards.
fn increment(cell: &AtomicU32, tag: u32) -> u32 {
    let mut value = cell.load(Ordering::Relaxed);
    loop {
        let count = if value >> 24 == tag {
            value & COUNT_MAX
        } else {
            0
        };
        let next_count = (count + 1).min(COUNT_MAX);
        match cell.compare_exchange_weak(
            value,
            (tag << 24) | next_count,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return next_count,
            Err(actual) => value = actual,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Escalation;

    const SPAN: Duration = Duration::from_secs(60);

    #[tokio::test(start_paused = true)]
    async fn a_network_is_counted_over_the_current_and_previous_span() {
        let escalation = Escalation::new(48, SPAN, 40);
        let sketch = &escalation.shared;
        let network = 0x2001_0db8_0a77_0000;
        for sent in 1..=5 {
            assert_eq!(sketch.observe(network), sent);
        }
        // The next span still counts the previous one's requests.
        tokio::time::advance(SPAN).await;
        assert_eq!(sketch.observe(network), 6);
        // Two spans on, only the current one's.
        tokio::time::advance(SPAN).await;
        assert_eq!(sketch.observe(network), 2);
        tokio::time::advance(2 * SPAN).await;
        assert_eq!(sketch.observe(network), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_estimate_is_never_below_what_a_network_sent() {
        let escalation = Escalation::new(48, SPAN, 40);
        let sketch = &escalation.shared;
        // Far more networks than cells: estimates grow, never shrink below
        // each network's own count, across span boundaries too.
        let networks: Vec<u64> = (0..20_000_u64).map(|index| index << 16).collect();
        let mut sent = vec![0_u64; networks.len()];
        for round in 0..6 {
            for (index, network) in networks.iter().enumerate() {
                if (index + round) % 3 == 0 {
                    sent[index] += 1;
                    assert!(sketch.observe(*network) >= sent[index]);
                }
            }
            tokio::time::advance(SPAN / 3).await;
        }
    }
}
