//! Where a Parquet file lives in the object store, derived from what it holds.
//!
//! `data/{database}/{measurement}/{YYYY-MM-DD}/{HH}/{log_first:020}-{log_last:020}.parquet`.
//! The name is a function of the table, the data's hour and the log range it covers, so
//! every replica writes the same file for the same flush, and a rewrite after a crash
//! lands on the same name.

use chrono::{DateTime, Utc};

use crate::ids::{LogIndex, TimestampNs};

/// Top-level prefix of all Parquet files in the store.
pub const DATA_PREFIX: &str = "data";

/// Escapes a name into one path component: `[A-Za-z0-9_-]` and non-leading `.` stay,
/// everything else becomes `~XX` per byte (so `~` itself is escaped and names never
/// collide).
pub fn escape_component(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, byte) in name.bytes().enumerate() {
        let keep =
            byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' || (byte == b'.' && i > 0);
        if keep {
            out.push(byte as char);
        } else {
            out.push_str(&format!("~{byte:02x}"));
        }
    }
    out
}

/// The object path of the file holding `hour`'s rows of a segment.
pub fn parquet_path(
    database: &str,
    measurement: &str,
    hour: TimestampNs,
    log_first: LogIndex,
    log_last: LogIndex,
) -> String {
    let hour_start = DateTime::<Utc>::from_timestamp_nanos(hour.0);
    format!(
        "{DATA_PREFIX}/{}/{}/{}/{}/{:020}-{:020}.parquet",
        escape_component(database),
        escape_component(measurement),
        hour_start.format("%Y-%m-%d"),
        hour_start.format("%H"),
        log_first.0,
        log_last.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_deterministic_and_safe() {
        let p = parquet_path(
            "db",
            "cpu load/x",
            TimestampNs(1_700_000_000_000_000_000),
            LogIndex(3),
            LogIndex(9),
        );
        assert_eq!(p, "data/db/cpu~20load~2fx/2023-11-14/22/00000000000000000003-00000000000000000009.parquet");
        assert_eq!(escape_component(".."), "~2e.");
        assert_ne!(escape_component("a~20b"), escape_component("a b"));
    }
}
