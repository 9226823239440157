//! The unhashed peer key the benchmarks measure the layer with, apart from
//! the HMAC.

use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use http::request::Parts;
use runlimit_axum::MissingMetadata;
use runlimit_core::{FixedWindowPolicy, SubjectKey};

/// A key that is the peer's address itself, unhashed, laid out as `PeerIp`'s
/// subject (IPv4: the byte 4 and the address; IPv6: 6, 128 and the address):
/// not for applications (stored keys must be unpredictable), but for measuring
/// what the layer costs apart from the HMAC, and what the HMAC costs in place.
pub(crate) fn unhashed_peer_key(
    parts: &Parts,
    _: &FixedWindowPolicy,
) -> Result<SubjectKey, MissingMetadata> {
    let ConnectInfo(peer) = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .ok_or(MissingMetadata::new("peer"))?;
    let mut digest = [0u8; 32];
    match peer.ip().to_canonical() {
        IpAddr::V4(ip) => {
            digest[0] = 4;
            digest[1..5].copy_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            digest[..2].copy_from_slice(&[6, 128]);
            digest[2..18].copy_from_slice(&ip.octets());
        }
    }
    Ok(SubjectKey::from_digest(digest))
}
