//! The leader's lifecycle policy for one table, ahead of merging: drop the files wholly
//! past the retention, then rewrite the files the retention reaches into or a delete
//! hides rows of. Pure, so it is tested without IO.

use super::{CompactionInput, CompactionRequest, DAY_NS};
use crate::ids::TimestampNs;
use crate::lifecycle::Tombstone;
use crate::meta::FileMeta;
use crate::store::TableKey;

/// Most files one drop entry names (keeps the entry small; the next check drops more).
pub const DROP_FILES_PER_ENTRY_MAX: usize = 1_000;

/// The bucket a file lies in: its compaction's, or its hour (a flushed file never
/// spans two hours).
fn bucket_of(file: &FileMeta) -> (TimestampNs, i64) {
    match file.compaction {
        Some(mark) => (mark.bucket_start, mark.bucket_ns),
        None => {
            let hour = file.time_min.hour_floor();
            let width = if file.time_max.hour_floor() == hour {
                TimestampNs::HOUR_NS
            } else {
                DAY_NS
            };
            (
                TimestampNs(file.time_min.0.div_euclid(width) * width),
                width,
            )
        }
    }
}

/// The next drop or rewrite due for a table whose files are `files`, if any.
pub fn plan_lifecycle(
    table: &TableKey,
    files: &[FileMeta],
    drop_before: Option<TimestampNs>,
    tombstones: &[&Tombstone],
) -> Option<CompactionRequest> {
    if let Some(before) = drop_before {
        let expired: Vec<CompactionInput> = files
            .iter()
            .filter(|f| f.time_max < before)
            .take(DROP_FILES_PER_ENTRY_MAX)
            .map(CompactionInput::of)
            .collect();
        if !expired.is_empty() {
            return Some(CompactionRequest {
                table: table.clone(),
                inputs: expired,
                bucket_start: TimestampNs(0),
                bucket_ns: 0,
                drop_before,
            });
        }
    }
    let due = files.iter().find(|f| {
        drop_before.is_some_and(|before| f.time_min < before)
            || tombstones
                .iter()
                .any(|t| t.applies_to(f.deletes_through(), f.time_min, f.time_max))
    })?;
    let (bucket_start, bucket_ns) = bucket_of(due);
    Some(CompactionRequest {
        table: table.clone(),
        inputs: vec![CompactionInput::of(due)],
        bucket_start,
        bucket_ns,
        drop_before,
    })
}
