//! Durations as operators write them (`10m`, `30d`) and numbers as operators read them
//! (`1,250,000`): shared by the flags, the tables and the report.

use std::time::Duration;

/// Parses `90s`, `10m`, `12h`, `30d`, `2w` (or a bare number of seconds) into a
/// duration, for `--duration` and `--retention`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a number and a unit (s, m, h, d, w)"))?;
    let unit_s = match unit.trim() {
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3_600.0,
        "d" => 86_400.0,
        "w" => 7.0 * 86_400.0,
        other => return Err(format!("{text:?}: unknown unit {other:?} (s, m, h, d, w)")),
    };
    let seconds = value * unit_s;
    if !seconds.is_finite() || seconds <= 0.0 || seconds > 100.0 * 365.0 * 86_400.0 {
        return Err(format!(
            "{text:?}: must be more than 0 and at most 100 years"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Writes a duration the way it was most likely typed: `45s`, `10m`, `1h 30m`, `30d`.
pub fn format_duration(duration: Duration) -> String {
    let s = duration.as_secs();
    if s >= 86_400 && s.is_multiple_of(86_400) {
        format!("{}d", s / 86_400)
    } else if s >= 3_600 {
        let (h, m) = (s / 3_600, (s % 3_600) / 60);
        if m == 0 {
            format!("{h}h")
        } else {
            format!("{h}h {m}m")
        }
    } else if s >= 60 {
        let (m, rest) = (s / 60, s % 60);
        if rest == 0 {
            format!("{m}m")
        } else {
            format!("{m}m {rest}s")
        }
    } else {
        format!("{:.0}s", duration.as_secs_f64())
    }
}

/// An integer with thousands separators: `1,250,000`.
pub fn thousands(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".to_string();
    }
    let rounded = value.round() as i128;
    let digits = rounded.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if rounded < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A number with about three significant digits, no exponent: `0.0123`, `4.56`,
/// `789`, `12,345`.
pub fn sig3(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".to_string();
    }
    let magnitude = value.abs();
    if magnitude >= 1_000.0 {
        thousands(value)
    } else if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 1.0 || magnitude == 0.0 {
        format!("{value:.2}")
    } else {
        let decimals = (-magnitude.log10()).ceil() as usize + 2;
        format!("{value:.decimals$}")
    }
}

/// A percentage of a fraction: `0.615` → `62 %`.
pub fn percent(fraction: f64) -> String {
    if !fraction.is_finite() {
        return "n/a".to_string();
    }
    format!("{:.0} %", fraction * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("m").is_err());
    }

    #[test]
    fn durations_format_as_typed() {
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::from_secs(30 * 86_400)), "30d");
        assert_eq!(format_duration(Duration::from_secs(5_400)), "1h 30m");
        assert_eq!(format_duration(Duration::from_secs(45)), "45s");
        assert_eq!(format_duration(Duration::from_secs(75)), "1m 15s");
    }

    #[test]
    fn numbers_read_like_an_operator_writes_them() {
        assert_eq!(thousands(1_250_000.0), "1,250,000");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(-1_000.0), "-1,000");
        assert_eq!(thousands(f64::NAN), "n/a");
        assert_eq!(sig3(0.01234), "0.0123");
        assert_eq!(sig3(4.561), "4.56");
        assert_eq!(sig3(45.61), "45.6");
        assert_eq!(sig3(456.1), "456");
        assert_eq!(sig3(45_610.0), "45,610");
        assert_eq!(percent(0.615), "62 %");
    }
}
