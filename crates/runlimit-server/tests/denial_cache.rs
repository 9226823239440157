//! The service on a limiter behind a denial cache, as a shared backend
//! runs: the same answers, denied keys answered by the cache.

mod common;

use std::{sync::Arc, time::Duration};

use common::{decider, descriptor, request, store, summary};
use runlimit_memory::{DenialCache, ManualClock, MemoryStoreConfig};
use runlimit_server::proto::rate_limit_response::Code;

const RULES: &str = "
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5}
";

#[tokio::test]
async fn a_limiter_behind_a_denial_cache_answers_the_same() {
    let clock = ManualClock::new();
    let cache = Arc::new(
        DenialCache::new(MemoryStoreConfig::new(1_000).expect("valid")).with_clock(clock.clone()),
    );
    let decider = decider(cache.in_front_of(store(&clock)), RULES);
    let both = || {
        request(
            "d",
            vec![descriptor(&[("user", "u")]), descriptor(&[("ip", "i")])],
        )
    };
    for (user, ip) in [(1, 4), (0, 3)] {
        let response = decider.should_rate_limit(&both()).await.expect("decided");
        assert_eq!(response.overall_code(), Code::Ok);
        assert_eq!(summary(&response.statuses[0]), (Code::Ok, user, Some(60)));
        assert_eq!(summary(&response.statuses[1]), (Code::Ok, ip, Some(60)));
    }
    for _ in 0..3 {
        let response = decider.should_rate_limit(&both()).await.expect("decided");
        assert_eq!(response.overall_code(), Code::OverLimit);
        assert_eq!(
            summary(&response.statuses[0]),
            (Code::OverLimit, 0, Some(60))
        );
        assert_eq!(summary(&response.statuses[1]), (Code::Ok, 3, Some(60)));
    }
    assert!(cache.stats().hits >= 2, "{:?}", cache.stats());
    clock.advance(Duration::from_secs(60));
    let response = decider.should_rate_limit(&both()).await.expect("decided");
    assert_eq!(response.overall_code(), Code::Ok);
}
