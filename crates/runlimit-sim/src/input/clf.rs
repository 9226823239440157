//! The Common and Combined Log Formats:
//!
//! ```text
//! 127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"
//! ```
//!
//! Read as bytes: a user agent in another encoding is a field like any other.

use std::{borrow::Cow, ops::Range};

use super::{Fields, InputSpec, Plan, UnknownField};

/// A CLF field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    Host,
    Ident,
    User,
    Time,
    Request,
    Method,
    Path,
    Protocol,
    Status,
    Bytes,
    Referer,
    UserAgent,
}

const FIELD_COUNT: usize = 12;

impl Field {
    fn named(name: &str) -> Option<Self> {
        Some(match name {
            "host" | "ip" | "remote_addr" | "client" => Self::Host,
            "ident" => Self::Ident,
            "user" | "remote_user" => Self::User,
            "time" | "time_local" => Self::Time,
            "request" => Self::Request,
            "method" => Self::Method,
            "path" | "uri" | "url" => Self::Path,
            "protocol" => Self::Protocol,
            "status" => Self::Status,
            "bytes" | "body_bytes_sent" | "size" => Self::Bytes,
            "referer" | "referrer" | "http_referer" => Self::Referer,
            "user_agent" | "agent" | "http_user_agent" => Self::UserAgent,
            _ => return None,
        })
    }
}

pub(super) fn plan(spec: &InputSpec) -> Result<Plan<Field>, UnknownField> {
    let mut spec = spec.clone();
    // The CLF time is always the bracketed date.
    spec.time_field = None;
    spec.time_format = super::TimeFormat::Clf;
    Plan::resolve(&spec, "host", |name| {
        Field::named(name).ok_or_else(|| UnknownField {
            format: "CLF",
            name: name.to_owned(),
            hint: " (it has host, ident, user, time, request, method, path, protocol, \
                   status, bytes, referer and user_agent)",
        })
    })
}

/// One parsed line: the byte range of each field present.
pub(super) struct Line<'a> {
    text: &'a [u8],
    ranges: [Option<Range<usize>>; FIELD_COUNT],
}

impl<'a> Line<'a> {
    pub(super) fn parse(text: &'a [u8]) -> Option<Self> {
        let mut ranges: [Option<Range<usize>>; FIELD_COUNT] = Default::default();
        let mut at = 0;
        let token = |at: &mut usize| -> Option<Range<usize>> {
            let start = *at;
            let len = memchr::memchr(b' ', &text[start..])?;
            *at = start + len + 1;
            (len > 0).then_some(start..start + len)
        };
        ranges[Field::Host as usize] = Some(token(&mut at)?);
        ranges[Field::Ident as usize] = Some(token(&mut at)?);
        // A user may be empty in some servers' logs (two spaces).
        let user = if text.get(at) == Some(&b' ') {
            at += 1;
            at - 1..at - 1
        } else {
            token(&mut at)?
        };
        ranges[Field::User as usize] = Some(user);
        if text.get(at) != Some(&b'[') {
            return None;
        }
        let close = at + memchr::memchr(b']', &text[at..])?;
        ranges[Field::Time as usize] = Some(at + 1..close);
        at = close + 1;
        if text.get(at..at + 2) != Some(b" \"") {
            return None;
        }
        let request = quoted(text, at + 1)?;
        at = request.end + 1;
        split_request(text, request.clone(), &mut ranges);
        ranges[Field::Request as usize] = Some(request);
        if text.get(at) != Some(&b' ') {
            return None;
        }
        at += 1;
        let status_end = memchr::memchr(b' ', &text[at..]).map_or(text.len(), |len| at + len);
        ranges[Field::Status as usize] = Some(at..status_end);
        if status_end == text.len() {
            return None;
        }
        at = status_end + 1;
        let bytes_end = memchr::memchr(b' ', &text[at..]).map_or(text.len(), |len| at + len);
        ranges[Field::Bytes as usize] = Some(at..bytes_end);
        at = bytes_end;
        // Combined adds the referer and the user agent; Common stops here.
        if at < text.len() {
            if text.get(at..at + 2) != Some(b" \"") {
                return None;
            }
            let referer = quoted(text, at + 1)?;
            at = referer.end + 1;
            ranges[Field::Referer as usize] = Some(referer);
            if text.get(at..at + 2) == Some(b" \"") {
                let agent = quoted(text, at + 1)?;
                ranges[Field::UserAgent as usize] = Some(agent);
            }
        }
        Some(Self { text, ranges })
    }
}

/// The range inside the quoted string starting at `open`, up to the first
/// quote not escaped by a backslash (Apache writes `\"`; nginx `\x22`).
fn quoted(text: &[u8], open: usize) -> Option<Range<usize>> {
    if text.get(open) != Some(&b'"') {
        return None;
    }
    let start = open + 1;
    let mut from = start;
    loop {
        let quote = from + memchr::memchr(b'"', text.get(from..)?)?;
        let backslashes = text[start..quote]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some(start..quote);
        }
        from = quote + 1;
    }
}

/// `GET /path HTTP/1.1` into method, path and protocol; a request line that is
/// not three tokens (a probe's junk) has none of them.
fn split_request(
    text: &[u8],
    request: Range<usize>,
    ranges: &mut [Option<Range<usize>>; FIELD_COUNT],
) {
    let line = &text[request.clone()];
    let Some(first) = memchr::memchr(b' ', line) else {
        return;
    };
    let Some(last) = memchr::memrchr(b' ', line) else {
        return;
    };
    if last <= first + 1 {
        return;
    }
    let base = request.start;
    ranges[Field::Method as usize] = Some(base..base + first);
    ranges[Field::Path as usize] = Some(base + first + 1..base + last);
    ranges[Field::Protocol as usize] = Some(base + last + 1..request.end);
}

impl Fields for Line<'_> {
    type Handle = Field;

    fn get(&self, handle: &Field) -> Option<Cow<'_, [u8]>> {
        let range = self.ranges[*handle as usize].clone()?;
        let value = &self.text[range];
        // `-` is CLF's "absent"; a status or date is never `-`.
        (value != b"-" || matches!(handle, Field::Bytes)).then_some(Cow::Borrowed(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field<'a>(line: &'a Line<'_>, field: Field) -> Option<&'a str> {
        line.ranges[field as usize]
            .clone()
            .map(|range| std::str::from_utf8(&line.text[range]).expect("test lines are UTF-8"))
    }

    #[test]
    fn reads_apache_documented_combined_line() {
        let text = br#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)""#;
        let line = Line::parse(text).expect("a valid line");
        assert_eq!(field(&line, Field::Host), Some("127.0.0.1"));
        assert_eq!(field(&line, Field::User), Some("frank"));
        assert_eq!(
            field(&line, Field::Time),
            Some("10/Oct/2000:13:55:36 -0700")
        );
        assert_eq!(field(&line, Field::Method), Some("GET"));
        assert_eq!(field(&line, Field::Path), Some("/apache_pb.gif"));
        assert_eq!(field(&line, Field::Protocol), Some("HTTP/1.0"));
        assert_eq!(field(&line, Field::Status), Some("200"));
        assert_eq!(field(&line, Field::Bytes), Some("2326"));
        assert_eq!(
            field(&line, Field::Referer),
            Some("http://www.example.com/start.html")
        );
        assert_eq!(
            field(&line, Field::UserAgent),
            Some("Mozilla/4.08 [en] (Win98; I ;Nav)")
        );
    }

    #[test]
    fn reads_common_lines_and_escaped_quotes() {
        let line =
            Line::parse(br#"::1 - - [10/Oct/2000:13:55:36 -0700] "GET /a\"b HTTP/1.1" 404 -"#)
                .expect("a valid line");
        assert_eq!(field(&line, Field::Path), Some(r#"/a\"b"#));
        assert_eq!(field(&line, Field::Status), Some("404"));
        assert_eq!(field(&line, Field::UserAgent), None);
        // Junk in the request line keeps the line, without method or path.
        let line =
            Line::parse(br#"192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "\x16\x03\x01" 400 0"#)
                .expect("a valid line");
        assert_eq!(field(&line, Field::Method), None);
        assert_eq!(field(&line, Field::Status), Some("400"));
    }

    #[test]
    fn reads_an_empty_user() {
        let line =
            Line::parse(br#"192.0.2.1 -  [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 1"#)
                .expect("a valid line");
        assert_eq!(field(&line, Field::User), Some(""));
        assert_eq!(field(&line, Field::Status), Some("200"));
    }

    #[test]
    fn refuses_truncated_lines() {
        let full =
            br#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 2326 "-" "ua""#;
        // Every cut that stops before the bytes field is not a line.
        let bytes_field = full.len() - br#" 2326 "-" "ua""#.len();
        for cut in 0..bytes_field {
            assert!(Line::parse(&full[..cut]).is_none(), "cut at {cut}");
        }
    }
}
