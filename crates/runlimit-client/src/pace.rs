//! Pacing to the policy a server advertises, with Runlimit's own GCRA.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use http::HeaderMap;
use runlimit_core::{Check, GcraPolicy, PolicyId, ScopeId, SubjectKey};
use runlimit_http::read;
use runlimit_memory::{Clock, GcraStore, MemoryStoreConfig};
use tokio::time::Instant;

use crate::{HoldLayerError, Partition};

/// Tokio's clock (paused in tests, like every wait of the layer).
#[derive(Debug)]
struct TokioClock(Instant);

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// Each partition's advertised policy, paced: a GCRA of the policy's rate
/// with a burst of one, a five-hundredth slower than advertised (a server's
/// clock may run a little fast). What keeps a window from getting more than
/// its quota when the network bunches requests together is the count of
/// units left each answer reports (`Holds`); the pace spreads the requests
/// over the window.
#[derive(Debug)]
pub(crate) struct Pacer {
    store: GcraStore,
    policies: Mutex<HashMap<Partition, GcraPolicy>>,
    max: usize,
}

impl Pacer {
    pub(crate) fn new(max: usize) -> Result<Self, HoldLayerError> {
        let config = MemoryStoreConfig::new(max).map_err(|_| HoldLayerError::TooManyPartitions)?;
        Ok(Self {
            store: GcraStore::new(config).with_clock(TokioClock(Instant::now())),
            policies: Mutex::new(HashMap::new()),
            max,
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Partition, GcraPolicy>> {
        self.policies.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Learns `partition`'s pace from a response's `RateLimit-Policy`: the
    /// slowest of its policies with a window. A partition's first pace is
    /// charged one request, for the request that went before any pace was
    /// known (its probe), so that the first window does not get one request
    /// too many. With `max` partitions paced, a new one makes the pacer
    /// forget every pace; each is relearned, and charged again (erring on
    /// the slow side), from its partition's next answer.
    pub(crate) fn learn(&self, partition: Partition, headers: &HeaderMap) {
        let Ok(policies) = read::policies(headers) else {
            return;
        };
        let slowest = policies
            .members()
            .iter()
            .filter_map(|policy| Some((policy.quota(), policy.window()?)))
            .filter(|&(quota, _)| quota > 0)
            .min_by(|(q1, w1), (q2, w2)| {
                // q1 / w1 < q2 / w2, in integers: windows are whole seconds,
                // so each product of two u64 fits a u128.
                (u128::from(*q1) * u128::from(w2.as_secs()))
                    .cmp(&(u128::from(*q2) * u128::from(w1.as_secs())))
            });
        let Some((quota, window)) = slowest else {
            return;
        };
        let period = window + window / 500;
        let Ok(policy) = GcraPolicy::new(
            PolicyId::new("runlimit-client.pace").unwrap_or_else(|_| unreachable!("a valid id")),
            ScopeId::new("partition").unwrap_or_else(|_| unreachable!("a valid id")),
            quota,
            Duration::from_millis(u64::try_from(period.as_millis()).unwrap_or(u64::MAX)),
            1,
        ) else {
            return;
        };
        let mut policies = self.lock();
        if policies.len() >= self.max && !policies.contains_key(&partition) {
            policies.clear();
        }
        let first = policies.insert(partition, policy.clone()).is_none();
        drop(policies);
        if first {
            let subject = SubjectKey::from_digest(partition.digest());
            // Nothing to do if the pacer's store refuses: the next turn
            // finds out.
            let _ = self.store.check(&Check::new(&policy, subject));
        }
    }

    /// Waits for `partition`'s next turn at its pace (at once when it has
    /// none yet).
    pub(crate) async fn turn(&self, partition: Partition) {
        let Some(policy) = self.lock().get(&partition).cloned() else {
            return;
        };
        let subject = SubjectKey::from_digest(partition.digest());
        loop {
            let wait = match self.store.check(&Check::new(&policy, subject)) {
                Ok(decision) if decision.is_allowed() => return,
                Ok(decision) => decision.retry_after().unwrap_or(Duration::from_millis(1)),
                // The pacer's store refused (full, or poisoned): do not pace.
                Err(_) => return,
            };
            tokio::time::sleep(wait).await;
        }
    }
}
