//! What a run found, per candidate: as a terminal table, JSON or CSV.

use std::{collections::BTreeMap, fmt::Write as _, io, time::Duration};

use serde::Serialize;

use crate::{
    change::ChangeAt,
    engine::Mode,
    input::{Malformed, time::format_rfc3339},
    policies::{Candidate, PolicySet},
    replay::{ChangeTally, ReplayOptions, Tally},
    sketch::Distinct,
};

/// The whole report of a run.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// How candidates were evaluated.
    pub mode: Mode,
    /// Lines read: requests and malformed lines. Blank lines (empty, or
    /// only spaces and tabs) are skipped and not counted.
    pub lines: u64,
    /// Requests replayed.
    pub requests: u64,
    /// Requests only peeked: their status was not charged, or they cost
    /// nothing.
    pub uncharged: u64,
    /// Lines that could not be used.
    pub malformed: MalformedSummary,
    /// The first request's time (RFC 3339).
    pub first_request: Option<String>,
    /// The last request's time (RFC 3339).
    pub last_request: Option<String>,
    /// Distinct subjects seen.
    pub subjects: u64,
    /// Whether `subjects` is exact (it is an estimate past a million).
    pub subjects_exact: bool,
    /// How subjects are shown: `keyed` (an HMAC label) or `raw`.
    pub subject_labels: &'static str,
    /// One row per candidate, or one for the batch; with a change, per new
    /// candidate (or their batch), of the policies continuing across it.
    pub rows: Vec<Row>,
    /// With a change of policies: what it did beside a fresh start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<ChangeReport>,
}

/// What a change of policies admitted and denied beside a fresh start: what
/// a deploy without continuity (every counter empty at the change) would
/// have given away.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ChangeReport {
    /// When the policies changed (RFC 3339): requests at or after it ran
    /// under the new ones.
    pub at: String,
    /// How long after the first request, as `--change-at` takes it: `+30m`.
    pub since_first_request: String,
    /// Requests replayed before the change.
    pub requests_before: u64,
    /// Requests replayed from the change on.
    pub requests_after: u64,
    /// The ids of the old candidates no new one replaces: they counted
    /// until the change, in a batch only.
    pub retired: Vec<String>,
    /// One per row of the report, in its order.
    pub rows: Vec<ChangeRow>,
    /// The minute from the first request the change falls in, for charts.
    #[serde(skip)]
    pub minute: usize,
}

/// One row across a change: the old policies until it, then the new ones,
/// continuing and as a fresh start.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ChangeRow {
    /// The new candidate's id, or `batch`.
    pub policy: String,
    /// The replaced candidate's algorithm; `None` for a new id.
    pub from_algorithm: Option<String>,
    /// The replaced candidate's quota; `None` for a new id.
    pub from_quota: Option<String>,
    /// The new candidate's algorithm.
    pub algorithm: String,
    /// The new candidate's quota.
    pub quota: String,
    /// Before the change, the same in both runs. A new id admits everything
    /// before the change: it did not exist.
    pub before_change: Counts,
    /// The new policies continuing from the old.
    pub continuing: RunCounts,
    /// The new policies with every counter empty at the change.
    pub fresh_start: RunCounts,
    /// Requests the fresh start admitted and continuing denied: what a
    /// reset would have given away.
    pub given_away: Difference,
    /// Requests continuing admitted and the fresh start denied (a fresh
    /// start that spends its quota early, or anchors its windows later,
    /// refuses some that continuing admits).
    pub held_back: Difference,
}

/// Requests admitted and denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Counts {
    /// Admitted.
    pub admitted: u64,
    /// Denied, for any reason.
    pub denied: u64,
}

/// One run of a change's new policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RunCounts {
    /// From the change on.
    pub after_change: Counts,
    /// Over the whole log, the requests before the change included.
    pub overall: Counts,
}

/// Requests one run decided otherwise than the other, and their subjects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Difference {
    /// Requests.
    pub requests: u64,
    /// Distinct subjects of those requests.
    pub subjects: u64,
    /// Whether `subjects` is exact (it is an estimate past a million).
    pub subjects_exact: bool,
}

/// Malformed lines: how many, why, and the first ones by number.
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct MalformedSummary {
    /// Lines skipped.
    pub count: u64,
    /// Lines skipped per reason.
    pub by_reason: BTreeMap<String, u64>,
    /// The first lines skipped, with their reason: as many as
    /// [`ReplayOptions::malformed_listed`], ten by default.
    pub first: Vec<MalformedLine>,
}

/// One skipped line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct MalformedLine {
    /// 1-based line number (for CSV, the record's first line).
    pub line: u64,
    /// Why it was skipped.
    pub reason: String,
}

/// What one candidate (or the batch) did.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Row {
    /// The candidate's id, or `batch` for all of them together. With a
    /// change, the new candidate's: the row counts its old one until the
    /// change, and [`ChangeRow`] names both.
    pub policy: String,
    /// Its algorithm.
    pub algorithm: String,
    /// Its quota, as `100 per 1m` or `10 per 1s, burst 20`.
    pub quota: String,
    /// Requests evaluated.
    pub requests: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests refused, for any reason.
    pub denied: u64,
    /// `denied / requests`.
    pub denied_share: f64,
    /// Refused because the store was full of live keys.
    pub denied_for_capacity: u64,
    /// Refused because the cost exceeds what the policy can ever admit.
    pub denied_for_cost: u64,
    /// Distinct subjects refused at least once.
    pub subjects_denied: u64,
    /// Whether `subjects_denied` is exact.
    pub subjects_denied_exact: bool,
    /// `subjects_denied` over every subject of the log.
    pub subjects_denied_share: f64,
    /// `Retry-After` of quota refusals, in whole seconds.
    pub retry_after_seconds: Option<Quantiles>,
    /// The most keys the store held (sampled every 64 requests and at the
    /// end). With a change, the continuing store's, which holds the old
    /// policies' keys too.
    pub peak_keys: u64,
    /// `peak_keys` times the memory store's documented cost per key (with
    /// a change, of a key in a store of all three algorithms: 64-byte
    /// entries).
    pub peak_bytes: u64,
    /// The most refused subjects, most first.
    pub top_denied: Vec<TopSubject>,
    /// How much a `top_denied` count may exceed the truth: zero while exact.
    pub top_denied_error: u64,
    /// For a batch: refusals per candidate.
    pub denied_by: BTreeMap<String, u64>,
    /// Admitted and denied per minute from the first request, for charts.
    #[serde(skip)]
    pub per_minute: Vec<[u64; 2]>,
}

/// Nearest-rank percentiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Quantiles {
    /// The median.
    pub p50: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The largest.
    pub max: u64,
}

/// A refused subject and how often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TopSubject {
    /// `k:` and 64 bits of the subject's HMAC key, or the subject as written.
    pub subject: String,
    /// Refusals.
    pub denied: u64,
}

#[derive(Debug)]
pub(crate) struct InputTally {
    requests: u64,
    uncharged: u64,
    first: Option<i64>,
    last: Option<i64>,
    subjects: Distinct,
    malformed: u64,
    reasons: BTreeMap<Malformed, u64>,
    /// The first malformed lines, as numbers and reasons: a line costs 16
    /// bytes until the report, however many are listed.
    listed: Vec<(u64, Malformed)>,
    listed_max: usize,
}

impl InputTally {
    pub(crate) fn new(exact_subjects: usize, listed_max: usize) -> Self {
        Self {
            requests: 0,
            uncharged: 0,
            first: None,
            last: None,
            subjects: Distinct::new(exact_subjects),
            malformed: 0,
            reasons: BTreeMap::new(),
            listed: Vec::new(),
            listed_max,
        }
    }

    pub(crate) fn requests(&self) -> u64 {
        self.requests
    }

    /// The last request's time.
    pub(crate) fn last(&self) -> Option<i64> {
        self.last
    }

    /// Lines skipped per reason.
    pub(crate) fn reasons(&self) -> impl Iterator<Item = (Malformed, u64)> + '_ {
        self.reasons.iter().map(|(&why, &lines)| (why, lines))
    }

    pub(crate) fn request(&mut self, at: i64, subject: u64, charged: bool) {
        self.requests += 1;
        self.uncharged += u64::from(!charged);
        self.first.get_or_insert(at);
        self.last = Some(at);
        self.subjects.insert(subject);
    }

    pub(crate) fn malformed(&mut self, line: u64, why: Malformed) {
        self.malformed += 1;
        *self.reasons.entry(why).or_default() += 1;
        if self.listed.len() < self.listed_max {
            self.listed.push((line, why));
        }
    }
}

/// What a report is built from.
pub(crate) struct Sources<'a> {
    /// The candidates the rows are of: with a change, the new ones.
    pub(crate) set: &'a PolicySet,
    /// The ids of the positions verdicts name.
    pub(crate) names: &'a [String],
    pub(crate) options: &'a ReplayOptions,
    pub(crate) input: &'a InputTally,
    pub(crate) rows: &'a [Tally],
    /// A change's tallies and its time, once known.
    pub(crate) change: Option<(&'a ChangeTally, i64)>,
    /// When the first request happened.
    pub(crate) origin: Option<i64>,
}

/// The memory store's documented cost of a key in a store of all three
/// algorithms, as a change replays in: a 64-byte entry.
const ANY_BYTES_PER_KEY: u64 = 152;

pub(crate) fn build(sources: &Sources<'_>) -> Report {
    let Sources {
        set,
        names,
        options,
        input,
        rows,
        change,
        origin,
    } = *sources;
    let (subjects, subjects_exact) = input.subjects.count();
    let candidates = set.candidates();
    let share = |part: u64, whole: u64| {
        #[allow(clippy::cast_precision_loss)]
        // An exact part over an estimated whole may exceed it: a share is at
        // most all.
        if whole == 0 {
            0.0
        } else {
            (part as f64 / whole as f64).min(1.0)
        }
    };
    let rows = rows
        .iter()
        .enumerate()
        .map(|(index, tally)| {
            let (policy, members): (String, Vec<&Candidate>) = match options.mode {
                Mode::Batch => ("batch".to_owned(), candidates.iter().collect()),
                Mode::Independent => (candidates[index].id().to_owned(), vec![&candidates[index]]),
            };
            let bytes_per_key = if change.is_some() {
                ANY_BYTES_PER_KEY
            } else {
                members[0].bytes_per_key()
            };
            let (subjects_denied, subjects_denied_exact) = tally.subjects.count();
            Row {
                policy,
                algorithm: members[0].algorithm().to_owned(),
                quota: quota_of(&members, options.mode),
                requests: tally.requests,
                admitted: tally.admitted,
                denied: tally.denied,
                denied_share: share(tally.denied, tally.requests),
                denied_for_capacity: tally.capacity,
                denied_for_cost: tally.cost,
                subjects_denied,
                subjects_denied_exact,
                subjects_denied_share: share(subjects_denied, subjects),
                retry_after_seconds: quantiles(&tally.retry_seconds),
                peak_keys: tally.peak_keys as u64,
                peak_bytes: tally.peak_keys as u64 * bytes_per_key,
                top_denied: tally
                    .top
                    .top(options.top)
                    .into_iter()
                    .map(|(_, denied)| TopSubject {
                        subject: denied.label.clone(),
                        denied: denied.count,
                    })
                    .collect(),
                top_denied_error: tally.top.error(),
                denied_by: match options.mode {
                    Mode::Batch => names
                        .iter()
                        .zip(&tally.denied_by)
                        .map(|(name, &denied)| (name.clone(), denied))
                        .collect(),
                    Mode::Independent => BTreeMap::new(),
                },
                per_minute: tally.minutes.clone(),
            }
        })
        .collect();
    let malformed = MalformedSummary {
        count: input.malformed,
        by_reason: input
            .reasons
            .iter()
            .map(|(why, &count)| (why.to_string(), count))
            .collect(),
        first: input
            .listed
            .iter()
            .map(|&(line, why)| MalformedLine {
                line,
                reason: why.to_string(),
            })
            .collect(),
    };
    Report {
        mode: options.mode,
        lines: input.requests + malformed.count,
        requests: input.requests,
        uncharged: input.uncharged,
        malformed,
        first_request: input.first.map(format_rfc3339),
        last_request: input.last.map(format_rfc3339),
        subjects,
        subjects_exact,
        subject_labels: if options.raw_subjects { "raw" } else { "keyed" },
        change: change.map(|(tally, at)| change_report(tally, at, origin, options.mode)),
        rows,
    }
}

fn change_report(tally: &ChangeTally, at: i64, origin: Option<i64>, mode: Mode) -> ChangeReport {
    let change = &tally.change;
    let since = u64::try_from(at.saturating_sub(origin.unwrap_or(at))).unwrap_or(0);
    let counts = |[admitted, denied]: [u64; 2]| Counts { admitted, denied };
    let difference = |requests: u64, subjects: &Distinct| {
        let (subjects, subjects_exact) = subjects.count();
        Difference {
            requests,
            subjects,
            subjects_exact,
        }
    };
    let rows = tally
        .rows
        .iter()
        .enumerate()
        .map(|(index, row)| {
            let (policy, from, to): (String, Vec<&Candidate>, Vec<&Candidate>) = match mode {
                Mode::Batch => (
                    "batch".to_owned(),
                    change.before().candidates().iter().collect(),
                    change.after().candidates().iter().collect(),
                ),
                Mode::Independent => (
                    change.after().candidates()[index].id().to_owned(),
                    change.predecessor(index).into_iter().collect(),
                    vec![&change.after().candidates()[index]],
                ),
            };
            let run = |after: [u64; 2]| RunCounts {
                after_change: counts(after),
                overall: counts([row.before[0] + after[0], row.before[1] + after[1]]),
            };
            ChangeRow {
                policy,
                from_algorithm: from.first().map(|c| c.algorithm().to_owned()),
                from_quota: (!from.is_empty()).then(|| quota_of(&from, mode)),
                algorithm: to[0].algorithm().to_owned(),
                quota: quota_of(&to, mode),
                before_change: counts(row.before),
                continuing: run(row.continuing),
                fresh_start: run(row.fresh_start),
                given_away: difference(row.given_away, &row.given_away_subjects),
                held_back: difference(row.held_back, &row.held_back_subjects),
            }
        })
        .collect();
    ChangeReport {
        at: format_rfc3339(at),
        since_first_request: ChangeAt::AfterFirstRequest(Duration::from_nanos(since)).to_string(),
        requests_before: tally.requests_before,
        requests_after: tally.requests_after,
        retired: change.retired().map(|c| c.id().to_owned()).collect(),
        rows,
        minute: usize::try_from(since / 60_000_000_000).unwrap_or(usize::MAX),
    }
}

/// A row's quota: a candidate's, or a batch's as `id: quota; …`.
fn quota_of(candidates: &[&Candidate], mode: Mode) -> String {
    match mode {
        Mode::Batch => candidates
            .iter()
            .map(|candidate| format!("{}: {candidate}", candidate.id()))
            .collect::<Vec<_>>()
            .join("; "),
        Mode::Independent => candidates
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    }
}

fn quantiles(histogram: &BTreeMap<u64, u64>) -> Option<Quantiles> {
    let total: u64 = histogram.values().sum();
    if total == 0 {
        return None;
    }
    // Nearest rank: the smallest value with at least p% of the samples at or
    // below it.
    let rank = |percent: u64| {
        let wanted = (total * percent).div_ceil(100).max(1);
        let mut seen = 0;
        for (&value, &count) in histogram {
            seen += count;
            if seen >= wanted {
                return value;
            }
        }
        0
    };
    Some(Quantiles {
        p50: rank(50),
        p99: rank(99),
        max: histogram.keys().next_back().copied().unwrap_or(0),
    })
}

impl Report {
    /// The comparison table an operator reads in a terminal.
    #[must_use]
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let span = match (&self.first_request, &self.last_request) {
            (Some(first), Some(last)) => format!(", {first} to {last}"),
            _ => String::new(),
        };
        let approx = if self.subjects_exact { "" } else { "≈" };
        let _ = writeln!(
            out,
            "{} from {approx}{}{span}; {} uncharged; {}",
            count(self.requests, "request", "requests"),
            count(self.subjects, "subject", "subjects"),
            self.uncharged,
            count(self.malformed.count, "malformed line", "malformed lines"),
        );
        let header = [
            "policy",
            "quota",
            "admitted",
            "denied",
            "denied %",
            "subjects denied",
            "retry p50/p99/max",
            "peak keys",
            "peak bytes",
        ];
        let cells: Vec<[String; 9]> = self
            .rows
            .iter()
            .map(|row| {
                let approx = if row.subjects_denied_exact { "" } else { "≈" };
                [
                    row.policy.clone(),
                    row.quota.clone(),
                    row.admitted.to_string(),
                    row.denied.to_string(),
                    format!("{:.2}", row.denied_share * 100.0),
                    format!(
                        "{approx}{} ({:.2}%)",
                        row.subjects_denied,
                        row.subjects_denied_share * 100.0
                    ),
                    row.retry_after_seconds.map_or_else(
                        || "-".to_owned(),
                        |q| format!("{}s/{}s/{}s", q.p50, q.p99, q.max),
                    ),
                    row.peak_keys.to_string(),
                    human_bytes(row.peak_bytes),
                ]
            })
            .collect();
        let widths: Vec<usize> = (0..header.len())
            .map(|column| {
                cells
                    .iter()
                    .map(|row| row[column].chars().count())
                    .chain([header[column].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut line = |values: &mut dyn Iterator<Item = &str>| {
            let mut text = String::new();
            for (column, value) in values.enumerate() {
                let pad = widths[column].saturating_sub(value.chars().count());
                // Text columns left-aligned, numbers right-aligned.
                if column < 2 {
                    let _ = write!(text, "{value}{}  ", " ".repeat(pad));
                } else {
                    let _ = write!(text, "{}{value}  ", " ".repeat(pad));
                }
            }
            let _ = writeln!(out, "{}", text.trim_end());
        };
        line(&mut header.iter().copied());
        for row in &cells {
            line(&mut row.iter().map(String::as_str));
        }
        for row in &self.rows {
            if !row.denied_by.is_empty() {
                let by: Vec<String> = row
                    .denied_by
                    .iter()
                    .map(|(policy, denied)| format!("{policy} {denied}"))
                    .collect();
                let _ = writeln!(out, "\n{} refused by: {}", row.policy, by.join(", "));
            }
            if row.denied_for_capacity + row.denied_for_cost > 0 {
                let _ = writeln!(
                    out,
                    "{}: {} refused because the store was full, {} because the cost exceeds the policy",
                    row.policy, row.denied_for_capacity, row.denied_for_cost
                );
            }
        }
        if let Some(change) = &self.change {
            change.write_table(&mut out);
        }
        let shown = if self.subject_labels == "raw" {
            "as written"
        } else {
            "by keyed label"
        };
        for row in &self.rows {
            if row.top_denied.is_empty() {
                continue;
            }
            let _ = writeln!(out, "\nmost denied for {} ({shown}):", row.policy);
            for top in &row.top_denied {
                let _ = writeln!(out, "  {:>10}  {}", top.denied, top.subject);
            }
            if row.top_denied_error > 0 {
                let _ = writeln!(
                    out,
                    "  (counts may be high by up to {})",
                    row.top_denied_error
                );
            }
        }
        if self.malformed.count > 0 {
            let reasons: Vec<String> = self
                .malformed
                .by_reason
                .iter()
                .map(|(reason, count)| format!("{count} {reason}"))
                .collect();
            let listed: Vec<String> = self
                .malformed
                .first
                .iter()
                .map(|line| format!("line {} ({})", line.line, line.reason))
                .collect();
            let which = match listed.len() as u64 {
                0 => String::new(),
                all if all == self.malformed.count => format!("; {}", listed.join(", ")),
                some => format!(
                    "; the first {some} of {}: {}",
                    self.malformed.count,
                    listed.join(", ")
                ),
            };
            let _ = writeln!(
                out,
                "\nmalformed lines skipped: {}{which}",
                reasons.join(", ")
            );
        }
        out
    }

    /// The rows as CSV, one per candidate (top subjects as
    /// `subject=count` joined by `;`). With a change, each row goes on with
    /// its [`ChangeRow`]: `from_algorithm`, `from_quota` (empty for a new
    /// id), `before_change_admitted`, `before_change_denied`, then
    /// `admitted_after_change` and `denied_after_change` of the continuing
    /// run, then of the fresh start (`fresh_start_admitted_after_change`,
    /// …) and its `fresh_start_admitted` and `fresh_start_denied` overall,
    /// then `given_away`, `given_away_subjects`, `held_back` and
    /// `held_back_subjects`.
    ///
    /// # Errors
    ///
    /// Writing to `out` failed.
    pub fn write_csv(&self, out: impl io::Write) -> io::Result<()> {
        let mut writer = csv::Writer::from_writer(out);
        let mut header = vec![
            "policy",
            "algorithm",
            "quota",
            "requests",
            "admitted",
            "denied",
            "denied_share",
            "denied_for_capacity",
            "denied_for_cost",
            "subjects_denied",
            "subjects_denied_share",
            "retry_after_p50_s",
            "retry_after_p99_s",
            "retry_after_max_s",
            "peak_keys",
            "peak_bytes",
            "top_denied",
        ];
        if self.change.is_some() {
            header.extend([
                "from_algorithm",
                "from_quota",
                "before_change_admitted",
                "before_change_denied",
                "admitted_after_change",
                "denied_after_change",
                "fresh_start_admitted_after_change",
                "fresh_start_denied_after_change",
                "fresh_start_admitted",
                "fresh_start_denied",
                "given_away",
                "given_away_subjects",
                "held_back",
                "held_back_subjects",
            ]);
        }
        writer.write_record(&header)?;
        for (index, row) in self.rows.iter().enumerate() {
            let change = self
                .change
                .as_ref()
                .and_then(|change| change.rows.get(index));
            let retry = |pick: fn(&Quantiles) -> u64| {
                row.retry_after_seconds
                    .as_ref()
                    .map_or_else(String::new, |q| pick(q).to_string())
            };
            let mut record = vec![
                row.policy.clone(),
                row.algorithm.clone(),
                row.quota.clone(),
                row.requests.to_string(),
                row.admitted.to_string(),
                row.denied.to_string(),
                format!("{:.6}", row.denied_share),
                row.denied_for_capacity.to_string(),
                row.denied_for_cost.to_string(),
                row.subjects_denied.to_string(),
                format!("{:.6}", row.subjects_denied_share),
                retry(|q| q.p50),
                retry(|q| q.p99),
                retry(|q| q.max),
                row.peak_keys.to_string(),
                row.peak_bytes.to_string(),
                row.top_denied
                    .iter()
                    .map(|top| format!("{}={}", top.subject, top.denied))
                    .collect::<Vec<_>>()
                    .join(";"),
            ];
            if let Some(change) = change {
                record.extend([
                    change.from_algorithm.clone().unwrap_or_default(),
                    change.from_quota.clone().unwrap_or_default(),
                ]);
                record.extend(
                    [
                        change.before_change.admitted,
                        change.before_change.denied,
                        change.continuing.after_change.admitted,
                        change.continuing.after_change.denied,
                        change.fresh_start.after_change.admitted,
                        change.fresh_start.after_change.denied,
                        change.fresh_start.overall.admitted,
                        change.fresh_start.overall.denied,
                        change.given_away.requests,
                        change.given_away.subjects,
                        change.held_back.requests,
                        change.held_back.subjects,
                    ]
                    .map(|count| count.to_string()),
                );
            }
            writer.write_record(&record)?;
        }
        writer.flush()
    }
}

impl ChangeReport {
    /// The change's section of the table: per row, its old and new quota,
    /// admitted and denied after the change and overall by each run, and
    /// what the fresh start gave away.
    fn write_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\npolicy change at {} ({}): {} before it, {} after",
            self.at,
            self.since_first_request,
            count(self.requests_before, "request", "requests"),
            self.requests_after,
        );
        if !self.retired.is_empty() {
            let _ = writeln!(out, "retired at the change: {}", self.retired.join(", "));
        }
        for row in &self.rows {
            let from = match (&row.from_algorithm, &row.from_quota) {
                (Some(algorithm), Some(quota)) => format!("{algorithm} {quota} → "),
                _ => "new: ".to_owned(),
            };
            let _ = writeln!(out, "{}: {from}{} {}", row.policy, row.algorithm, row.quota);
            let header = [
                "",
                "admitted after",
                "denied after",
                "admitted overall",
                "denied overall",
            ];
            let cells = [
                ("continuing", &row.continuing),
                ("fresh start", &row.fresh_start),
            ]
            .map(|(run, counts)| {
                [
                    run.to_owned(),
                    counts.after_change.admitted.to_string(),
                    counts.after_change.denied.to_string(),
                    counts.overall.admitted.to_string(),
                    counts.overall.denied.to_string(),
                ]
            });
            let width = |column: usize| {
                cells
                    .iter()
                    .map(|cells| cells[column].chars().count())
                    .chain([header[column].len()])
                    .max()
                    .unwrap_or(0)
            };
            let widths: Vec<usize> = (0..header.len()).map(width).collect();
            let mut line = |values: [&str; 5]| {
                let mut text = format!("  {:<width$}", values[0], width = widths[0]);
                for (value, width) in values.iter().zip(&widths).skip(1) {
                    let _ = write!(text, "  {value:>width$}");
                }
                let _ = writeln!(out, "{}", text.trim_end());
            };
            line(header);
            for cells in &cells {
                line(cells.each_ref().map(String::as_str));
            }
            let given_away = if row.given_away.requests == 0 {
                "nothing".to_owned()
            } else {
                row.given_away.describe("to")
            };
            let _ = writeln!(out, "  a fresh start would have given away {given_away}");
            if row.held_back.requests > 0 {
                let _ = writeln!(
                    out,
                    "  and refused {} that continuing admitted",
                    row.held_back.describe("from")
                );
            }
        }
    }
}

impl Difference {
    /// `3 requests to 1 subject`, with `preposition` between.
    fn describe(&self, preposition: &str) -> String {
        let approx = if self.subjects_exact { "" } else { "≈" };
        format!(
            "{} {preposition} {approx}{}",
            count(self.requests, "request", "requests"),
            count(self.subjects, "subject", "subjects")
        )
    }
}

/// `1 request`, `2 requests`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[allow(clippy::cast_precision_loss)]
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let histogram: BTreeMap<u64, u64> = [(1, 98), (5, 1), (60, 1)].into_iter().collect();
        assert_eq!(
            quantiles(&histogram),
            Some(Quantiles {
                p50: 1,
                p99: 5,
                max: 60
            })
        );
        assert_eq!(quantiles(&BTreeMap::new()), None);
    }

    #[test]
    fn bytes_read_in_binary_units() {
        assert_eq!(human_bytes(85), "85 B");
        assert_eq!(human_bytes(85 << 20), "85.0 MiB");
    }
}
