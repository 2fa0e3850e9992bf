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

/// Hex digits of the digest that stands for a measurement name too long to escape whole.
const NAME_DIGEST_HEX: usize = 32;

/// How many bytes `component` takes as the object store finally writes it: object_store
/// percent-encodes `~`, `%` and every non-ASCII byte of a path part, so an escaped byte
/// (`~e6`) is stored as five (`%7Ee6`). Every length check goes through this.
pub fn stored_len(component: &str) -> usize {
    object_store::path::PathPart::from(component).as_ref().len()
}

/// The path component of a measurement's files. Its escaped name
/// ([`escape_component`]) when that fits in [`PATH_COMPONENT_BYTES_MAX`] stored bytes
/// (every name that fits keeps the component it always had); otherwise as much of the
/// escaped name as fits beside `~~` and a 128-bit digest of the whole name. An escaped
/// name never holds `~~` (each `~` starts a two-digit escape), so the two forms never
/// meet, and every valid name of up to 128 bytes has a component that fits: a name in
/// CJK characters, 15 stored bytes a character, is not refused for it.
pub fn measurement_component(name: &str) -> String {
    let escaped = escape_component(name);
    if stored_len(&escaped) <= PATH_COMPONENT_BYTES_MAX {
        return escaped;
    }
    let suffix = format!("~~{}", name_digest(name));
    let budget = PATH_COMPONENT_BYTES_MAX - stored_len(&suffix);
    let mut prefix = String::new();
    for (end, _) in name.char_indices().skip(1).chain([(name.len(), ' ')]) {
        let longer = escape_component(&name[..end]);
        if stored_len(&longer) > budget {
            break;
        }
        prefix = longer;
    }
    let component = prefix + &suffix;
    debug_assert!(stored_len(&component) <= PATH_COMPONENT_BYTES_MAX);
    component
}

/// The first [`NAME_DIGEST_HEX`] hex digits of the SHA-256 of `name`.
fn name_digest(name: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    hex[..NAME_DIGEST_HEX].to_string()
}

/// A bounded local file name for work on the object `path` (a download, a file being
/// received, a cache fill): its file name, which is a log range, after a digest of the
/// whole path, so it stays short whatever the measurement's name and never collides.
pub fn staging_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let name = format!("{}-{file}", &name_digest(path)[..16]);
    debug_assert!(name.len() <= 128, "{name}");
    name
}

/// Checks that every path the files of `measurement` in `database` can be given fits
/// the object store as it will write it: each component at most
/// [`PATH_COMPONENT_BYTES_MAX`] stored bytes, the whole key at most 1,024 (S3's limit).
/// Built with the very functions that name files, at the longest log indexes.
pub fn check_paths_fit(database: &str, measurement: &str) -> Result<(), String> {
    let longest = LogIndex(u64::MAX);
    let hour = TimestampNs(0);
    for path in [
        parquet_path(database, measurement, hour, longest, longest),
        compaction_path(database, measurement, hour, longest, longest, longest),
    ] {
        let stored = object_store::path::Path::from(path.as_str());
        if let Some(part) = stored
            .parts()
            .find(|p| p.as_ref().len() > PATH_COMPONENT_BYTES_MAX)
        {
            return Err(format!(
                "the path component {:?} of {path:?} is {} bytes as stored; at most \
                 {PATH_COMPONENT_BYTES_MAX} fit",
                part.as_ref(),
                part.as_ref().len()
            ));
        }
        if stored.as_ref().len() > OBJECT_KEY_BYTES_MAX {
            return Err(format!(
                "the path {path:?} is {} bytes as stored; at most {OBJECT_KEY_BYTES_MAX} fit",
                stored.as_ref().len()
            ));
        }
    }
    Ok(())
}

/// Longest object key S3 (and most stores) accept, in bytes.
pub const OBJECT_KEY_BYTES_MAX: usize = 1024;

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
        measurement_component(measurement),
        hour_start.format("%Y-%m-%d"),
        hour_start.format("%H"),
        log_first.0,
        log_last.0
    );
    debug_assert!(
        object_store::path::Path::from(path.as_str())
            .parts()
            .all(|c| c.as_ref().len() <= PATH_COMPONENT_BYTES_MAX)
            && path
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".."),
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
        .is_some_and(|c| stored_len(c) <= PATH_COMPONENT_BYTES_MAX));
    path
}

/// The highest log index whose entries a Parquet file's name says it holds: the end of
/// its log range, or for a compaction output the index of the entry that made it. `None`
/// for a name Quiver does not write. The start's sweep deletes a file it does not list
/// only when the node's snapshot and log reach this index (see `store::sweep`): a file
/// beyond what the node holds may be the only copy of acknowledged rows.
pub fn log_end_of(path: &str) -> Option<LogIndex> {
    let name = path.rsplit('/').next()?.strip_suffix(".parquet")?;
    let mut parts = name.split('-');
    let first: u64 = parts.next()?.parse().ok()?;
    let last: u64 = parts.next()?.parse().ok()?;
    let end = match parts.next() {
        None => last,
        Some(made) => made.strip_prefix('c')?.parse::<u64>().ok()?.max(last),
    };
    (parts.next().is_none() && first <= last).then_some(LogIndex(end))
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

    #[test]
    fn log_ends_are_read_back_from_every_name_quiver_writes() {
        let hour = TimestampNs(1_700_000_000_000_000_000);
        let flushed = parquet_path("db", "温度", hour, LogIndex(3), LogIndex(9));
        assert_eq!(log_end_of(&flushed), Some(LogIndex(9)));
        let merged = compaction_path("db", "m", hour, LogIndex(3), LogIndex(9), LogIndex(40));
        assert_eq!(log_end_of(&merged), Some(LogIndex(40)));
        for other in [
            "data/db/m/2023-11-14/22/x.parquet",
            "data/db/m/2023-11-14/22/00000000000000000009-00000000000000000003.parquet",
            "data/db/m/2023-11-14/22/1-2-c3-4.parquet",
            "data/db/m/2023-11-14/22/1-2-x3.parquet",
            "data/db/m/2023-11-14/22/1-2.parquet.tmp",
            "",
        ] {
            assert_eq!(log_end_of(other), None, "{other}");
        }
    }

    /// Regression: a 20-character CJK name escaped to 180 bytes passed a check of the
    /// escaped length, but object_store stores `~` as `%7E`: 300 bytes, a flush that
    /// failed for ever ("File name too long").
    #[test]
    fn long_names_get_a_component_that_fits_as_stored() {
        let cjk = "温度传感器读数温度传感器读数温度传感器读".to_string();
        assert_eq!(cjk.chars().count(), 20);
        for name in [
            cjk.clone(),
            "日".repeat(42),
            " ".repeat(128),
            format!("~~{}", "a".repeat(126)),
            "é".repeat(64),
            "m".repeat(128),
        ] {
            let component = measurement_component(&name);
            assert!(stored_len(&component) <= PATH_COMPONENT_BYTES_MAX, "{name}");
            assert!(check_paths_fit(&"d".repeat(64), &name).is_ok(), "{name}");
        }
        // A name that fits keeps its escaped form; one that does not ends in the digest.
        assert_eq!(measurement_component("cpu load"), "cpu~20load");
        let long = measurement_component(&cjk);
        assert!(long.starts_with("~e6~b8~a9"), "{long}");
        assert!(long.contains("~~"), "{long}");
        // Different long names never share a component.
        assert_ne!(
            measurement_component(&"日".repeat(42)),
            measurement_component(&format!("{}月", "日".repeat(41)))
        );
    }

    #[test]
    fn staging_names_are_short_and_distinct() {
        let a = parquet_path(
            "db",
            &"日".repeat(42),
            TimestampNs(0),
            LogIndex(1),
            LogIndex(2),
        );
        let b = parquet_path(
            "db",
            &"月".repeat(42),
            TimestampNs(0),
            LogIndex(1),
            LogIndex(2),
        );
        assert!(staging_name(&a).len() < 100);
        assert_ne!(staging_name(&a), staging_name(&b));
        assert!(staging_name(&a).ends_with("-00000000000000000001-00000000000000000002.parquet"));
    }
}
