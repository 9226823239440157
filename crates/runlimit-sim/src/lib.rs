//! Know what a policy will do before it ships.
//!
//! `runlimit-sim` replays a recorded access log against candidate policies
//! through `runlimit-memory`'s real stores ([`MemoryStore`], [`GcraStore`],
//! [`SlidingWindowStore`]) on a virtual clock set from each line's timestamp,
//! and reports who would have been refused: requests and subjects denied,
//! the most denied subjects, `Retry-After` percentiles and the keys the
//! store held. Nothing sleeps, so an hour of traffic replays in well under a
//! second, and the same log and policies always give the same decisions.
//!
//! The `runlimit-sim` binary is the usual way in:
//!
//! ```text
//! runlimit-sim generate --minutes 60 > access.log
//! runlimit-sim replay --policies policies.toml access.log
//! runlimit-sim replay --policies policies.toml --subject ip --charge-status 401 \
//!     --json --chart per-minute.svg access.log
//! runlimit-sim replay --batch --policies route.toml access.log
//! runlimit-sim replay --policies before.toml --change-at +30m --then after.toml access.log
//! ```
//!
//! Each candidate is evaluated on its own, in a store of its own, unless
//! `--batch` ([`Mode::Batch`]) evaluates them together, all-or-nothing, as
//! the admission layer checks a route's policies. The layer's one limiter
//! holds one algorithm, so a batch's candidates must share one (and one
//! quota mode); a set of several is refused before anything is replayed.
//!
//! The library is what the binary is built from, for tests and tools:
//!
//! ```
//! use runlimit_core::KeyHasher;
//! use runlimit_sim::{Format, InputSpec, PolicySet, Reader, Replay, ReplayOptions, SubjectSpec};
//!
//! let set = PolicySet::from_toml(r#"
//!     [[policy]]
//!     algorithm = "fixed_window"
//!     id = "login.ip"
//!     scope = "ip"
//!     limit = 2
//!     window = { secs = 60, nanos = 0 }
//! "#)?;
//! let log = br#"192.0.2.1 - - [01/Jan/2026:00:00:00 +0000] "POST /login HTTP/1.1" 401 64
//! 192.0.2.1 - - [01/Jan/2026:00:00:01 +0000] "POST /login HTTP/1.1" 401 64
//! 192.0.2.1 - - [01/Jan/2026:00:00:02 +0000] "POST /login HTTP/1.1" 401 64
//! "#;
//! let spec = InputSpec::new(Format::Clf, SubjectSpec::client_address());
//! let mut reader = Reader::new(&log[..], &spec)?;
//! let hasher = KeyHasher::new(b"a secret of at least thirty-two bytes")?;
//! let mut replay = Replay::new(&set, ReplayOptions::new(hasher))?;
//! replay.run(&mut reader, |_| {})?;
//! replay.require_requests(&spec)?;
//! let report = replay.report();
//! assert_eq!((report.rows[0].admitted, report.rows[0].denied), (2, 1));
//! assert_eq!(report.rows[0].retry_after_seconds.map(|q| q.max), Some(58));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # A change of policies
//!
//! A policy can [continue](runlimit_core::FixedWindowPolicy::continuing)
//! from the one it replaces, so that a deploy that edits a limit hands no
//! one a fresh quota ([`runlimit_core::carry`] states how a subject's state
//! is translated, and the bound). A [`PolicyChange`] replays such a deploy:
//! the candidates of one set, replaced at a time ([`ChangeAt`]: an RFC 3339
//! time or an offset from the first request, within the log) by those of
//! another, matched by id. [`Replay::with_change`] runs each row twice
//! from the change, in an [`AnyStore`] each (so a change of algorithm
//! carries too): its new policy continuing from the old one, and as a fresh
//! start with every counter empty at the change, which is what a deploy
//! without continuity does. [`Report::change`] sets them side by side: what
//! each admitted and denied after the change and overall, and what the
//! fresh start would have given away (requests it admitted that
//! continuing denied) and to how many subjects. A new id starts at the
//! change in both runs; an old id the new set lacks is retired; with
//! [`Mode::Batch`], the whole batch changes at once (each set's policies
//! sharing one algorithm, as a batch's must).
//!
//! ```
//! use runlimit_core::KeyHasher;
//! use runlimit_sim::{
//!     Format, InputSpec, PolicyChange, PolicySet, Reader, Replay, ReplayOptions, SubjectSpec,
//! };
//!
//! // Three per 15 minutes, then two.
//! let limit = |limit| PolicySet::from_toml(&format!(r#"
//!     [[policy]]
//!     algorithm = "fixed_window"
//!     id = "reset.ip"
//!     scope = "ip"
//!     limit = {limit}
//!     window = {{ secs = 900, nanos = 0 }}
//! "#));
//! let change = PolicyChange::new(limit(3)?, "+1m".parse()?, limit(2)?)?;
//! let log = br#"192.0.2.1 - - [01/Jan/2026:00:00:00 +0000] "POST /reset HTTP/1.1" 200 64
//! 192.0.2.1 - - [01/Jan/2026:00:00:01 +0000] "POST /reset HTTP/1.1" 200 64
//! 192.0.2.1 - - [01/Jan/2026:00:00:02 +0000] "POST /reset HTTP/1.1" 200 64
//! 192.0.2.1 - - [01/Jan/2026:00:01:00 +0000] "POST /reset HTTP/1.1" 200 64
//! 192.0.2.1 - - [01/Jan/2026:00:01:01 +0000] "POST /reset HTTP/1.1" 200 64
//! "#;
//! let spec = InputSpec::new(Format::Clf, SubjectSpec::client_address());
//! let mut reader = Reader::new(&log[..], &spec)?;
//! let hasher = KeyHasher::new(b"a secret of at least thirty-two bytes")?;
//! let mut replay = Replay::with_change(&change, ReplayOptions::new(hasher))?;
//! replay.run(&mut reader, |_| {})?;
//! replay.require_requests(&spec)?;
//! replay.require_change()?;
//! let report = replay.report();
//! let row = &report.change.as_ref().expect("a change").rows[0];
//! // Continuing, the three requests count against the new limit of two; a
//! // fresh start admits two more.
//! assert_eq!(row.continuing.after_change.admitted, 0);
//! assert_eq!(row.fresh_start.after_change.admitted, 2);
//! assert_eq!((row.given_away.requests, row.given_away.subjects), (2, 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Reading a log
//!
//! A Common or Combined Log Format line has fixed fields: the client
//! address is its host. JSON lines and CSV have named fields: the address is
//! read from `ip` unless the subject names another (`ip:client_ip`), the
//! time from `time` unless [`InputSpec::time_field`] names another; a JSON
//! field may be a dotted path into nested objects. Blank lines are skipped.
//! A line that cannot be used is [`Malformed`]: counted, listed by number
//! and reason (the first [`MALFORMED_LISTED`], or
//! [`ReplayOptions::malformed_listed`]), and skipped. A log with no usable
//! line at all is most likely read with the wrong fields:
//! [`Replay::require_requests`] turns it into an error
//! ([`NothingReplayed`]) that names the fields its lines lack, rather than
//! a report that nobody was refused.
//!
//! # What a replay assumes
//!
//! * Traffic does not react: a refused client is assumed to send what the
//!   log says it sent. Real clients that back off make the real denial
//!   counts lower; attackers that rotate make them higher.
//! * A request's time is its line's; CLF times have whole seconds, so the
//!   requests of one second are evaluated at its start, in log order. A line
//!   up to a minute earlier than the latest before it is evaluated at the
//!   latest (stores never go back); one further back is skipped as out of
//!   order (`--max-backwards`), so one wrong timestamp cannot shift a run.
//! * CSV records are one line each: a quoted field may hold commas, not
//!   newlines.
//! * With a status filter (`--charge-status`), requests with other statuses
//!   are decided by a peek and consume nothing, as an admission layer that
//!   charges by outcome refunds them.
//!
//! # Privacy
//!
//! Subjects are derived with [`runlimit_core::KeyHasher`] from the network
//! or fields chosen, and reports name them by 64 bits of that key
//! (`k:3fa1…`) unless the operator asks for raw subjects. Malformed lines
//! are reported by number and reason, never by content. Without a secret,
//! the binary draws one per run: the decisions do not depend on it, only
//! the labels do.
//!
//! # Memory
//!
//! Input is streamed. What a run holds is bounded by the stores' `max_keys`
//! (with a change, two stores per row, each of the larger `max_keys` of the
//! two sets), a million exact distinct subjects per count before it
//! switches to an estimate, a bounded table of the most denied subjects, and
//! a chart series of one pair of counts per minute of log.
//!
//! [`MemoryStore`]: runlimit_memory::MemoryStore
//! [`GcraStore`]: runlimit_memory::GcraStore
//! [`SlidingWindowStore`]: runlimit_memory::SlidingWindowStore
//! [`AnyStore`]: runlimit_memory::AnyStore

mod change;
mod chart;
mod engine;
mod generate;
mod input;
mod policies;
mod replay;
mod report;
mod sketch;
mod subject;

pub use change::{ChangeAt, ChangeAtError, ChangeError, ChangeOutsideLog, PolicyChange};
pub use chart::{ChartError, write_svg};
pub use engine::{Mode, Refusal, Simulation, SimulationError, Verdict};
pub use generate::{GenerateOptions, MAX_MINUTES, generate};
pub use input::{
    DEFAULT_MAX_LINE_LEN, Format, InputError, InputSpec, Malformed, Read, Reader, Request,
    TimeFormat, UnknownField,
};
pub use policies::{Candidate, DEFAULT_MAX_KEYS, PolicySet, PolicySetError};
pub use replay::{
    KEY_SAMPLE_INTERVAL, MALFORMED_LISTED, MAX_TOP, NothingReplayed, Replay, ReplayError,
    ReplayOptions, StatusSet, StatusSetError,
};
pub use report::{
    ChangeReport, ChangeRow, Counts, Difference, MalformedLine, MalformedSummary, Quantiles,
    Report, Row, RunCounts, TopSubject,
};
pub use subject::{SubjectPart, SubjectSpec, SubjectSpecError};
