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

/// Longest path component Linux file systems accept (`NAME_MAX`: ext4, XFS, btrfs, tmpfs
/// all use 255 bytes). Every component of a Parquet path must fit, or its flush fails
/// forever; names that become components are checked against it when they are accepted.
pub const PATH_COMPONENT_BYTES_MAX: usize = 255;

/// Bytes one byte of a name takes once escaped that [`escape_component`] rewrites.
pub const ESCAPED_BYTE_BYTES: usize = 3;

/// Whether [`escape_component`] keeps `byte` at position `i` as it is.
fn kept(i: usize, byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-' || (byte == b'.' && i > 0)
}

/// Escapes a name into one path component: `[A-Za-z0-9_-]` and non-leading `.` stay,
/// everything else becomes `~XX` per byte (so `~` itself is escaped and names never
/// collide).
pub fn escape_component(name: &str) -> String {
    let mut out = String::with_capacity(escaped_len(name));
    for (i, byte) in name.bytes().enumerate() {
        if kept(i, byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("~{byte:02x}"));
        }
    }
    debug_assert_eq!(out.len(), escaped_len(name));
    out
}

/// The length in bytes of [`escape_component`]`(name)`, without building it.
pub fn escaped_len(name: &str) -> usize {
    name.bytes()
        .enumerate()
        .map(|(i, byte)| if kept(i, byte) { 1 } else { ESCAPED_BYTE_BYTES })
        .sum()
}

/// The object path of the file holding `hour`'s rows of a segment.
pub fn parquet_path(
    database: &str,
    measurement: &str,
    hour: TimestampNs,
    log_first: LogIndex,
    log_last: LogIndex,
) -> String {
    // Components other than the names are bounded by construction: an i64 of nanoseconds
    // spans the years 1677-2262, so the date is always `YYYY-MM-DD` (10 bytes), the hour
    // 2 bytes and the file name 49 bytes; database names are at most 64 ASCII bytes that
    // escaping keeps. Only the measurement can grow, and validation bounds it.
    let hour_start = DateTime::<Utc>::from_timestamp_nanos(hour.0);
    let path = format!(
        "{DATA_PREFIX}/{}/{}/{}/{}/{:020}-{:020}.parquet",
        escape_component(database),
        escape_component(measurement),
        hour_start.format("%Y-%m-%d"),
        hour_start.format("%H"),
        log_first.0,
        log_last.0
    );
    debug_assert!(
        path.split('/')
            .all(|c| !c.is_empty() && c.len() <= PATH_COMPONENT_BYTES_MAX && c != "." && c != ".."),
        "unsafe path {path:?}"
    );
    path
}

/// The object path of a compaction output: beside the files of its bucket's first hour,
/// named by the log range it covers and the index of the entry that made it, so it never
/// collides with a flushed file or another output.
pub fn compaction_path(
    database: &str,
    measurement: &str,
    bucket_start: TimestampNs,
    log_first: LogIndex,
    log_last: LogIndex,
    index: LogIndex,
) -> String {
    let flushed_name = parquet_path(
        database,
        measurement,
        bucket_start.hour_floor(),
        log_first,
        log_last,
    );
    let stem = flushed_name.trim_end_matches(".parquet");
    let path = format!("{stem}-c{:020}.parquet", index.0);
    debug_assert!(path
        .rsplit('/')
        .next()
        .is_some_and(|c| c.len() <= PATH_COMPONENT_BYTES_MAX));
    path
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

    #[test]
    fn escaped_len_matches_escape_component() {
        for name in [
            "",
            "cpu",
            ".x",
            "x.",
            "a b",
            "温度",
            "~",
            "..",
            "é".repeat(64).as_str(),
        ] {
            assert_eq!(escaped_len(name), escape_component(name).len(), "{name:?}");
        }
    }

    #[test]
    fn fixed_components_stay_short_at_the_ends_of_time() {
        for hour in [i64::MIN, -1, 0, i64::MAX] {
            let hour = TimestampNs(hour).hour_floor();
            let p = parquet_path("a", "m", hour, LogIndex(u64::MAX), LogIndex(u64::MAX));
            let parts: Vec<&str> = p.split('/').collect();
            assert_eq!(parts.len(), 6, "{p}");
            assert_eq!(parts[3].len(), 10, "{p}");
            assert_eq!(parts[4].len(), 2, "{p}");
            assert_eq!(parts[5].len(), 49, "{p}");
        }
    }
}
