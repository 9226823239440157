//! Pacing to the policy a server advertises, on GCRA's virtual schedule.

use std::{
    collections::HashMap,
    hash::BuildHasherDefault,
    sync::{Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use http::HeaderMap;
use runlimit_http::read;
use tokio::time::Instant;

use crate::{HoldLayerError, Partition, partition::PartitionHasher};

/// The most partitions a layer may pace (and so track): more is a mistake
/// in the bound, not a workload.
pub(crate) const MAX_PACED: usize = 1 << 31;

/// The longest pace interval: a policy of one request a year or rarer is
/// paced at one a year (the count of what is left still binds).
const MAX_INTERVAL: Duration = Duration::from_secs(366 * 86_400);

type Map = HashMap<Partition, Pace, BuildHasherDefault<PartitionHasher>>;

/// Each partition's advertised policy, paced with a burst of one, a
/// five-hundredth slower than advertised (a server's clock may run a little
/// fast). Each request reserves the next slot of its partition's schedule
/// (GCRA's theoretical arrival time) when it is let go and waits for it, so
/// requests go in the order they were let go, each wakes once, and one that
/// wakes late does not push back those after it. What keeps a window from
/// getting more than its quota when the network bunches requests together
/// is the count of units left each answer reports (`Holds`); the pace
/// spreads the requests over the window.
#[derive(Debug)]
pub(crate) struct Pacer {
    paces: Mutex<Map>,
    max: usize,
}

/// One partition's schedule.
#[derive(Debug, Clone, Copy)]
struct Pace {
    /// Between two requests.
    interval: Duration,
    /// The next free slot.
    next: Instant,
}

impl Pacer {
    pub(crate) fn new(max: usize) -> Result<Self, HoldLayerError> {
        if max > MAX_PACED {
            return Err(HoldLayerError::TooManyPartitions);
        }
        Ok(Self {
            paces: Mutex::default(),
            max,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Map> {
        // Each operation leaves the map consistent.
        self.paces.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Learns `partition`'s pace from a response's `RateLimit-Policy`: the
    /// policy with the shortest window (the smallest quota among equals),
    /// where bursts meet refusals; a longer window's quota (a minute's
    /// beside a second's) is kept by the count of what answers report left,
    /// not spread over its window. A partition's first pace starts a slot
    /// after now, for the request that went before any pace was known (its
    /// probe), so that the first window does not get one request too many.
    /// With `max` partitions paced, a new one makes the pacer forget every
    /// pace; each is relearned, and charged again (erring on the slow
    /// side), from its partition's next answer.
    pub(crate) fn learn(&self, partition: Partition, headers: &HeaderMap) {
        let Ok(policies) = read::policies(headers) else {
            return;
        };
        let shortest = policies
            .members()
            .iter()
            .filter_map(|policy| Some((policy.window()?, policy.quota())))
            .filter(|&(_, quota)| quota > 0)
            .min();
        let Some((window, quota)) = shortest else {
            return;
        };
        // window × 1.002 / quota, rounded up (a window's nanoseconds, at
        // most 10¹⁵ seconds' worth, times 501 fit a u128), at most a year.
        let nanos = (window.as_nanos() * 501).div_ceil(500 * u128::from(quota));
        let interval =
            Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)).min(MAX_INTERVAL);
        let now = Instant::now();
        let mut paces = self.lock();
        if paces.len() >= self.max && !paces.contains_key(&partition) {
            paces.clear();
        }
        paces
            .entry(partition)
            .and_modify(|pace| pace.interval = interval)
            .or_insert(Pace {
                interval,
                next: now + interval,
            });
    }

    /// Waits for `partition`'s next slot at its pace (at once when it has
    /// no pace yet, or its slot has come).
    pub(crate) async fn turn(&self, partition: Partition) {
        let now = Instant::now();
        let slot = {
            let mut paces = self.lock();
            let Some(pace) = paces.get_mut(&partition) else {
                return;
            };
            let slot = pace.next.max(now);
            pace.next = slot + pace.interval;
            slot
        };
        if slot > now {
            tokio::time::sleep_until(slot).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn policy(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("ratelimit-policy", HeaderValue::from_static(value));
        headers
    }

    /// The policy with the shortest window sets the pace (named, or the
    /// unnamed one of the draft's revisions 6 and 7), a five-hundredth
    /// slow; each request takes the next slot, the first a slot after the
    /// pace was learned (the probe's).
    #[tokio::test(start_paused = true)]
    async fn requests_reserve_slots_at_the_shortest_windows_pace() {
        for field in [r#""minute";q=50;w=60, "second";q=20;w=1"#, "20;w=1"] {
            let pacer = Pacer::new(4).expect("valid");
            let partition = Partition::of(b"api");
            let start = Instant::now();
            pacer.learn(partition, &policy(field));
            let turns: Vec<_> = (0..3)
                .map(|_| {
                    let turn = Box::pin(pacer.turn(partition));
                    async move {
                        turn.await;
                        Instant::now() - start
                    }
                })
                .collect();
            let mut went = Vec::new();
            for turn in turns {
                went.push(turn.await);
            }
            // Tokio's timer wakes on the millisecond after the slot.
            let interval = Duration::from_micros(50_100);
            for (slot, went) in (1..).zip(went) {
                let due = interval * slot;
                assert!(
                    went >= due && went <= due + Duration::from_millis(1),
                    "{field}: slot {slot} went at {went:?}"
                );
            }
        }
    }
}
