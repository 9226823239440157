//! Timestamps as logs write them, read into nanoseconds since the Unix epoch.

use time::{
    OffsetDateTime, PrimitiveDateTime,
    format_description::{BorrowedFormatItem, well_known::Rfc3339},
    macros::format_description,
};

/// How a timestamp field is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
#[non_exhaustive]
pub enum TimeFormat {
    /// Numbers are epoch seconds, milliseconds, microseconds or nanoseconds by
    /// magnitude (below 10¹¹, 10¹⁴, 10¹⁷, else nanoseconds); text is RFC 3339,
    /// then the Common Log Format's date, then a number.
    #[default]
    Auto,
    /// RFC 3339, such as `2026-12-01T10:00:00.250Z` or `…+01:00`.
    Rfc3339,
    /// The Common Log Format's `10/Oct/2000:13:55:36 -0700`.
    Clf,
    /// Seconds since the Unix epoch, fractions allowed.
    EpochSeconds,
    /// Milliseconds since the Unix epoch, fractions allowed.
    EpochMillis,
}

impl TimeFormat {
    /// Reads `text` (a field's bytes) as nanoseconds since the Unix epoch.
    pub(crate) fn parse(self, text: &[u8]) -> Option<i64> {
        match self {
            Self::Auto => parse_rfc3339(text)
                .or_else(|| parse_clf_date(text))
                .or_else(|| parse_number(text).and_then(epoch_by_magnitude)),
            Self::Rfc3339 => parse_rfc3339(text),
            Self::Clf => parse_clf_date(text),
            Self::EpochSeconds => parse_number(text).and_then(|n| scale(n, 1_000_000_000)),
            Self::EpochMillis => parse_number(text).and_then(|n| scale(n, 1_000_000)),
        }
    }
}

/// A decimal number as billionths of itself, exactly (no floating point, so
/// `1700000000.25` seconds is exactly 250 ms past the second).
fn parse_number(text: &[u8]) -> Option<i128> {
    let text = std::str::from_utf8(text).ok()?.trim();
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) || whole.len() > 20 {
        return None;
    }
    let whole: i128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    // Digits past the ninth are below a billionth: dropped.
    let kept = &fraction[..fraction.len().min(9)];
    let scale = 10i128.pow(9 - u32::try_from(kept.len()).unwrap_or(9));
    let fraction: i128 = if kept.is_empty() {
        0
    } else {
        kept.parse::<i128>().ok()? * scale
    };
    let billionths = whole * 1_000_000_000 + fraction;
    Some(if negative { -billionths } else { billionths })
}

fn epoch_by_magnitude(billionths: i128) -> Option<i64> {
    let whole = billionths.abs() / 1_000_000_000;
    let nanos_per_unit = if whole < 100_000_000_000 {
        1_000_000_000
    } else if whole < 100_000_000_000_000 {
        1_000_000
    } else if whole < 100_000_000_000_000_000 {
        1_000
    } else {
        1
    };
    scale(billionths, nanos_per_unit)
}

/// `billionths` of a unit of `nanos_per_unit` nanoseconds, in nanoseconds;
/// `None` outside what i64 nanoseconds hold (1677 to 2262).
fn scale(billionths: i128, nanos_per_unit: i128) -> Option<i64> {
    i64::try_from(billionths.checked_mul(nanos_per_unit)? / 1_000_000_000).ok()
}

pub(crate) fn parse_rfc3339(text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?;
    let at = OffsetDateTime::parse(text.trim(), &Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos()).ok()
}

/// Parses `10/Oct/2000:13:55:36 -0700` (the zone may be absent, meaning UTC).
/// A day the month does not have (31/Feb) is a bad date, not a later one.
pub(crate) fn parse_clf_date(text: &[u8]) -> Option<i64> {
    const ZONED: &[BorrowedFormatItem<'_>] = format_description!(
        "[day]/[month repr:short]/[year]:[hour]:[minute]:[second] [offset_hour sign:mandatory][offset_minute]"
    );
    const UTC: &[BorrowedFormatItem<'_>] =
        format_description!("[day]/[month repr:short]/[year]:[hour]:[minute]:[second]");
    let text = std::str::from_utf8(text).ok()?;
    let at = OffsetDateTime::parse(text, ZONED).ok().or_else(|| {
        PrimitiveDateTime::parse(text, UTC)
            .ok()
            .map(PrimitiveDateTime::assume_utc)
    })?;
    i64::try_from(at.unix_timestamp_nanos()).ok()
}

/// Remembers the last date read, since a busy log repeats each second's date
/// on many consecutive lines.
#[derive(Debug, Default)]
pub(crate) struct DateCache {
    text: Vec<u8>,
    nanos: i64,
}

impl DateCache {
    pub(crate) fn parse(&mut self, format: TimeFormat, text: &[u8]) -> Option<i64> {
        if !self.text.is_empty() && self.text == text {
            return Some(self.nanos);
        }
        let nanos = format.parse(text)?;
        self.text.clear();
        self.text.extend_from_slice(text);
        self.nanos = nanos;
        Some(nanos)
    }
}

/// Formats nanoseconds since the epoch as RFC 3339, for reports.
pub(crate) fn format_rfc3339(nanos: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(nanos))
        .ok()
        .and_then(|at| at.format(&Rfc3339).ok())
        .unwrap_or_else(|| nanos.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn clf_dates_read_with_their_zone() {
        // Apache's documented example: 10/Oct/2000:13:55:36 -0700 is 20:55:36 UTC.
        assert_eq!(
            parse_clf_date(b"10/Oct/2000:13:55:36 -0700"),
            Some(971_211_336 * SECOND)
        );
        assert_eq!(parse_clf_date(b"01/Jan/1970:00:00:00 +0000"), Some(0));
        assert_eq!(
            parse_clf_date(b"29/Feb/2024:12:00:00 +0000"),
            Some(1_709_208_000 * SECOND)
        );
    }

    #[test]
    fn bad_clf_dates_are_refused() {
        for bad in [
            &b"10/Oct/2000:13:55:36 -07"[..],
            b"10/Foo/2000:13:55:36 -0700",
            b"1O/Oct/2000:13:55:36 -0700",
            b"10/Oct/2000 13:55:36 -0700",
            b"10/Oct/2000:25:55:36 -0700",
            b"31/Feb/2026:00:00:00 +0000",
            b"29/Feb/2025:00:00:00 +0000",
            b"31/Apr/2026:00:00:00 +0000",
            b"10/Oct/2000:13:55:36 +9999",
            b"",
        ] {
            assert_eq!(
                parse_clf_date(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn auto_reads_rfc3339_and_epochs_by_magnitude() {
        let auto = TimeFormat::Auto;
        assert_eq!(auto.parse(b"1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        assert_eq!(auto.parse(b"1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(auto.parse(b"1700000000"), Some(1_700_000_000 * SECOND));
        assert_eq!(
            auto.parse(b"1700000000250"),
            Some(1_700_000_000_250_000_000)
        );
        assert_eq!(
            auto.parse(b"1700000000.25"),
            Some(1_700_000_000_250_000_000)
        );
        assert_eq!(auto.parse(b"yesterday"), None);
        assert_eq!(auto.parse(b"NaN"), None);
        assert_eq!(auto.parse(b"1e300"), None);
    }
}
