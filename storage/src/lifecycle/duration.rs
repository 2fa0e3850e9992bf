//! Durations as operators write them in lifecycle settings: `36h`, `30d`, `2w`, `1y`.

use crate::error::{Error, Result};

const HOUR_NS: i64 = 3_600_000_000_000;
const DAY_NS: i64 = 24 * HOUR_NS;

/// Parses `<integer><unit>` with unit `m` (minutes), `h`, `d`, `w` or `y` (365 days)
/// into nanoseconds. Refuses zero, negatives and anything that overflows.
pub fn parse_duration_ns(text: &str) -> Result<i64> {
    let text = text.trim();
    let bad = |why: &str| {
        Error::InvalidPayload(format!(
            "duration {text:?} {why} (expected a whole number and a unit: m, h, d, w or y, e.g. \"30d\")"
        ))
    };
    let unit_at = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| bad("has no unit"))?;
    let (digits, unit) = text.split_at(unit_at);
    let count: i64 = digits.parse().map_err(|_| bad("has no number"))?;
    let unit_ns = match unit {
        "m" => 60_000_000_000,
        "h" => HOUR_NS,
        "d" => DAY_NS,
        "w" => 7 * DAY_NS,
        "y" => 365 * DAY_NS,
        _ => return Err(bad("has an unknown unit")),
    };
    if count == 0 {
        return Err(bad("is zero"));
    }
    count.checked_mul(unit_ns).ok_or_else(|| bad("is too long"))
}

/// The shortest exact form of `ns` in the units [`parse_duration_ns`] reads.
pub fn format_duration_ns(ns: i64) -> String {
    for (unit, unit_ns) in [
        ("y", 365 * DAY_NS),
        ("w", 7 * DAY_NS),
        ("d", DAY_NS),
        ("h", HOUR_NS),
        ("m", 60_000_000_000),
    ] {
        if ns > 0 && ns % unit_ns == 0 {
            return format!("{}{unit}", ns / unit_ns);
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse_and_print_back() {
        assert_eq!(parse_duration_ns("30d").unwrap(), 30 * DAY_NS);
        assert_eq!(parse_duration_ns("36h").unwrap(), 36 * HOUR_NS);
        assert_eq!(parse_duration_ns("2w").unwrap(), 14 * DAY_NS);
        assert_eq!(parse_duration_ns("1y").unwrap(), 365 * DAY_NS);
        assert_eq!(parse_duration_ns(" 5m ").unwrap(), 300_000_000_000);
        for text in ["30d", "36h", "2w", "1y", "5m", "10d"] {
            assert_eq!(format_duration_ns(parse_duration_ns(text).unwrap()), text);
        }
    }

    #[test]
    fn nonsense_is_refused_with_the_reason() {
        for (text, why) in [
            ("30", "no unit"),
            ("d", "no number"),
            ("0d", "zero"),
            ("-1d", "no number"),
            ("3x", "unknown unit"),
            ("1.5d", "unknown unit"),
            ("99999999999y", "too long"),
        ] {
            let e = parse_duration_ns(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
