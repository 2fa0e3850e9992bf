//! What the clients were told, and the checks against what the nodes hold.
//!
//! Every batch has its own id and `rows` rows numbered `0..rows`. An acknowledged batch
//! must be on every node exactly once, whole. A batch refused with "nothing written"
//! (not the leader, unavailable: a 503 to a client) must be on none. A batch whose
//! outcome was unknown (a 504) is whole once or absent. Nothing else may appear.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch, StringDictionaryBuilder, TimestampNanosecondArray};
use arrow::datatypes::{Int32Type, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use quiver_storage::{canonical_schema, ColumnKind, FieldType, Storage, TableSource};

/// The database and measurement every write goes to.
pub const DATABASE: &str = "db";
pub const MEASUREMENT: &str = "cpu";

/// 2026-01-01T00:00:00Z: batches spread their rows over the six hours after it, so
/// flushes write several hour files and compaction has work.
const T0: i64 = 1_767_225_600_000_000_000;
const HOUR: i64 = 3_600_000_000_000;

/// What a client was told about a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Acked,
    /// Refused before anything was appended.
    Refused,
    /// Maybe written.
    Unknown,
}

/// Rows per batch id, as a node holds them (or as they must be).
pub type Content = BTreeMap<i64, Vec<i64>>;

#[derive(Default)]
pub struct Model {
    batches: BTreeMap<i64, (u32, Outcome)>,
    /// Deletes of whole batches, and what the client was told of each.
    deletes: BTreeMap<i64, Outcome>,
}

impl Model {
    pub fn record(&mut self, batch: i64, rows: u32, outcome: Outcome) {
        self.batches.insert(batch, (rows, outcome));
    }

    /// Deletes acknowledged.
    pub fn deletes_acked(&self) -> usize {
        self.deletes
            .values()
            .filter(|o| **o == Outcome::Acked)
            .count()
    }

    /// Rows of a batch that was sent.
    pub fn rows_of(&self, batch: i64) -> Option<u32> {
        self.batches.get(&batch).map(|(rows, _)| *rows)
    }

    /// A delete of `batch`'s rows, and what the client was told. An acknowledged delete
    /// hides the batch for good (a write of unknown outcome that commits at all commits
    /// before the delete: a leader holding the delete holds every entry before it);
    /// one of unknown outcome may or may not have; a refused one did nothing.
    pub fn record_delete(&mut self, batch: i64, outcome: Outcome) {
        let before = self.deletes.get(&batch).copied();
        let merged = match (before, outcome) {
            (Some(Outcome::Acked), _) | (_, Outcome::Acked) => Outcome::Acked,
            (Some(Outcome::Unknown), _) | (_, Outcome::Unknown) => Outcome::Unknown,
            _ => Outcome::Refused,
        };
        self.deletes.insert(batch, merged);
    }

    pub fn count(&self, outcome: Outcome) -> usize {
        self.batches.values().filter(|(_, o)| *o == outcome).count()
    }

    /// Rows a node may hold at most (acknowledged and maybe-written batches).
    pub fn rows_possible(&self) -> u64 {
        self.batches
            .values()
            .filter(|(_, o)| *o != Outcome::Refused)
            .map(|(r, _)| *r as u64)
            .sum()
    }

    /// What is wrong with `content`, if anything.
    pub fn violations(&self, content: &Content) -> Vec<String> {
        let mut out = Vec::new();
        for (batch, (rows, outcome)) in &self.batches {
            let whole: Vec<i64> = (0..*rows as i64).collect();
            let held = content.get(batch);
            let outcome = match (outcome, self.deletes.get(batch)) {
                (Outcome::Refused, _) | (_, None | Some(Outcome::Refused)) => outcome,
                (_, Some(Outcome::Acked)) => {
                    if let Some(seqs) = held {
                        out.push(format!(
                            "batch {batch}, deleted with an acknowledgement, is held: {}",
                            summary(seqs)
                        ));
                    }
                    continue;
                }
                (_, Some(Outcome::Unknown)) => &Outcome::Unknown,
            };
            match (outcome, held) {
                (Outcome::Acked, Some(seqs)) if *seqs == whole => {}
                (Outcome::Acked, held) => out.push(format!(
                    "acknowledged batch {batch} ({rows} rows) held as {:?}",
                    held.map(|s| summary(s))
                )),
                (Outcome::Refused, None) => {}
                (Outcome::Refused, Some(seqs)) => out.push(format!(
                    "batch {batch} was refused as not written, yet it is held: {}",
                    summary(seqs)
                )),
                (Outcome::Unknown, None) => {}
                (Outcome::Unknown, Some(seqs)) if *seqs == whole => {}
                (Outcome::Unknown, Some(seqs)) => out.push(format!(
                    "batch {batch} of unknown outcome held partly or twice: {}",
                    summary(seqs)
                )),
            }
        }
        for batch in content.keys() {
            if !self.batches.contains_key(batch) {
                out.push(format!("batch {batch} was never sent"));
            }
        }
        out
    }
}

fn summary(seqs: &[i64]) -> String {
    format!(
        "{} rows, first {:?}",
        seqs.len(),
        &seqs[..seqs.len().min(5)]
    )
}

/// The first row time of batch `batch`: its rows follow one nanosecond apart, and no
/// other batch's rows fall between (batches are 1,000 ns apart, 40 rows at most).
fn first_time(batch: i64) -> i64 {
    T0 + (batch % 6) * HOUR + batch * 1_000
}

/// The time range `[from, before)` that holds exactly the rows of batch `batch`.
pub fn time_range(batch: i64, rows: u32) -> (i64, i64) {
    let from = first_time(batch);
    (from, from + i64::from(rows))
}

/// A batch of `rows` rows with id `batch`.
pub fn batch(batch: i64, rows: u32) -> RecordBatch {
    let schema = canonical_schema([
        ("host", ColumnKind::Tag),
        ("batch", ColumnKind::Field(FieldType::Integer)),
        ("seq", ColumnKind::Field(FieldType::Integer)),
    ]);
    let n = rows as i64;
    let mut host = StringDictionaryBuilder::<Int32Type>::new();
    for i in 0..n {
        host.append_value(format!("h{}", (batch + i) % 5));
    }
    let time: Vec<i64> = (0..n).map(|i| first_time(batch) + i).collect();
    let columns: Vec<arrow::array::ArrayRef> = vec![
        Arc::new(TimestampNanosecondArray::from(time)),
        Arc::new(host.finish()),
        Arc::new(arrow::array::Int64Array::from(vec![batch; n as usize])),
        Arc::new(arrow::array::Int64Array::from((0..n).collect::<Vec<_>>())),
    ];
    RecordBatch::try_new(schema, columns).expect("a well-formed batch")
}

/// Rows a node holds, from its metadata only (row counts of memory and files): cheap
/// enough for every step.
pub fn rows_held(storage: &Storage) -> u64 {
    let Some(table) = storage.table(DATABASE, MEASUREMENT) else {
        return 0;
    };
    let memory: u64 = table.memory.iter().map(|b| b.num_rows() as u64).sum();
    memory + table.files.all().iter().map(|f| f.rows).sum::<u64>()
}

/// Rows visible on a node, counted without reading its `batch` and `seq` columns:
/// memory batches' row counts and files' row counts from their metadata, less the rows
/// the deletes hide. [`content`] must read back exactly as many.
pub fn rows_visible(storage: &Storage) -> u64 {
    let Some(table) = storage.table(DATABASE, MEASUREMENT) else {
        return 0;
    };
    let memory: u64 = table.memory.iter().map(|b| b.num_rows() as u64).sum();
    let files: u64 = table
        .files
        .all()
        .iter()
        .map(|f| f.rows - hidden_in_file(storage, &table, f))
        .sum();
    memory + files
}

/// Rows of `file` that the snapshot's tombstones hide, read from the file.
fn hidden_in_file(
    storage: &Storage,
    table: &quiver_storage::TableSnapshot,
    file: &quiver_storage::ParquetFileRef,
) -> u64 {
    if file.tombstones.is_empty() {
        return 0;
    }
    read_file(storage, &file.path)
        .iter()
        .map(|b| {
            let hide = hiding(table, file, b);
            b.num_rows() as u64 - kept(&hide).len() as u64
        })
        .sum()
}

/// Which rows of `b` (a batch of `file`) its tombstones hide.
fn hiding(
    table: &quiver_storage::TableSnapshot,
    file: &quiver_storage::ParquetFileRef,
    b: &RecordBatch,
) -> Vec<bool> {
    let mut hide = vec![false; b.num_rows()];
    for &t in &file.tombstones {
        let matched = table.tombstones[t]
            .matches(b)
            .unwrap_or_else(|e| panic!("a tombstone cannot be evaluated on {}: {e}", file.path));
        for (i, h) in hide.iter_mut().enumerate() {
            *h |= matched.value(i);
        }
    }
    hide
}

fn kept(hide: &[bool]) -> Vec<usize> {
    hide.iter()
        .enumerate()
        .filter(|(_, h)| !**h)
        .map(|(i, _)| i)
        .collect()
}

fn read_file(storage: &Storage, path: &str) -> Vec<RecordBatch> {
    let root = storage.config().dir.join("parquet");
    let file = std::fs::File::open(root.join(path))
        .unwrap_or_else(|e| panic!("a listed file {path} cannot be opened: {e}"));
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .unwrap_or_else(|e| panic!("a listed file {path} cannot be read: {e}"));
    reader
        .map(|b| b.unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect()
}

/// Every row a node holds, read from memory and from its Parquet files, less the rows
/// its deletes hide.
pub fn content(storage: &Storage) -> Content {
    let mut out = Content::new();
    let Some(table) = storage.table(DATABASE, MEASUREMENT) else {
        return out;
    };
    let mut add = |b: &RecordBatch, keep: Option<&[usize]>| {
        let (Some(batch), Some(seq)) = (b.column_by_name("batch"), b.column_by_name("seq")) else {
            // Every batch this simulation writes has both: one without them is a batch
            // the node made up, or lost columns of.
            assert!(
                b.num_rows() == 0,
                "{} rows without their batch and seq columns: {:?}",
                b.num_rows(),
                b.schema()
            );
            return;
        };
        // Buffered integers may be held narrower than 64 bits (`TableSource::memory`).
        let wide = |c: &arrow::array::ArrayRef| {
            arrow::compute::cast(c, &arrow::datatypes::DataType::Int64)
                .unwrap_or_else(|e| panic!("an integer column cannot be widened: {e}"))
        };
        let (batch, seq) = (wide(batch), wide(seq));
        let (batch, seq) = (
            batch.as_primitive::<Int64Type>(),
            seq.as_primitive::<Int64Type>(),
        );
        let all: Vec<usize>;
        let rows = match keep {
            Some(rows) => rows,
            None => {
                all = (0..b.num_rows()).collect();
                &all
            }
        };
        for &i in rows {
            out.entry(batch.value(i)).or_default().push(seq.value(i));
        }
    };
    for b in &table.memory {
        add(b, None);
    }
    for f in table.files.all() {
        for b in read_file(storage, &f.path) {
            let keep = kept(&hiding(&table, &f, &b));
            add(&b, Some(&keep));
        }
    }
    for seqs in out.values_mut() {
        seqs.sort_unstable();
    }
    out
}

/// What a node holds, for failure messages: its files and its rows in memory.
pub fn describe(storage: &Storage) -> String {
    let Some(table) = storage.table(DATABASE, MEASUREMENT) else {
        return "no table".into();
    };
    let mut out: Vec<String> = table
        .files
        .all()
        .iter()
        .map(|f| format!("  {} ({} rows)", f.path, f.rows))
        .collect();
    let memory: usize = table.memory.iter().map(|b| b.num_rows()).sum();
    out.push(format!(
        "  memory: {memory} rows in {} batches",
        table.memory.len()
    ));
    out.join("\n")
}
