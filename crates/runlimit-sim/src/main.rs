//! `runlimit-sim`: replay access logs against candidate policies, or write a
//! synthetic log to try them on. See the crate documentation.

use std::{
    fs::File,
    io::{self, BufRead, BufReader, IsTerminal, Write},
    path::{Path, PathBuf},
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use runlimit_core::{KeyHasher, MIN_SECRET_LEN};
use runlimit_sim::{
    ChangeAt, DEFAULT_MAX_LINE_LEN, Format, GenerateOptions, InputSpec, Malformed, Mode,
    PolicyChange, PolicySet, Reader, Replay, ReplayOptions, SimulationError, StatusSet,
    SubjectSpec, TimeFormat,
};

#[derive(Parser)]
#[command(
    name = "runlimit-sim",
    version,
    about = "Replay access logs against candidate Runlimit policies and report who they would have refused."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a log against the policies of a TOML file.
    Replay(Box<ReplayArgs>),
    /// Write a synthetic Combined Log Format log: steady users, a
    /// credential-stuffing burst and a crawler.
    Generate(GenerateArgs),
}

#[derive(Args)]
struct ReplayArgs {
    /// The log to replay; `-` or nothing reads standard input.
    log: Option<PathBuf>,
    /// The candidate policies (TOML: `max_keys` and `[[policy]]` tables);
    /// with --then, those in force until --change-at.
    #[arg(long, short)]
    policies: PathBuf,
    /// The log's format.
    #[arg(long, short, value_enum, default_value_t = Format::Clf)]
    format: Format,
    /// Who requests count against: `ip` (the client address: CLF's host
    /// field, the field `ip` in JSON and CSV), `ip:FIELD` (the address in
    /// another field, such as `ip:client_ip`), a field name, or parts joined
    /// by `+` (such as `ip+path`).
    #[arg(long, short, default_value = "ip")]
    subject: SubjectSpec,
    /// The network prefix IPv4 clients are grouped by.
    #[arg(long, default_value_t = 32)]
    ipv4_prefix: u8,
    /// The network prefix IPv6 clients are grouped by.
    #[arg(long, default_value_t = 64)]
    ipv6_prefix: u8,
    /// The field holding each request's time (JSON and CSV).
    #[arg(long, default_value = "time")]
    time_field: String,
    /// How that field is written (JSON and CSV).
    #[arg(long, value_enum, default_value_t = TimeFormat::Auto)]
    time_format: TimeFormat,
    /// A field holding each request's cost in units (`-` and 0 cost nothing).
    #[arg(long)]
    cost_field: Option<String>,
    /// Charge only requests with these statuses (such as `401,403`,
    /// `400-499` or `4xx`, classes in either case); the others are only
    /// checked, as a layer charging by outcome.
    #[arg(long)]
    charge_status: Option<StatusSet>,
    /// The field holding the status (JSON and CSV).
    #[arg(long, default_value = "status")]
    status_field: String,
    /// Evaluate all policies as one atomic batch, as the admission layer
    /// checks a route's policies, instead of each on its own. The layer's
    /// limiter holds one algorithm, so the policies must share one (and one
    /// quota mode); to compare algorithms, replay without --batch.
    #[arg(long)]
    batch: bool,
    /// Replace the policies at this time with those of --then: an RFC 3339
    /// time (2026-01-01T00:30:00Z) or an offset from the log's first
    /// request (+30m, +1h30m, +90s). It must fall within the log.
    #[arg(long, value_name = "TIME|+OFFSET", requires = "then")]
    change_at: Option<ChangeAt>,
    /// The policies in force from --change-at on (TOML, as --policies).
    /// Each continues from the policy of --policies with its id (same scope,
    /// any algorithm), carrying each subject's state across the change; a
    /// new id starts at the change. The report compares each with a fresh
    /// start, every counter empty at the change, as a deploy without
    /// continuity: what a reset would have given away. With --batch, the
    /// whole batch changes at once.
    #[arg(long, value_name = "FILE", requires = "change_at")]
    then: Option<PathBuf>,
    /// How many of the most denied subjects to list per policy (at most
    /// 1000).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(0..=1000))]
    top: u16,
    /// How many seconds a line's time may go back from the latest before it
    /// (evaluated at the latest); a line further back is skipped as out of
    /// order.
    #[arg(long, default_value_t = 60)]
    max_backwards: u64,
    /// Show subjects as written (addresses, user names) instead of keyed
    /// labels. Only for the operator's own eyes.
    #[arg(long)]
    raw_subjects: bool,
    /// A file holding the secret (at least 32 bytes) labels are keyed with;
    /// the same secret gives the same labels across runs. One trailing
    /// newline (`\n` or `\r\n`) is not part of the secret, so a file
    /// written by `echo` or an editor keys as the same secret without it.
    /// Default: the `RUNLIMIT_SIM_KEY_SECRET` variable, else a random secret
    /// per run.
    #[arg(long)]
    key_secret_file: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print the report as CSV, one row per policy.
    #[arg(long)]
    csv: bool,
    /// Also draw admitted and denied per minute as an SVG file. It is
    /// written after the report is printed: if it cannot be written, the
    /// report is still printed, the error names the file and the exit
    /// status is 1.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Lines longer than this many bytes are skipped as malformed.
    #[arg(long, default_value_t = DEFAULT_MAX_LINE_LEN)]
    max_line_len: usize,
    /// How many malformed lines to list by number and reason (the first
    /// ones), or `all`; the others are only counted. Every listed line is
    /// held in memory until the report.
    #[arg(long, value_name = "N|all", default_value = "10", value_parser = listed_lines)]
    malformed_lines: usize,
}

/// `all`, or a number of lines.
fn listed_lines(text: &str) -> Result<usize, String> {
    if text.eq_ignore_ascii_case("all") {
        return Ok(usize::MAX);
    }
    text.parse()
        .map_err(|_| format!("`{text}` is neither a number of lines nor `all`"))
}

#[derive(Args)]
struct GenerateArgs {
    /// How many minutes the log covers.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    minutes: u32,
    /// Steady users.
    #[arg(long, default_value_t = 500)]
    users: u32,
    /// The random seed; the same seed gives the same log.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where to write the log; standard output by default.
    #[arg(long, short)]
    output: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => replay(*args),
        Command::Generate(args) => generate(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("runlimit-sim: {error}");
            ExitCode::FAILURE
        }
    }
}

type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// The policy set in `path`.
fn read_policies(path: &Path) -> Result<PolicySet> {
    let policies = std::fs::read_to_string(path)
        .map_err(|error| format!("reading {}: {error}", path.display()))?;
    Ok(PolicySet::from_toml(&policies).map_err(|error| format!("{}: {error}", path.display()))?)
}

fn replay(args: ReplayArgs) -> Result<()> {
    let set = read_policies(&args.policies)?;
    let change = match (args.change_at, &args.then) {
        (Some(at), Some(then)) => Some(
            PolicyChange::new(set.clone(), at, read_policies(then)?)
                .map_err(|error| format!("{}: {error}", then.display()))?,
        ),
        // clap requires both or neither.
        _ => None,
    };
    let subject = args
        .subject
        .with_prefixes(args.ipv4_prefix, args.ipv6_prefix)?;
    let mut spec = InputSpec::new(args.format, subject);
    spec.time_field = Some(args.time_field);
    spec.time_format = args.time_format;
    spec.cost_field = args.cost_field;
    spec.status_field = Some(args.status_field);
    spec.read_status = args.charge_status.is_some();
    spec.max_line_len = args.max_line_len;

    let mut options = ReplayOptions::new(key_hasher(args.key_secret_file.as_ref())?);
    options.mode = if args.batch {
        Mode::Batch
    } else {
        Mode::Independent
    };
    options.charge = args.charge_status;
    options.top = usize::from(args.top);
    options.max_backwards = Duration::from_secs(args.max_backwards);
    options.raw_subjects = args.raw_subjects;
    options.malformed_listed = args.malformed_lines;
    let replay = match &change {
        Some(change) => Replay::with_change(change, options),
        None => Replay::new(&set, options),
    };
    let mut replay = replay.map_err(|error| match error {
        SimulationError::MixedAlgorithms { .. } | SimulationError::MixedQuotaModes => {
            format!("{error}; replay without --batch to evaluate each candidate on its own")
        }
        error => error.to_string(),
    })?;

    let (input, length): (Box<dyn BufRead>, Option<u64>) = match &args.log {
        Some(path) if path.as_os_str() != "-" => {
            let file =
                File::open(path).map_err(|error| format!("opening {}: {error}", path.display()))?;
            let length = file.metadata().ok().map(|metadata| metadata.len());
            (Box::new(BufReader::with_capacity(1 << 20, file)), length)
        }
        _ => (Box::new(io::stdin().lock()), None),
    };
    let mut reader = Reader::new(input, &spec)?;
    let progress = Progress::new(length);
    replay.run(&mut reader, |consumed| progress.update(consumed))?;
    progress.finish();
    replay.require_requests(&spec).map_err(|nothing| {
        let mut message = nothing.to_string();
        for (why, _) in nothing.reasons() {
            // Two reasons (no time, unreadable time) may share a hint.
            if let Some(hint) = hint(why).filter(|hint| !message.contains(hint)) {
                message.push_str("\n  ");
                message.push_str(hint);
            }
        }
        message
    })?;
    replay.require_change()?;

    let report = replay.report();
    let unlisted = report.malformed.count - report.malformed.first.len() as u64;
    if unlisted > 0 {
        eprintln!(
            "runlimit-sim: {} not listed; --malformed-lines N or all lists more",
            count(unlisted, "more malformed line", "more malformed lines")
        );
    }
    {
        let mut out = io::stdout().lock();
        if args.json {
            serde_json::to_writer_pretty(&mut out, &report)?;
            writeln!(out)?;
        } else if args.csv {
            report.write_csv(&mut out)?;
        } else {
            write!(out, "{}", report.to_table())?;
        }
        out.flush()?;
    }
    // After the report, so that a chart that cannot be written costs the
    // chart only; the run still fails, for scripts that expect the file.
    if let Some(path) = &args.chart {
        runlimit_sim::write_svg(&report, path)?;
    }
    Ok(())
}

/// Which option reads the field a line was skipped for.
fn hint(why: Malformed) -> Option<&'static str> {
    Some(match why {
        Malformed::Syntax => "--format names the log's format (clf, json or csv)",
        Malformed::MissingAddress => {
            "--subject ip:FIELD names the field holding the client address \
             (JSON and CSV read `ip` unless told otherwise)"
        }
        Malformed::MissingSubject => "--subject names the fields a subject is made of",
        Malformed::MissingTime | Malformed::BadTime => {
            "--time-field and --time-format say where and how the time is written"
        }
        Malformed::BadStatus => "--status-field names the field holding the status",
        Malformed::BadCost => "--cost-field names the field holding the cost",
        _ => return None,
    })
}

fn key_hasher(file: Option<&PathBuf>) -> Result<KeyHasher> {
    let secret = match file {
        Some(path) => {
            let mut secret = std::fs::read(path)
                .map_err(|error| format!("reading {}: {error}", path.display()))?;
            if secret.last() == Some(&b'\n') {
                secret.pop();
                if secret.last() == Some(&b'\r') {
                    secret.pop();
                }
            }
            secret
        }
        None => match std::env::var_os("RUNLIMIT_SIM_KEY_SECRET") {
            Some(secret) => secret.into_encoded_bytes(),
            None => rand::random::<[u8; MIN_SECRET_LEN]>().to_vec(),
        },
    };
    Ok(KeyHasher::new(&secret)?)
}

/// A progress bar that appears only when a run has lasted two seconds and
/// standard error is a terminal.
struct Progress {
    bar: ProgressBar,
    started: Instant,
    shown: std::cell::Cell<bool>,
}

impl Progress {
    fn new(length: Option<u64>) -> Self {
        let bar = match length {
            Some(length) => {
                ProgressBar::with_draw_target(Some(length), ProgressDrawTarget::hidden())
                    .with_style(
                        ProgressStyle::with_template(
                            "{bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                    )
            }
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()).with_style(
                ProgressStyle::with_template("{spinner} {bytes} read ({bytes_per_sec})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        Self {
            bar,
            started: Instant::now(),
            shown: std::cell::Cell::new(false),
        }
    }

    fn update(&self, consumed: u64) {
        if !self.shown.get()
            && self.started.elapsed() > Duration::from_secs(2)
            && io::stderr().is_terminal()
        {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown.set(true);
        }
        self.bar.set_position(consumed);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

fn generate(args: &GenerateArgs) -> Result<()> {
    let options = GenerateOptions {
        minutes: args.minutes,
        users: args.users,
        seed: args.seed,
        ..GenerateOptions::default()
    };
    let lines = match &args.output {
        Some(path) => runlimit_sim::generate(File::create(path)?, &options)?,
        None => runlimit_sim::generate(io::stdout().lock(), &options)?,
    };
    eprintln!("runlimit-sim: wrote {}", count(lines, "line", "lines"));
    Ok(())
}

/// `1 line`, `2 lines`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
