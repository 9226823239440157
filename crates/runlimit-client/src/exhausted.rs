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
