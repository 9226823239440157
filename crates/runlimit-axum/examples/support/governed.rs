//! tower_governor's `GovernorLayer`, configured like the benchmarks'
//! `RateLimitLayer` so both can be measured in the same run: keyed on the TCP
//! peer's address and port, with a limit no benchmark reaches.

use std::net::SocketAddr;

use axum::{Router, extract::ConnectInfo};
use http::Request;
use tower_governor::{
    GovernorError, GovernorLayer, governor::GovernorConfigBuilder, key_extractor::KeyExtractor,
};

/// tower_governor's key: the peer, as `peer_key` keys it.
#[derive(Debug, Clone, Copy)]
struct PeerAddr;

impl KeyExtractor for PeerAddr {
    type Key = SocketAddr;

    fn extract<T>(&self, request: &Request<T>) -> Result<SocketAddr, GovernorError> {
        request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| *peer)
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

/// `router` behind tower_governor, with its `x-ratelimit-*` headers on every
/// admitted response when `headers` is set.
pub(crate) fn governed(router: Router, headers: bool) -> Router {
    // A burst of u32::MAX: every request in a benchmark is admitted.
    let mut builder = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .key_extractor(PeerAddr);
    if headers {
        let config = builder.use_headers().finish().expect("a valid quota");
        router.layer(GovernorLayer::new(config))
    } else {
        let config = builder.finish().expect("a valid quota");
        router.layer(GovernorLayer::new(config))
    }
}
