//! A synthetic Combined Log Format log to try policies on without private
//! data: steady users, a credential-stuffing burst and a crawler.

use std::{
    cmp::Reverse,
    collections::BinaryHeap,
    io::{self, Write},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use rand::{Rng, SeedableRng, rngs::StdRng};
use time::{OffsetDateTime, format_description::BorrowedFormatItem, macros::format_description};

/// What to generate. The same options give the same log, byte for byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerateOptions {
    /// When the log starts, nanoseconds since the Unix epoch.
    pub start: i64,
    /// How long the log covers (at most [`MAX_MINUTES`]).
    pub minutes: u32,
    /// Steady users, each browsing at about one request per 20 seconds.
    pub users: u32,
    /// The random seed.
    pub seed: u64,
}

impl Default for GenerateOptions {
    /// An hour from 2026-01-01T00:00:00Z with 500 users, seed 1.
    fn default() -> Self {
        Self {
            start: 1_767_225_600 * NANOS_PER_SECOND,
            minutes: 60,
            users: 500,
            seed: 1,
        }
    }
}

const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// The longest log generated: about nineteen years.
pub const MAX_MINUTES: u32 = 10_000_000;

/// Who sends requests.
#[derive(Debug, Clone, Copy)]
enum Actor {
    /// A person browsing and now and then logging in.
    User { address: IpAddr, agent: usize },
    /// One machine of a botnet trying leaked passwords, rotating addresses
    /// within its own IPv6 /64 or sending from its one IPv4 address.
    Stuffer { network: IpAddr },
    /// A crawler walking the catalogue.
    Crawler,
}

const AGENTS: [&str; 4] = [
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
];
const CRAWLER: &str = "ExampleBot/2.1 (+https://bot.example/)";
const CRAWLER_ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);

/// Writes the log to `out` and returns the number of lines.
///
/// * Users (addresses in 100.64.0.0/10 and 2001:db8:1::/48) send a request
///   every 20 seconds on average (exponential gaps): pages, the catalogue,
///   and one login in twenty, which fails one time in ten.
/// * From a third of the way in, for a tenth of the log (at least two
///   minutes), 40 machines try passwords at about 4 logins a second each
///   (`POST /login`, 401 with a rare 200): 24 from single IPv4 addresses in
///   203.0.113.0/24, 16 from a fresh address in their own IPv6 /64 each
///   time.
/// * From half way, for a quarter of the log, one crawler fetches five
///   catalogue pages a second.
///
/// # Errors
///
/// Writing to `out` failed.
///
/// # Examples
///
/// ```
/// use runlimit_sim::{GenerateOptions, generate};
///
/// let mut log = Vec::new();
/// let options = GenerateOptions { minutes: 5, users: 20, ..GenerateOptions::default() };
/// let lines = generate(&mut log, &options)?;
/// assert_eq!(log.iter().filter(|&&b| b == b'\n').count() as u64, lines);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn generate(out: impl Write, options: &GenerateOptions) -> io::Result<u64> {
    let mut out = io::BufWriter::with_capacity(1 << 16, out);
    let mut rng = StdRng::seed_from_u64(options.seed);
    let length = i64::from(options.minutes.min(MAX_MINUTES)) * 60 * NANOS_PER_SECOND;
    let end = options.start + length;
    let burst_start = options.start + length / 3;
    let burst_end = burst_start + (length / 10).max(120 * NANOS_PER_SECOND);
    let crawl_start = options.start + length / 2;
    let crawl_end = crawl_start + length / 4;

    let mut actors = Vec::new();
    // (next time, actor index, until): the earliest request is always next.
    let mut queue = BinaryHeap::new();
    for _ in 0..options.users {
        let address = if rng.random_bool(0.8) {
            // 100.64.0.0/10: shared address space, never a real client here.
            IpAddr::V4(Ipv4Addr::from(
                0x6440_0000 | (rng.random::<u32>() & 0x003f_ffff),
            ))
        } else {
            // A /64 of its own in 2001:db8:1::/48.
            IpAddr::V6(Ipv6Addr::from(
                (0x2001_0db8_0001_u128 << 80)
                    | (u128::from(rng.random::<u16>()) << 64)
                    | u128::from(rng.random::<u64>()),
            ))
        };
        let agent = rng.random_range(0..AGENTS.len());
        let first = options.start + gap(&mut rng, 20.0);
        queue.push(Reverse((first, actors.len(), end)));
        actors.push(Actor::User { address, agent });
    }
    for machine in 0..40u8 {
        let network = if machine < 24 {
            IpAddr::V4(Ipv4Addr::new(203, 0, 113, 10 + machine))
        } else {
            IpAddr::V6(Ipv6Addr::from(
                (0x2001_0db8_00ff_u128 << 80) | (u128::from(machine) << 64),
            ))
        };
        let first = burst_start + gap(&mut rng, 0.25);
        queue.push(Reverse((first, actors.len(), burst_end.min(end))));
        actors.push(Actor::Stuffer { network });
    }
    queue.push(Reverse((crawl_start, actors.len(), crawl_end.min(end))));
    actors.push(Actor::Crawler);

    let mut dates = DateText::default();
    let mut lines = 0u64;
    while let Some(Reverse((at, index, until))) = queue.pop() {
        if at >= until {
            continue;
        }
        let date = dates.at(at);
        match actors[index] {
            Actor::User { address, agent } => {
                let (method, path, status, bytes) = browse(&mut rng);
                writeln!(
                    out,
                    "{address} - - [{date}] \"{method} {path} HTTP/1.1\" {status} {bytes} \"https://shop.example/\" \"{}\"",
                    AGENTS[agent]
                )?;
                queue.push(Reverse((at + gap(&mut rng, 20.0), index, until)));
            }
            Actor::Stuffer { network } => {
                let address = match network {
                    IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(
                        u128::from(v6) | u128::from(rng.random::<u64>()),
                    )),
                    v4 @ IpAddr::V4(_) => v4,
                };
                let status = if rng.random_bool(0.002) { 200 } else { 401 };
                writeln!(
                    out,
                    "{address} - - [{date}] \"POST /login HTTP/1.1\" {status} 64 \"-\" \"python-requests/2.32.3\""
                )?;
                queue.push(Reverse((at + gap(&mut rng, 0.25), index, until)));
            }
            Actor::Crawler => {
                let page = rng.random_range(1..50_000);
                writeln!(
                    out,
                    "{CRAWLER_ADDRESS} - - [{date}] \"GET /products/{page} HTTP/1.1\" 200 18234 \"-\" \"{CRAWLER}\""
                )?;
                queue.push(Reverse((at + gap(&mut rng, 0.2), index, until)));
            }
        }
        lines += 1;
    }
    out.flush()?;
    Ok(lines)
}

/// An exponential gap with mean `mean_seconds`, at least a millisecond.
#[allow(clippy::cast_possible_truncation)]
fn gap(rng: &mut StdRng, mean_seconds: f64) -> i64 {
    let uniform: f64 = rng.random_range(f64::EPSILON..1.0);
    let seconds = -uniform.ln() * mean_seconds;
    ((seconds * 1e9) as i64).max(1_000_000)
}

fn browse(rng: &mut StdRng) -> (&'static str, String, u16, u32) {
    let roll = rng.random_range(0..100);
    match roll {
        0..=4 => {
            let status = if rng.random_bool(0.1) { 401 } else { 302 };
            ("POST", "/login".to_owned(), status, 64)
        }
        5..=29 => ("GET", "/".to_owned(), 200, 9_512),
        30..=79 => (
            "GET",
            format!("/products/{}", rng.random_range(1..50_000)),
            200,
            rng.random_range(8_000..30_000),
        ),
        80..=94 => (
            "GET",
            format!("/api/items?page={}", rng.random_range(1..40)),
            200,
            rng.random_range(1_000..4_000),
        ),
        _ => ("GET", "/cart".to_owned(), 200, 4_020),
    }
}

/// The CLF date of a second, formatted once per second.
#[derive(Debug, Default)]
struct DateText {
    second: Option<i64>,
    text: String,
}

impl DateText {
    fn at(&mut self, nanos: i64) -> &str {
        let second = nanos.div_euclid(NANOS_PER_SECOND);
        if self.second != Some(second) {
            self.second = Some(second);
            self.text = clf_date(second);
        }
        &self.text
    }
}

/// `01/Jan/2026:00:00:03 +0000` for seconds since the Unix epoch.
fn clf_date(seconds: i64) -> String {
    const CLF: &[BorrowedFormatItem<'_>] =
        format_description!("[day]/[month repr:short]/[year]:[hour]:[minute]:[second] +0000");
    OffsetDateTime::from_unix_timestamp(seconds)
        .ok()
        .and_then(|at| at.format(CLF).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::time::parse_clf_date;

    #[test]
    fn dates_round_trip_through_the_clf_reader() {
        for seconds in [0, 951_782_400, 971_211_336, 1_767_225_600, 4_102_444_799] {
            let text = clf_date(seconds);
            assert_eq!(
                parse_clf_date(text.as_bytes()),
                Some(seconds * NANOS_PER_SECOND),
                "{text}"
            );
        }
    }

    #[test]
    fn the_same_options_give_the_same_log() {
        let options = GenerateOptions {
            minutes: 6,
            users: 30,
            ..GenerateOptions::default()
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let lines = generate(&mut a, &options).expect("writing to a Vec");
        generate(&mut b, &options).expect("writing to a Vec");
        assert_eq!(a, b);
        // 30 users for 6 minutes, 40 stuffers for 2 minutes, a crawler for 1.5.
        assert!(lines > 40 * 4 * 100, "{lines} lines");
    }
}
