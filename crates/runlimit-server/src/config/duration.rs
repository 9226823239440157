//! Periods written for people: `500ms`, `90s`, `15m`, `2h`, `1d`, `1w`, and
//! sums of them (`1h30m`).

use std::time::Duration;

/// Reads `text` as one or more `<whole number><unit>` parts, units `ms`,
/// `s`, `m`, `h`, `d` (24 hours) and `w` (7 days), added together; `None`
/// for anything else (no unit, a fraction, a sign, spaces, an overflow).
pub(crate) fn parse(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let amount: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let millis_per_unit: u64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        let part = Duration::from_millis(amount.checked_mul(millis_per_unit)?);
        total = total.checked_add(part)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humane_periods_parse_and_everything_else_is_refused() {
        for (text, millis) in [
            ("500ms", 500),
            ("90s", 90_000),
            ("15m", 900_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
            ("1w", 604_800_000),
            ("1h30m", 5_400_000),
            ("0s", 0),
        ] {
            assert_eq!(parse(text), Some(Duration::from_millis(millis)), "{text}");
        }
        for text in [
            "",
            "90",
            "s",
            "1.5h",
            "-1s",
            "1 h",
            "1x",
            "1hh",
            "h1",
            "1S",
            "99999999999999999999s",
            "18446744073709551615w",
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
    }
}
