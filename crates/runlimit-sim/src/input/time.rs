//! Timestamps as logs write them, read into nanoseconds since the Unix epoch.

use time::{OffsetDateTime, format_description::well_known::Rfc3339};

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

fn parse_rfc3339(text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?;
    let at = OffsetDateTime::parse(text.trim(), &Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos()).ok()
}

/// Parses `10/Oct/2000:13:55:36 -0700` (the zone may be absent, meaning UTC).
pub(crate) fn parse_clf_date(text: &[u8]) -> Option<i64> {
    fn digits(bytes: &[u8]) -> Option<i64> {
        bytes.iter().try_fold(0i64, |acc, &b| {
            b.is_ascii_digit().then(|| acc * 10 + i64::from(b - b'0'))
        })
    }
    if text.len() < 20 || text[2] != b'/' || text[6] != b'/' || text[11] != b':' {
        return None;
    }
    let day = digits(&text[0..2])?;
    let month = match &text[3..6] {
        b"Jan" => 1,
        b"Feb" => 2,
        b"Mar" => 3,
        b"Apr" => 4,
        b"May" => 5,
        b"Jun" => 6,
        b"Jul" => 7,
        b"Aug" => 8,
        b"Sep" => 9,
        b"Oct" => 10,
        b"Nov" => 11,
        b"Dec" => 12,
        _ => return None,
    };
    let year = digits(&text[7..11])?;
    if text[14] != b':' || text[17] != b':' {
        return None;
    }
    let hour = digits(&text[12..14])?;
    let minute = digits(&text[15..17])?;
    let second = digits(&text[18..20])?;
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let offset = match &text[20..] {
        [] => 0,
        [b' ', sign @ (b'+' | b'-'), zone @ ..] if zone.len() == 4 => {
            let (hours, minutes) = (digits(&zone[0..2])?, digits(&zone[2..4])?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let minutes = hours * 60 + minutes;
            if *sign == b'-' { -minutes } else { minutes }
        }
        _ => return None,
    };
    // A day the month does not have (31/Feb) is a bad date, not a later one.
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=month_days).contains(&day) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset * 60;
    seconds.checked_mul(1_000_000_000)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
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
