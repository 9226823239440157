//! What the layer knows of each partition's quota, and when a request to it
//! may go: never more than `max` partitions at once.
//!
//! A partition nothing is known of yet sends one request (its probe) and
//! holds the others until the probe's answer says what the quota is, at most
//! [`MAX_PROBE_WAIT`]. A response that reports the units left (`RateLimit`'s
//! `r`, revision 7's `remaining`, `X-RateLimit-Remaining`) lets that many
//! more requests go, counting those already sent after the answered one, and
//! holds the rest until the reset; then the next request probes again. When
//! the window may have ended before the cautious reading of its reset (an
//! epoch reset against a `Date` truncated to the second; a count with no
//! reset at all), one request probes at the earliest moment it may have:
//! if the window has not ended, that probe alone is refused, and a server
//! whose epoch resets so prove exact is not probed early again.
//!
//! A response that says the quota is exhausted holds the partition until it
//! says, and a 429 that names no wait holds it a second ([`REFUSAL_HOLD`]).
//! A server that refuses without reporting any count teaches one: after its
//! first refusal, the next two windows are sent one request at a time (so
//! that only the one finding the window spent is refused), and from then on
//! what the last two windows both admitted goes at once and the rest one at
//! a time. Of two windows, at most one straddles two of the server's (a
//! window that began just before an epoch second, say) and counts too many;
//! the smaller is what one of the server's windows holds.

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
    exhausted::{GRPC_STATUS, QuotaLeft, exhausted_for, quota_left},
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

/// How long a refusal (429, or gRPC's `RESOURCE_EXHAUSTED`) that names no
/// wait, or a wait of zero, holds its partition: whole-second fields are
/// often truncated, so "0" may mean anything under a second.
pub(crate) const REFUSAL_HOLD: Duration = Duration::from_secs(1);

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
    /// The partition's probe is out, or a probe waits for every request
    /// sent to be answered: wait for that answer.
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
    /// Answers of this window that were not refusals.
    admitted: u64,
    /// What the refusals of a server that reports no count taught.
    learned: Option<Learned>,
    /// The first request number of the current window: answers to earlier
    /// requests describe a window that has reset.
    fresh_from: u64,
    probe: Probe,
    /// Told when no request is left unanswered, for a probe waiting for it.
    settled: Option<Arc<Notify>>,
    /// The request number of a probe sent a second before an epoch reset's
    /// cautious reading (see `Left::epoch_early`), until answered.
    early_probe: Option<u64>,
    /// Such a probe found its window not ended: this server's epoch resets
    /// are exact, and its windows are no longer probed early.
    exact_resets: bool,
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
    /// The earliest reset any answer of the window put (resets are whole
    /// seconds rounded up, so the earliest is the closest): the count holds
    /// until then. An hour away when no answer said.
    reset: Instant,
    /// When the count is spent, one request probes from here (see
    /// `ResetWithin::earliest`), read from the window's first answer: the
    /// window's start is where a fixed window's length is measured from.
    earliest: Instant,
    /// The server's epoch reset, naming the window counted (`QuotaLeft::window`).
    window: Option<Duration>,
    /// `earliest` is a second before an epoch reset's cautious reading (not
    /// a count without a reset, which is probed at once when spent).
    epoch_early: bool,
}

/// What the refusals of a server that reports no count taught.
#[derive(Debug, Clone, Copy)]
struct Learned {
    /// What a window lets go at once; beyond it, one at a time.
    quota: u64,
    /// What the last window admitted before its refusal (`None` after the
    /// first refusal, which ended requests sent unchecked).
    last: Option<u64>,
    /// Until when it is kept: [`LEARNED_FOR`] holds (of a second at least)
    /// after the last refusal, so that a caller whose traffic fell below
    /// the quota soon goes unchecked again.
    until: Instant,
}

/// For how many times its hold a refusal's lesson is kept.
const LEARNED_FOR: u32 = 10;

impl State {
    /// Whether forgetting this partition would lose something that holds
    /// requests back.
    fn active(&self, now: Instant) -> bool {
        self.hold.is_some_and(|hold| hold > now)
            || self.unanswered > 0
            || matches!(self.probe, Probe::Out(_))
            || self
                .left
                .is_some_and(|left| left.reset > now && left.remaining == 0)
            || self.learned.is_some_and(|learned| learned.until > now)
    }

    /// A wait for every request sent to be answered (see `settled`),
    /// registered before the lock is released, so that an answer in between
    /// is not missed.
    fn until_settled(&mut self) -> Turn {
        let settled = self.settled.get_or_insert_with(|| Arc::new(Notify::new()));
        let mut wait = Box::pin(Arc::clone(settled).notified_owned());
        wait.as_mut().enable();
        Turn::Probing(wait)
    }

    /// One request fewer unanswered: when none is left, a probe waiting for
    /// that may go.
    fn one_answered(&mut self) {
        self.unanswered = self.unanswered.saturating_sub(1);
        if self.unanswered == 0
            && let Some(settled) = self.settled.take()
        {
            settled.notify_waiters();
        }
    }

    /// When a spent count may be probed: its earliest moment, unless that
    /// is an epoch reset's and this server's proved exact.
    fn probe_from(&self, left: Left) -> Instant {
        if left.epoch_early && self.exact_resets {
            left.reset
        } else {
            left.earliest
        }
    }

    /// A new window begins (or may have): its quota is learned afresh, its
    /// first request probing alone (paced partitions too: a longer window's
    /// quota, a minute's beside a second's, is only known again by asking).
    fn new_window(&mut self) {
        self.left = None;
        self.uncounted = 0;
        self.admitted = 0;
        self.fresh_from = self.sent;
        if matches!(self.probe, Probe::Answered) {
            self.probe = Probe::Unknown;
        }
    }
}

/// Partitions and what is known of them; never more than `max` at once.
#[derive(Debug)]
pub(crate) struct Holds {
    max: usize,
    states: Mutex<States>,
}

impl Holds {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            states: Mutex::new(States::default()),
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

    /// Whether a request that waited [`MAX_PROBE_WAIT`] for an answer may
    /// go: as [`turn`](Self::turn), without waiting for one again (holds and
    /// counts still apply).
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
        // A probe that tests whether a window has ended goes once every
        // request sent is answered (for at most `MAX_PROBE_WAIT`): one still
        // on its way may be counted after it, and refused in its place.
        if let Some(left) = state.left {
            if now >= left.reset {
                // A new window: its first request alone learns its quota.
                state.new_window();
            } else if left.remaining == 0 {
                let from = state.probe_from(left);
                if now < from {
                    return Turn::Until(from);
                }
                // The window may have ended.
                if for_probe && state.unanswered > 0 {
                    return state.until_settled();
                }
                if left.epoch_early {
                    state.early_probe = Some(state.sent);
                }
                state.new_window();
            }
        } else if let Some(learned) = state.learned {
            if now >= learned.until {
                state.learned = None;
            } else if state.sent - state.fresh_from >= learned.quota {
                // Beyond what a window is known to hold: one at a time.
                if for_probe && state.unanswered > 0 {
                    return state.until_settled();
                }
                if matches!(state.probe, Probe::Answered) {
                    state.probe = Probe::Unknown;
                }
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
        state.one_answered();
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
            let quota = quota_left(headers);
            // A refusal for the rate: 429, or gRPC's `RESOURCE_EXHAUSTED`.
            let too_many = status == StatusCode::TOO_MANY_REQUESTS
                || headers
                    .get(GRPC_STATUS)
                    .is_some_and(|code| code.as_bytes() == b"8");
            let refused = too_many || status == StatusCode::SERVICE_UNAVAILABLE;
            let mut states = self.lock();
            // A partition with requests unanswered is never forgotten; one
            // forgotten for an untracked request has nothing to update.
            if let Some(state) = states.map.get_mut(&ticket.partition) {
                state.one_answered();
                let fresh = ticket.number >= state.fresh_from;
                if !fresh {
                    // Sent before the reset, perhaps counted after it.
                    state.uncounted += 1;
                }
                if state.early_probe == Some(ticket.number) {
                    state.early_probe = None;
                    state.exact_resets |= refused || quota.is_some_and(|quota| quota.units == 0);
                }
                // An exhausted quota in an answer that is not a refusal is a
                // count like any other (zero left), held until its reset
                // below; refusals hold as long as they say, a 429 at least
                // `REFUSAL_HOLD`.
                let mut hold = wait.filter(|_| refused || quota.is_none());
                if too_many && hold.is_none_or(|hold| hold.is_zero()) {
                    hold = Some(REFUSAL_HOLD);
                }
                if let Some(hold) = hold {
                    let until = now + hold.min(MAX_HOLD);
                    state.hold = Some(state.hold.map_or(until, |held| held.max(until)));
                    recorded = true;
                }
                if let Some(quota) = quota.filter(|_| fresh) {
                    Self::count(state, quota, now);
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
                if fresh && !refused {
                    state.admitted += 1;
                }
                if fresh
                    && quota.is_none()
                    && too_many
                    && let Some(hold) = hold
                {
                    Self::learn(state, hold.min(MAX_HOLD), now);
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

    /// Counts what a fresh answer reports is left: a new window's count
    /// from its first answer, else the fewest of the window's answers. An
    /// answer naming a later epoch reset than the count's is the first of a
    /// later window (requests let go late may land after the server's window
    /// turned); one naming an earlier reset describes a window that has
    /// ended, and counts nothing.
    fn count(state: &mut State, quota: QuotaLeft, now: Instant) {
        // The server counts: requests go by its count.
        state.learned = None;
        let (latest, earliest) = match quota.reset {
            Some(reset) => (
                now + reset.latest.min(MAX_HOLD),
                now + reset.earliest.min(MAX_HOLD),
            ),
            // Until a refusal says otherwise; the count spent, a probe
            // finds out at once whether the window has turned.
            None => (now + MAX_HOLD, now),
        };
        let known = state.left.filter(|known| now < known.reset);
        let later = |a: Option<Duration>, b: Option<Duration>| matches!((a, b), (Some(a), Some(b)) if a > b);
        let (fewest, reset, earliest, epoch_early) = match known {
            Some(known) if later(known.window, quota.window) => return,
            Some(known) if !later(quota.window, known.window) => (
                known.fewest.min(quota.units),
                known.reset.min(latest),
                known.earliest,
                known.epoch_early,
            ),
            _ => (
                quota.units,
                latest,
                earliest,
                quota
                    .reset
                    .is_some_and(|reset| reset.earliest < reset.latest),
            ),
        };
        state.left = Some(Left {
            fewest,
            remaining: fewest
                .saturating_sub(state.unanswered)
                .saturating_sub(state.uncounted),
            reset,
            earliest: earliest.min(reset),
            window: quota.window.or(known.and_then(|known| known.window)),
            epoch_early,
        });
    }

    /// A refusal of this window from a server that reports no count, the
    /// partition held for `hold`: what the window admitted is a measure of
    /// the server's quota, unless it was the first (whose requests went
    /// unchecked); the next window begins after the hold, with a probe.
    fn learn(state: &mut State, hold: Duration, now: Instant) {
        if state.left.is_some() {
            return;
        }
        let admitted = state.admitted;
        let (quota, last) = match state.learned {
            None => (0, None),
            Some(learned) => (
                learned.last.map_or(0, |last| last.min(admitted)),
                Some(admitted),
            ),
        };
        state.learned = Some(Learned {
            quota,
            last,
            // A refusal late in its window names a short hold: the lesson
            // lasts as long at least as after a second's.
            until: now + hold.max(REFUSAL_HOLD) * LEARNED_FOR,
        });
        state.new_window();
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
                        .is_some_and(|left| left.remaining == 0 && state.probe_from(left) > now)
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn answer(holds: &Holds, ticket: Ticket, status: StatusCode, fields: &[(&str, String)]) {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.insert(
                http::HeaderName::from_bytes(name.as_bytes()).expect("a name"),
                HeaderValue::from_str(value).expect("a value"),
            );
        }
        holds.answered(Some(ticket), status, &headers, false, None);
    }

    fn go(holds: &Holds, partition: Partition) -> Ticket {
        match holds.turn(partition, Instant::now()) {
            Turn::Go(Some(ticket)) => ticket,
            _ => panic!("expected to go"),
        }
    }

    /// An epoch-second `Date` and the epoch reset `ahead` of it, with
    /// `remaining` units.
    fn epoch_fields(date: u64, ahead: u64, remaining: u64) -> Vec<(&'static str, String)> {
        let at = std::time::UNIX_EPOCH + Duration::from_secs(date);
        vec![
            ("date", httpdate::fmt_http_date(at)),
            ("x-ratelimit-remaining", remaining.to_string()),
            ("x-ratelimit-reset", (date + ahead).to_string()),
        ]
    }

    /// A count's probe moment comes from its window's first answer; an
    /// answer naming a later epoch reset is the first of a later window
    /// (its requests went after the server's window turned), and moves it.
    #[tokio::test(start_paused = true)]
    async fn an_answer_naming_a_later_epoch_reset_starts_a_new_count() {
        let (holds, partition) = (Holds::new(4), Partition::of(b"api"));
        let start = Instant::now();
        let probe = go(&holds, partition);
        answer(
            &holds,
            probe,
            StatusCode::OK,
            &epoch_fields(1_800_000_000, 2, 2),
        );
        let (first, second) = (go(&holds, partition), go(&holds, partition));
        tokio::time::sleep(Duration::from_millis(500)).await;
        answer(
            &holds,
            first,
            StatusCode::OK,
            &epoch_fields(1_800_000_001, 2, 1),
        );
        answer(
            &holds,
            second,
            StatusCode::OK,
            &epoch_fields(1_800_000_001, 2, 0),
        );
        match holds.turn(partition, Instant::now()) {
            Turn::Until(until) => assert_eq!(until - start, Duration::from_millis(1_500)),
            _ => panic!("the count is spent"),
        }
        // An answer naming the earlier reset, late, counts nothing.
        let third = go_after(&holds, partition).await;
        answer(
            &holds,
            third,
            StatusCode::OK,
            &epoch_fields(1_800_000_002, 2, 19),
        );
        let late = go(&holds, partition);
        answer(
            &holds,
            late,
            StatusCode::OK,
            &epoch_fields(1_800_000_001, 2, 0),
        );
        assert!(matches!(holds.turn(partition, Instant::now()), Turn::Go(_)));
    }

    /// A window probed a second before its epoch reset's cautious reading
    /// that turns out not to have ended (the server's resets are exact, not
    /// rounded up): that probe is refused, and the partition's windows are
    /// not probed early again.
    #[tokio::test(start_paused = true)]
    async fn an_early_probe_refused_is_not_sent_again() {
        let (holds, partition) = (Holds::new(4), Partition::of(b"api"));
        let date = 1_800_000_000;
        let probe = go(&holds, partition);
        answer(&holds, probe, StatusCode::OK, &epoch_fields(date, 2, 0));
        let start = Instant::now();
        let Turn::Until(early) = holds.turn(partition, start) else {
            panic!("the count is spent");
        };
        assert_eq!(early - start, Duration::from_secs(1));
        tokio::time::sleep_until(early).await;
        let early = go(&holds, partition);
        assert!(early.probe);
        answer(
            &holds,
            early,
            StatusCode::FORBIDDEN,
            &epoch_fields(date + 1, 1, 0),
        );
        // The next window: spent at once, waited for to its cautious reset.
        let next = go_after(&holds, partition).await;
        answer(&holds, next, StatusCode::OK, &epoch_fields(date + 2, 2, 0));
        let now = Instant::now();
        let Turn::Until(until) = holds.turn(partition, now) else {
            panic!("the count is spent");
        };
        assert_eq!(until - now, Duration::from_secs(2));
    }

    /// A refusal naming a short wait (late in its window, to the
    /// millisecond) teaches as long a lesson as one naming a second.
    #[tokio::test(start_paused = true)]
    async fn a_short_holds_lesson_lasts() {
        let (holds, partition) = (Holds::new(4), Partition::of(b"api"));
        let pushback = [
            ("grpc-status", "8".to_owned()),
            ("grpc-retry-pushback-ms", "50".to_owned()),
        ];
        let probe = go(&holds, partition);
        answer(&holds, probe, StatusCode::OK, &pushback);
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Five seconds on, the window's probe, then still one at a time.
        let window_probe = go(&holds, partition);
        answer(&holds, window_probe, StatusCode::OK, &[]);
        let first = go(&holds, partition);
        assert!(matches!(
            holds.turn(partition, Instant::now()),
            Turn::Probing(_)
        ));
        answer(&holds, first, StatusCode::OK, &[]);
    }

    /// Waits for `partition`'s turn and goes.
    async fn go_after(holds: &Holds, partition: Partition) -> Ticket {
        loop {
            match holds.turn(partition, Instant::now()) {
                Turn::Go(Some(ticket)) => return ticket,
                Turn::Until(until) => tokio::time::sleep_until(until).await,
                _ => panic!("nothing is out"),
            }
        }
    }

    /// A count spent before its cautious reset probes at the earliest
    /// moment the window can have ended, once every request sent is
    /// answered: one still on its way may be counted after the probe.
    #[tokio::test(start_paused = true)]
    async fn a_probe_testing_a_window_waits_for_every_answer() {
        let (holds, partition) = (Holds::new(4), Partition::of(b"api"));
        // Laravel's count, without a reset: the window may turn any time.
        let probe = go(&holds, partition);
        answer(
            &holds,
            probe,
            StatusCode::OK,
            &[("x-ratelimit-remaining", "1".to_owned())],
        );
        let last = go(&holds, partition);
        let Turn::Probing(settled) = holds.turn(partition, Instant::now()) else {
            panic!("the probe waits for the answer still out");
        };
        answer(
            &holds,
            last,
            StatusCode::OK,
            &[("x-ratelimit-remaining", "0".to_owned())],
        );
        settled.await;
        let test = go(&holds, partition);
        assert!(test.probe, "it goes alone");
        assert!(matches!(
            holds.turn(partition, Instant::now()),
            Turn::Probing(_)
        ));
        // Refused, with Laravel's `Retry-After: 0`: held a second.
        answer(
            &holds,
            test,
            StatusCode::TOO_MANY_REQUESTS,
            &[
                ("retry-after", "0".to_owned()),
                ("x-ratelimit-remaining", "0".to_owned()),
            ],
        );
        let Turn::Until(until) = holds.turn(partition, Instant::now()) else {
            panic!("held");
        };
        assert_eq!(until - Instant::now(), REFUSAL_HOLD);
    }

    /// A server that refuses without a count: after its first refusal, two
    /// windows go one request at a time, then what both admitted at once.
    #[tokio::test(start_paused = true)]
    async fn refusals_without_a_count_teach_a_quota() {
        let (holds, partition) = (Holds::new(4), Partition::of(b"api"));
        let refuse = |ticket| {
            answer(
                &holds,
                ticket,
                StatusCode::TOO_MANY_REQUESTS,
                &[("retry-after", "1".to_owned())],
            );
        };
        // The first window: nothing is known, so after the probe the rest
        // go at once, and are refused.
        let probe = go(&holds, partition);
        answer(&holds, probe, StatusCode::OK, &[]);
        let burst: Vec<Ticket> = (0..3).map(|_| go(&holds, partition)).collect();
        for ticket in burst {
            refuse(ticket);
        }
        // Two windows of three, one at a time; then, after each window's
        // probe, the two more at once.
        for window in 0..3 {
            let probe = go_after(&holds, partition).await;
            assert!(probe.probe, "window {window} begins with a probe");
            answer(&holds, probe, StatusCode::OK, &[]);
            let mut out = Vec::new();
            for _ in 0..2 {
                out.push(go_after(&holds, partition).await);
                if window < 2 {
                    assert!(
                        matches!(holds.turn(partition, Instant::now()), Turn::Probing(_)),
                        "window {window}: one at a time"
                    );
                    answer(&holds, out.pop().expect("sent"), StatusCode::OK, &[]);
                }
            }
            for ticket in out {
                answer(&holds, ticket, StatusCode::OK, &[]);
            }
            let fourth = go_after(&holds, partition).await;
            assert!(fourth.probe, "window {window}: the fourth goes alone");
            refuse(fourth);
        }
    }
}
