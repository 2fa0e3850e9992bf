//! Wrapper types that keep numbers and names apart.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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

    /// The start of the hour this timestamp falls in (floor, also for negative times).
    pub fn hour_floor(self) -> TimestampNs {
        TimestampNs(self.0.div_euclid(Self::HOUR_NS) * Self::HOUR_NS)
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

/// Checks a measurement name: 1 to 128 bytes, no control characters, no `/` (it becomes a
/// path component of the Parquet files) and not `.` or `..`.
pub fn validate_measurement_name(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.len() > MEASUREMENT_NAME_BYTES_MAX
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c.is_control() || c == '/' || c == '\\');
    if bad {
        Err(Error::InvalidName(format!(
            "measurement name {name:?} must be 1 to {MEASUREMENT_NAME_BYTES_MAX} bytes without '/', '\\' or control characters"
        )))
    } else {
        Ok(())
    }
}

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
}
