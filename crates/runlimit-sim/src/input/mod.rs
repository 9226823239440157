//! Log formats and what the simulator reads from each line: a time, a subject,
//! and optionally a cost and a status.
//!
//! Input is streamed: a line is read, used and dropped, so memory does not
//! grow with the log. A line that cannot be used is [`Malformed`]: counted,
//! its number kept for the report, and skipped. Its content is never kept,
//! since it holds the very identities a shared report must not leak.

mod clf;
mod csv;
mod json;
mod lines;
pub(crate) mod time;

use std::{borrow::Cow, fmt, io::BufRead};

pub use self::time::TimeFormat;
use self::{lines::LineReader, time::DateCache};
use crate::subject::{self, SubjectPart, SubjectSpec};

/// The longest line read; a longer one is malformed ([`Malformed::TooLong`]).
pub const DEFAULT_MAX_LINE_LEN: usize = 64 * 1024;

/// A log's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum Format {
    /// The Common and Combined Log Formats (nginx's and Apache's defaults):
    /// fields `host`, `ident`, `user`, `time`, `request`, `method`, `path`,
    /// `protocol`, `status`, `bytes`, and in Combined `referer` and
    /// `user_agent`.
    #[value(alias = "combined", alias = "common")]
    Clf,
    /// One JSON object per line; fields by name, or by a dotted path into
    /// nested objects.
    #[value(alias = "jsonl", alias = "ndjson")]
    Json,
    /// Comma-separated values with a header row naming the columns, one
    /// record per line.
    Csv,
}

/// Where and how to read each request of a log.
///
/// In JSON lines and CSV the client address is read from the field `ip`
/// unless the subject names another (`ip:client_ip`), and the time from
/// the field `time` unless [`time_field`](Self::time_field) names another.
/// The Common Log Format has fixed fields: the address is its host field.
#[derive(Debug, Clone)]
pub struct InputSpec {
    /// The log's format.
    pub format: Format,
    /// Who each request counts against.
    pub subject: SubjectSpec,
    /// The field holding the time (not used for CLF). Default `time`.
    pub time_field: Option<String>,
    /// How that field is written.
    pub time_format: TimeFormat,
    /// A field holding each request's cost in units; `-`, empty or `0`
    /// costs nothing, and a line without the field is malformed. Without it
    /// every request costs one unit.
    pub cost_field: Option<String>,
    /// The field holding the response status (default `status`); read only
    /// when a status filter is set.
    pub status_field: Option<String>,
    /// Whether statuses are needed.
    pub read_status: bool,
    /// The longest line read.
    pub max_line_len: usize,
}

impl InputSpec {
    /// Reads `format` with the subject `subject`, the format's default
    /// fields, and no cost or status.
    #[must_use]
    pub fn new(format: Format, subject: SubjectSpec) -> Self {
        Self {
            format,
            subject,
            time_field: None,
            time_format: TimeFormat::Auto,
            cost_field: None,
            status_field: None,
            read_status: false,
            max_line_len: DEFAULT_MAX_LINE_LEN,
        }
    }

    /// The fields a line is skipped for when it is `why`: `["ip"]` for
    /// [`Malformed::MissingAddress`] in JSON, say. Empty for reasons that
    /// concern the whole line (its length, its syntax, its order).
    #[must_use]
    pub fn fields_of(&self, why: Malformed) -> Vec<&str> {
        let address = match self.format {
            Format::Clf => "host",
            Format::Json | Format::Csv => "ip",
        };
        let time = match self.format {
            Format::Clf => None,
            Format::Json | Format::Csv => self.time_field.as_deref(),
        };
        match why {
            Malformed::MissingTime | Malformed::BadTime => vec![time.unwrap_or("time")],
            Malformed::MissingAddress | Malformed::BadAddress => self
                .subject
                .parts()
                .iter()
                .filter_map(|part| match part {
                    SubjectPart::Address { field } => Some(field.as_deref().unwrap_or(address)),
                    SubjectPart::Field(_) => None,
                })
                .collect(),
            Malformed::MissingSubject => self
                .subject
                .parts()
                .iter()
                .filter_map(|part| match part {
                    SubjectPart::Field(name) => Some(name.as_str()),
                    SubjectPart::Address { .. } => None,
                })
                .collect(),
            Malformed::BadStatus => vec![self.status_field.as_deref().unwrap_or("status")],
            Malformed::BadCost => self.cost_field.as_deref().into_iter().collect(),
            Malformed::TooLong | Malformed::Syntax | Malformed::OutOfOrder => Vec::new(),
        }
    }
}

/// Why a line was skipped. The reason names a field's role, never its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
#[non_exhaustive]
pub enum Malformed {
    /// The line was longer than the input's bound.
    #[error("line too long")]
    TooLong,
    /// The line is not in the log's format.
    #[error("not in the log format")]
    Syntax,
    /// The time is absent.
    #[error("no time")]
    MissingTime,
    /// The time could not be read.
    #[error("unreadable time")]
    BadTime,
    /// The client address is absent (in JSON and CSV, the field `ip` unless
    /// the subject names another).
    #[error("no client address")]
    MissingAddress,
    /// A field of the subject is absent, empty or `-`.
    #[error("no subject field")]
    MissingSubject,
    /// The client address is not an IP address.
    #[error("unreadable client address")]
    BadAddress,
    /// The status is absent or not a number from 100 to 999.
    #[error("no valid status")]
    BadStatus,
    /// The cost is absent or not a whole number.
    #[error("no valid cost")]
    BadCost,
    /// The time is earlier than an earlier line's by more than the replay
    /// allows (see `ReplayOptions::max_backwards`).
    #[error("time out of order")]
    OutOfOrder,
}

/// What was read from one line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Request {
    /// Nanoseconds since the Unix epoch.
    pub at: i64,
    /// The subject's encoding: network addresses as bytes, fields
    /// length-prefixed. Fed to the key hasher, never printed except with
    /// raw subjects.
    pub subject: Vec<u8>,
    /// Units the request costs; zero charges nothing.
    pub cost: u64,
    /// The response status, when read.
    pub status: Option<u16>,
}

impl Request {
    /// The subject as an operator reads it (`198.51.100.7`, `2001:db8::/64`,
    /// field values as text, parts joined by ` + `).
    #[must_use]
    pub fn subject_text(&self) -> String {
        subject::render(&self.subject)
    }
}

/// A request's fields, found by a format-specific handle resolved once.
trait Fields {
    type Handle;
    fn get(&self, handle: &Self::Handle) -> Option<Cow<'_, [u8]>>;
}

/// The fields a run reads, resolved to one format's handles.
#[derive(Debug)]
struct Plan<H> {
    time: H,
    time_format: TimeFormat,
    parts: Vec<PartPlan<H>>,
    cost: Option<H>,
    status: Option<H>,
}

#[derive(Debug)]
enum PartPlan<H> {
    Address(H),
    Field(H),
}

/// A field name the format does not have (CLF) or a CSV header lacks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {format} input has no field `{name}`{hint}")]
pub struct UnknownField {
    format: &'static str,
    name: String,
    hint: &'static str,
}

impl<H> Plan<H> {
    fn resolve(
        spec: &InputSpec,
        default_address: &str,
        mut handle: impl FnMut(&str) -> Result<H, UnknownField>,
    ) -> Result<Self, UnknownField> {
        let time = handle(spec.time_field.as_deref().unwrap_or("time"))?;
        let parts = spec
            .subject
            .parts()
            .iter()
            .map(|part| match part {
                SubjectPart::Address { field } => Ok(PartPlan::Address(handle(
                    field.as_deref().unwrap_or(default_address),
                )?)),
                SubjectPart::Field(name) => Ok(PartPlan::Field(handle(name)?)),
            })
            .collect::<Result<_, _>>()?;
        let cost = spec.cost_field.as_deref().map(&mut handle).transpose()?;
        let status = if spec.read_status {
            Some(handle(spec.status_field.as_deref().unwrap_or("status"))?)
        } else {
            None
        };
        Ok(Self {
            time,
            time_format: spec.time_format,
            parts,
            cost,
            status,
        })
    }

    fn fill<F: Fields<Handle = H>>(
        &self,
        subject_spec: &SubjectSpec,
        fields: &F,
        dates: &mut DateCache,
        out: &mut Request,
    ) -> Result<(), Malformed> {
        let time = fields.get(&self.time).ok_or(Malformed::MissingTime)?;
        out.at = dates
            .parse(self.time_format, &time)
            .ok_or(Malformed::BadTime)?;
        out.subject.clear();
        for part in &self.parts {
            match part {
                PartPlan::Address(handle) => {
                    let text = fields.get(handle).ok_or(Malformed::MissingAddress)?;
                    subject_spec
                        .push_address(&text, &mut out.subject)
                        .ok_or(Malformed::BadAddress)?;
                }
                PartPlan::Field(handle) => {
                    let value = fields.get(handle).ok_or(Malformed::MissingSubject)?;
                    if value.is_empty() || &*value == b"-" {
                        return Err(Malformed::MissingSubject);
                    }
                    subject::push_field(&value, &mut out.subject);
                }
            }
        }
        out.cost = match &self.cost {
            None => 1,
            // An absent field is a mistake (a misspelt name reads as absent
            // on every line), not a free request.
            Some(handle) => match fields.get(handle).as_deref() {
                None => return Err(Malformed::BadCost),
                Some(b"-" | b"") => 0,
                Some(text) => parse_u64(text).ok_or(Malformed::BadCost)?,
            },
        };
        out.status = match &self.status {
            None => None,
            Some(handle) => {
                let text = fields.get(handle).ok_or(Malformed::BadStatus)?;
                let status = parse_u64(&text)
                    .filter(|status| (100..=999).contains(status))
                    .ok_or(Malformed::BadStatus)?;
                Some(u16::try_from(status).map_err(|_| Malformed::BadStatus)?)
            }
        };
        Ok(())
    }
}

fn parse_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 {
        return None;
    }
    text.iter().try_fold(0u64, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + u64::from(b - b'0'))
    })
}

/// One line's result: its number and the request, or why it was skipped.
pub type Read<'a> = (u64, Result<&'a Request, Malformed>);

/// Reads requests from a log, one line at a time.
pub struct Reader<R: BufRead> {
    inner: Inner<R>,
    subject: SubjectSpec,
    dates: DateCache,
    request: Request,
}

enum Inner<R: BufRead> {
    Clf {
        lines: LineReader<R>,
        plan: Plan<clf::Field>,
    },
    Json {
        lines: LineReader<R>,
        plan: Plan<String>,
    },
    Csv {
        reader: csv::CsvReader<R>,
        plan: Plan<usize>,
    },
}

/// Why a log could not be read at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// A field the run needs does not exist in the format or the header.
    #[error(transparent)]
    UnknownField(#[from] UnknownField),
    /// Reading failed.
    #[error("reading the log failed: {0}")]
    Io(#[from] std::io::Error),
    /// The CSV header could not be read.
    #[error("reading the CSV header failed: {0}")]
    CsvHeader(String),
}

impl<R: BufRead> Reader<R> {
    /// Prepares to read `input` as `spec` says.
    ///
    /// # Errors
    ///
    /// [`InputError::UnknownField`] when a named field does not exist in the
    /// format (CLF) or the CSV header, and the reading errors of the header.
    pub fn new(input: R, spec: &InputSpec) -> Result<Self, InputError> {
        let inner = match spec.format {
            Format::Clf => Inner::Clf {
                lines: LineReader::new(input, spec.max_line_len),
                plan: clf::plan(spec)?,
            },
            Format::Json => Inner::Json {
                lines: LineReader::new(input, spec.max_line_len),
                plan: Plan::resolve(spec, "ip", |name| Ok(name.to_owned()))?,
            },
            Format::Csv => {
                let reader = csv::CsvReader::new(input, spec.max_line_len)?;
                let plan = Plan::resolve(spec, "ip", |name| reader.column(name))?;
                Inner::Csv { reader, plan }
            }
        };
        Ok(Self {
            inner,
            subject: spec.subject.clone(),
            dates: DateCache::default(),
            request: Request::default(),
        })
    }

    /// Bytes consumed from the input so far.
    #[must_use]
    pub fn consumed(&self) -> u64 {
        match &self.inner {
            Inner::Clf { lines, .. } | Inner::Json { lines, .. } => lines.consumed(),
            Inner::Csv { reader, .. } => reader.consumed(),
        }
    }

    /// The next line's result, `None` at the end of the input.
    ///
    /// # Errors
    ///
    /// [`InputError::Io`] when reading fails; malformed lines are not errors.
    pub fn next_request(&mut self) -> Result<Option<Read<'_>>, InputError> {
        let Self {
            inner,
            subject,
            dates,
            request,
        } = self;
        let (number, result) = match inner {
            Inner::Clf { lines, plan } => {
                let Some(line) = lines.next_line()? else {
                    return Ok(None);
                };
                let result = match line {
                    lines::Line::TooLong => Err(Malformed::TooLong),
                    lines::Line::Text(text) => clf::Line::parse(text)
                        .ok_or(Malformed::Syntax)
                        .and_then(|fields| plan.fill(subject, &fields, dates, request)),
                };
                (lines.number(), result)
            }
            Inner::Json { lines, plan } => {
                let Some(line) = lines.next_line()? else {
                    return Ok(None);
                };
                let result = match line {
                    lines::Line::TooLong => Err(Malformed::TooLong),
                    lines::Line::Text(text) => json::Object::parse(text)
                        .ok_or(Malformed::Syntax)
                        .and_then(|fields| plan.fill(subject, &fields, dates, request)),
                };
                (lines.number(), result)
            }
            Inner::Csv { reader, plan } => {
                let Some((number, record)) = reader.next_record()? else {
                    return Ok(None);
                };
                let result = record.and_then(|fields| plan.fill(subject, fields, dates, request));
                (number, result)
            }
        };
        Ok(Some((number, result.map(|()| &*request))))
    }
}

impl<R: BufRead> fmt::Debug for Reader<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader").finish_non_exhaustive()
    }
}
