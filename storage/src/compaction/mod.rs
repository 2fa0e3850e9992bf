//! Compaction: merging a table's small files into fewer, larger ones, decided by the
//! leader through the log and carried out identically by every replica.
//!
//! * [`plan`] is the leader's policy: which files of a table to merge now (small files
//!   of one hour first, then every file of a closed day into one day file), within the
//!   memory and size bounds of [`CompactionSettings`].
//! * A `Compact` log entry names the inputs; applying it records a [`CompactionJob`]
//!   whose output path is a function of the entry's index, so every replica writes the
//!   same file. [`merge`] produces the output's bytes: the same inputs give the same
//!   bytes on every replica.
//! * The swap is crash-safe without any record besides the files: an output's footer
//!   says which log range and time bucket it covers ([`CompactionMark`]); any file of
//!   the table inside both is dead ([`supersedes`]) and is removed when the node next
//!   opens. Inputs are deleted only after the output is durable, and only after a grace
//!   period so queries that listed them can finish.

use serde::{Deserialize, Serialize};

use crate::ids::{LogIndex, TimestampNs};
use crate::lifecycle::Tombstone;
use crate::meta::{CompactionMark, FileMeta};
use crate::store::TableKey;

pub(crate) mod lifecycle_plan;
pub(crate) mod merge;
pub(crate) mod plan;

/// Nanoseconds in one day.
pub const DAY_NS: i64 = 24 * TimestampNs::HOUR_NS;

/// Compaction settings (the `[compaction]` section).
#[derive(Debug, Clone)]
pub struct CompactionSettings {
    /// Whether the leader proposes compactions at all.
    pub enabled: bool,
    /// An hour with this many files is merged even while it is still open (late or
    /// backfilled writes, frequent flushes).
    pub hour_files_min: usize,
    /// An hour or a day counts as closed (no more writes expected) this long after it
    /// ends; then all its files are merged.
    pub closed_after_ms: u64,
    /// A closed day is merged into one file only if its files add up to at most this
    /// many bytes; bigger days stay one file per hour.
    pub day_file_bytes_max: u64,
    /// The most memory one compaction may hold. A merge streams: it reads every input
    /// a batch at a time, sized so one batch per input fits; the policy merges no more
    /// inputs at once than fit with the smallest batch.
    pub memory_bytes_max: u64,
    /// How long replaced files stay on disk after a compaction, so queries that
    /// started before it can still read them. Longer than `query.timeout_ms`.
    pub input_grace_ms: u64,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            enabled: true,
            hour_files_min: 4,
            closed_after_ms: 3_600_000,
            day_file_bytes_max: 1 << 30,
            memory_bytes_max: 512 << 20,
            input_grace_ms: 300_000,
        }
    }
}

/// One file a compaction consumes, as the leader saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionInput {
    /// Object path.
    pub path: String,
    /// First log index the file covers.
    pub log_first: LogIndex,
    /// Last log index the file covers.
    pub log_last: LogIndex,
}

impl CompactionInput {
    /// Describes `meta` as an input.
    pub fn of(meta: &FileMeta) -> Self {
        CompactionInput {
            path: meta.path.clone(),
            log_first: meta.log_first,
            log_last: meta.log_last,
        }
    }
}

/// What the leader proposes: merge these files of one table, covering one bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionRequest {
    /// The table.
    pub table: TableKey,
    /// Files to merge, in log order.
    pub inputs: Vec<CompactionInput>,
    /// Start of the time bucket (hour or day) every input lies in.
    pub bucket_start: TimestampNs,
    /// Width of the bucket in nanoseconds; 0 for a drop of whole files past the
    /// retention (no output, no bucket).
    pub bucket_ns: i64,
    /// Rows older than this are dropped (the retention, floored to the hour, as the
    /// leader saw it); none: no row is too old.
    #[serde(default)]
    pub drop_before: Option<TimestampNs>,
}

impl CompactionRequest {
    /// Whether this drops whole files past the retention instead of merging.
    pub fn is_drop(&self) -> bool {
        self.bucket_ns == 0
    }
}

/// A committed compaction waiting to be carried out on this replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionJob {
    /// What was asked.
    pub request: CompactionRequest,
    /// Index of the `Compact` entry; names the output.
    pub index: LogIndex,
    /// The output's object path.
    pub output: String,
    /// First log index the output covers.
    pub log_first: LogIndex,
    /// Last log index the output covers.
    pub log_last: LogIndex,
    /// The table's deletes older than the entry, applied to the inputs they cover.
    #[serde(default)]
    pub tombstones: Vec<Tombstone>,
}

impl CompactionJob {
    /// Whether `row_filter` would keep every row of `input` (nothing to rewrite):
    /// no tombstone applies to it and none of its rows is past `drop_before`.
    pub fn keeps_all_of(&self, input: &FileMeta) -> bool {
        self.request
            .drop_before
            .is_none_or(|before| input.time_min >= before)
            && !self
                .tombstones
                .iter()
                .any(|t| t.applies_to(input.deletes_through(), input.time_min, input.time_max))
    }

    /// The rows of `batch` (read from `input`) that survive this job's deletes and
    /// retention, as a mask, or `None` when all of them do.
    pub fn row_filter(
        &self,
        input: &FileMeta,
        batch: &arrow::record_batch::RecordBatch,
    ) -> crate::error::Result<Option<arrow::array::BooleanArray>> {
        if self.keeps_all_of(input) {
            return Ok(None);
        }
        let rows = batch.num_rows();
        let mut keep = vec![true; rows];
        if let Some(before) = self.request.drop_before {
            if let Some(time) = batch
                .column_by_name(crate::schema::TIME_COLUMN)
                .and_then(|c| {
                    arrow::array::AsArray::as_primitive_opt::<
                        arrow::datatypes::TimestampNanosecondType,
                    >(c)
                })
            {
                for (k, t) in keep.iter_mut().zip(time.values().iter()) {
                    *k = *t >= before.0;
                }
            }
        }
        for t in self
            .tombstones
            .iter()
            .filter(|t| t.applies_to(input.deletes_through(), input.time_min, input.time_max))
        {
            let matched = t.predicate.matches(batch)?;
            for (i, k) in keep.iter_mut().enumerate() {
                *k &= !matched.value(i);
            }
        }
        Ok(Some(keep.into_iter().map(Some).collect()))
    }
    /// The mark the output carries.
    pub fn mark(&self) -> CompactionMark {
        CompactionMark {
            index: self.index,
            bucket_start: self.request.bucket_start,
            bucket_ns: self.request.bucket_ns,
        }
    }

    /// Whether `path` is one of the inputs.
    pub fn consumes(&self, path: &str) -> bool {
        self.request.inputs.iter().any(|i| i.path == path)
    }
}

/// What applying a `Compact` entry did (identical on every replica, except that a
/// replica that already holds the output after a restart answers `AlreadyDone`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompactionOutcome {
    /// The job is queued on this replica.
    Scheduled,
    /// The output already exists here (a replay after a restart).
    AlreadyDone,
    /// The entry names files that are not (or no longer) the table's: nothing happens.
    Rejected(String),
}

/// Whether compaction output `output` holds every row of `other` (so `other` is dead):
/// same table, `other`'s log range inside the output's, its times inside the output's
/// bucket. Transitive by construction, so a crash that leaves several generations of
/// inputs behind is cleaned up from the newest output alone.
pub fn supersedes(output: &FileMeta, other: &FileMeta) -> bool {
    let Some(mark) = output.compaction else {
        return false;
    };
    output.path != other.path
        && output.database == other.database
        && output.measurement == other.measurement
        && output.log_first <= other.log_first
        && other.log_last <= output.log_last
        && mark.bucket_contains(other.time_min)
        && mark.bucket_contains(other.time_max)
}

/// Splits files into live ones and those a present compaction output supersedes.
pub fn split_superseded(files: Vec<FileMeta>) -> (Vec<FileMeta>, Vec<FileMeta>) {
    let outputs: Vec<FileMeta> = files
        .iter()
        .filter(|f| f.compaction.is_some())
        .cloned()
        .collect();
    files
        .into_iter()
        .partition(|f| !outputs.iter().any(|o| supersedes(o, f)))
}

#[cfg(test)]
mod tests;
