//! The real stores on a virtual clock: what each candidate decides for each
//! request.

use std::time::Duration;

use runlimit_core::{AnyPolicy, BatchDecision, Check, Decision, Denial, SubjectKey};
use runlimit_memory::{
    AnyStore, GcraStore, ManualClock, MemoryStore, MemoryStoreConfig, MemoryStoreError,
    SlidingWindowStore,
};

use crate::{
    change::{ChangeAt, ChangeOutsideLog, PolicyChange},
    input::time::format_rfc3339,
    policies::{Candidate, PolicySet},
};

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
        /// The refusing candidate's position in the set. With a change, in
        /// the new set: an old candidate takes the position of the new one
        /// that replaces it, and the old ones no new one replaces follow
        /// the new set.
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
    /// The change is before the log's first request.
    #[error(transparent)]
    ChangeOutsideLog(#[from] ChangeOutsideLog),
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

/// The verdict of `policies` (at `positions` in the set) in `store`, as a
/// function body: it returns early for a cost no policy can admit. (A macro,
/// because the stores' algorithm trait cannot be named here.)
macro_rules! evaluate {
    ($store:expr, $policies:expr, $positions:expr, $subject:expr, $cost:expr, $charged:expr) => {{
        let (store, policies, positions) = ($store, $policies, $positions);
        let units = $cost.max(1);
        let mut checks = Vec::with_capacity(policies.len());
        for (index, policy) in policies.iter().enumerate() {
            match Check::weighted(policy, $subject, units) {
                Ok(check) => checks.push(check),
                Err(_) => {
                    return Ok(Verdict::Denied {
                        policy: positions[index],
                        reason: Refusal::CostAboveCapacity,
                    });
                }
            }
        }
        let charged = $charged && $cost > 0;
        if let [check] = checks.as_slice() {
            let decision = if charged {
                store.check(check)?
            } else {
                store.peek(check)?
            };
            Ok(Verdict::from_decision(positions[0], &decision))
        } else {
            let batch = if charged {
                store.check_all(&checks)?
            } else {
                let decisions = checks
                    .iter()
                    .map(|check| store.peek(check))
                    .collect::<Result<Vec<_>, _>>()?;
                BatchDecision::from_decisions(decisions)
            };
            Ok(match batch {
                BatchDecision::Denied { index, denial }
                | BatchDecision::ShadowDenied { index, denial } => {
                    Verdict::denied(positions[index], &denial)
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
            Self::FixedWindow(group) => evaluate!(
                &group.store,
                &group.policies,
                &group.positions,
                subject,
                cost,
                charged
            ),
            Self::SlidingWindow(group) => evaluate!(
                &group.store,
                &group.policies,
                &group.positions,
                subject,
                cost,
                charged
            ),
            Self::Gcra(group) => evaluate!(
                &group.store,
                &group.policies,
                &group.positions,
                subject,
                cost,
                charged
            ),
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

/// One row's policies across a change: the old (none for a new id) until
/// it, then the new, replayed twice from it.
#[derive(Debug)]
struct Changing {
    /// Runs the old policies until the change, then the new ones continuing
    /// from them: every state the old ones hold is here to carry.
    continuing: AnyStore,
    /// Empty until the change, then runs the new policies from nothing, as a
    /// deploy without continuity does.
    fresh_start: AnyStore,
    old: Vec<AnyPolicy>,
    old_positions: Vec<usize>,
    /// The new policies continuing from the old.
    new: Vec<AnyPolicy>,
    /// The new policies without a predecessor.
    new_fresh: Vec<AnyPolicy>,
    new_positions: Vec<usize>,
}

impl Changing {
    /// The continuing verdict and the fresh start's: one verdict twice
    /// before the change.
    fn evaluate(
        &self,
        changed: bool,
        subject: SubjectKey,
        cost: u64,
        charged: bool,
    ) -> Result<[Verdict; 2], MemoryStoreError> {
        if !changed {
            let verdict = if self.old.is_empty() {
                // A policy that does not exist yet refuses nothing.
                Verdict::Admitted
            } else {
                evaluate_any(
                    &self.continuing,
                    &self.old,
                    &self.old_positions,
                    subject,
                    cost,
                    charged,
                )?
            };
            return Ok([verdict; 2]);
        }
        Ok([
            evaluate_any(
                &self.continuing,
                &self.new,
                &self.new_positions,
                subject,
                cost,
                charged,
            )?,
            evaluate_any(
                &self.fresh_start,
                &self.new_fresh,
                &self.new_positions,
                subject,
                cost,
                charged,
            )?,
        ])
    }
}

fn evaluate_any(
    store: &AnyStore,
    policies: &[AnyPolicy],
    positions: &[usize],
    subject: SubjectKey,
    cost: u64,
    charged: bool,
) -> Result<Verdict, MemoryStoreError> {
    evaluate!(store, policies, positions, subject, cost, charged)
}

/// A change's rows and where the replay stands against it.
#[derive(Debug)]
struct ChangeState {
    at: ChangeAt,
    /// When the change happens, known from the first request.
    resolved: Option<i64>,
    /// Whether a request at or after the change has been evaluated.
    changed: bool,
    rows: Vec<Changing>,
    /// The fresh start's verdicts of the last request.
    fresh_start: Vec<Verdict>,
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
///
/// # A change of policies
///
/// [`with_change`](Self::with_change) replays a [`PolicyChange`]: each row
/// runs its old candidate until the change, then its new one twice, in an
/// [`AnyStore`] each: continuing from the old (the state a subject built up
/// under the old policy is carried into the new counter the first time the
/// subject is checked under it, whatever the two algorithms), and as a
/// fresh start, every counter empty at the change.
/// [`evaluate`](Self::evaluate) returns the continuing verdicts and
/// [`fresh_start_verdicts`](Self::fresh_start_verdicts) the others.
///
/// ```
/// use runlimit_core::SubjectKey;
/// use runlimit_sim::{Mode, PolicyChange, PolicySet, Simulation};
///
/// let limit = |limit| PolicySet::from_toml(&format!(r#"
///     [[policy]]
///     algorithm = "fixed_window"
///     id = "login.ip"
///     scope = "ip"
///     limit = {limit}
///     window = {{ secs = 600, nanos = 0 }}
/// "#));
/// let change = PolicyChange::new(limit(3)?, "+60s".parse()?, limit(2)?)?;
/// let mut simulation = Simulation::with_change(&change, Mode::Independent)?;
/// let subject = SubjectKey::from_digest([7; 32]);
/// let second = 1_000_000_000;
/// for at in 0..3 {
///     assert!(simulation.evaluate(at * second, subject, 1, true)?[0].is_admitted());
/// }
/// // After the change, the three requests still count against the lower limit.
/// assert!(!simulation.evaluate(60 * second, subject, 1, true)?[0].is_admitted());
/// assert!(simulation.fresh_start_verdicts()[0].is_admitted());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Simulation {
    clock: ManualClock,
    origin: Option<i64>,
    groups: Vec<AnyGroup>,
    change: Option<ChangeState>,
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
                check_batch(set.candidates(), config)?;
                vec![group(config, &clock, &indexed)]
            }
        };
        Ok(Self {
            clock,
            origin: None,
            verdicts: Vec::with_capacity(groups.len()),
            groups,
            change: None,
        })
    }

    /// Builds the stores of `change`: for each new candidate
    /// ([`Mode::Independent`]) or for the new set as one batch
    /// ([`Mode::Batch`]: the old set's batch until the change, the new set's
    /// from it, every policy changing at once), one store that runs the old
    /// policies and then the new ones continuing from them, and one that
    /// starts the new ones afresh at the change. An old candidate that no
    /// new one replaces counts only in a batch, until the change.
    ///
    /// Each store holds the larger `max_keys` of the two sets.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), for each set's batch.
    pub fn with_change(change: &PolicyChange, mode: Mode) -> Result<Self, SimulationError> {
        let clock = ManualClock::new();
        let config = change.store_config();
        let store = || AnyStore::new(config).with_clock(clock.clone());
        let new = change.after().candidates();
        let rows = match mode {
            Mode::Independent => new
                .iter()
                .enumerate()
                .map(|(index, candidate)| Changing {
                    continuing: store(),
                    fresh_start: store(),
                    old: change
                        .predecessor(index)
                        .map(Candidate::to_any)
                        .into_iter()
                        .collect(),
                    old_positions: vec![index],
                    new: vec![change.continuing(index).clone()],
                    new_fresh: vec![candidate.to_any()],
                    new_positions: vec![index],
                })
                .collect(),
            Mode::Batch => {
                let old = change.before().candidates();
                check_batch(old, &config)?;
                check_batch(new, &config)?;
                vec![Changing {
                    continuing: store(),
                    fresh_start: store(),
                    old: old.iter().map(Candidate::to_any).collect(),
                    old_positions: (0..old.len())
                        .map(|position| change.position_of_old(position))
                        .collect(),
                    new: (0..new.len())
                        .map(|index| change.continuing(index).clone())
                        .collect(),
                    new_fresh: new.iter().map(Candidate::to_any).collect(),
                    new_positions: (0..new.len()).collect(),
                }]
            }
        };
        Ok(Self {
            clock,
            origin: None,
            verdicts: Vec::with_capacity(rows.len()),
            groups: Vec::new(),
            change: Some(ChangeState {
                at: change.at(),
                resolved: None,
                changed: false,
                fresh_start: Vec::with_capacity(rows.len()),
                rows,
            }),
        })
    }

    /// Evaluates one request at `at` (nanoseconds since the Unix epoch):
    /// `cost` units for `subject`, charged if `charged` and the cost is not
    /// zero, otherwise only peeked (nothing consumed, refused if a check of
    /// its cost, at least one unit, would be).
    ///
    /// Returns a verdict per candidate ([`Mode::Independent`]) or one for
    /// the batch ([`Mode::Batch`]); with a change, per new candidate, of the
    /// policies continuing across it.
    ///
    /// # Errors
    ///
    /// [`SimulationError::ChangeOutsideLog`] when the change is before the
    /// first request evaluated, and [`SimulationError::Store`] if a store
    /// fails, which a valid simulation never does.
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
        match &mut self.change {
            None => {
                for group in &self.groups {
                    self.verdicts.push(group.evaluate(subject, cost, charged)?);
                }
            }
            Some(change) => {
                let when = *change
                    .resolved
                    .get_or_insert_with(|| change.at.resolve(origin));
                if when < origin {
                    return Err(ChangeOutsideLog::BeforeFirstRequest {
                        change_at: format_rfc3339(when),
                        first_request: format_rfc3339(origin),
                    }
                    .into());
                }
                // Once changed, always: a line a little back in time is
                // evaluated at the latest time, after the change.
                change.changed |= at >= when;
                change.fresh_start.clear();
                for row in &change.rows {
                    let [continuing, fresh_start] =
                        row.evaluate(change.changed, subject, cost, charged)?;
                    self.verdicts.push(continuing);
                    change.fresh_start.push(fresh_start);
                }
            }
        }
        Ok(&self.verdicts)
    }

    /// With a change, the verdicts of the last request under the new
    /// policies started afresh at the change, one per row as
    /// [`evaluate`](Self::evaluate)'s (before the change, the same ones);
    /// without a change, `evaluate`'s.
    #[must_use]
    pub fn fresh_start_verdicts(&self) -> &[Verdict] {
        match &self.change {
            Some(change) => &change.fresh_start,
            None => &self.verdicts,
        }
    }

    /// Whether the change has happened: a request at or after its time has
    /// been evaluated. Always `false` without a change.
    #[must_use]
    pub fn changed(&self) -> bool {
        self.change.as_ref().is_some_and(|change| change.changed)
    }

    /// When the change happens, nanoseconds since the Unix epoch, once the
    /// first request is evaluated; `None` without a change.
    #[must_use]
    pub fn change_at(&self) -> Option<i64> {
        self.change.as_ref().and_then(|change| change.resolved)
    }

    /// Keys stored in each group's store now, including expired entries not
    /// yet removed; with a change, in each row's continuing store, which
    /// holds the old policies' keys too.
    pub fn stored_keys(&self) -> impl Iterator<Item = usize> + '_ {
        let changing = self.change.iter().flat_map(|change| &change.rows);
        self.groups
            .iter()
            .map(AnyGroup::entries)
            .chain(changing.map(|row| row.continuing.stats().entries))
    }

    /// When the first request happened, nanoseconds since the Unix epoch.
    #[must_use]
    pub fn origin(&self) -> Option<i64> {
        self.origin
    }
}

/// Refuses a batch the admission layer could not check either: candidates
/// of several algorithms or quota modes, or more than a batch may hold.
fn check_batch(
    candidates: &[Candidate],
    config: &MemoryStoreConfig,
) -> Result<(), SimulationError> {
    let first = &candidates[0];
    if let Some(other) = candidates
        .iter()
        .find(|c| c.algorithm() != first.algorithm())
    {
        return Err(SimulationError::MixedAlgorithms {
            first_policy: first.id().to_owned(),
            first: first.algorithm(),
            other_policy: other.id().to_owned(),
            other: other.algorithm(),
        });
    }
    if candidates
        .iter()
        .any(|c| c.quota_mode() != first.quota_mode())
    {
        return Err(SimulationError::MixedQuotaModes);
    }
    let allowed = config.max_keys().min(config.max_batch_size());
    if candidates.len() > allowed {
        return Err(SimulationError::BatchTooLarge {
            needed: candidates.len(),
            allowed,
        });
    }
    Ok(())
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
