//! What the layer knows of each partition's quota, and when a request to it
//! may go: never more than `max` partitions at once.
//!
//! A partition nothing is known of yet sends one request (its probe) and
//! holds the others until the probe's answer says what the quota is, at most
//! [`MAX_PROBE_WAIT`]. A response that reports the units left and when they
//! reset (`RateLimit`'s `r` and `t`, `X-RateLimit-Remaining` and `-Reset`)
//! lets that many more requests go, counting those already sent after the
//! answered one, and holds the rest until the reset; then the next request
//! probes again. A response that says the quota is exhausted holds the
//! partition until it says.

use std::{
    collections::HashMap,
    hash::BuildHasherDefault,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use http::{HeaderMap, StatusCode};
use tokio::{
    sync::{Notify, futures::OwnedNotified},
    time::Instant,
};
use tower::retry::budget::Budget;

use crate::{
    MAX_HOLD, Partition,
    exhausted::{exhausted_for, quota_left},
    partition::PartitionHasher,
};

type Map = HashMap<Partition, State, BuildHasherDefault<PartitionHasher>>;

/// The partitions, and until when a full map is known to have no room.
#[derive(Debug, Default)]
struct States {
    map: Map,
    /// A sweep of a full map found every partition active: until then, new
    /// partitions go untracked without sweeping again under the lock.
    no_room_until: Option<Instant>,
}

/// How long a full map of active partitions is not swept again.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The longest a request waits for its partition's probe to be answered
/// before it goes anyway: an API that answers slowly (a long poll, say) must
/// not serialize every call to it.
pub(crate) const MAX_PROBE_WAIT: Duration = Duration::from_secs(2);

/// Sending a refused request again: how long to wait first (beyond the
/// partition's hold, which the next attempt waits for), spread by `spread`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry {
    /// To sleep before the next attempt: the whole wait when no hold was
    /// recorded for it, else nothing.
    pub(crate) sleep: Duration,
    /// Added to the end of the partition's hold before the next attempt.
    pub(crate) spread: Duration,
}

/// Whether a request may go now.
pub(crate) enum Turn {
    /// Go, as the request `ticket` names (`None`: the partition is not
    /// tracked, since the bound is full of active ones).
    Go(Option<Ticket>),
    /// The partition is held until then.
    Until(Instant),
    /// The partition's probe is out: wait for its answer.
    Probing(Pin<Box<OwnedNotified>>),
}

/// A request let go: its partition and its number there, and whether it is
/// the partition's probe.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    partition: Partition,
    number: u64,
    probe: bool,
}

/// What is known of one partition.
#[derive(Debug, Default)]
struct State {
    /// Refused or exhausted until then (the longest a response named).
    hold: Option<Instant>,
    /// Requests let go so far.
    sent: u64,
    /// Requests let go and not yet answered.
    unanswered: u64,
    /// Requests of this window whose count no answer reported: lost ones
    /// (the server may have counted them) and late answers from before the
    /// reset (the server may have counted them in this window).
    uncounted: u64,
    /// What may still be sent until the reported quota resets.
    left: Option<Left>,
    /// The first request number of the current window: answers to earlier
    /// requests describe a window that has reset.
    fresh_from: u64,
    probe: Probe,
}

#[derive(Debug, Default)]
enum Probe {
    /// Nothing is known: the next request probes.
    #[default]
    Unknown,
    /// A probe is out; others wait for it.
    Out(Arc<Notify>),
    /// An answer came: requests go by what it said.
    Answered,
}

/// What the answers of a window said, and what that lets go.
#[derive(Debug, Clone, Copy)]
struct Left {
    /// The fewest units left any answer of the window reported: a server
    /// counts requests in its own order, so the answer of the request it
    /// counted last may come first or last; the fewest is the most counted.
    fewest: u64,
    /// Requests that may still go: `fewest` less those unanswered when it
    /// was last computed (any of them may be counted after it) and those
    /// uncounted, less those sent or lost since.
    remaining: u64,
    /// The earliest reset any answer of the window put: resets are whole
    /// seconds rounded up, so the earliest is the closest.
    reset: Instant,
}

impl State {
    /// Whether forgetting this partition would lose something that holds
    /// requests back.
    fn active(&self, now: Instant) -> bool {
        self.hold.is_some_and(|hold| hold > now)
            || self.unanswered > 0
            || matches!(self.probe, Probe::Out(_))
            || self.left.is_some_and(|left| left.reset > now)
    }
}

/// Partitions and what is known of them; never more than `max` at once.
#[derive(Debug)]
pub(crate) struct Holds {
    max: usize,
    /// Whether a new window is probed (not when requests are paced).
    reprobe: bool,
    states: Mutex<States>,
}

impl Holds {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            reprobe: true,
            states: Mutex::new(States::default()),
        }
    }

    /// Holds for paced requests: a new window is not probed, since the pace
    /// already sends the requests its reset releases one at a time.
    pub(crate) fn paced(max: usize) -> Self {
        Self {
            reprobe: false,
            ..Self::new(max)
        }
    }

    /// The most partitions tracked at once.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    fn lock(&self) -> MutexGuard<'_, States> {
        // Each operation leaves the map consistent; a panic elsewhere under
        // the lock cannot corrupt it.
        self.states.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `partition`'s state, made room for: with `max` partitions tracked,
    /// inactive ones are forgotten; if none is, `None` (the partition goes
    /// untracked, and an active one is never dropped).
    fn state(
        states: &mut States,
        max: usize,
        partition: Partition,
        now: Instant,
    ) -> Option<&mut State> {
        if !states.map.contains_key(&partition) && states.map.len() >= max {
            if states.no_room_until.is_some_and(|until| now < until) {
                return None;
            }
            states.map.retain(|_, state| state.active(now));
            if states.map.len() >= max {
                states.no_room_until = Some(now + SWEEP_INTERVAL);
                return None;
            }
        }
        Some(states.map.entry(partition).or_default())
    }

    /// Whether a request to `partition` may go at `now`.
    pub(crate) fn turn(&self, partition: Partition, now: Instant) -> Turn {
        self.turn_waiting(partition, now, true)
    }

    /// Whether a request that waited [`MAX_PROBE_WAIT`] for a probe may go:
    /// as [`turn`](Self::turn), without waiting for the probe again (holds
    /// and counts still apply).
    pub(crate) fn turn_past_probe(&self, partition: Partition, now: Instant) -> Turn {
        self.turn_waiting(partition, now, false)
    }

    fn turn_waiting(&self, partition: Partition, now: Instant, for_probe: bool) -> Turn {
        let mut states = self.lock();
        let Some(state) = Self::state(&mut states, self.max, partition, now) else {
            return Turn::Go(None);
        };
        if let Some(hold) = state.hold.filter(|&hold| hold > now) {
            return Turn::Until(hold);
        }
        if let Some(left) = state.left {
            if now >= left.reset {
                // A new window: learn its quota afresh.
                state.left = None;
                state.uncounted = 0;
                state.fresh_from = state.sent;
                if self.reprobe && matches!(state.probe, Probe::Answered) {
                    state.probe = Probe::Unknown;
                }
            } else if left.remaining == 0 {
                return Turn::Until(left.reset);
            }
        }
        let probe = match &state.probe {
            Probe::Out(_) if !for_probe => false,
            Probe::Out(answered) => {
                let mut wait = Box::pin(Arc::clone(answered).notified_owned());
                // Registered before the lock is released, so an answer in
                // between is not missed.
                wait.as_mut().enable();
                return Turn::Probing(wait);
            }
            Probe::Unknown => {
                state.probe = Probe::Out(Arc::new(Notify::new()));
                true
            }
            Probe::Answered => false,
        };
        Turn::Go(Some(Self::send(state, partition, probe)))
    }

    fn send(state: &mut State, partition: Partition, probe: bool) -> Ticket {
        let number = state.sent;
        state.sent += 1;
        state.unanswered += 1;
        if let Some(left) = &mut state.left {
            left.remaining = left.remaining.saturating_sub(1);
        }
        Ticket {
            partition,
            number,
            probe,
        }
    }

    /// A request let go was never answered (it failed, or was dropped): if it
    /// was the probe, the next request probes instead.
    pub(crate) fn unanswered(&self, ticket: Ticket) {
        let mut states = self.lock();
        let Some(state) = states.map.get_mut(&ticket.partition) else {
            return;
        };
        state.unanswered = state.unanswered.saturating_sub(1);
        // The server may have counted it all the same. (What may still go
        // counted it when it was sent, or as unanswered; from the next
        // answer on it counts as uncounted.)
        if ticket.number >= state.fresh_from {
            state.uncounted += 1;
        }
        if ticket.probe
            && matches!(state.probe, Probe::Out(_))
            && let Probe::Out(answered) = std::mem::take(&mut state.probe)
        {
            answered.notify_waiters();
        }
    }

    /// Records what the answer to `ticket` (`status` and `headers`) says of
    /// its partition, and says whether to send its request again: only when
    /// it was refused (429 or 503) with a wait of at most [`MAX_HOLD`], a
    /// copy of the request exists (`replayable`), and `budget` allows.
    pub(crate) fn answered(
        &self,
        ticket: Option<Ticket>,
        status: StatusCode,
        headers: &HeaderMap,
        replayable: bool,
        budget: Option<&(dyn Budget + Send + Sync)>,
    ) -> Option<Retry> {
        let wait = exhausted_for(status, headers);
        let now = Instant::now();
        let mut recorded = false;
        if let Some(ticket) = ticket {
            let left = quota_left(headers);
            let mut states = self.lock();
            // A partition with requests unanswered is never forgotten; one
            // forgotten for an untracked request has nothing to update.
            if let Some(state) = states.map.get_mut(&ticket.partition) {
                state.unanswered = state.unanswered.saturating_sub(1);
                let fresh = ticket.number >= state.fresh_from;
                if !fresh {
                    // Sent before the reset, perhaps counted after it.
                    state.uncounted += 1;
                }
                // An exhausted quota in an answer that is not a refusal is a
                // count like any other (zero left), held until its reset
                // below; refusals hold as long as they say.
                if let Some(wait) = wait
                    && (refusal(status, headers) || left.is_none())
                {
                    let until = now + wait.min(MAX_HOLD);
                    state.hold = Some(state.hold.map_or(until, |held| held.max(until)));
                    recorded = true;
                }
                if let Some((units, reset)) = left.filter(|_| fresh) {
                    let reset = now + reset.min(MAX_HOLD);
                    let (fewest, reset) = match state.left {
                        Some(known) if now < known.reset => {
                            (known.fewest.min(units), known.reset.min(reset))
                        }
                        _ => (units, reset),
                    };
                    state.left = Some(Left {
                        fewest,
                        remaining: fewest
                            .saturating_sub(state.unanswered)
                            .saturating_sub(state.uncounted),
                        reset,
                    });
                }
                // An answer from before the window reset says nothing of the
                // new one: a probe that went before it leaves the next
                // request to probe.
                match &state.probe {
                    Probe::Out(answered) if ticket.probe => {
                        answered.notify_waiters();
                        state.probe = if fresh {
                            Probe::Answered
                        } else {
                            Probe::Unknown
                        };
                    }
                    Probe::Unknown if fresh => state.probe = Probe::Answered,
                    _ => {}
                }
            }
        }
        let wait = wait?;
        let refused = matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        );
        if !(refused && replayable && wait <= MAX_HOLD && budget.is_some_and(Budget::withdraw)) {
            return None;
        }
        let spread = crate::layer::jitter(wait);
        Some(Retry {
            sleep: if recorded {
                Duration::ZERO
            } else {
                wait + spread
            },
            spread,
        })
    }

    /// How many partitions are held at `now`: refused or exhausted, or with
    /// every unit a response reported already sent.
    pub(crate) fn held(&self, now: Instant) -> usize {
        self.lock()
            .map
            .values()
            .filter(|state| {
                state.hold.is_some_and(|hold| hold > now)
                    || state
                        .left
                        .is_some_and(|left| left.reset > now && left.remaining == 0)
            })
            .count()
    }
}

/// Whether an answer refused its request: 429 or 503, or gRPC's
/// `RESOURCE_EXHAUSTED`.
fn refusal(status: StatusCode, headers: &HeaderMap) -> bool {
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) || headers
        .get("grpc-status")
        .is_some_and(|code| code.as_bytes() == b"8")
}
