//! Wrapper types that keep numbers and names apart.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::paths::check_paths_fit;

/// Index of an entry in the replicated log. Every row in storage remembers the index of
/// the log entry that brought it, so replay can skip what Parquet already holds.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct LogIndex(pub u64);

impl std::fmt::Display for LogIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Nanoseconds since the Unix epoch, UTC: the unit of the `time` column.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct TimestampNs(pub i64);

impl TimestampNs {
    /// Nanoseconds in one hour: the width of a Parquet time partition.
    pub const HOUR_NS: i64 = 3_600_000_000_000;

    /// The wall clock now (0 if the clock is before 1970, the maximum past 2262).
    pub fn now() -> TimestampNs {
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        TimestampNs(ns)
    }

    /// The start of the hour this timestamp falls in (floor, also for negative times).
    /// The earliest times (the first 47 minutes of 1677-09-21) belong to an hour that
    /// starts before `i64::MIN`; their floor saturates to `i64::MIN` rather than
    /// overflowing, so they still share one partition.
    pub fn hour_floor(self) -> TimestampNs {
        TimestampNs(
            self.0
                .div_euclid(Self::HOUR_NS)
                .saturating_mul(Self::HOUR_NS),
        )
    }
}

/// Longest measurement name accepted, in bytes (ARCHITECTURE.md, Names).
pub const MEASUREMENT_NAME_BYTES_MAX: usize = 128;
/// Longest database name accepted, in characters.
pub const DATABASE_NAME_CHARS_MAX: usize = 64;

/// Checks a database name against `[A-Za-z][A-Za-z0-9_-]{0,63}`; names become directory
/// names, so nothing else may pass.
pub fn validate_database_name(name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = match chars.next() {
        Some(first) if first.is_ascii_alphabetic() => {
            name.len() <= DATABASE_NAME_CHARS_MAX
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName(format!(
            "database name {name:?} must match [A-Za-z][A-Za-z0-9_-]{{0,63}}"
        )))
    }
}

/// Checks a measurement name: 1 to 128 bytes, no control characters, no `/` or `\`,
/// not `.` or `..`; and that every path its Parquet files can be given fits the object
/// store as it writes them ([`check_paths_fit`], through the functions that name the
/// files). Any name passing the first rules fits: a name too long to escape whole is
/// shortened with a digest ([`crate::paths::measurement_component`]), so a table can
/// always be flushed.
pub fn validate_measurement_name(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.len() > MEASUREMENT_NAME_BYTES_MAX
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c.is_control() || c == '/' || c == '\\');
    if bad {
        return Err(Error::InvalidName(format!(
            "measurement name {name:?} must be 1 to {MEASUREMENT_NAME_BYTES_MAX} bytes without '/', '\\' or control characters"
        )));
    }
    check_paths_fit(LONGEST_DATABASE_NAME, name).map_err(|e| {
        Error::InvalidName(format!("measurement name {name:?} cannot name a file: {e}"))
    })
}

/// The longest database name: the paths of a measurement are checked within it.
const LONGEST_DATABASE_NAME: &str =
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hour_floor_handles_negative_times() {
        assert_eq!(
            TimestampNs(-1).hour_floor(),
            TimestampNs(-TimestampNs::HOUR_NS)
        );
        assert_eq!(
            TimestampNs(TimestampNs::HOUR_NS + 5).hour_floor(),
            TimestampNs(TimestampNs::HOUR_NS)
        );
    }

    #[test]
    fn hour_floor_of_the_earliest_times_saturates_instead_of_overflowing() {
        // Found replaying `i64::MIN` through the path code: the floor of the first,
        // partial hour is below `i64::MIN`, and multiplying back overflowed.
        assert_eq!(TimestampNs(i64::MIN).hour_floor(), TimestampNs(i64::MIN));
        let first_whole = TimestampNs(i64::MIN).0.div_euclid(TimestampNs::HOUR_NS) + 1;
        let start = TimestampNs(first_whole * TimestampNs::HOUR_NS);
        assert_eq!(TimestampNs(start.0 - 1).hour_floor(), TimestampNs(i64::MIN));
        assert_eq!(start.hour_floor(), start);
        assert_eq!(
            TimestampNs(i64::MAX).hour_floor().0 % TimestampNs::HOUR_NS,
            0
        );
    }

    #[test]
    fn database_names_follow_the_spec() {
        assert!(validate_database_name("default").is_ok());
        assert!(validate_database_name("a-b_9").is_ok());
        assert!(validate_database_name("9a").is_err());
        assert!(validate_database_name("").is_err());
        assert!(validate_database_name("a/b").is_err());
        assert!(validate_database_name(&"a".repeat(65)).is_err());
    }

    #[test]
    fn measurement_names_cannot_escape_their_directory() {
        assert!(validate_measurement_name("cpu load").is_ok());
        assert!(validate_measurement_name("..").is_err());
        assert!(validate_measurement_name("a/b").is_err());
        assert!(validate_measurement_name(&"m".repeat(129)).is_err());
    }

    /// Regression: names whose escaped form is too long as stored were either refused
    /// (128 bytes of `é`) or, worse, accepted and never flushed (20 CJK characters). Now
    /// every name of the first rules is accepted and gets a path that fits.
    #[test]
    fn every_valid_name_is_accepted_and_fits() {
        assert_eq!(LONGEST_DATABASE_NAME.len(), DATABASE_NAME_CHARS_MAX);
        assert!(validate_database_name(LONGEST_DATABASE_NAME).is_ok());
        for name in [
            "é".repeat(64),
            "温度传感器读数温度传感器读数温度传感器读".to_string(),
            "日".repeat(42),
            " ".repeat(128),
            "m".repeat(128),
            format!(".{}", "m".repeat(127)),
        ] {
            assert!(validate_measurement_name(&name).is_ok(), "{name}");
        }
    }
}
