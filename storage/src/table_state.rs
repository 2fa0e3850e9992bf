//! One table's state in memory: its schema, the live buffer, frozen segments waiting to
//! be written, and the files already written. Pure bookkeeping, no IO: the rules of
//! which log entries a table still needs live here and are unit-tested here.

use std::collections::VecDeque;
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::compaction::{CompactionJob, CompactionRequest};
use crate::error::Result;
use crate::ids::LogIndex;
use crate::meta::FileMeta;
use crate::schema::MeasurementSchema;
use crate::sort_lead::{choose_lead, required_lead, SortDecision};

/// Rows that arrived in one log entry.
#[derive(Debug, Clone)]
pub struct Buffered {
    /// Index of the entry that brought them.
    pub index: LogIndex,
    /// The rows (the writer's columns, a subset of the table schema).
    pub batch: RecordBatch,
}

/// A buffer frozen by a flush entry: immutable, queryable, waiting to become Parquet.
#[derive(Debug, Clone)]
pub struct Frozen {
    /// First log index the segment covers.
    pub log_first: LogIndex,
    /// The flush entry's index.
    pub log_last: LogIndex,
    /// The table schema when it was frozen; every file of the segment gets it.
    pub schema: SchemaRef,
    /// The rows.
    pub batches: Vec<RecordBatch>,
    /// Rows in the segment.
    pub rows: usize,
    /// Memory held, in bytes.
    pub bytes: usize,
    /// The tag its files sort by first (the table's decision when it was frozen, so
    /// every replica writes the same bytes; see `sort_lead`).
    pub sort_lead: Option<String>,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct TableState {
    pub(crate) schema: MeasurementSchema,
    pub(crate) active: Vec<Buffered>,
    pub(crate) active_rows: usize,
    pub(crate) active_bytes: usize,
    pub(crate) active_since: Option<Instant>,
    /// When the live buffer last received rows (for the idle flush).
    pub(crate) active_last: Option<Instant>,
    pub(crate) frozen: VecDeque<Frozen>,
    pub(crate) files: crate::file_list::FileList,
    /// Every entry at or below this index is in Parquet for this table.
    pub(crate) flushed_through: LogIndex,
    /// Every entry at or below this index is in Parquet or a frozen segment.
    pub(crate) frozen_through: LogIndex,
    /// Committed compactions not yet carried out here, in log order.
    pub(crate) pending: Vec<CompactionJob>,
    /// Which tag the table's files sort by first (replicated: decided by a freeze).
    pub(crate) sort: SortDecision,
}

impl TableState {
    /// Whether the rows of entry `index` are already held (replay after a restart).
    pub fn holds(&self, index: LogIndex) -> bool {
        index <= self.frozen_through
    }

    /// Appends an entry's rows; the caller has merged the schema. Returns bytes added.
    pub fn append(&mut self, index: LogIndex, batch: RecordBatch, now: Instant) -> usize {
        debug_assert!(!self.holds(index), "entry {index} applied twice");
        debug_assert!(
            self.active.last().is_none_or(|b| b.index <= index),
            "entries out of order"
        );
        let bytes = held_bytes(&batch);
        self.active_rows += batch.num_rows();
        self.active_bytes += bytes;
        self.active_since.get_or_insert(now);
        self.active_last = Some(now);
        self.active.push(Buffered { index, batch });
        bytes
    }

    /// Applies a flush entry at `index`: the live buffer becomes a frozen segment
    /// covering `(frozen_through, index]`. Returns false if there was nothing to freeze
    /// or the flush was already applied before a restart.
    pub fn freeze(&mut self, index: LogIndex) -> bool {
        if self.holds(index) || self.active.is_empty() {
            return false;
        }
        let batches: Vec<RecordBatch> = self.active.drain(..).map(|b| b.batch).collect();
        if self.sort == SortDecision::Undecided {
            if let Some(lead) = choose_lead(self.schema.arrow(), &batches) {
                self.sort = SortDecision::Decided(Some(lead));
            }
        }
        let segment = Frozen {
            log_first: LogIndex(self.frozen_through.0 + 1),
            log_last: index,
            schema: self.schema.arrow().clone(),
            batches,
            rows: self.active_rows,
            bytes: self.active_bytes,
            sort_lead: self.sort.lead().map(str::to_string),
        };
        self.frozen.push_back(segment);
        self.frozen_through = index;
        self.active_rows = 0;
        self.active_bytes = 0;
        self.active_since = None;
        self.active_last = None;
        true
    }

    /// Applies a delete at `index`: freezes the live buffer into a segment ending at
    /// `index - 1`, so no segment holds rows from both sides of the delete. The rows of
    /// entries after it start a new segment at `index`.
    pub fn freeze_before(&mut self, index: LogIndex) -> bool {
        debug_assert!(index.0 > 0, "a delete is never the first entry");
        self.freeze(LogIndex(index.0.saturating_sub(1)))
    }

    /// Records a file found on disk or received from a peer: its columns join the
    /// schema and its log range counts as flushed. Keeps files ordered.
    pub fn add_file(&mut self, meta: FileMeta) -> Result<()> {
        let columns = meta
            .columns
            .iter()
            .filter_map(|c| c.kind().map(|k| (c.name.as_str(), k)));
        let file_schema = crate::schema::canonical_schema(columns);
        if let Some(grown) = self.schema.merge(&meta.measurement, &file_schema)? {
            self.schema = grown;
        }
        self.flushed_through = self.flushed_through.max(meta.log_last);
        self.frozen_through = self.frozen_through.max(self.flushed_through);
        self.adopt_sort_of(&meta);
        self.files.insert(meta);
        Ok(())
    }

    /// An undecided table holding a file of more than one series takes that file's
    /// lead: its decision was made before the file was written (or the file predates
    /// leads), and later files must merge with it. A snapshot's recorded decision,
    /// restored after the files, has the last word.
    fn adopt_sort_of(&mut self, meta: &FileMeta) {
        if self.sort == SortDecision::Undecided {
            if let Some(lead) = required_lead(meta) {
                self.sort = SortDecision::Decided(lead.map(str::to_string));
            }
        }
    }

    /// A table holding `files` (found at start, in any order): as [`Self::add_file`]
    /// for each, with the list sorted once.
    pub fn with_files(files: Vec<FileMeta>) -> Result<TableState> {
        let mut state = TableState::default();
        for meta in &files {
            let columns = meta
                .columns
                .iter()
                .filter_map(|c| c.kind().map(|k| (c.name.as_str(), k)));
            let file_schema = crate::schema::canonical_schema(columns);
            if let Some(grown) = state.schema.merge(&meta.measurement, &file_schema)? {
                state.schema = grown;
            }
            state.flushed_through = state.flushed_through.max(meta.log_last);
            state.adopt_sort_of(meta);
        }
        state.frozen_through = state.flushed_through;
        state.files = crate::file_list::FileList::from_files(files);
        Ok(state)
    }

    /// Sets `flushed_through` from the files again, after files were removed (a
    /// snapshot install): what the files no longer hold must be applied again.
    pub fn recompute_flushed_through(&mut self) {
        self.flushed_through = self
            .files
            .iter()
            .map(|f| f.log_last)
            .max()
            .unwrap_or_default();
        self.frozen_through = self
            .frozen
            .back()
            .map(|f| f.log_last)
            .unwrap_or_default()
            .max(self.flushed_through);
    }

    /// Whether the oldest frozen segment is the one ending at `log_last`: it is not
    /// when a snapshot installed while the segment was being written replaced the
    /// table's memory (segments end at flush entries, so an equal end is an equal
    /// segment).
    pub fn oldest_segment_ends_at(&self, log_last: LogIndex) -> bool {
        self.frozen.front().map(|f| f.log_last) == Some(log_last)
    }

    /// Records that the oldest frozen segment is now the given files (the caller has
    /// checked [`TableState::oldest_segment_ends_at`]). Returns the bytes of memory
    /// released.
    pub fn segment_written(&mut self, log_last: LogIndex, files: Vec<FileMeta>) -> usize {
        debug_assert!(
            self.oldest_segment_ends_at(log_last),
            "segments are written in order"
        );
        if !self.oldest_segment_ends_at(log_last) {
            return 0;
        }
        self.files.append(files);
        self.flushed_through = log_last;
        self.frozen.pop_front().map(|f| f.bytes).unwrap_or(0)
    }

    /// Why `request` cannot be applied to this table, if it cannot. Decided only from
    /// replicated state (files, frozen segments and queued jobs together describe the
    /// same files on every replica at the same index, however far each has got in
    /// writing them), so every replica accepts or rejects alike.
    pub fn compaction_refusal(&self, request: &CompactionRequest) -> Option<String> {
        if request.inputs.is_empty() || request.bucket_ns < 0 {
            return Some("a compaction needs inputs and a bucket".into());
        }
        if request.is_drop() && request.drop_before.is_none() {
            return Some("a drop needs a retention cutoff".into());
        }
        for (i, input) in request.inputs.iter().enumerate() {
            if request.inputs[..i].iter().any(|o| o.path == input.path) {
                return Some(format!("{} is named twice", input.path));
            }
            if self.pending.iter().any(|j| j.consumes(&input.path)) {
                return Some(format!("{} is already being compacted", input.path));
            }
            let range = (input.log_first, input.log_last);
            let is_file = self
                .files
                .iter()
                .any(|f| f.path == input.path && (f.log_first, f.log_last) == range);
            let is_coming_output = self
                .pending
                .iter()
                .any(|j| j.output == input.path && (j.log_first, j.log_last) == range);
            let is_frozen = self
                .frozen
                .iter()
                .any(|f| (f.log_first, f.log_last) == range);
            if !(is_file || is_coming_output || is_frozen) {
                return Some(format!("{} is not a file of the table", input.path));
            }
        }
        None
    }
}

/// Bytes `batch` holds in memory: each column's own part of its buffers. Also what a
/// query's memory reservation counts for a batch it holds (a slice of a larger buffer
/// counts as the slice).
///
/// A batch decoded from a log entry shares one allocation (the IPC message body) between
/// all its columns, and `get_array_memory_size` counts a shared allocation once per
/// buffer that points into it: a TSBS-shaped batch (21 columns, about 40 buffers) was
/// counted 20 to 40 times over, which made the memory budget refuse writes and flush
/// tiny segments with a fraction of the budget in use.
pub fn held_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|column| {
            column
                .to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| column.get_array_memory_size())
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float64Array, TimestampNanosecondArray};

    use super::*;
    use crate::schema::canonical_schema;
    use crate::{ColumnKind, FieldType};

    fn batch(rows: usize) -> RecordBatch {
        let schema = canonical_schema([("v", ColumnKind::Field(FieldType::Float))]);
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(TimestampNanosecondArray::from(vec![1i64; rows])),
                Arc::new(Float64Array::from(vec![1.0; rows])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn freeze_covers_the_range_since_the_last_freeze() {
        let mut t = TableState::default();
        let now = Instant::now();
        t.append(LogIndex(3), batch(2), now);
        t.append(LogIndex(5), batch(3), now);
        assert!(t.freeze(LogIndex(6)));
        let f = t.frozen.front().unwrap();
        assert_eq!(
            (f.log_first, f.log_last, f.rows),
            (LogIndex(1), LogIndex(6), 5)
        );
        assert!(t.holds(LogIndex(5)));
        assert!(!t.freeze(LogIndex(6)), "replayed flush is a no-op");
        t.append(LogIndex(7), batch(1), now);
        assert!(t.freeze(LogIndex(8)));
        assert_eq!(t.frozen.back().unwrap().log_first, LogIndex(7));
        assert!(t.segment_written(LogIndex(6), vec![]) > 0);
        assert_eq!(t.flushed_through, LogIndex(6));
        assert_eq!(t.active_rows, 0);
        assert_eq!(t.frozen.iter().map(|f| f.rows).sum::<usize>(), 1);
    }

    #[test]
    fn an_empty_buffer_does_not_freeze() {
        let mut t = TableState::default();
        assert!(!t.freeze(LogIndex(4)));
        assert!(t.frozen.is_empty());
    }
}
