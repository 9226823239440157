//! A run: requests from a log, through the simulation, into tallies.

use std::{collections::BTreeMap, io::BufRead, ops::RangeInclusive, str::FromStr, time::Duration};

use runlimit_core::{
    FixedWindowPolicy, KeyHasher, PolicyId, PreparedKeyHasher, ScopeId, SubjectKey,
};

use crate::{
    change::{ChangeOutsideLog, PolicyChange},
    engine::{Mode, Refusal, Simulation, SimulationError, Verdict},
    input::{InputError, InputSpec, Malformed, Reader, Request, time::format_rfc3339},
    policies::PolicySet,
    report::{self, Report},
    sketch::{Distinct, TopDenied},
};

/// Response statuses whose requests are charged; the others are only peeked
/// (charge by outcome: count failed logins, not successful ones).
///
/// Parsed from a comma-separated list of statuses (`401`), ranges
/// (`400-499`) and classes (`4xx`, in either case: `4XX`).
///
/// ```
/// use runlimit_sim::StatusSet;
///
/// let failures: StatusSet = "401,403,5xx".parse()?;
/// assert!(failures.contains(401) && failures.contains(503));
/// assert!(!failures.contains(200));
/// assert_eq!("4XX".parse::<StatusSet>()?, "4xx".parse()?);
/// # Ok::<(), runlimit_sim::StatusSetError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet(Vec<RangeInclusive<u16>>);

/// A status list that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a status, a range like 400-499 or a class like 4xx")]
pub struct StatusSetError(String);

impl StatusSet {
    /// Whether `status` is in the set.
    #[must_use]
    pub fn contains(&self, status: u16) -> bool {
        self.0.iter().any(|range| range.contains(&status))
    }
}

impl FromStr for StatusSet {
    type Err = StatusSetError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let status = |item: &str| {
            item.parse::<u16>()
                .ok()
                .filter(|status| (100..=999).contains(status))
                .ok_or_else(|| StatusSetError(item.to_owned()))
        };
        text.split(',')
            .map(str::trim)
            .map(|item| {
                let class = item
                    .len()
                    .checked_sub(2)
                    .and_then(|digit| item.split_at_checked(digit))
                    .filter(|(_, xx)| xx.eq_ignore_ascii_case("xx"))
                    .map(|(class, _)| class);
                if let Some(class) = class {
                    let class = class
                        .parse::<u16>()
                        .ok()
                        .filter(|class| (1..=9).contains(class))
                        .ok_or_else(|| StatusSetError(item.to_owned()))?;
                    Ok(class * 100..=class * 100 + 99)
                } else if let Some((low, high)) = item.split_once('-') {
                    let (low, high) = (status(low)?, status(high)?);
                    if low > high {
                        return Err(StatusSetError(item.to_owned()));
                    }
                    Ok(low..=high)
                } else {
                    status(item).map(|status| status..=status)
                }
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

/// How a run replays and reports.
#[derive(Debug)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// Each candidate alone, or all as one batch.
    pub mode: Mode,
    /// Charge only requests with these statuses; `None` charges every one.
    pub charge: Option<StatusSet>,
    /// How many of the most denied subjects each row lists (at most
    /// [`MAX_TOP`]).
    pub top: usize,
    /// How far a line's time may go back from the latest before it: such a
    /// line is evaluated at the latest time (stores never go back); in
    /// [`Replay::run`], one further back is [`Malformed::OutOfOrder`], so
    /// that one bad timestamp cannot silently shift a whole run.
    /// ([`Replay::record`] evaluates whatever it is given.)
    pub max_backwards: Duration,
    /// Show subjects as written instead of by their keyed label.
    pub raw_subjects: bool,
    /// How many malformed lines the report lists by number (the first
    /// ones); the others are only counted. Each listed line is kept until
    /// the report, so `usize::MAX` (every one) costs memory in proportion
    /// to the malformed lines.
    pub malformed_listed: usize,
    /// The secret subjects are keyed with. A report's labels are stable for
    /// one secret; the decisions do not depend on it.
    pub hasher: KeyHasher,
}

impl ReplayOptions {
    /// Independent candidates, every request charged, ten top subjects,
    /// keyed labels, the first [`MALFORMED_LISTED`] malformed lines listed.
    #[must_use]
    pub fn new(hasher: KeyHasher) -> Self {
        Self {
            mode: Mode::Independent,
            charge: None,
            top: 10,
            max_backwards: Duration::from_secs(60),
            raw_subjects: false,
            malformed_listed: MALFORMED_LISTED,
            hasher,
        }
    }
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The input could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The simulation failed.
    #[error(transparent)]
    Simulation(#[from] SimulationError),
}

/// No line of a log could be replayed: it held none, or every line was
/// malformed. A report of nothing would read as "no one refused".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct NothingReplayed {
    lines: u64,
    reasons: Vec<SkipReason>,
}

/// Why lines were skipped: the reason, how many lines, and the fields it
/// concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SkipReason {
    why: Malformed,
    lines: u64,
    fields: Vec<String>,
}

impl NothingReplayed {
    /// The lines read, all of them malformed; zero for a log of none (or
    /// only blank lines).
    #[must_use]
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Why the lines were skipped, with how many lines each, most first.
    pub fn reasons(&self) -> impl Iterator<Item = (Malformed, u64)> + '_ {
        self.reasons.iter().map(|reason| (reason.why, reason.lines))
    }

    fn describe(&self) -> String {
        if self.lines == 0 {
            return "nothing to replay: the log has no lines (blank lines are skipped)".to_owned();
        }
        let reasons: Vec<String> = self
            .reasons
            .iter()
            .map(|reason| {
                let fields = match reason.fields.as_slice() {
                    [] => String::new(),
                    [field] => format!(" (field `{field}`)"),
                    fields => format!(" (fields `{}`)", fields.join("`, `")),
                };
                format!("{} {}{fields}", reason.lines, reason.why)
            })
            .collect();
        let lines = if self.lines == 1 {
            "one line is".to_owned()
        } else {
            format!("{} lines are all", self.lines)
        };
        format!(
            "nothing to replay: the log's {lines} malformed: {}",
            reasons.join(", ")
        )
    }
}

/// The most subjects a row lists as most denied: the table behind them
/// holds 64 times as many.
pub const MAX_TOP: usize = 1_000;

/// How many malformed lines a report lists by number unless
/// [`ReplayOptions::malformed_listed`] says otherwise.
pub const MALFORMED_LISTED: usize = 10;

/// Distinct subjects counted exactly before estimating.
const EXACT_SUBJECTS: usize = 1 << 20;

/// Stored keys are sampled once per this many requests, and at the end.
pub const KEY_SAMPLE_INTERVAL: u64 = 64;

/// The most minutes a chart's series holds; later requests land in the last.
const MAX_MINUTES: usize = 1 << 20;

/// A run in progress: feed it requests (or a whole [`Reader`]), then take
/// its [`Report`].
#[derive(Debug)]
pub struct Replay {
    simulation: Simulation,
    set: PolicySet,
    options: ReplayOptions,
    keys: PreparedKeyHasher,
    labels: PreparedKeyHasher,
    subject_policy: FixedWindowPolicy,
    input: report::InputTally,
    rows: Vec<Tally>,
    verdicts: Vec<Verdict>,
    /// The ids of the positions verdicts name.
    names: Vec<String>,
    change: Option<ChangeTally>,
}

#[derive(Debug)]
pub(crate) struct Tally {
    pub(crate) requests: u64,
    pub(crate) admitted: u64,
    pub(crate) denied: u64,
    pub(crate) capacity: u64,
    pub(crate) cost: u64,
    pub(crate) denied_by: Vec<u64>,
    pub(crate) subjects: Distinct,
    pub(crate) top: TopDenied,
    pub(crate) retry_seconds: BTreeMap<u64, u64>,
    pub(crate) minutes: Vec<[u64; 2]>,
    pub(crate) peak_keys: usize,
}

/// A change's tallies: how many requests fell on each side of it, and each
/// row's.
#[derive(Debug)]
pub(crate) struct ChangeTally {
    pub(crate) change: PolicyChange,
    pub(crate) requests_before: u64,
    pub(crate) requests_after: u64,
    pub(crate) rows: Vec<ChangeRowTally>,
}

/// One row's counts across a change, each as `[admitted, denied]`.
#[derive(Debug)]
pub(crate) struct ChangeRowTally {
    /// Before the change, the same in both runs.
    pub(crate) before: [u64; 2],
    /// After it, continuing.
    pub(crate) continuing: [u64; 2],
    /// After it, started afresh.
    pub(crate) fresh_start: [u64; 2],
    /// Requests the fresh start admitted and continuing denied.
    pub(crate) given_away: u64,
    pub(crate) given_away_subjects: Distinct,
    /// Requests continuing admitted and the fresh start denied.
    pub(crate) held_back: u64,
    pub(crate) held_back_subjects: Distinct,
}

/// How many rows a report of `set` has.
fn rows_of(set: &PolicySet, mode: Mode) -> usize {
    match mode {
        Mode::Independent => set.candidates().len(),
        Mode::Batch => 1,
    }
}

impl Replay {
    /// Prepares a run of `set`.
    ///
    /// # Errors
    ///
    /// As [`Simulation::new`].
    pub fn new(set: &PolicySet, options: ReplayOptions) -> Result<Self, SimulationError> {
        let simulation = Simulation::new(set, options.mode)?;
        let names = set
            .candidates()
            .iter()
            .map(|candidate| candidate.id().to_owned())
            .collect();
        Ok(Self::with_simulation(simulation, set, names, None, options))
    }

    /// Prepares a run of `change`: each row (each new candidate, or their
    /// batch) replays its old policies until the change and its new ones
    /// from it, continuing from the old, and the report compares each with
    /// a fresh start at the change ([`Report::change`]).
    ///
    /// # Errors
    ///
    /// As [`Simulation::with_change`].
    pub fn with_change(
        change: &PolicyChange,
        options: ReplayOptions,
    ) -> Result<Self, SimulationError> {
        let simulation = Simulation::with_change(change, options.mode)?;
        let rows = rows_of(change.after(), options.mode);
        let tally = ChangeTally {
            change: change.clone(),
            requests_before: 0,
            requests_after: 0,
            rows: (0..rows)
                .map(|_| ChangeRowTally {
                    before: [0; 2],
                    continuing: [0; 2],
                    fresh_start: [0; 2],
                    given_away: 0,
                    given_away_subjects: Distinct::new(EXACT_SUBJECTS),
                    held_back: 0,
                    held_back_subjects: Distinct::new(EXACT_SUBJECTS),
                })
                .collect(),
        };
        Ok(Self::with_simulation(
            simulation,
            change.after(),
            change.names(),
            Some(tally),
            options,
        ))
    }

    fn with_simulation(
        simulation: Simulation,
        set: &PolicySet,
        names: Vec<String>,
        change: Option<ChangeTally>,
        options: ReplayOptions,
    ) -> Self {
        let rows = rows_of(set, options.mode);
        // Keys and labels are derived under a policy of their own, so one
        // subject has one key and one label across every candidate.
        #[allow(clippy::unwrap_used)]
        let subject_policy = FixedWindowPolicy::new(
            PolicyId::new("runlimit.sim").unwrap(),
            ScopeId::new("subject").unwrap(),
            1,
            Duration::from_secs(1),
        )
        .unwrap();
        let mut options = options;
        options.top = options.top.min(MAX_TOP);
        let keep = options.top.saturating_mul(64).max(1_024);
        Self {
            simulation,
            keys: store_key_hasher().prepared_for(&subject_policy),
            labels: options.hasher.prepared_for(&subject_policy),
            subject_policy,
            input: report::InputTally::new(EXACT_SUBJECTS, options.malformed_listed),
            rows: (0..rows)
                .map(|_| Tally {
                    requests: 0,
                    admitted: 0,
                    denied: 0,
                    capacity: 0,
                    cost: 0,
                    denied_by: vec![0; names.len()],
                    subjects: Distinct::new(EXACT_SUBJECTS),
                    top: TopDenied::new(keep),
                    retry_seconds: BTreeMap::new(),
                    minutes: Vec::new(),
                    peak_keys: 0,
                })
                .collect(),
            verdicts: Vec::with_capacity(rows),
            names,
            change,
            set: set.clone(),
            options,
        }
    }

    /// The subject key the stores count `request` under.
    ///
    /// It is derived under a fixed key, not the options' secret: a full
    /// store's bounded cleanup can depend on key bytes, and decisions must
    /// not depend on how labels are keyed.
    #[must_use]
    pub fn subject_key(&self, request: &Request) -> SubjectKey {
        self.keys.hash_for(&self.subject_policy, &request.subject)
    }

    /// Evaluates one request and tallies it. Returns the verdicts, one per
    /// row of the report: with a change, of the policies continuing across
    /// it ([`fresh_start_verdicts`](Self::fresh_start_verdicts) has the
    /// fresh start's).
    ///
    /// # Errors
    ///
    /// As [`Simulation::evaluate`].
    pub fn record(&mut self, request: &Request) -> Result<&[Verdict], SimulationError> {
        let key = self.subject_key(request);
        // Stored keys are uniform: 64 of their bits identify a subject in
        // counts (a collision among a billion subjects is about 3%).
        let bytes = key.as_bytes();
        let subject = u64::from_be_bytes([
            bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
        ]);
        let charged = match (&self.options.charge, request.status) {
            (None, _) => true,
            (Some(set), Some(status)) => set.contains(status),
            (Some(_), None) => false,
        };
        self.input
            .request(request.at, subject, charged && request.cost > 0);
        let verdicts = self
            .simulation
            .evaluate(request.at, key, request.cost, charged)?;
        self.verdicts.clear();
        self.verdicts.extend_from_slice(verdicts);
        let origin = self.simulation.origin().unwrap_or(request.at);
        let minute = usize::try_from(request.at.saturating_sub(origin) / 60_000_000_000)
            .unwrap_or(0)
            .min(MAX_MINUTES - 1);
        let mut label = None;
        for (tally, verdict) in self.rows.iter_mut().zip(&self.verdicts) {
            tally.requests += 1;
            if tally.minutes.len() <= minute {
                tally.minutes.resize(minute + 1, [0, 0]);
            }
            match *verdict {
                Verdict::Admitted => {
                    tally.admitted += 1;
                    tally.minutes[minute][0] += 1;
                }
                Verdict::Denied { policy, reason } => {
                    tally.denied += 1;
                    tally.minutes[minute][1] += 1;
                    tally.denied_by[policy] += 1;
                    match reason {
                        Refusal::Quota { retry_after } => {
                            if let Some(wait) = retry_after {
                                *tally
                                    .retry_seconds
                                    .entry(runlimit_core::ceil_seconds(wait))
                                    .or_default() += 1;
                            }
                        }
                        Refusal::StorageCapacity => tally.capacity += 1,
                        Refusal::CostAboveCapacity => tally.cost += 1,
                    }
                    tally.subjects.insert(subject);
                    tally.top.add(subject, || {
                        label
                            .get_or_insert_with(|| {
                                label_of(
                                    &self.labels,
                                    &self.subject_policy,
                                    self.options.raw_subjects,
                                    request,
                                )
                            })
                            .clone()
                    });
                }
            }
        }
        if let Some(change) = &mut self.change {
            change.record(
                self.simulation.changed(),
                &self.verdicts,
                self.simulation.fresh_start_verdicts(),
                subject,
            );
        }
        if self.input.requests().is_multiple_of(KEY_SAMPLE_INTERVAL) {
            self.sample_keys();
        }
        Ok(&self.verdicts)
    }

    /// With a change, the verdicts of the last request recorded under the
    /// new policies started afresh at the change, one per row (before the
    /// change, the same as [`record`](Self::record)'s); without a change,
    /// `record`'s.
    #[must_use]
    pub fn fresh_start_verdicts(&self) -> &[Verdict] {
        self.simulation.fresh_start_verdicts()
    }

    fn sample_keys(&mut self) {
        for (tally, keys) in self.rows.iter_mut().zip(self.simulation.stored_keys()) {
            tally.peak_keys = tally.peak_keys.max(keys);
        }
    }

    /// Counts a line that could not be used.
    pub fn skip(&mut self, line: u64, why: Malformed) {
        self.input.malformed(line, why);
    }

    /// Replays every line of `reader`, calling `progress` with the bytes
    /// consumed every 65,536 lines.
    ///
    /// # Errors
    ///
    /// [`ReplayError::Input`] when reading fails, and
    /// [`ReplayError::Simulation`] as [`record`](Self::record).
    pub fn run<R: BufRead>(
        &mut self,
        reader: &mut Reader<R>,
        mut progress: impl FnMut(u64),
    ) -> Result<(), ReplayError> {
        let mut lines = 0u64;
        let mut latest: Option<i64> = None;
        let backwards = i64::try_from(self.options.max_backwards.as_nanos()).unwrap_or(i64::MAX);
        loop {
            match reader.next_request()? {
                None => break,
                Some((line, Ok(request))) => {
                    if latest.is_some_and(|latest| request.at < latest.saturating_sub(backwards)) {
                        self.skip(line, Malformed::OutOfOrder);
                    } else {
                        latest = Some(latest.map_or(request.at, |latest| latest.max(request.at)));
                        self.record(request)?;
                    }
                }
                Some((line, Err(why))) => self.skip(line, why),
            }
            lines += 1;
            if lines.is_multiple_of(65_536) {
                progress(reader.consumed());
            }
        }
        progress(reader.consumed());
        Ok(())
    }

    /// Checks that at least one request was replayed, so that a log the
    /// input specification `spec` does not fit (a JSON log without the
    /// address field, say) is not mistaken for one that nobody would be
    /// refused on.
    ///
    /// # Errors
    ///
    /// [`NothingReplayed`] when no request was replayed: it counts the lines
    /// and says why they were skipped, naming the fields (from `spec`).
    pub fn require_requests(&self, spec: &InputSpec) -> Result<(), NothingReplayed> {
        if self.input.requests() > 0 {
            return Ok(());
        }
        let mut reasons: Vec<SkipReason> = self
            .input
            .reasons()
            .map(|(why, lines)| SkipReason {
                why,
                lines,
                fields: spec.fields_of(why).into_iter().map(str::to_owned).collect(),
            })
            .collect();
        reasons.sort_by_key(|reason| std::cmp::Reverse(reason.lines));
        Err(NothingReplayed {
            lines: reasons.iter().map(|reason| reason.lines).sum(),
            reasons,
        })
    }

    /// Checks that the change (if any) happened within the log: that a
    /// request at or after its time was replayed, so that the report's
    /// comparison is not of nothing. A change before the first request
    /// is refused at that request ([`SimulationError::ChangeOutsideLog`]).
    ///
    /// # Errors
    ///
    /// [`ChangeOutsideLog::AfterLastRequest`] when every request replayed
    /// was before the change.
    pub fn require_change(&self) -> Result<(), ChangeOutsideLog> {
        match (self.simulation.change_at(), self.input.last()) {
            (Some(at), Some(last)) if !self.simulation.changed() => {
                Err(ChangeOutsideLog::AfterLastRequest {
                    change_at: format_rfc3339(at),
                    last_request: format_rfc3339(last),
                })
            }
            _ => Ok(()),
        }
    }

    /// The report so far.
    #[must_use]
    pub fn report(&mut self) -> Report {
        self.sample_keys();
        report::build(&report::Sources {
            set: &self.set,
            names: &self.names,
            options: &self.options,
            input: &self.input,
            rows: &self.rows,
            change: self.change.as_ref().zip(self.simulation.change_at()),
            origin: self.simulation.origin(),
        })
    }
}

impl ChangeTally {
    fn record(
        &mut self,
        changed: bool,
        continuing: &[Verdict],
        fresh_start: &[Verdict],
        subject: u64,
    ) {
        // `[admitted, denied]`'s index of a verdict.
        let column = |verdict: &Verdict| usize::from(!verdict.is_admitted());
        if !changed {
            self.requests_before += 1;
            for (row, verdict) in self.rows.iter_mut().zip(continuing) {
                row.before[column(verdict)] += 1;
            }
            return;
        }
        self.requests_after += 1;
        for ((row, continuing), fresh_start) in
            self.rows.iter_mut().zip(continuing).zip(fresh_start)
        {
            row.continuing[column(continuing)] += 1;
            row.fresh_start[column(fresh_start)] += 1;
            match (continuing.is_admitted(), fresh_start.is_admitted()) {
                (false, true) => {
                    row.given_away += 1;
                    row.given_away_subjects.insert(subject);
                }
                (true, false) => {
                    row.held_back += 1;
                    row.held_back_subjects.insert(subject);
                }
                _ => {}
            }
        }
    }
}

/// How a report names `request`'s subject: `k:` and 64 bits of its key under
/// the report's secret, or the subject as written.
fn label_of(
    labels: &PreparedKeyHasher,
    policy: &FixedWindowPolicy,
    raw_subjects: bool,
    request: &Request,
) -> String {
    if raw_subjects {
        return request.subject_text();
    }
    let key = labels.hash_for(policy, &request.subject);
    let bytes = key.as_bytes();
    let high = u64::from_be_bytes([
        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
    ]);
    format!("k:{high:016x}")
}

/// The fixed key store keys are derived under. It guards nothing: store keys
/// never leave the process, and labels use the report's own secret.
fn store_key_hasher() -> KeyHasher {
    #[allow(clippy::unwrap_used)]
    KeyHasher::new(b"runlimit-sim store keys, fixed so decisions never vary").unwrap()
}
