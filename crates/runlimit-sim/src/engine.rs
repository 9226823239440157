//! The real stores on a virtual clock: what each candidate decides for each
//! request.

use std::time::Duration;

use runlimit_core::{BatchDecision, Check, Decision, Denial, SubjectKey};
use runlimit_memory::{
    GcraStore, ManualClock, MemoryStore, MemoryStoreConfig, MemoryStoreError, SlidingWindowStore,
};

use crate::policies::{Candidate, PolicySet};

/// How candidates are evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Mode {
    /// Each candidate alone, in a store of its own: what each would do if it
    /// were the only policy.
    #[default]
    Independent,
    /// All candidates as one atomic batch in one store, as the admission
    /// layer checks a route's policies: a request is admitted only if every
    /// policy admits it, and a refused request consumes nothing from any.
    /// The layer's limiter holds one algorithm, so the candidates must too.
    Batch,
}

/// What one evaluation decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Admitted (and charged, unless the request was uncharged).
    Admitted,
    /// Refused by the candidate at `policy` (its position in the set).
    Denied {
        /// The refusing candidate's position in the set.
        policy: usize,
        /// Why.
        reason: Refusal,
    },
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The quota was exhausted; `retry_after` is when the store said to retry.
    Quota {
        /// The wait the store computed.
        retry_after: Option<Duration>,
    },
    /// The store was full of live keys (fails closed).
    StorageCapacity,
    /// The request's cost is above what the policy can ever admit.
    CostAboveCapacity,
}

impl Verdict {
    fn from_decision(policy: usize, decision: &Decision) -> Self {
        match decision.denial() {
            // A shadow policy's would-be denial is what enforcing it would do.
            Some(denial) if decision.would_deny() || decision.is_denied() => {
                Self::denied(policy, denial)
            }
            _ => Self::Admitted,
        }
    }

    fn denied(policy: usize, denial: &Denial) -> Self {
        let reason = if denial.is_storage_capacity() {
            Refusal::StorageCapacity
        } else {
            Refusal::Quota {
                retry_after: denial.retry_after(),
            }
        };
        Self::Denied { policy, reason }
    }

    /// Whether the request was admitted.
    #[must_use]
    pub fn is_admitted(&self) -> bool {
        matches!(self, Self::Admitted)
    }
}

/// A refused evaluation setting: the caller's mistake, found when the
/// simulation is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimulationError {
    /// Batch mode over candidates of different algorithms.
    #[error(
        "batch mode needs candidates of one algorithm, as the admission layer's one \
         limiter holds: `{first_policy}` is {first} but `{other_policy}` is {other}; \
         batch only one algorithm's policies"
    )]
    MixedAlgorithms {
        /// The first candidate's id.
        first_policy: String,
        /// The first candidate's algorithm.
        first: &'static str,
        /// The id of the first candidate of another algorithm.
        other_policy: String,
        /// Its algorithm.
        other: &'static str,
    },
    /// Batch mode over enforced and shadow candidates: a batch has one
    /// quota mode, as the layer's.
    #[error("batch mode needs candidates of one quota mode (all enforced or all shadow)")]
    MixedQuotaModes,
    /// A batch of every candidate needs more keys than the store holds, or
    /// more checks than a batch may carry.
    #[error("batch mode needs {needed} keys per request; the store allows {allowed}")]
    BatchTooLarge {
        /// Keys (or checks) one request needs.
        needed: usize,
        /// What the store allows.
        allowed: usize,
    },
    /// The store failed: a bug, since a simulation's store is never poisoned
    /// by another thread and its batches are valid by construction.
    #[error("the store failed: {0}")]
    Store(#[from] MemoryStoreError),
}

/// One store and the candidates it evaluates together.
#[derive(Debug)]
struct Group<S, P> {
    store: S,
    policies: Vec<P>,
    /// The candidates' positions in the set.
    positions: Vec<usize>,
}

macro_rules! evaluate {
    ($group:expr, $subject:expr, $cost:expr, $charged:expr) => {{
        let group = $group;
        let units = $cost.max(1);
        let mut checks = Vec::with_capacity(group.policies.len());
        for (index, policy) in group.policies.iter().enumerate() {
            match Check::weighted(policy, $subject, units) {
                Ok(check) => checks.push(check),
                Err(_) => {
                    return Ok(Verdict::Denied {
                        policy: group.positions[index],
                        reason: Refusal::CostAboveCapacity,
                    });
                }
            }
        }
        let charged = $charged && $cost > 0;
        if let [check] = checks.as_slice() {
            let decision = if charged {
                group.store.check(check)?
            } else {
                group.store.peek(check)?
            };
            Ok(Verdict::from_decision(group.positions[0], &decision))
        } else {
            let batch = if charged {
                group.store.check_all(&checks)?
            } else {
                let decisions = checks
                    .iter()
                    .map(|check| group.store.peek(check))
                    .collect::<Result<Vec<_>, _>>()?;
                BatchDecision::from_decisions(decisions)
            };
            Ok(match batch {
                BatchDecision::Denied { index, denial }
                | BatchDecision::ShadowDenied { index, denial } => {
                    Verdict::denied(group.positions[index], &denial)
                }
                _ => Verdict::Admitted,
            })
        }
    }};
}

#[derive(Debug)]
enum AnyGroup {
    FixedWindow(Group<MemoryStore, runlimit_core::FixedWindowPolicy>),
    SlidingWindow(Group<SlidingWindowStore, runlimit_core::SlidingWindowPolicy>),
    Gcra(Group<GcraStore, runlimit_core::GcraPolicy>),
}

impl AnyGroup {
    fn evaluate(
        &self,
        subject: SubjectKey,
        cost: u64,
        charged: bool,
    ) -> Result<Verdict, MemoryStoreError> {
        match self {
            Self::FixedWindow(group) => evaluate!(group, subject, cost, charged),
            Self::SlidingWindow(group) => evaluate!(group, subject, cost, charged),
            Self::Gcra(group) => evaluate!(group, subject, cost, charged),
        }
    }

    fn entries(&self) -> usize {
        match self {
            Self::FixedWindow(group) => group.store.stats().entries,
            Self::SlidingWindow(group) => group.store.stats().entries,
            Self::Gcra(group) => group.store.stats().entries,
        }
    }
}

/// The candidates' stores on one virtual clock, driven by the requests'
/// times.
///
/// The stores are `runlimit-memory`'s own, so a simulated decision is the
/// decision the store makes; only time is virtual. Time starts at the first
/// request's; an earlier request later in the log is evaluated at the latest
/// time seen on its store (stores never move backwards).
///
/// ```
/// use runlimit_core::SubjectKey;
/// use runlimit_sim::{Mode, PolicySet, Simulation};
///
/// let set = PolicySet::from_toml(r#"
///     [[policy]]
///     algorithm = "fixed_window"
///     id = "login.ip"
///     scope = "ip"
///     limit = 1
///     window = { secs = 60, nanos = 0 }
/// "#)?;
/// let mut simulation = Simulation::new(&set, Mode::Independent)?;
/// let subject = SubjectKey::from_digest([7; 32]);
/// let second = 1_000_000_000;
/// assert!(simulation.evaluate(0, subject, 1, true)?[0].is_admitted());
/// assert!(!simulation.evaluate(30 * second, subject, 1, true)?[0].is_admitted());
/// assert!(simulation.evaluate(60 * second, subject, 1, true)?[0].is_admitted());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Simulation {
    clock: ManualClock,
    origin: Option<i64>,
    groups: Vec<AnyGroup>,
    verdicts: Vec<Verdict>,
}

impl Simulation {
    /// Builds a store for each candidate ([`Mode::Independent`]) or one for
    /// all of them ([`Mode::Batch`]).
    ///
    /// # Errors
    ///
    /// [`SimulationError::MixedAlgorithms`],
    /// [`SimulationError::MixedQuotaModes`] and
    /// [`SimulationError::BatchTooLarge`] for a batch the layer could not
    /// check either.
    pub fn new(set: &PolicySet, mode: Mode) -> Result<Self, SimulationError> {
        let clock = ManualClock::new();
        let config = set.store_config();
        let indexed: Vec<(usize, &Candidate)> = set.candidates().iter().enumerate().collect();
        let groups = match mode {
            Mode::Independent => indexed
                .iter()
                .map(|&(position, candidate)| group(config, &clock, &[(position, candidate)]))
                .collect(),
            Mode::Batch => {
                let first = indexed[0].1;
                if let Some((_, other)) = indexed
                    .iter()
                    .find(|(_, c)| c.algorithm() != first.algorithm())
                {
                    return Err(SimulationError::MixedAlgorithms {
                        first_policy: first.id().to_owned(),
                        first: first.algorithm(),
                        other_policy: other.id().to_owned(),
                        other: other.algorithm(),
                    });
                }
                let mode = indexed[0].1.quota_mode();
                if indexed.iter().any(|(_, c)| c.quota_mode() != mode) {
                    return Err(SimulationError::MixedQuotaModes);
                }
                let allowed = config.max_keys().min(config.max_batch_size());
                if indexed.len() > allowed {
                    return Err(SimulationError::BatchTooLarge {
                        needed: indexed.len(),
                        allowed,
                    });
                }
                vec![group(config, &clock, &indexed)]
            }
        };
        Ok(Self {
            clock,
            origin: None,
            verdicts: Vec::with_capacity(groups.len()),
            groups,
        })
    }

    /// Evaluates one request at `at` (nanoseconds since the Unix epoch):
    /// `cost` units for `subject`, charged if `charged` and the cost is not
    /// zero, otherwise only peeked (nothing consumed, refused if a check of
    /// its cost, at least one unit, would be).
    ///
    /// Returns a verdict per candidate ([`Mode::Independent`]) or one for
    /// the batch ([`Mode::Batch`]).
    ///
    /// # Errors
    ///
    /// [`SimulationError::Store`] if a store fails, which a valid
    /// simulation never does.
    pub fn evaluate(
        &mut self,
        at: i64,
        subject: SubjectKey,
        cost: u64,
        charged: bool,
    ) -> Result<&[Verdict], SimulationError> {
        let origin = *self.origin.get_or_insert(at);
        let since = u64::try_from(at.saturating_sub(origin)).unwrap_or(0);
        self.clock.set(Duration::from_nanos(since));
        self.verdicts.clear();
        for group in &self.groups {
            self.verdicts.push(group.evaluate(subject, cost, charged)?);
        }
        Ok(&self.verdicts)
    }

    /// Keys stored in each group's store now, including expired entries not
    /// yet removed.
    pub fn stored_keys(&self) -> impl Iterator<Item = usize> + '_ {
        self.groups.iter().map(AnyGroup::entries)
    }

    /// When the first request happened, nanoseconds since the Unix epoch.
    #[must_use]
    pub fn origin(&self) -> Option<i64> {
        self.origin
    }
}

fn group(
    config: &MemoryStoreConfig,
    clock: &ManualClock,
    members: &[(usize, &Candidate)],
) -> AnyGroup {
    let positions = members.iter().map(|(position, _)| *position).collect();
    macro_rules! build {
        ($variant:ident, $store:ty) => {
            AnyGroup::$variant(Group {
                store: <$store>::new(*config).with_clock(clock.clone()),
                policies: members
                    .iter()
                    .filter_map(|(_, candidate)| match candidate {
                        Candidate::$variant(policy) => Some(policy.clone()),
                        _ => None,
                    })
                    .collect(),
                positions,
            })
        };
    }
    // Callers pass members of one algorithm.
    match members[0].1 {
        Candidate::FixedWindow(_) => build!(FixedWindow, MemoryStore),
        Candidate::SlidingWindow(_) => build!(SlidingWindow, SlidingWindowStore),
        Candidate::Gcra(_) => build!(Gcra, GcraStore),
    }
}
