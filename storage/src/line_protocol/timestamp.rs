//! Timestamps: the unit a client declares, and conversion to nanoseconds.

/// The unit of the timestamps in a body, as the write endpoint's `precision` parameter
/// declares it. Each InfluxDB API version spells it differently, hence one parser each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Nanoseconds since the epoch (the default of the v1 and v2 APIs).
    Nanoseconds,
    /// Microseconds since the epoch.
    Microseconds,
    /// Milliseconds since the epoch.
    Milliseconds,
    /// Seconds since the epoch.
    Seconds,
    /// Minutes since the epoch (InfluxDB 1.x `m`).
    Minutes,
    /// Hours since the epoch (InfluxDB 1.x `h`).
    Hours,
    /// Decided per timestamp by its magnitude, as for MessagePack (InfluxDB 3's default):
    /// below 1e10 seconds, below 1e13 milliseconds, below 1e16 microseconds, otherwise
    /// nanoseconds. Negative timestamps go by their absolute value. This reads any
    /// timestamp from 1970-04-26 to 2286 right whatever its unit; earlier times in
    /// milliseconds or finer are misread, so clients writing those must say the unit.
    Auto,
}

const NS_PER_US: i64 = 1_000;
const NS_PER_MS: i64 = 1_000_000;
const NS_PER_S: i64 = 1_000_000_000;

impl Precision {
    /// InfluxDB 1.x `/write`: `ns` (and `n`, which the 1.x Python client and QuestDB's
    /// ILP-over-HTTP client send), `u` (and `us`), `ms`, `s`, `m`, `h`.
    pub fn parse_v1(s: &str) -> Option<Self> {
        match s {
            "ns" | "n" => Some(Precision::Nanoseconds),
            "u" | "us" => Some(Precision::Microseconds),
            "ms" => Some(Precision::Milliseconds),
            "s" => Some(Precision::Seconds),
            "m" => Some(Precision::Minutes),
            "h" => Some(Precision::Hours),
            _ => None,
        }
    }

    /// InfluxDB 2.x `/api/v2/write`: `ns`, `us`, `ms`, `s`.
    pub fn parse_v2(s: &str) -> Option<Self> {
        match s {
            "ns" => Some(Precision::Nanoseconds),
            "us" => Some(Precision::Microseconds),
            "ms" => Some(Precision::Milliseconds),
            "s" => Some(Precision::Seconds),
            _ => None,
        }
    }

    /// InfluxDB 3 `/api/v3/write_lp`: `auto`, `nanosecond`, `microsecond`,
    /// `millisecond`, `second`, and the short forms `ns`, `us`, `ms`, `s`.
    pub fn parse_v3(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(Precision::Auto),
            "nanosecond" | "ns" => Some(Precision::Nanoseconds),
            "microsecond" | "us" => Some(Precision::Microseconds),
            "millisecond" | "ms" => Some(Precision::Milliseconds),
            "second" | "s" => Some(Precision::Seconds),
            _ => None,
        }
    }

    /// A short name for error messages.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Nanoseconds => "ns",
            Precision::Microseconds => "us",
            Precision::Milliseconds => "ms",
            Precision::Seconds => "s",
            Precision::Minutes => "m",
            Precision::Hours => "h",
            Precision::Auto => "auto",
        }
    }

    /// Converts a timestamp in this unit to nanoseconds, or `None` if that overflows.
    pub(super) fn to_ns(self, ts: i64) -> Option<i64> {
        let scale = match self {
            Precision::Nanoseconds => 1,
            Precision::Microseconds => NS_PER_US,
            Precision::Milliseconds => NS_PER_MS,
            Precision::Seconds => NS_PER_S,
            Precision::Minutes => 60 * NS_PER_S,
            Precision::Hours => 3_600 * NS_PER_S,
            Precision::Auto => auto_scale(ts),
        };
        ts.checked_mul(scale)
    }
}

/// Nanoseconds per unit of `ts` under [`Precision::Auto`].
fn auto_scale(ts: i64) -> i64 {
    let magnitude = ts.unsigned_abs();
    if magnitude < 10_000_000_000 {
        NS_PER_S
    } else if magnitude < 10_000_000_000_000 {
        NS_PER_MS
    } else if magnitude < 10_000_000_000_000_000 {
        NS_PER_US
    } else {
        1
    }
}

/// Parses a timestamp token: `-?[0-9]+` within i64.
pub(super) fn parse(token: &str) -> Result<i64, String> {
    let b = token.as_bytes();
    if let Some(ts) = super::value::integer(b) {
        return Ok(ts);
    }
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        Err(format!("timestamp {token:?} out of range"))
    } else {
        Err(format!("invalid timestamp {token:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_api_version_spells_precision_its_own_way() {
        assert_eq!(Precision::parse_v1("u"), Some(Precision::Microseconds));
        assert_eq!(Precision::parse_v1("us"), Some(Precision::Microseconds));
        assert_eq!(Precision::parse_v1("auto"), None);
        assert_eq!(Precision::parse_v2("u"), None);
        assert_eq!(Precision::parse_v2("ms"), Some(Precision::Milliseconds));
        assert_eq!(Precision::parse_v3("auto"), Some(Precision::Auto));
        assert_eq!(
            Precision::parse_v3("microsecond"),
            Some(Precision::Microseconds)
        );
        assert_eq!(Precision::parse_v3("second"), Some(Precision::Seconds));
        assert_eq!(Precision::parse_v3("s"), Some(Precision::Seconds));
        assert_eq!(Precision::parse_v3("seconds"), None);
    }

    #[test]
    fn scaling_is_checked() {
        assert_eq!(Precision::Seconds.to_ns(-2), Some(-2_000_000_000));
        assert_eq!(Precision::Seconds.to_ns(i64::MAX / 1_000), None);
        assert_eq!(Precision::Nanoseconds.to_ns(i64::MIN), Some(i64::MIN));
        assert_eq!(Precision::Milliseconds.to_ns(10_000_000_000_000), None);
    }

    #[test]
    fn auto_follows_the_magnitude_rule() {
        let ns = 1_700_000_000_123_456_789i64;
        assert_eq!(
            Precision::Auto.to_ns(1_700_000_000),
            Some(1_700_000_000 * NS_PER_S)
        );
        assert_eq!(
            Precision::Auto.to_ns(ns / 1_000_000),
            Some(1_700_000_000_123_000_000)
        );
        assert_eq!(
            Precision::Auto.to_ns(ns / 1_000),
            Some(1_700_000_000_123_456_000)
        );
        assert_eq!(Precision::Auto.to_ns(ns), Some(ns));
        assert_eq!(
            Precision::Auto.to_ns(-1_700_000_000),
            Some(-1_700_000_000 * NS_PER_S)
        );
        assert_eq!(Precision::Auto.to_ns(9_999_999_999), None);
    }

    #[test]
    fn timestamp_tokens() {
        assert_eq!(parse("-5"), Ok(-5));
        assert_eq!(parse("9223372036854775807"), Ok(i64::MAX));
        assert!(parse("9223372036854775808")
            .unwrap_err()
            .contains("out of range"));
        assert!(parse("+5").unwrap_err().contains("invalid timestamp"));
        assert!(parse("1.5").unwrap_err().contains("invalid timestamp"));
        assert!(parse("-").unwrap_err().contains("invalid timestamp"));
    }
}
