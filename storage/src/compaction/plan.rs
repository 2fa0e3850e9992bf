//! The leader's compaction policy for one table: pure, so it is tested without IO.
//!
//! Closed days first: every file of a day that ended `closed_after_ms` ago merges into
//! one day file when the day fits `day_file_bytes_max` and the memory bound (the merge
//! streams: what bounds its memory is how many inputs it reads at once). Otherwise,
//! per hour: an hour's files merge into one when the hour is closed, or earlier when it
//! has `hour_files_min` files (late writes, frequent flushes). A merge always takes a
//! bucket's files as a run in log order with nothing of that bucket left out in the
//! middle, which is what makes [`super::supersedes`] exact.

use std::collections::BTreeMap;

use super::{CompactionInput, CompactionRequest, CompactionSettings, DAY_NS};
use crate::ids::TimestampNs;
use crate::meta::FileMeta;
use crate::store::TableKey;

/// The memory a merge of `files` holds at least (one smallest read batch per input;
/// see [`super::merge`], which streams and sizes its batches to the bound).
pub fn merge_memory(files: &[&FileMeta]) -> u64 {
    let columns = files.iter().map(|f| f.columns.len()).max().unwrap_or(0);
    super::merge::merge_memory_min(files.len(), columns)
}

fn bucket_of(file: &FileMeta, width: i64) -> Option<i64> {
    let start = file.time_min.0.div_euclid(width).saturating_mul(width);
    (file.time_max.0.div_euclid(width).saturating_mul(width) == start).then_some(start)
}

fn closed(bucket_start: i64, width: i64, now: TimestampNs, settings: &CompactionSettings) -> bool {
    let closed_after = i64::try_from(settings.closed_after_ms)
        .unwrap_or(i64::MAX)
        .saturating_mul(1_000_000);
    bucket_start
        .saturating_add(width)
        .saturating_add(closed_after)
        <= now.0
}

fn request(table: &TableKey, files: &[&FileMeta], start: i64, width: i64) -> CompactionRequest {
    CompactionRequest {
        table: table.clone(),
        inputs: files.iter().map(|f| CompactionInput::of(f)).collect(),
        bucket_start: TimestampNs(start),
        bucket_ns: width,
        drop_before: None,
    }
}

/// The next merge for a table whose files are `files` (in log order), if one is due.
pub fn plan_table(
    table: &TableKey,
    files: &[FileMeta],
    now: TimestampNs,
    settings: &CompactionSettings,
) -> Option<CompactionRequest> {
    let mut days: BTreeMap<i64, Vec<&FileMeta>> = BTreeMap::new();
    for f in files {
        if let Some(day) = bucket_of(f, DAY_NS) {
            days.entry(day).or_default().push(f);
        }
    }
    for (&day, in_day) in &days {
        if in_day.len() < 2 || !closed(day, DAY_NS, now, settings) {
            continue;
        }
        let bytes: u64 = in_day.iter().map(|f| f.size_bytes).sum();
        if bytes <= settings.day_file_bytes_max && merge_memory(in_day) <= settings.memory_bytes_max
        {
            return Some(request(table, in_day, day, DAY_NS));
        }
    }
    let mut hours: BTreeMap<i64, Vec<&FileMeta>> = BTreeMap::new();
    for f in files {
        let hour_scoped = f
            .compaction
            .is_none_or(|m| m.bucket_ns == TimestampNs::HOUR_NS);
        if let (true, Some(hour)) = (hour_scoped, bucket_of(f, TimestampNs::HOUR_NS)) {
            hours.entry(hour).or_default().push(f);
        }
    }
    for (&hour, in_hour) in &hours {
        if in_hour.len() < 2 {
            continue;
        }
        if in_hour.len() < settings.hour_files_min
            && !closed(hour, TimestampNs::HOUR_NS, now, settings)
        {
            continue;
        }
        let mut take = 0;
        while take < in_hour.len() && merge_memory(&in_hour[..=take]) <= settings.memory_bytes_max {
            take += 1;
        }
        if take >= 2 {
            return Some(request(table, &in_hour[..take], hour, TimestampNs::HOUR_NS));
        }
    }
    None
}
