//! Reading a response into how long its partition's quota is exhausted.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};
use runlimit_http::{
    draft_11::RATELIMIT,
    read::{self, Pushback},
};

/// How long the server said requests like the one answered with `status`
/// and `headers` will be refused: the longest of what `Retry-After` (on 429
/// or 503), an exhausted draft `RateLimit` member, an exhausted legacy
/// quota, and gRPC pushback on `RESOURCE_EXHAUSTED` say, measured against
/// the response's `Date` when it has one. `None` when none of them says the
/// quota is exhausted.
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
    // Only a member with `r=0` is exhausted (Structured Field parameters
    // have no spaces around `=`, and `r=00` contains it too): a field
    // without it is not parsed, which is most responses.
    let exhausted_member = headers
        .get_all(RATELIMIT)
        .iter()
        .any(|value| value.as_bytes().windows(3).any(|window| window == b"r=0"));
    if exhausted_member && let Ok(statuses) = read::statuses(headers) {
        for status in statuses.members() {
            if status.remaining() == 0
                && let Some(reset) = status.reset()
            {
                consider(reset);
            }
        }
    }
    let legacy = read::legacy(headers);
    if legacy.remaining == Some(0)
        && let Some(reset) = legacy.reset
    {
        consider(reset.remaining_from(now()));
    }
    if headers
        .get("grpc-status")
        .is_some_and(|code| code.as_bytes() == b"8")
        && let Some(Pushback::After(wait)) = read::grpc_pushback(headers)
    {
        consider(wait);
    }
    longest.filter(|wait| !wait.is_zero())
}

/// The most constraining quota a response reports: the fewest units left
/// (the longest reset among equals) of the draft `RateLimit` members and the
/// legacy `X-RateLimit-Remaining`, each with a nonzero reset, and that
/// reset. `None` when the response reports no quota with a reset.
pub(crate) fn quota_left(headers: &HeaderMap) -> Option<(u64, Duration)> {
    let mut fewest: Option<(u64, Duration)> = None;
    let mut consider = |left: u64, reset: Duration| {
        if reset.is_zero() {
            return;
        }
        fewest = Some(match fewest {
            Some((units, after)) if units < left || (units == left && after >= reset) => {
                (units, after)
            }
            _ => (left, reset),
        });
    };
    // Most responses of most APIs carry neither: nothing is parsed then.
    let mut lines = headers.get_all(RATELIMIT).iter();
    match (lines.next(), lines.next()) {
        (None, _) => {}
        // One line with one plain member, the usual shape, read directly.
        (Some(line), None) if let Some((left, reset)) = plain_member(line.as_bytes()) => {
            if let Some(reset) = reset {
                consider(left, Duration::from_secs(reset));
            }
        }
        _ => {
            if let Ok(statuses) = read::statuses(headers) {
                for status in statuses.members() {
                    if let Some(reset) = status.reset() {
                        consider(status.remaining(), reset);
                    }
                }
            }
        }
    }
    if headers.contains_key("x-ratelimit-remaining") || headers.contains_key("ratelimit-remaining")
    {
        let legacy = read::legacy(headers);
        if let (Some(left), Some(reset)) = (legacy.remaining, legacy.reset) {
            let now = read::server_date(headers).unwrap_or_else(SystemTime::now);
            consider(left, reset.remaining_from(now));
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
