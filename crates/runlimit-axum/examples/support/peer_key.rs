//! The key extractors the benchmarks use: the TCP peer, as a directly reached
//! service would key its clients, and the same peer unhashed, to measure the
//! layer apart from the HMAC.

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use http::request::Parts;
use runlimit_axum::MissingMetadata;
use runlimit_core::{FixedWindowPolicy, PreparedKeyHasher, SubjectKey};

/// The peer's address (IPv4 mapped into the IPv6 layout) and port, as 18
/// bytes.
#[inline]
fn peer_subject(parts: &Parts) -> Result<[u8; 18], MissingMetadata> {
    let ConnectInfo(peer) = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .ok_or(MissingMetadata::new("peer"))?;
    let mut subject = [0u8; 18];
    match peer.ip() {
        IpAddr::V4(ip) => subject[12..16].copy_from_slice(&ip.octets()),
        IpAddr::V6(ip) => subject[..16].copy_from_slice(&ip.octets()),
    }
    subject[16..].copy_from_slice(&peer.port().to_be_bytes());
    Ok(subject)
}

/// Keys on the peer's address and port without formatting them as text, with a
/// hasher prepared for the layer's one policy.
pub(crate) fn peer_key(
    hasher: PreparedKeyHasher,
) -> impl Fn(&Parts, &FixedWindowPolicy) -> Result<SubjectKey, MissingMetadata> + Send + Sync + 'static
{
    move |parts, policy| Ok(hasher.hash_for(policy, &peer_subject(parts)?))
}

/// A key that is the peer's address and port themselves, unhashed: not for
/// applications (stored keys must be unpredictable), but for measuring what
/// the layer costs apart from the HMAC, and what the HMAC costs in place.
pub(crate) fn unhashed_peer_key(
    parts: &Parts,
    _: &FixedWindowPolicy,
) -> Result<SubjectKey, MissingMetadata> {
    let mut digest = [0u8; 32];
    digest[..18].copy_from_slice(&peer_subject(parts)?);
    Ok(SubjectKey::from_digest(digest))
}
