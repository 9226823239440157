//! Reading a response into how long its partition's quota is exhausted.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, StatusCode};
use runlimit_http::{
    draft_11::RATELIMIT,
    legacy::X_RATELIMIT_REMAINING,
    read::{self, Pushback, Reset},
};

/// `RateLimit-Remaining`: GitLab's, and the draft's revision 6.
const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");

/// gRPC's status, in the headers of a Trailers-Only response. (Names the
/// layer looks up on every answer are built once, not parsed per lookup.)
pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// How long the server said requests like the one answered with `status`
/// and `headers` will be refused: the longest of what `Retry-After` (on 429
/// or 503), an exhausted draft `RateLimit` member (or revision 7's
/// `remaining=0` with its `reset`), an exhausted legacy quota (its
/// `X-RateLimit-Reset-After` when sent, else its reset), and gRPC pushback
/// on `RESOURCE_EXHAUSTED` say, measured against the response's `Date` when
/// it has one. `None` when none of them says the quota is exhausted.
///
/// Fields that cannot be read are ignored: a client cannot act on them.
///
/// ```
/// use std::time::Duration;
///
/// use http::{HeaderMap, HeaderValue, StatusCode};
/// use runlimit_client::exhausted_for;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", HeaderValue::from_static("2"));
/// assert_eq!(
///     exhausted_for(StatusCode::TOO_MANY_REQUESTS, &headers),
///     Some(Duration::from_secs(2))
/// );
/// assert_eq!(exhausted_for(StatusCode::OK, &HeaderMap::new()), None);
///
/// // GitHub's primary rate limit: an epoch reset, read against the
/// // response's `Date`.
/// let mut headers = HeaderMap::new();
/// headers.insert("date", HeaderValue::from_static("Mon, 01 Jul 2013 17:46:53 GMT"));
/// headers.insert("x-ratelimit-limit", HeaderValue::from_static("60"));
/// headers.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
/// headers.insert("x-ratelimit-reset", HeaderValue::from_static("1372700873"));
/// assert_eq!(
///     exhausted_for(StatusCode::FORBIDDEN, &headers),
///     Some(Duration::from_secs(60))
/// );
/// ```
#[must_use]
pub fn exhausted_for(status: StatusCode, headers: &HeaderMap) -> Option<Duration> {
    // The server's time is read only where a date needs it.
    let now = || read::server_date(headers).unwrap_or_else(SystemTime::now);
    let mut longest: Option<Duration> = None;
    let mut consider = |wait: Duration| {
        longest = Some(longest.map_or(wait, |earlier| earlier.max(wait)));
    };
    if (status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE)
        && let Ok(Some(wait)) = read::retry_after(headers, now())
    {
        consider(wait);
    }
    // Only a member with `r=0` (or revision 7's `remaining=0`) is exhausted
    // (Structured Field parameters have no spaces around `=`, and `r=00`
    // contains it too): a field without it is not parsed, which is most
    // responses.
    let mut draft_7 = false;
    let exhausted_member = headers.get_all(RATELIMIT).iter().any(|value| {
        let value = value.as_bytes();
        draft_7 |= contains(value, b"remaining=0");
        contains(value, b"r=0")
    });
    if exhausted_member && let Ok(statuses) = read::statuses(headers) {
        for status in statuses.members() {
            if status.remaining() == 0
                && let Some(reset) = status.reset()
            {
                consider(reset);
            }
        }
    }
    if draft_7
        && let Ok(Some(status)) = read::draft_7_status(headers)
        && status.remaining() == 0
        && let Some(reset) = status.reset()
    {
        consider(reset);
    }
    // The older fields are read only when they say what is left.
    if has_legacy_remaining(headers) {
        let legacy = read::legacy(headers);
        if legacy.remaining == Some(0) {
            // `X-RateLimit-Reset-After` says to the millisecond what an
            // epoch reset says to the second.
            if let Some(after) = legacy.reset_after {
                consider(after);
            } else if let Some(reset) = legacy.reset {
                consider(reset.remaining_from(now()));
            }
        }
    }
    if headers
        .get(GRPC_STATUS)
        .is_some_and(|code| code.as_bytes() == b"8")
        && let Some(Pushback::After(wait)) = read::grpc_pushback(headers)
    {
        consider(wait);
    }
    longest.filter(|wait| !wait.is_zero())
}

/// Whether the response has `X-RateLimit-Remaining` or GitLab's (and
/// revision 6's) `RateLimit-Remaining`.
fn has_legacy_remaining(headers: &HeaderMap) -> bool {
    headers.contains_key(X_RATELIMIT_REMAINING) || headers.contains_key(RATELIMIT_REMAINING)
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// What an answer says is left of its partition's most constraining quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuotaLeft {
    /// The units left.
    pub(crate) units: u64,
    /// When they reset, measured from the answer; `None` when the answer
    /// does not say (`X-RateLimit-Remaining` alone).
    pub(crate) reset: Option<ResetWithin>,
    /// The epoch reset the server named (since the epoch), which tells its
    /// windows apart: a later one is a later window.
    pub(crate) window: Option<Duration>,
}

/// When a quota resets, measured from the answer, as closely as its fields
/// tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResetWithin {
    /// The latest it can reset: the cautious reading, which the count waits
    /// for.
    pub(crate) latest: Duration,
    /// The earliest moment worth one probe when the count is spent: a
    /// second before `latest` for an epoch reset read against a `Date`
    /// (truncated to the second, so up to a second behind the server) two
    /// seconds or more away; else `latest`.
    pub(crate) earliest: Duration,
}

impl ResetWithin {
    /// A reset that is as precise as it reads (delta-seconds, milliseconds).
    fn exactly(after: Duration) -> Self {
        Self {
            latest: after,
            earliest: after,
        }
    }
}

/// The most constraining quota a response reports: the fewest units left
/// (the latest reset among equals; an unknown reset is the latest) of the
/// draft `RateLimit` members, revision 7's `RateLimit` Dictionary, and the
/// legacy `X-RateLimit-Remaining` (or `RateLimit-Remaining`). A quota whose
/// reset is zero is skipped (it resets now). `None` when the response
/// reports no quota.
pub(crate) fn quota_left(headers: &HeaderMap) -> Option<QuotaLeft> {
    let mut fewest: Option<QuotaLeft> = None;
    let mut consider = |units: u64, reset: Option<ResetWithin>, window: Option<Duration>| {
        if reset.is_some_and(|reset| reset.latest.is_zero()) {
            return;
        }
        let later = |a: Option<ResetWithin>, b: Option<ResetWithin>| match (a, b) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => a.latest >= b.latest,
        };
        fewest = Some(match fewest {
            Some(known)
                if known.units < units || (known.units == units && later(known.reset, reset)) =>
            {
                known
            }
            _ => QuotaLeft {
                units,
                reset,
                window,
            },
        });
    };
    // Most responses of most APIs carry neither: nothing is parsed then.
    let mut lines = headers.get_all(RATELIMIT).iter();
    match (lines.next(), lines.next()) {
        (None, _) => {}
        // One line with one plain member, the usual shape, read directly.
        (Some(line), None) if let Some((left, reset)) = plain_member(line.as_bytes()) => {
            consider(
                left,
                reset.map(|reset| ResetWithin::exactly(Duration::from_secs(reset))),
                None,
            );
        }
        _ => match read::statuses(headers) {
            Ok(statuses) => {
                for status in statuses.members() {
                    consider(
                        status.remaining(),
                        status.reset().map(ResetWithin::exactly),
                        None,
                    );
                }
            }
            // Not a List: revision 7's Dictionary, perhaps.
            Err(_) => {
                if let Ok(Some(status)) = read::draft_7_status(headers) {
                    consider(
                        status.remaining(),
                        status.reset().map(ResetWithin::exactly),
                        None,
                    );
                }
            }
        },
    }
    if has_legacy_remaining(headers) {
        let legacy = read::legacy(headers);
        if let Some(left) = legacy.remaining {
            let reset = match (legacy.reset_after, legacy.reset) {
                (Some(after), _) => Some(ResetWithin::exactly(after)),
                (None, Some(reset @ Reset::At(_))) => Some(match read::server_date(headers) {
                    Some(date) => {
                        let latest = reset.remaining_from(date);
                        ResetWithin {
                            latest,
                            earliest: if latest >= Duration::from_secs(2) {
                                latest - Duration::from_secs(1)
                            } else {
                                latest
                            },
                        }
                    }
                    None => ResetWithin::exactly(reset.remaining_from(SystemTime::now())),
                }),
                (None, Some(Reset::After(after))) => Some(ResetWithin::exactly(after)),
                (None, None) => None,
            };
            let window = match legacy.reset {
                Some(Reset::At(at)) => at.duration_since(SystemTime::UNIX_EPOCH).ok(),
                _ => None,
            };
            consider(left, reset, window);
        }
    }
    fewest
}

/// `r` and `t` of a `RateLimit` line holding one member whose name is a
/// plain string or token and whose parameters are all small non-negative
/// integers (`"api";r=19;t=1`). `None` for anything else, which the full
/// Structured Field parser then reads: this only skips its work for the
/// shape our own layer and most servers send.
fn plain_member(line: &[u8]) -> Option<(u64, Option<u64>)> {
    let rest = match line.first()? {
        b'"' => {
            let close = 1 + line[1..].iter().position(|&b| b == b'"')?;
            // Only the characters an sf-string holds unescaped; an escape,
            // a control character or a byte beyond ASCII is the parser's.
            if !line[1..close]
                .iter()
                .all(|&b| (0x20..=0x7e).contains(&b) && b != b'\\')
            {
                return None;
            }
            &line[close + 1..]
        }
        b'a'..=b'z' | b'A'..=b'Z' | b'*' => {
            let end = line
                .iter()
                .position(|&b| !(b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&b)))
                .unwrap_or(line.len());
            &line[end..]
        }
        _ => return None,
    };
    if rest.first() != Some(&b';') {
        return None;
    }
    let (mut left, mut reset) = (None, None);
    for parameter in rest.split(|&b| b == b';').skip(1) {
        let (key, value) = parameter.split_at(parameter.iter().position(|&b| b == b'=')?);
        let value = &value[1..];
        // Integers of at most 15 digits, as RFC 9651 allows.
        if value.is_empty() || value.len() > 15 || !value.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let number = value
            .iter()
            .fold(0u64, |acc, &b| acc * 10 + u64::from(b - b'0'));
        match key {
            b"r" if left.is_none() => left = Some(number),
            b"t" if reset.is_none() => reset = Some(number),
            // A repeated or unknown key with an integer: the parser's
            // rules (the last wins, unknown ignored) are not worth
            // repeating here.
            _ => return None,
        }
    }
    Some((left?, reset))
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn headers(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    /// Every shape of count is read, the fewest units left governing.
    #[test]
    fn counts_are_read_from_every_shape() {
        let exactly = |after| Some(ResetWithin::exactly(after));
        // Revision 7's Dictionary, and its exhausted form.
        let draft_7 = headers(&[("ratelimit", "limit=20, remaining=19, reset=1")]);
        assert_eq!(
            quota_left(&draft_7),
            Some(QuotaLeft {
                units: 19,
                reset: exactly(secs(1)),
                window: None
            })
        );
        let spent = headers(&[("ratelimit", "limit=20, remaining=0, reset=1")]);
        assert_eq!(exhausted_for(StatusCode::OK, &spent), Some(secs(1)));
        // The spaced members revision 8 sends, and revision 6's fields.
        let draft_8 = headers(&[("ratelimit", r#""20-in-1sec"; r=19; t=1"#)]);
        assert_eq!(quota_left(&draft_8).map(|quota| quota.units), Some(19));
        let draft_6 = headers(&[("ratelimit-remaining", "7"), ("ratelimit-reset", "1")]);
        assert_eq!(
            quota_left(&draft_6),
            Some(QuotaLeft {
                units: 7,
                reset: exactly(secs(1)),
                window: None
            })
        );
        // Two members: the fewest left governs, whatever its window.
        let two = headers(&[("ratelimit", r#""second";r=19;t=1, "minute";r=9;t=58"#)]);
        assert_eq!(
            quota_left(&two),
            Some(QuotaLeft {
                units: 9,
                reset: exactly(secs(58)),
                window: None
            })
        );
        // Laravel's count without a reset.
        let laravel = headers(&[("x-ratelimit-limit", "20"), ("x-ratelimit-remaining", "5")]);
        assert_eq!(
            quota_left(&laravel),
            Some(QuotaLeft {
                units: 5,
                reset: None,
                window: None
            })
        );
        // Discord's reset-after, to the millisecond, over its epoch reset.
        let discord = headers(&[
            ("date", "Mon, 01 Jul 2013 17:46:53 GMT"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1372700815.250"),
            ("x-ratelimit-reset-after", "1.250"),
        ]);
        assert_eq!(
            exhausted_for(StatusCode::OK, &discord),
            Some(Duration::from_millis(1_250))
        );
        assert_eq!(
            quota_left(&discord).and_then(|quota| quota.reset),
            exactly(Duration::from_millis(1_250))
        );
        assert_eq!(quota_left(&headers(&[("retry-after", "1")])), None);
    }

    /// An epoch reset against a `Date` truncated to the second: the latest
    /// reading is waited for, but two seconds or more away, one probe may
    /// go a second earlier; the reset names the window.
    #[test]
    fn epoch_resets_read_their_earliest_moment_and_window() {
        let quota = |reset: &'static str| {
            quota_left(&headers(&[
                ("date", "Mon, 01 Jul 2013 17:46:53 GMT"),
                ("x-ratelimit-remaining", "3"),
                ("x-ratelimit-reset", reset),
            ]))
            .expect("a count")
        };
        // 1372700813 is the `Date`.
        let two_away = quota("1372700815");
        assert_eq!(
            two_away.reset,
            Some(ResetWithin {
                latest: secs(2),
                earliest: secs(1)
            })
        );
        assert_eq!(two_away.window, Some(secs(1_372_700_815)));
        assert_eq!(
            quota("1372700814").reset,
            Some(ResetWithin::exactly(secs(1)))
        );
        assert_eq!(
            quota("1372700873").reset,
            Some(ResetWithin {
                latest: secs(60),
                earliest: secs(59)
            })
        );
        // A reset already past counts nothing.
        assert_eq!(
            quota_left(&headers(&[
                ("date", "Mon, 01 Jul 2013 17:46:53 GMT"),
                ("x-ratelimit-remaining", "3"),
                ("x-ratelimit-reset", "1372700813"),
            ])),
            None
        );
    }

    /// Where the direct reading answers, it answers what the parser reads.
    #[test]
    fn plain_members_read_as_the_parser_reads_them() {
        let lines = [
            r#""api";r=19;t=1"#,
            r#""api/everyone";r=0;t=60"#,
            "api;r=5;t=10",
            "default;r=5",
            r#""a";t=3;r=7"#,
            r#""a";r=5;t=1, "b";r=2;t=9"#,
            r#""a"; r=5;t=1"#,
            r#""a";r=5;r=6"#,
            r#""a";r=-1;t=1"#,
            r#""a";r=1.5;t=1"#,
            r#""a";r=5;pk=:AAA=:"#,
            r#""a\"b";r=1;t=1"#,
            r#""a";t=1"#,
            r#""unterminated;r=1"#,
            "1api;r=1",
            "",
        ];
        for line in lines {
            let value = HeaderValue::from_str(line).expect("a header value");
            let mut headers = HeaderMap::new();
            headers.insert(RATELIMIT, value.clone());
            let parsed = read::statuses(&headers).ok().and_then(|statuses| {
                statuses
                    .members()
                    .first()
                    .map(|status| (status.remaining(), status.reset().map(|t| t.as_secs())))
            });
            if let Some(direct) = plain_member(value.as_bytes()) {
                assert_eq!(Some(direct), parsed, "{line}");
            }
        }
        assert_eq!(plain_member(br#""api";r=19;t=1"#), Some((19, Some(1))));
        assert_eq!(plain_member(b"default;r=5"), Some((5, None)));
        assert_eq!(plain_member(br#""a";r=5;t=1, "b";r=2;t=9"#), None);
    }
}
