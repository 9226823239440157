//! The layer: hold a request while its partition's quota is exhausted.

use std::{
    fmt,
    future::{Future, poll_fn},
    hash::{BuildHasher, RandomState},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use http::{Request, Response, StatusCode};
use tokio::time::Instant;
use tower::retry::budget::Budget;
use tower_layer::Layer;
use tower_service::Service;

use crate::{
    ByOrigin, HoldObserver, NoRetry, Partition, PartitionKey, Replay,
    holds::{Holds, MAX_PROBE_WAIT, Retry, Ticket, Turn},
    pace::Pacer,
};

/// The most times one request is sent again.
pub(crate) const MAX_RETRIES: u32 = 2;

/// The longest a partition is held: a server may name any time, and a
/// client that waits longer than an hour had better be told so by a
/// refusal than hang. A refusal that asks for longer is not retried.
pub const MAX_HOLD: Duration = Duration::from_secs(3_600);

/// How a layer sends refused requests again: which, and within what budget.
#[derive(Clone)]
struct Retries<R> {
    replay: R,
    budget: Option<Arc<dyn Budget + Send + Sync>>,
}

impl<R: fmt::Debug> fmt::Debug for Retries<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retries")
            .field("replay", &self.replay)
            .field("budget", &self.budget.is_some())
            .finish()
    }
}

/// A [`HoldLayer`] built with a bound of zero partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HoldLayerError {
    /// `max_partitions` was zero.
    #[error("a hold layer needs room for at least one partition")]
    NoPartitions,
    /// `max_partitions` was more than a pacing store can hold
    /// (`runlimit_memory::MAX_KEYS`).
    #[error("too many partitions to pace")]
    TooManyPartitions,
}

/// Holds each outbound request, instead of sending it, while the last
/// response of its partition said the quota is exhausted (see the crate
/// docs for what says so). Clones share their holds, so one layer put in
/// front of several clients holds them all.
///
/// A hold lasts at most [`MAX_HOLD`], whatever the server named.
///
/// # Errors and cancellation
///
/// The inner service's errors and responses pass through unchanged. A
/// request whose future is dropped while held is never sent and holds
/// nothing. A held request is sent by a clone of the inner service made
/// ready after the hold, so it reserves nothing (a buffer's slot) while it
/// waits.
#[derive(Debug, Clone)]
pub struct HoldLayer<K = ByOrigin, R = NoRetry> {
    core: Core,
    key: K,
    retries: Retries<R>,
}

/// What the layer and the reqwest middleware share: the holds, the pacer
/// and the observer.
#[derive(Debug, Clone)]
pub(crate) struct Core {
    pub(crate) holds: Arc<Holds>,
    pub(crate) pacer: Option<Arc<Pacer>>,
    pub(crate) observer: Observer,
}

impl Core {
    pub(crate) fn new(max_partitions: usize) -> Result<Self, HoldLayerError> {
        if max_partitions == 0 {
            return Err(HoldLayerError::NoPartitions);
        }
        Ok(Self {
            holds: Arc::new(Holds::new(max_partitions)),
            pacer: None,
            observer: Observer::default(),
        })
    }

    pub(crate) fn pace(&mut self) -> Result<(), HoldLayerError> {
        self.pacer = Some(Arc::new(Pacer::new(self.holds.max())?));
        Ok(())
    }

    pub(crate) fn observe(&mut self, observer: impl HoldObserver) {
        self.observer = Observer(Some(Arc::new(observer)));
    }

    /// `partition`'s turn for a request being called: one let go at once
    /// holds its guard from here, so that a future dropped before it is
    /// first polled still releases what it took.
    pub(crate) fn first_turn(&self, partition: Partition) -> First {
        match self.holds.turn(partition, Instant::now()) {
            Turn::Go(ticket) => First::Go(Outstanding {
                holds: Arc::clone(&self.holds),
                ticket,
            }),
            turn => First::Wait(turn),
        }
    }

    /// Waits until a request to `partition` may go (its hold, its count,
    /// its probe's answer, its pace), starting from `first` when the caller
    /// already asked, and lets it go. A hold's end is pushed back by
    /// `spread`.
    pub(crate) async fn wait_turn(
        &self,
        partition: Option<Partition>,
        first: Option<First>,
        spread: Duration,
    ) -> Outstanding {
        let Some(partition) = partition else {
            return Outstanding {
                holds: Arc::clone(&self.holds),
                ticket: None,
            };
        };
        let outstanding = match first {
            Some(First::Go(outstanding)) => outstanding,
            first => {
                let mut turn = match first {
                    Some(First::Wait(turn)) => Some(turn),
                    _ => None,
                };
                // After waiting MAX_PROBE_WAIT once, a request stops waiting
                // for probes; holds and counts still apply.
                let mut past_probe = false;
                let ticket = loop {
                    let next = turn.take().unwrap_or_else(|| {
                        let now = Instant::now();
                        if past_probe {
                            self.holds.turn_past_probe(partition, now)
                        } else {
                            self.holds.turn(partition, now)
                        }
                    });
                    match next {
                        Turn::Go(ticket) => break ticket,
                        Turn::Until(until) => tokio::time::sleep_until(until + spread).await,
                        Turn::Probing(answered) => {
                            past_probe = tokio::time::timeout(MAX_PROBE_WAIT, answered)
                                .await
                                .is_err();
                        }
                    }
                };
                // From here a dropped request releases its partition's probe.
                Outstanding {
                    holds: Arc::clone(&self.holds),
                    ticket,
                }
            }
        };
        if let Some(pacer) = &self.pacer {
            pacer.turn(partition).await;
        }
        outstanding
    }
}

impl Core {
    /// Takes an answer to a request let go as `outstanding`: learns its
    /// pace, records what it says of the partition, and tells the observer.
    /// Returns `again` (a copy of the request) with how long to wait when
    /// the request is to be sent again; `None` when the answer is returned.
    pub(crate) fn answered<T>(
        &self,
        partition: Option<Partition>,
        outstanding: Outstanding,
        status: StatusCode,
        headers: &http::HeaderMap,
        again: Option<T>,
        budget: Option<&(dyn Budget + Send + Sync)>,
    ) -> Option<(T, Retry)> {
        if let (Some(pacer), Some(partition)) = (&self.pacer, partition) {
            pacer.learn(partition, headers);
        }
        let retry = outstanding.answered(status, headers, again.is_some(), budget);
        match (again, retry) {
            (Some(copy), Some(retry)) => {
                self.observer.retrying();
                Some((copy, retry))
            }
            _ => {
                self.observer.returned(status);
                None
            }
        }
    }
}

/// A request's first turn, taken when it was called.
pub(crate) enum First {
    /// It may go, and holds its guard.
    Go(Outstanding),
    /// It waits.
    Wait(Turn),
}

/// A request let go and not yet answered. Dropped unanswered (its send
/// failed, or its future was dropped), it lets another request probe.
#[derive(Debug)]
pub(crate) struct Outstanding {
    holds: Arc<Holds>,
    ticket: Option<Ticket>,
}

impl Outstanding {
    /// Records the answer (see `Holds::answered`) and says whether to send
    /// the request again.
    pub(crate) fn answered(
        mut self,
        status: StatusCode,
        headers: &http::HeaderMap,
        replayable: bool,
        budget: Option<&(dyn Budget + Send + Sync)>,
    ) -> Option<Retry> {
        let ticket = self.ticket.take();
        self.holds
            .answered(ticket, status, headers, replayable, budget)
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.holds.unanswered(ticket);
        }
    }
}

/// The layer's observer, if any.
#[derive(Clone, Default)]
pub(crate) struct Observer(pub(crate) Option<Arc<dyn HoldObserver>>);

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Observer(..)"
        } else {
            "None"
        })
    }
}

impl Observer {
    /// When a wait began, if anyone is told of waits: the clock is read only
    /// then.
    pub(crate) fn start(&self) -> Option<Instant> {
        self.0.is_some().then(Instant::now)
    }

    /// Tells of the wait since `began` (from [`start`](Self::start)).
    pub(crate) fn waited(&self, began: Option<Instant>) {
        if let (Some(observer), Some(began)) = (&self.0, began) {
            let waited = began.elapsed();
            if !waited.is_zero() {
                observer.on_wait(waited);
            }
        }
    }

    pub(crate) fn retrying(&self) {
        if let Some(observer) = &self.0 {
            observer.on_retry();
        }
    }

    pub(crate) fn returned(&self, status: StatusCode) {
        if let Some(observer) = &self.0
            && matches!(
                status,
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            )
        {
            observer.on_refused(status);
        }
    }
}

impl HoldLayer {
    /// Holds at most `max_partitions` partitions at once, partitioned by
    /// origin.
    ///
    /// # Errors
    ///
    /// [`HoldLayerError::NoPartitions`] when `max_partitions` is zero.
    pub fn new(max_partitions: usize) -> Result<Self, HoldLayerError> {
        Ok(Self {
            core: Core::new(max_partitions)?,
            key: ByOrigin,
            retries: Retries {
                replay: NoRetry,
                budget: None,
            },
        })
    }
}

impl<K, R> HoldLayer<K, R> {
    /// Names each request's partition with `key` instead (a per-token or
    /// per-tenant quota): a function of the request returning a
    /// [`Partition`](crate::Partition), or `None` to leave it untracked.
    #[must_use]
    pub fn partition_by<K2>(self, key: K2) -> HoldLayer<K2, R> {
        HoldLayer {
            core: self.core,
            key,
            retries: self.retries,
        }
    }

    /// Also paces each partition to the policy its server advertises
    /// (`RateLimit-Policy`, named or the unnamed `20;w=1` of the draft's
    /// revisions 6 and 7; of several, the one with the shortest window), on
    /// GCRA's virtual schedule: each request let go reserves the next slot
    /// at that rate (a five-hundredth slower, for a server's clock that runs
    /// a little fast) and waits for it, so that concurrent callers spread
    /// over the window instead of bursting into a refusal when a window
    /// opens, and a late wake-up does not delay the requests after it. A
    /// partition is paced from its first response with the field on (the
    /// first request goes alone, see the crate docs). Pacing only adds
    /// waits to what the fields alone let go: the units each answer says are
    /// left still bound what is sent, windows are still probed, and a
    /// partition whose server advertises no policy goes as it would unpaced.
    /// The pacing state is bounded like the holds.
    ///
    /// # Errors
    ///
    /// [`HoldLayerError::TooManyPartitions`] when the bound is more than
    /// 2³¹.
    pub fn pace(mut self) -> Result<Self, HoldLayerError> {
        self.core.pace()?;
        Ok(self)
    }

    /// Sends a request refused with 429 or 503, whose response says how long
    /// to wait, again after that wait (and a jitter of up to a tenth of it,
    /// at most a second), when `replay` gives a copy of it
    /// ([`IdempotentRequests`](crate::IdempotentRequests) for idempotent
    /// methods with clonable bodies) and `budget` allows: at most twice per
    /// request. Every request deposits into the budget, as with
    /// `tower::retry`, so retries stay a share of the traffic.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use runlimit_client::{HoldLayer, IdempotentRequests};
    /// use tower::retry::budget::TpsBudget;
    ///
    /// # fn main() -> Result<(), runlimit_client::HoldLayerError> {
    /// let layer = HoldLayer::new(10_000)?
    ///     .retry(IdempotentRequests, TpsBudget::new(Duration::from_secs(10), 1, 0.2));
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn retry<R2>(
        self,
        replay: R2,
        budget: impl Budget + Send + Sync + 'static,
    ) -> HoldLayer<K, R2> {
        HoldLayer {
            core: self.core,
            key: self.key,
            retries: Retries {
                replay,
                budget: Some(Arc::new(budget)),
            },
        }
    }

    /// Tells `observer` of the layer's waits, retries and refusals.
    #[must_use]
    pub fn with_observer(mut self, observer: impl HoldObserver) -> Self {
        self.core.observe(observer);
        self
    }

    /// How many partitions are held now.
    #[must_use]
    pub fn held_partitions(&self) -> usize {
        self.core.holds.held(Instant::now())
    }
}

impl<S, K: Clone, R: Clone> Layer<S> for HoldLayer<K, R> {
    type Service = Hold<S, K, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Hold {
            inner,
            core: self.core.clone(),
            key: self.key.clone(),
            retries: self.retries.clone(),
        }
    }
}

/// The service [`HoldLayer`] builds.
#[derive(Debug, Clone)]
pub struct Hold<S, K = ByOrigin, R = NoRetry> {
    inner: S,
    core: Core,
    key: K,
    retries: Retries<R>,
}

impl<S, K, R, B, ResBody> Service<Request<B>> for Hold<S, K, R>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    ResBody: Send + 'static,
    K: PartitionKey<B>,
    R: Replay<B>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResBody>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let partition = self.key.partition(&request);
        let first = partition.map(|partition| self.core.first_turn(partition));
        // A request that waits (held, probing, or paced) is made ready only
        // when it goes.
        let held = match &first {
            None => false,
            Some(First::Go(_)) => self.core.pacer.is_some(),
            Some(First::Wait(_)) => true,
        };
        // A request sent now takes the service made ready for it, leaving a
        // clone; a held one takes a clone and is made ready after its hold,
        // so it reserves nothing (a buffer's slot, say) while it waits.
        let clone = self.inner.clone();
        let mut inner = if held {
            clone
        } else {
            std::mem::replace(&mut self.inner, clone)
        };
        let (core, retries) = (self.core.clone(), self.retries.clone());
        if let Some(budget) = &retries.budget {
            budget.deposit();
        }
        Box::pin(async move {
            let mut request = request;
            let mut first = first;
            let mut sent = 0;
            // Added to the end of the hold before a retry, to spread retries.
            let mut spread = Duration::ZERO;
            loop {
                let began = core.observer.start();
                let outstanding = core.wait_turn(partition, first.take(), spread).await;
                core.observer.waited(began);
                if held || sent > 0 {
                    poll_fn(|cx| inner.poll_ready(cx)).await?;
                }
                let again = (sent < MAX_RETRIES)
                    .then(|| retries.replay.replay(&request))
                    .flatten();
                let response = inner.call(request).await?;
                sent += 1;
                match core.answered(
                    partition,
                    outstanding,
                    response.status(),
                    response.headers(),
                    again,
                    retries.budget.as_deref(),
                ) {
                    Some((copy, retry)) => {
                        // The refusal is not returned: release it (and its
                        // connection) before waiting.
                        drop(response);
                        spread = retry.spread;
                        tokio::time::sleep(retry.sleep).await;
                        request = copy;
                    }
                    None => return Ok(response),
                }
            }
        })
    }
}

/// Up to a tenth of `wait`, at most a second, drawn afresh per call.
pub(crate) fn jitter(wait: Duration) -> Duration {
    let span = (wait / 10).min(Duration::from_secs(1));
    let draw = RandomState::new().hash_one(Instant::now());
    let nanos = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(draw.checked_rem(nanos.saturating_add(1)).unwrap_or(0))
}
