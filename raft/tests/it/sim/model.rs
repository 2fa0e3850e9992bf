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

/// Where batches' rows lie: eight whole hours before the test process started.
/// Batches spread their rows over six hours after it, so flushes write several hour
/// files and compaction has work: the first hour (`batch % 6 == 0`), then a free hour,
/// then five more. Rows this recent make retention real: queries hide rows by the wall
/// clock and compaction drops files by it (held to a day past the newest row).
fn t0() -> i64 {
    static T0: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *T0.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        now.div_euclid(HOUR) * HOUR - 8 * HOUR
    })
}

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
    /// Windows of the continuous query proposed, and what the proposer was told.
    windows: BTreeMap<i64, Outcome>,
    /// What the client was told of the retention rule that expires the first hour
    /// (see [`RETENTION_NS`]), if one was sent.
    retention: Option<Outcome>,
}

/// A retention that expires exactly the first of the hours batches use (batches `b`
/// with `b % 6 == 0`): measured from the wall clock, its cut lies half an hour into
/// the free hour after it when the process starts, and stays in that hour for the
/// next half hour (a test process runs for minutes).
pub fn retention_ns() -> i64 {
    static RETENTION: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *RETENTION.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        now - (t0() + HOUR + HOUR / 2)
    })
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

    /// The retention rule was sent and the client told `outcome`: once it may have
    /// been applied, batches of the first hour may go (whole files at a time).
    pub fn record_retention(&mut self, outcome: Outcome) {
        self.retention = match (self.retention, outcome) {
            (Some(Outcome::Acked), _) | (_, Outcome::Acked) => Some(Outcome::Acked),
            (Some(Outcome::Unknown), _) | (_, Outcome::Unknown) => Some(Outcome::Unknown),
            _ => Some(Outcome::Refused),
        };
    }

    /// A window of the continuous query was proposed and its proposer told `outcome`
    /// (a window found already done counts as acknowledged: an earlier proposal of it
    /// committed).
    pub fn record_window(&mut self, window: i64, outcome: Outcome) {
        let merged = match (self.windows.get(&window).copied(), outcome) {
            (Some(Outcome::Acked), _) | (_, Outcome::Acked) => Outcome::Acked,
            (Some(Outcome::Unknown), _) | (_, Outcome::Unknown) => Outcome::Unknown,
            _ => Outcome::Refused,
        };
        self.windows.insert(window, merged);
    }

    /// Windows acknowledged.
    pub fn windows_acked(&self) -> usize {
        self.windows
            .values()
            .filter(|o| **o == Outcome::Acked)
            .count()
    }

    /// What is wrong with the continuous query's target as a node holds it (`content`
    /// keyed by window, one row per window): every window at most once, acknowledged
    /// ones present, none that was never proposed. A window proposed again after an
    /// unknown outcome must not be written twice.
    pub fn window_violations(&self, content: &Content) -> Vec<String> {
        let mut out = Vec::new();
        for (window, seqs) in content {
            match self.windows.get(window) {
                None | Some(Outcome::Refused) => out.push(format!(
                    "window {window} is held but was never proposed, or was refused"
                )),
                _ if seqs.len() != 1 => {
                    out.push(format!("window {window} is held {} times", seqs.len()))
                }
                _ => {}
            }
        }
        for (window, outcome) in &self.windows {
            if *outcome == Outcome::Acked && !content.contains_key(window) {
                out.push(format!("acknowledged window {window} is not held"));
            }
        }
        out
    }

    /// Whether `batch` may have expired: its rows lie in the first hour and the rule
    /// was not refused.
    fn may_have_expired(&self, batch: i64) -> bool {
        batch % 6 == 0 && matches!(self.retention, Some(Outcome::Acked | Outcome::Unknown))
    }

    /// Acknowledged, undeleted batches that `content` no longer holds because they
    /// expired: what shows the retention step reached the files.
    pub fn expired_in(&self, content: &Content) -> usize {
        self.batches
            .iter()
            .filter(|(b, (_, o))| {
                *o == Outcome::Acked
                    && self.may_have_expired(**b)
                    && !self.deletes.contains_key(b)
                    && !content.contains_key(b)
            })
            .count()
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
            // Expired rows go a whole hour file at a time: a batch is gone or whole.
            let outcome = match outcome {
                Outcome::Acked if self.may_have_expired(*batch) => &Outcome::Unknown,
                o => o,
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

/// The continuous query's target measurement.
pub const CQ_TARGET: &str = "cpu_cq";
/// The continuous query's window width.
pub const CQ_EVERY_NS: i64 = 60_000_000_000;

/// The start of the continuous query's first window: seven hours after [`t0`], clear of
/// the retention and of the batches' hours.
pub fn cq_first_window() -> i64 {
    t0() + 7 * HOUR
}

/// The one row the continuous query writes for window `window` (numbered from
/// [`cq_first_window`]): what its query computes is the same every time it runs, so a
/// leader that runs a window again proposes the same row. `batch` holds the window's
/// number and `seq` 0: [`content_of`] reads it like a batch.
pub fn cq_row(window: i64) -> RecordBatch {
    let schema = canonical_schema([
        ("host", ColumnKind::Tag),
        ("batch", ColumnKind::Field(FieldType::Integer)),
        ("seq", ColumnKind::Field(FieldType::Integer)),
    ]);
    let mut host = StringDictionaryBuilder::<Int32Type>::new();
    host.append_value("cq");
    let columns: Vec<arrow::array::ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| -> arrow::array::ArrayRef {
            match f.name().as_str() {
                "time" => Arc::new(TimestampNanosecondArray::from(vec![
                    cq_first_window() + window * CQ_EVERY_NS,
                ])),
                "host" => Arc::new(host.finish()),
                "batch" => Arc::new(arrow::array::Int64Array::from(vec![window])),
                _ => Arc::new(arrow::array::Int64Array::from(vec![0i64])),
            }
        })
        .collect();
    RecordBatch::try_new(schema, columns).expect("a valid window row")
}

/// The first row time of batch `batch`: its rows follow one nanosecond apart, and no
/// other batch's rows fall between (batches are 1,000 ns apart, 40 rows at most).
fn first_time(batch: i64) -> i64 {
    let hour = match batch % 6 {
        0 => 0,
        k => k + 1,
    };
    t0() + hour * HOUR + batch * 1_000
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
    let within = table.visible_from.is_none_or(|from| file.time_min >= from)
        && table
            .visible_before
            .is_none_or(|before| file.time_max < before);
    if file.tombstones.is_empty() && within {
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

/// Which rows of `b` (a batch of `file`) its tombstones hide, and which lie outside the
/// snapshot's window (retention): a query's scan filters a file's rows on `time` by
/// that window, as the snapshot filters memory rows already. Without it a node whose
/// expired rows sit in a file differs from one whose sit in memory (seeds 35 and 40,
/// which flushed differently), though queries on both answer the same.
fn hiding(
    table: &quiver_storage::TableSnapshot,
    file: &quiver_storage::ParquetFileRef,
    b: &RecordBatch,
) -> Vec<bool> {
    let mut hide = vec![false; b.num_rows()];
    if table.visible_from.is_some() || table.visible_before.is_some() {
        let time = b
            .column_by_name("time")
            .and_then(|c| c.as_any().downcast_ref::<TimestampNanosecondArray>())
            .unwrap_or_else(|| panic!("{}: no nanosecond time column", file.path));
        for (i, h) in hide.iter_mut().enumerate() {
            let t = quiver_storage::TimestampNs(time.value(i));
            *h |= table.visible_from.is_some_and(|from| t < from)
                || table.visible_before.is_some_and(|before| t >= before);
        }
    }
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
    content_of(storage, MEASUREMENT)
}

/// What `measurement` of a node holds, read like [`content`].
pub fn content_of(storage: &Storage, measurement: &str) -> Content {
    let mut out = Content::new();
    let Some(table) = storage.table(DATABASE, measurement) else {
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
