//! Reloading a directory of rules while deciding: counters carry on, an
//! invalid configuration is refused, and the watcher picks up changes.

mod common;

use std::{sync::Arc, time::Duration};

use common::{SECRET, TempDir, descriptor, request, store, summary};
use runlimit_core::KeyHasher;
use runlimit_memory::{AnyStore, ManualClock};
use runlimit_server::{
    config::ConfigError,
    metrics::Metrics,
    proto::rate_limit_response::Code,
    reload::{Reload, Reloader},
    service::Decider,
};

/// The longest a test waits for an event that should come promptly.
const BOUND: Duration = Duration::from_secs(10);

fn rules(k_limit: u32, extra: &str) -> String {
    format!(
        "domain: d
descriptors:
  - key: k
    rate_limit: {{unit: minute, requests_per_unit: {k_limit}}}
{extra}"
    )
}

struct Setup {
    dir: TempDir,
    reloader: Arc<Reloader>,
    decider: Decider<AnyStore>,
    metrics: Metrics,
}

fn setup(name: &str, yaml: &str, clock: &ManualClock) -> Setup {
    let dir = TempDir::new(name);
    dir.write("rules.yaml", yaml);
    let metrics = Metrics::new();
    let reloader = Arc::new(Reloader::start(dir.path(), metrics.clone()).expect("valid"));
    let decider = Decider::new(
        store(clock),
        Arc::clone(reloader.config()),
        KeyHasher::new(SECRET).expect("long"),
        metrics.clone(),
    );
    Setup {
        dir,
        reloader,
        decider,
        metrics,
    }
}

impl Setup {
    /// The remaining units after one more hit of `k=v`.
    async fn hit(&self) -> (Code, u32) {
        let response = self
            .decider
            .should_rate_limit(&request("d", vec![descriptor(&[("k", "v")])]))
            .await
            .expect("a decision");
        let (code, remaining, _) = summary(&response.statuses[0]);
        (code, remaining)
    }

    fn counted(&self, line: &str) -> bool {
        self.metrics
            .render()
            .lines()
            .any(|rendered| rendered == line)
    }
}

#[tokio::test]
async fn a_rule_that_did_not_change_keeps_its_counters() {
    let clock = ManualClock::new();
    let setup = setup("unchanged", &rules(5, ""), &clock);
    assert_eq!(setup.hit().await, (Code::Ok, 4));
    assert_eq!(setup.hit().await, (Code::Ok, 3));
    setup.dir.write(
        "rules.yaml",
        &rules(
            5,
            "  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
        ),
    );
    assert_eq!(
        setup.reloader.reload().expect("valid"),
        Reload::Replaced { domains: 1 }
    );
    assert_eq!(setup.hit().await, (Code::Ok, 2));
    // Nothing changed since: nothing is loaded.
    assert_eq!(setup.reloader.reload().expect("valid"), Reload::Unchanged);
    assert!(setup.counted("ratelimit_service_config_load_success 2"));
}

#[tokio::test]
async fn a_changed_limit_carries_what_was_used() {
    let clock = ManualClock::new();
    let setup = setup("changed", &rules(5, ""), &clock);
    for _ in 0..3 {
        setup.hit().await;
    }
    setup.dir.write("rules.yaml", &rules(10, ""));
    setup.reloader.reload().expect("valid");
    // Three of ten used before this one.
    assert_eq!(setup.hit().await, (Code::Ok, 6));
    // And lowered below what was used: over at once.
    setup.dir.write("rules.yaml", &rules(2, ""));
    setup.reloader.reload().expect("valid");
    assert_eq!(setup.hit().await.0, Code::OverLimit);
}

#[tokio::test]
async fn an_invalid_configuration_is_refused_and_the_current_one_stays() {
    let clock = ManualClock::new();
    let setup = setup("invalid", &rules(5, ""), &clock);
    let generation = *setup.reloader.config().changes().borrow();
    assert_eq!(setup.hit().await, (Code::Ok, 4));

    setup
        .dir
        .write("rules.yaml", &rules(5, "  - key: k\n    value: [\n"));
    let error = setup.reloader.reload().expect_err("invalid");
    assert!(matches!(error, ConfigError::Invalid { .. }), "{error}");
    assert_eq!(*setup.reloader.config().changes().borrow(), generation);
    assert_eq!(setup.hit().await, (Code::Ok, 3));
    assert!(setup.counted("ratelimit_service_config_load_error 1"));
    // The same files are not refused, and counted, again.
    assert_eq!(
        setup.reloader.reload().expect("nothing new"),
        Reload::Unchanged
    );
    assert!(setup.counted("ratelimit_service_config_load_error 1"));

    // A second domain in a new file, and a duplicate of it: refused too.
    setup.dir.write("rules.yaml", &rules(5, ""));
    setup.dir.write("more.yaml", "domain: d\n");
    assert!(setup.reloader.reload().is_err());
    assert!(setup.counted("ratelimit_service_config_load_error 2"));
    std::fs::remove_file(setup.dir.path().join("more.yaml")).expect("remove");
    assert_eq!(
        setup.reloader.reload().expect("valid again"),
        Reload::Replaced { domains: 1 }
    );
    assert_eq!(setup.hit().await, (Code::Ok, 2));
}

#[tokio::test]
async fn the_watcher_loads_a_changed_directory() {
    let clock = ManualClock::new();
    let setup = setup("watched", &rules(5, ""), &clock);
    let mut changes = setup.reloader.config().changes();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher = {
        let reloader = Arc::clone(&setup.reloader);
        tokio::spawn(async move {
            reloader
                .watch(Duration::from_millis(10), async {
                    let _ = stopped.await;
                })
                .await;
        })
    };
    setup.dir.write("second.yaml", "domain: e\n");
    tokio::time::timeout(BOUND, changes.changed())
        .await
        .expect("a reload in time")
        .expect("the configuration lives");
    let config = setup.reloader.config().load();
    assert!(config.domain("e").is_some());
    assert_eq!(setup.hit().await, (Code::Ok, 4));
    let _ = stop.send(());
    tokio::time::timeout(BOUND, watcher)
        .await
        .expect("the watcher stops")
        .expect("not panicked");
}
