//! Durations on the command line: `250ms`, `1s`, `1.5s`, `2m`, `1h`, and compounds (`1m30s`).

use std::time::Duration;

/// The longest duration accepted: 365 days (8760h). A year is far past any grace or timeout a
/// host means; a larger value is a typo.
pub const MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses a duration with a unit: `ms`, `s`, `m` or `h`, with an optional decimal fraction
/// (`1.5s`). One rule for every duration flag: a number needs a unit, `0` included (`0s`), so `5`
/// is never guessed to be seconds or milliseconds, and the error says what to write instead.
///
/// Errors: a one-line message naming the bad text and the accepted forms.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(sheepdog_core::duration::parse("1.5s"), Ok(Duration::from_millis(1500)));
/// assert!(sheepdog_core::duration::parse("5").is_err());
/// ```
pub fn parse(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "invalid duration '{text}': expected a number with a unit (ms, s, m, h), like 250ms, 1.5s, 2m, 1h or 1m30s"
        )
    };
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!("invalid duration '{text}': a duration cannot be negative"));
    }
    if !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
        return Err(format!("invalid duration '{text}': a number needs a unit, like {t}s or {t}ms (ms, s, m, h)"));
    }
    if t.is_empty() {
        return Err(bad());
    }
    // One or more NUMBER UNIT parts, largest first in practice (`1h30m`, `1m30s`, `1s500ms`).
    let mut rest = t;
    let mut ms = 0.0f64;
    while !rest.is_empty() {
        let split = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let (num, tail) = rest.split_at(split);
        if num.is_empty() || num.starts_with('.') || num.ends_with('.') {
            return Err(bad());
        }
        let value: f64 = num.parse().map_err(|_| bad())?;
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let ms_per_unit = match unit {
            "ms" => 1.0,
            "s" => 1000.0,
            "m" | "min" => 60_000.0,
            "h" => 3_600_000.0,
            _ => return Err(bad()),
        };
        ms += value * ms_per_unit;
        rest = next;
    }
    // A year is far past any grace or timeout a host means; larger is a typo.
    if !ms.is_finite() || ms > MAX.as_millis() as f64 {
        return Err(format!("invalid duration '{text}': at most 8760h (365 days)"));
    }
    Ok(Duration::from_micros((ms * 1000.0).round() as u64))
}

/// [`parse`], refusing zero: for bounds such as `--timeout` and `--ready-timeout`, where `0s`
/// would mean "stop at once" (certainly a mistake).
pub fn parse_positive(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d.is_zero() {
        return Err(format!("invalid duration '{text}': must be more than 0"));
    }
    Ok(d)
}

/// How long something took, in a sentence: `12ms` under a second, else seconds with one
/// decimal (`1.2s`). Rounded for reading, not for `parse`; a configured bound is [`format`]ted.
pub fn elapsed(ms: u64) -> String {
    if ms >= 1000 { format!("{:.1}s", ms as f64 / 1000.0) } else { format!("{ms}ms") }
}

/// Formats a duration the way `parse` reads it back: `250ms`, `10s`, `1.5s`, `2m`.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 || !ms.is_multiple_of(1000) {
        if ms >= 1000 && ms.is_multiple_of(100) {
            return format!("{}s", ms as f64 / 1000.0);
        }
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{format, parse, parse_positive};

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse("0ms").unwrap(), Duration::ZERO);
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse("1s500ms").unwrap(), Duration::from_millis(1500));
        assert!(parse("-1s").unwrap_err().contains("cannot be negative"));
        assert!(parse_positive("0s").is_err());
    }

    #[test]
    fn rejects_what_it_would_have_to_guess() {
        for bad in ["", "5", "0", "1.5", "1.s", ".5s", "5x", "-1s", "1e3s", "s", "1.5.5s", "99999999h"] {
            assert!(parse(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn a_bare_number_is_refused_with_the_fix() {
        // One rule for units (issue 31): `--term-grace 0` and `--timeout 5` get the same answer.
        for bare in ["0", "5"] {
            let e = parse(bare).unwrap_err();
            assert!(e.contains(&format!("like {bare}s or {bare}ms")), "{e}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for ms in [0u64, 250, 1000, 1500, 10_000, 120_000, 3_600_000] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse(&format(d)).unwrap(), d, "{}", format(d));
        }
    }
}
