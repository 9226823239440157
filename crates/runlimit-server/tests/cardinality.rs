//! Metrics are labelled by rule, never by value: distinct descriptor
//! values, a hundred thousand of them (a million with `--ignored`, best
//! with `--release`), leave the exposition as it was after the first
//! thousand.

mod common;

use std::time::Duration;

use common::{costing, decider, descriptor, request, store};
use runlimit_memory::ManualClock;
use runlimit_server::proto::{
    RateLimitDescriptor, RateLimitUnit, rate_limit_descriptor::RateLimitOverride,
};

const RULES: &str = "
domain: d
descriptors:
  - key: remote_address
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 5}
";

/// The number of series and the size of the exposition.
fn measure(rendered: &str) -> (usize, usize) {
    let series = rendered
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .count();
    (series, rendered.len())
}

#[tokio::test]
async fn a_hundred_thousand_distinct_values_add_no_series() {
    distinct_values_add_no_series(100_000).await;
}

#[tokio::test]
#[ignore = "a million requests take minutes in a debug build: run with --release -- --ignored"]
async fn a_million_distinct_values_add_no_series() {
    distinct_values_add_no_series(1_000_000).await;
}

async fn distinct_values_add_no_series(values: usize) {
    const WARM_UP: usize = 1_000;
    let clock = ManualClock::new();
    let decider = decider(store(&clock), RULES);
    let mut before = None;
    for index in 0..values {
        if index == WARM_UP {
            before = Some(measure(&decider.metrics().render()));
        }
        // A second passes every thousand requests, so the store's
        // one-second counters expire and its space is reused.
        if index % 1_000 == 0 {
            clock.advance(Duration::from_secs(1));
        }
        let value = format!("198.51.{}.{}", index / 256, index % 256);
        let descriptor = match index % 3 {
            0 => descriptor(&[("remote_address", &value)]),
            1 => costing(2, &[("path", &value), ("user", &value)]),
            _ => RateLimitDescriptor {
                limit: Some(RateLimitOverride {
                    requests_per_unit: 3,
                    unit: RateLimitUnit::Second.into(),
                }),
                ..descriptor(&[("client", &value)])
            },
        };
        decider
            .should_rate_limit(&request("d", vec![descriptor]))
            .await
            .expect("a decision");
    }
    let rendered = decider.metrics().render();
    let (series, size) = measure(&rendered);
    let (series_before, size_before) = before.expect("measured");
    println!(
        "{values} values: {series} series, {size} bytes of exposition; after {WARM_UP}: {series_before} series, {size_before} bytes"
    );
    // Five counters for each of the two rules and the override label, and
    // the service's four.
    assert_eq!(series, 5 * 3 + 4);
    assert_eq!(series, series_before);
    // Only the counts' digits grew.
    assert!(size <= size_before + 5 * 3 * 6, "{size} > {size_before}");
    assert!(!rendered.contains("198.51."));
    let total_hits = |rule: &str| {
        rendered
            .lines()
            .find(|line| {
                line.starts_with(&format!(
                    r#"ratelimit_service_rate_limit_total_hits{{domain="d",rule="{rule}"}}"#
                ))
            })
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|count| count.parse::<u64>().ok())
    };
    // The requests of each kind: every third index.
    let third =
        |kind: usize| u64::try_from((0..values).filter(|index| index % 3 == kind).count()).ok();
    assert_eq!(total_hits("remote_address"), third(0));
    assert_eq!(total_hits("path.user"), third(1).map(|hits| 2 * hits));
    assert_eq!(total_hits("override:client"), third(2));
}
