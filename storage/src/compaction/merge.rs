//! Producing a compaction's output as a stream: every input is already sorted by tags
//! (its sort lead first, see `sort_lead`) then time (the order every file declares,
//! flush outputs and merge outputs alike; inputs of more than one series agree on the
//! lead, and a file of one series is sorted under any), so
//! the output is a k-way merge of the inputs, read a batch at a time and written a
//! chunk at a time. Memory is bounded by the number of inputs times one read batch
//! (sized from `compaction.memory_bytes_max`), plus one output chunk and the Parquet
//! writer's open row group, never by the size of the inputs.
//!
//! Deterministic: the same inputs give the same bytes on every replica, whatever its
//! memory setting (read batch sizes change only how the inputs are read; the output is
//! cut into chunks and row groups by constants). Equal keys keep log order: rows of an
//! earlier input come first, then rows in file order.

use std::io::Write;
use std::path::Path;

use arrow::array::{ArrayRef, BooleanArray};
use arrow::compute::{cast, interleave_record_batch};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use super::CompactionJob;
use crate::error::{Error, Result};
use crate::meta::{ColumnMeta, FileMeta, FILE_META_VERSION};
use crate::parquet_encode::{min_max, time_values, ParquetSettings, StreamingParquetWriter};
use crate::schema::{canonical_schema, ColumnKind, TIME_COLUMN};
use crate::sort_lead::{merge_lead, sort_tag_indices};
use crate::tag_distinct::TagDistinct;

/// Rows an input is read in at most.
const READ_BATCH_ROWS_MAX: usize = 64 * 1024;

/// Rows an input is read in at least, however many inputs share the memory.
pub const READ_BATCH_ROWS_MIN: usize = 1024;

/// Rows of one output chunk handed to the Parquet writer. A constant, so the output's
/// bytes do not depend on any replica's settings.
const OUTPUT_CHUNK_ROWS: usize = 8 * 1024;

/// Bytes one value of one column is assumed to take once decoded (numbers take 8 or
/// less, short strings about this, tags a dictionary key).
pub const DECODED_BYTES_PER_VALUE: u64 = 24;

/// Rows a filter keeps of a batch read from an input (`None`: all of them).
pub type RowFilter<'a> =
    dyn Fn(&FileMeta, &RecordBatch) -> Result<Option<BooleanArray>> + Sync + 'a;

/// The memory a merge of `inputs` files of `columns` columns holds at least: one
/// smallest read batch per input. The leader's policy never proposes more inputs than
/// `compaction.memory_bytes_max` allows by this measure.
pub fn merge_memory_min(inputs: usize, columns: usize) -> u64 {
    (inputs as u64)
        .saturating_mul(READ_BATCH_ROWS_MIN as u64)
        .saturating_mul(columns as u64)
        .saturating_mul(DECODED_BYTES_PER_VALUE)
}

/// Merges the inputs (each `(file on disk, its metadata)`, in log order) into the
/// output `job` names, written to `sink`, keeping the rows `keep` keeps. Returns the
/// output's metadata (its `size_bytes` still 0: the caller measures the file), or
/// `None` when no row is left (then `sink` holds no valid file).
pub fn merge_files(
    job: &CompactionJob,
    inputs: &[(std::path::PathBuf, FileMeta)],
    settings: &ParquetSettings,
    memory_bytes_max: u64,
    keep: &RowFilter<'_>,
    sink: &mut (dyn Write + Send),
) -> Result<Option<FileMeta>> {
    debug_assert_eq!(inputs.len(), job.request.inputs.len());
    let schema = union_schema(inputs.iter().map(|(_, m)| m))?;
    let metas: Vec<&FileMeta> = inputs.iter().map(|(_, m)| m).collect();
    let lead = merge_lead(&metas)?;
    let batch_rows = read_batch_rows(memory_bytes_max, inputs.len(), schema.fields().len());
    let mut merger = Merger::new(&schema, lead.as_deref())?;
    for (position, (path, meta)) in inputs.iter().enumerate() {
        let input = Input::open(path, meta, &schema, batch_rows, position)?;
        merger.add(input, keep)?;
    }
    let columns: Vec<ColumnMeta> = schema
        .fields()
        .iter()
        .filter_map(|f| {
            ColumnKind::from_arrow(f.name(), f.data_type()).map(|k| ColumnMeta::new(f.name(), k))
        })
        .collect();
    let mut writer = StreamingParquetWriter::new(sink, &schema, settings, lead.as_deref())?;
    let mut rows = 0u64;
    let (mut time_min, mut time_max) = (i64::MAX, i64::MIN);
    let mut distinct = TagDistinct::new(&schema);
    while let Some(chunk) = merger.next_chunk(keep)? {
        distinct.add(&chunk);
        let (lo, hi) = min_max(time_values(&chunk)?);
        time_min = time_min.min(lo);
        time_max = time_max.max(hi);
        rows += chunk.num_rows() as u64;
        writer.write(&chunk)?;
    }
    if rows == 0 {
        return Ok(None);
    }
    let meta = FileMeta {
        version: FILE_META_VERSION,
        path: job.output.clone(),
        database: job.request.table.database.clone(),
        measurement: job.request.table.measurement.clone(),
        rows,
        time_min: crate::ids::TimestampNs(time_min),
        time_max: crate::ids::TimestampNs(time_max),
        log_first: job.log_first,
        log_last: job.log_last,
        segment_files: 1,
        columns: columns.into(),
        size_bytes: 0,
        compaction: Some(job.mark()),
        tag_distinct: distinct.finish(),
        sort_lead: lead,
    };
    writer.finish(&meta)?;
    Ok(Some(meta))
}

/// Rows per read batch so that one batch per input fits half the memory bound (the
/// other half is for batches an output chunk still points into, the chunk itself and
/// the writer).
fn read_batch_rows(memory_bytes_max: u64, inputs: usize, columns: usize) -> usize {
    let per_input = memory_bytes_max / 2 / (inputs.max(1) as u64);
    let row_bytes = (columns.max(1) as u64).saturating_mul(DECODED_BYTES_PER_VALUE);
    usize::try_from(per_input / row_bytes)
        .unwrap_or(READ_BATCH_ROWS_MAX)
        .clamp(READ_BATCH_ROWS_MIN, READ_BATCH_ROWS_MAX)
}

/// One input file being read in order.
struct Input {
    reader: ParquetRecordBatchReader,
    meta: FileMeta,
    schema: SchemaRef,
    /// Its place in log order: breaks ties between equal keys.
    position: usize,
    rows_read: u64,
}

impl Input {
    fn open(
        path: &Path,
        meta: &FileMeta,
        schema: &SchemaRef,
        batch_rows: usize,
        position: usize,
    ) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)?
            .with_batch_size(batch_rows)
            .build()?;
        Ok(Input {
            reader,
            meta: meta.clone(),
            schema: schema.clone(),
            position,
            rows_read: 0,
        })
    }

    /// The next non-empty batch of kept rows, conformed to the merge's schema (tags
    /// held as dictionaries, missing columns as nulls); `None` at the end, once the file
    /// is found to hold the rows its footer promises.
    fn next_batch(&mut self, keep: &RowFilter<'_>) -> Result<Option<RecordBatch>> {
        for batch in self.reader.by_ref() {
            let batch = batch?;
            self.rows_read += batch.num_rows() as u64;
            let columns: Vec<ArrayRef> = self
                .schema
                .fields()
                .iter()
                .map(|field| match batch.column_by_name(field.name()) {
                    Some(column) if column.data_type() == field.data_type() => Ok(column.clone()),
                    Some(column) => Ok(cast(column, field.data_type())?),
                    None => Ok(arrow::array::new_null_array(
                        field.data_type(),
                        batch.num_rows(),
                    )),
                })
                .collect::<Result<_>>()?;
            let conformed = RecordBatch::try_new(self.schema.clone(), columns)?;
            let kept = match keep(&self.meta, &conformed)? {
                Some(mask) => arrow::compute::filter_record_batch(&conformed, &mask)?,
                None => conformed,
            };
            if kept.num_rows() > 0 {
                return Ok(Some(kept));
            }
        }
        if self.rows_read != self.meta.rows {
            return Err(Error::Corrupt {
                path: self.meta.path.clone(),
                reason: format!(
                    "holds {} rows, its footer says {}",
                    self.rows_read, self.meta.rows
                ),
            });
        }
        Ok(None)
    }
}

/// An input with its current batch and the sort keys of that batch's rows.
struct Cursor {
    input: Input,
    keys: Rows,
    /// Next row of the current batch.
    row: usize,
    rows: usize,
    /// Where the current batch sits in the chunk's list of batches.
    slot: usize,
}

/// The k-way merge: a min-heap of cursors by (sort key, log order).
struct Merger {
    converter: RowConverter,
    sort_columns: Vec<usize>,
    cursors: Vec<Cursor>,
    /// Cursor indices, a binary min-heap.
    heap: Vec<usize>,
    /// Batches the current output chunk takes rows from.
    slots: Vec<RecordBatch>,
    /// (slot, row) of each output row of the current chunk.
    picks: Vec<(usize, usize)>,
}

impl Merger {
    fn new(schema: &SchemaRef, lead: Option<&str>) -> Result<Self> {
        // Tags (`lead` first, the others in schema order), then time: the declared
        // `sorting_columns`, nulls first (an input lacking a tag has it null throughout,
        // which keeps it sorted).
        let mut sort_columns = sort_tag_indices(schema, lead);
        sort_columns.push(schema.index_of(TIME_COLUMN)?);
        let fields = sort_columns
            .iter()
            .map(|&i| SortField::new(schema.field(i).data_type().clone()))
            .collect();
        Ok(Merger {
            converter: RowConverter::new(fields)?,
            sort_columns,
            cursors: Vec::new(),
            heap: Vec::new(),
            slots: Vec::new(),
            picks: Vec::with_capacity(OUTPUT_CHUNK_ROWS),
        })
    }

    fn keys_of(&self, batch: &RecordBatch) -> Result<Rows> {
        let columns: Vec<ArrayRef> = self
            .sort_columns
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        let keys = self.converter.convert_columns(&columns)?;
        if let Some(i) = (1..keys.num_rows()).find(|&i| keys.row(i) < keys.row(i - 1)) {
            return Err(Error::Corrupt {
                path: String::new(),
                reason: format!("rows are not sorted by tags then time at row {i} of a batch"),
            });
        }
        Ok(keys)
    }

    /// Adds an input and reads its first batch.
    fn add(&mut self, mut input: Input, keep: &RowFilter<'_>) -> Result<()> {
        let Some(batch) = input.next_batch(keep)? else {
            return Ok(());
        };
        let keys = self
            .keys_of(&batch)
            .map_err(|e| with_path(e, &input.meta.path))?;
        self.slots.push(batch);
        let rows = keys.num_rows();
        self.cursors.push(Cursor {
            input,
            keys,
            row: 0,
            rows,
            slot: self.slots.len() - 1,
        });
        self.heap.push(self.cursors.len() - 1);
        let last = self.heap.len() - 1;
        self.sift_up(last);
        Ok(())
    }

    fn less(&self, a: usize, b: usize) -> bool {
        let (ca, cb) = (&self.cursors[a], &self.cursors[b]);
        match ca.keys.row(ca.row).cmp(&cb.keys.row(cb.row)) {
            std::cmp::Ordering::Equal => ca.input.position < cb.input.position,
            other => other.is_lt(),
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.less(self.heap[i], self.heap[parent]) {
                break;
            }
            self.heap.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (left, right) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if left < n && self.less(self.heap[left], self.heap[least]) {
                least = left;
            }
            if right < n && self.less(self.heap[right], self.heap[least]) {
                least = right;
            }
            if least == i {
                return;
            }
            self.heap.swap(i, least);
            i = least;
        }
    }

    /// The next output chunk (up to [`OUTPUT_CHUNK_ROWS`] rows), `None` at the end.
    fn next_chunk(&mut self, keep: &RowFilter<'_>) -> Result<Option<RecordBatch>> {
        self.picks.clear();
        while self.picks.len() < OUTPUT_CHUNK_ROWS {
            let Some(&top) = self.heap.first() else {
                break;
            };
            let cursor = &mut self.cursors[top];
            self.picks.push((cursor.slot, cursor.row));
            cursor.row += 1;
            if cursor.row < cursor.rows {
                self.sift_down(0);
                continue;
            }
            // The batch is used up: the next one must not sort before its last row.
            let last = cursor.keys.row(cursor.rows - 1).owned();
            match cursor.input.next_batch(keep)? {
                Some(batch) => {
                    let path = cursor.input.meta.path.clone();
                    let keys = self.keys_of(&batch).map_err(|e| with_path(e, &path))?;
                    if keys.row(0) < last.row() {
                        return Err(Error::Corrupt {
                            path,
                            reason: "rows are not sorted by tags then time across batches".into(),
                        });
                    }
                    self.slots.push(batch);
                    let cursor = &mut self.cursors[top];
                    cursor.rows = keys.num_rows();
                    cursor.keys = keys;
                    cursor.row = 0;
                    cursor.slot = self.slots.len() - 1;
                    self.sift_down(0);
                }
                None => {
                    let end = self.heap.len() - 1;
                    self.heap.swap(0, end);
                    self.heap.pop();
                    self.sift_down(0);
                }
            }
        }
        if self.picks.is_empty() {
            return Ok(None);
        }
        let batches: Vec<&RecordBatch> = self.slots.iter().collect();
        let chunk = interleave_record_batch(&batches, &self.picks)?;
        self.retire_slots();
        Ok(Some(chunk))
    }

    /// Keeps only the batches cursors still read from, so memory stays one batch per
    /// input between chunks.
    fn retire_slots(&mut self) {
        let mut kept = Vec::with_capacity(self.heap.len());
        for &c in &self.heap {
            let cursor = &mut self.cursors[c];
            kept.push(self.slots[cursor.slot].clone());
            cursor.slot = kept.len() - 1;
        }
        self.slots = kept;
    }
}

fn with_path(e: Error, path: &str) -> Error {
    match e {
        Error::Corrupt { reason, .. } => Error::Corrupt {
            path: path.to_string(),
            reason,
        },
        other => other,
    }
}

/// The canonical schema holding every column of every input.
fn union_schema<'a>(metas: impl Iterator<Item = &'a FileMeta>) -> Result<SchemaRef> {
    let mut columns: Vec<(String, ColumnKind)> = Vec::new();
    for meta in metas {
        for column in meta.columns.iter() {
            let kind = column.kind().ok_or_else(|| Error::Corrupt {
                path: meta.path.clone(),
                reason: format!(
                    "column {:?} has unknown kind {:?}",
                    column.name, column.kind
                ),
            })?;
            match columns.iter().find(|(n, _)| *n == column.name) {
                Some((_, existing)) if *existing != kind => {
                    return Err(Error::Corrupt {
                        path: meta.path.clone(),
                        reason: format!(
                            "column {:?} is {} here and {} in another input",
                            column.name,
                            kind.name(),
                            existing.name()
                        ),
                    })
                }
                Some(_) => {}
                None => columns.push((column.name.clone(), kind)),
            }
        }
    }
    Ok(canonical_schema(
        columns.iter().map(|(n, k)| (n.as_str(), *k)),
    ))
}
