//! tower_governor's `GovernorLayer`, configured like the benchmarks'
//! `RateLimitLayer` so both can be measured in the same run: keyed on the TCP
//! peer's address by its default key extractor (as `PeerIp` keys Runlimit's
//! checks), with a limit no benchmark reaches.

use axum::Router;
use tower_governor::{
    GovernorLayer, governor::GovernorConfigBuilder, key_extractor::PeerIpKeyExtractor,
};

/// `router` behind tower_governor, with its `x-ratelimit-*` headers on every
/// admitted response when `headers` is set.
pub(crate) fn governed(router: Router, headers: bool) -> Router {
    // A burst of u32::MAX: every request in a benchmark is admitted.
    let mut builder = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(u32::MAX)
        .key_extractor(PeerIpKeyExtractor);
    if headers {
        let config = builder.use_headers().finish().expect("a valid quota");
        router.layer(GovernorLayer::new(config))
    } else {
        let config = builder.finish().expect("a valid quota");
        router.layer(GovernorLayer::new(config))
    }
}
