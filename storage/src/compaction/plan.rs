//! The leader's compaction policy for one table: pure, so it is tested without IO.
//!
//! Closed days first: every file of a day that ended `closed_after_ms` ago merges into
//! one day file when the day fits `day_file_bytes_max` and the memory bound (the merge
//! streams: what bounds its memory is how many inputs it reads at once). Otherwise,
//! per hour: an hour's files merge into one when the hour is closed, or earlier when it
//! has `hour_files_min` files (late writes, frequent flushes). A merge always takes a
//! bucket's files as a run in log order with nothing of that bucket left out in the
//! middle, which is what makes [`super::supersedes`] exact. Files sorted by different
//! leads (`sort_lead`; only a table written across an upgrade, or files fetched from a
//! replica that decided otherwise) cannot be merged: a bucket is then merged as runs
//! of files that agree, each run still contiguous in log order.

use std::collections::BTreeMap;

use super::{CompactionInput, CompactionRequest, CompactionSettings, DAY_NS};
use crate::ids::TimestampNs;
use crate::meta::FileMeta;
use crate::sort_lead::required_lead;
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

/// `files` cut into runs, in order, whose files can be merged together: every file of
/// more than one series in a run declares the same sort lead.
fn mergeable_runs<'a, 'f>(files: &'a [&'f FileMeta]) -> Vec<&'a [&'f FileMeta]> {
    let mut runs = Vec::new();
    let mut start = 0;
    let mut lead: Option<Option<&str>> = None;
    for (i, file) in files.iter().enumerate() {
        let Some(required) = required_lead(file) else {
            continue;
        };
        match lead {
            Some(current) if current != required => {
                runs.push(&files[start..i]);
                start = i;
                lead = Some(required);
            }
            Some(_) => {}
            None => lead = Some(required),
        }
    }
    if start < files.len() {
        runs.push(&files[start..]);
    }
    runs
}

/// Most merges planned for one table at one check: a long backlog is proposed in
/// batches of this many, each log entry small, the next batch at the next check.
pub const MERGES_PER_CHECK_MAX: usize = 128;

/// Every merge due now for a table whose files are `files` (in log order), oldest
/// buckets first: one per closed day, and one per hour of the days not merged whole.
/// Their inputs never overlap, so they are carried out one after another in any order.
/// A backlog of months merges in one check instead of a day per check.
pub fn plan_table(
    table: &TableKey,
    files: &[FileMeta],
    now: TimestampNs,
    settings: &CompactionSettings,
) -> Vec<CompactionRequest> {
    let mut planned = Vec::new();
    let mut days: BTreeMap<i64, Vec<&FileMeta>> = BTreeMap::new();
    for f in files {
        if let Some(day) = bucket_of(f, DAY_NS) {
            days.entry(day).or_default().push(f);
        }
    }
    let mut days_merged = Vec::new();
    for (&day, in_day) in &days {
        if planned.len() >= MERGES_PER_CHECK_MAX {
            return planned;
        }
        if in_day.len() < 2 || !closed(day, DAY_NS, now, settings) {
            continue;
        }
        let bytes: u64 = in_day.iter().map(|f| f.size_bytes).sum();
        if bytes > settings.day_file_bytes_max {
            continue;
        }
        if let Some(run) = mergeable_runs(in_day)
            .into_iter()
            .find(|run| run.len() >= 2 && merge_memory(run) <= settings.memory_bytes_max)
        {
            planned.push(request(table, run, day, DAY_NS));
            days_merged.push(day);
        }
    }
    let mut hours: BTreeMap<i64, Vec<&FileMeta>> = BTreeMap::new();
    for f in files {
        let hour_scoped = f
            .compaction
            .is_none_or(|m| m.bucket_ns == TimestampNs::HOUR_NS);
        if let (true, Some(hour)) = (hour_scoped, bucket_of(f, TimestampNs::HOUR_NS)) {
            if !days_merged.contains(&hour.div_euclid(DAY_NS).saturating_mul(DAY_NS)) {
                hours.entry(hour).or_default().push(f);
            }
        }
    }
    for (&hour, in_hour) in &hours {
        if planned.len() >= MERGES_PER_CHECK_MAX {
            break;
        }
        if in_hour.len() < 2 {
            continue;
        }
        if in_hour.len() < settings.hour_files_min
            && !closed(hour, TimestampNs::HOUR_NS, now, settings)
        {
            continue;
        }
        for run in mergeable_runs(in_hour) {
            let mut take = 0;
            while take < run.len() && merge_memory(&run[..=take]) <= settings.memory_bytes_max {
                take += 1;
            }
            if take >= 2 {
                planned.push(request(table, &run[..take], hour, TimestampNs::HOUR_NS));
                break;
            }
        }
    }
    planned
}
