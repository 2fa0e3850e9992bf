//! The read side of storage: what a query sees of one measurement at one instant.
//!
//! A [`TableSnapshot`] is a consistent cut: rows still in memory (the live buffer and
//! segments frozen but not yet written) plus the Parquet files the catalog lists. A row
//! is in exactly one of the two at any instant, so a query over the union never sees a
//! row twice or misses one that was acknowledged.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::file_list::FileList;
use crate::ids::TimestampNs;
use crate::lifecycle::{DeletePredicate, Tombstone};
use crate::meta::ColumnMeta;
use crate::schema::ColumnKind;

/// One Parquet file as the query engine needs to know it: where it is and what it may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetFileRef {
    /// Path of the file inside the object store (relative, `/`-separated).
    pub path: String,
    /// Size of the file in bytes (lets the reader skip a HEAD request).
    pub size_bytes: u64,
    /// Rows in the file.
    pub rows: u64,
    /// Smallest `time` in the file (inclusive).
    pub time_min: TimestampNs,
    /// Largest `time` in the file (inclusive).
    pub time_max: TimestampNs,
    /// Indexes into [`TableSnapshot::tombstones`] of the deletes that hide rows of this
    /// file (a query filters them out).
    pub tombstones: Vec<usize>,
    /// The file's columns (shared between files, as in [`FileMeta::columns`]).
    pub columns: Arc<[ColumnMeta]>,
    /// Distinct values per tag, as [`FileMeta::tag_distinct`] records them.
    pub tag_distinct: Vec<u32>,
}

impl ParquetFileRef {
    /// How many distinct values the file holds in tag column `tag`: 0 when the file has
    /// no such column (its rows read as null there), `None` when it was not counted.
    pub fn tag_distinct(&self, tag: &str) -> Option<u32> {
        if self.tag_distinct.is_empty() {
            return None;
        }
        let mut tags = self
            .columns
            .iter()
            .filter(|c| c.kind() == Some(ColumnKind::Tag));
        match tags.position(|c| c.name == tag) {
            Some(position) => self.tag_distinct.get(position).copied(),
            None => Some(0),
        }
    }
}

/// Everything a query needs to read one measurement, captured under the storage lock.
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    /// Database the measurement belongs to.
    pub database: String,
    /// Measurement (table) name.
    pub measurement: String,
    /// The measurement's merged schema: `time`, then tags (sorted by name), then fields
    /// (sorted by name). Every in-memory batch below has exactly these columns (tag keys
    /// may be narrower); Parquet files may lack newer columns, which read as nulls.
    pub schema: SchemaRef,
    /// Tag column names in sort order (the order files are sorted by, before `time`).
    pub tag_columns: Vec<String>,
    /// Rows not yet in Parquet: the live buffer and frozen segments, with `schema`'s
    /// columns in its order, but tag keys possibly narrower than its 32 bits (as log
    /// entries carry them) and integer fields possibly narrower than 64 (as the buffer
    /// holds them, `int_width`): widening every buffered row for every query cost memory
    /// in proportion to the buffer (240 MB for a `count(*)` over 3 M TSBS rows). Readers
    /// cast the columns they project.
    pub memory: Vec<RecordBatch>,
    /// Parquet files, found by the time range a query reads.
    pub files: SnapshotFiles,
    /// Rows older than this are invisible (past the retention, or before the window a
    /// query is limited to): files wholly older are not listed, memory rows are
    /// filtered already, listed files that reach below it need a filter on `time`.
    pub visible_from: Option<TimestampNs>,
    /// Rows at or after this are invisible (after a query's window), likewise.
    pub visible_before: Option<TimestampNs>,
    /// Deletes that still hide rows of some listed file (memory rows are filtered).
    pub tombstones: Vec<DeletePredicate>,
    /// When set, only rows this predicate matches are visible in the files (used to
    /// count the rows a delete hid; memory rows are filtered already).
    pub only_matching: Option<DeletePredicate>,
}

impl TableSnapshot {
    /// A snapshot with nothing hidden (tests and tools build them by hand).
    pub fn unfiltered(
        database: &str,
        measurement: &str,
        schema: SchemaRef,
        tag_columns: Vec<String>,
        memory: Vec<RecordBatch>,
        files: Vec<ParquetFileRef>,
    ) -> Self {
        TableSnapshot {
            database: database.to_string(),
            measurement: measurement.to_string(),
            schema,
            tag_columns,
            memory,
            files: SnapshotFiles::Listed(files),
            visible_from: None,
            visible_before: None,
            tombstones: Vec::new(),
            only_matching: None,
        }
    }
}

/// The files a [`TableSnapshot`] may read. A query asks for those of its time range
/// once it knows it (at scan time), so a table's other files are never looked at.
#[derive(Debug, Clone)]
pub enum SnapshotFiles {
    /// Files listed by hand (tests and tools), in the order they were written.
    Listed(Vec<ParquetFileRef>),
    /// A table's files as storage held them when the snapshot was taken.
    Table(TableFiles),
}

/// A table's files at one instant, with what the snapshot's view hides of them.
#[derive(Debug, Clone)]
pub struct TableFiles {
    pub(crate) list: FileList,
    /// Only rows at or after this (retention, a window).
    pub(crate) visible_from: Option<TimestampNs>,
    /// Only rows before this (a window).
    pub(crate) visible_before: Option<TimestampNs>,
    /// Only files this delete applies to (counting its rows).
    pub(crate) only: Option<Tombstone>,
    /// The snapshot's tombstones, in the order of [`TableSnapshot::tombstones`].
    pub(crate) tombstones: Vec<Tombstone>,
    /// Put before every file's path (see [`SnapshotFiles::with_path_prefix`]).
    pub(crate) path_prefix: Option<Arc<str>>,
}

impl SnapshotFiles {
    /// The files that may hold visible rows with `time` in `[min_ns, max_ns]` (both
    /// inclusive), in the order they were written.
    pub fn overlapping(&self, min_ns: i64, max_ns: i64) -> Vec<ParquetFileRef> {
        match self {
            SnapshotFiles::Listed(files) => files
                .iter()
                .filter(|f| min_ns <= max_ns && f.time_max.0 >= min_ns && f.time_min.0 <= max_ns)
                .cloned()
                .collect(),
            SnapshotFiles::Table(table) => table.overlapping(min_ns, max_ns),
        }
    }

    /// Every file the snapshot's view can read, in the order they were written.
    pub fn all(&self) -> Vec<ParquetFileRef> {
        self.overlapping(i64::MIN, i64::MAX)
    }

    /// The same files, each path under `prefix/`: a node running several Raft groups
    /// reads every group's files through one object store that routes by the first
    /// path component, and keeps paths (the key of the query engine's footer cache)
    /// distinct between groups whose files share a name.
    pub fn with_path_prefix(self, prefix: &str) -> Self {
        match self {
            SnapshotFiles::Listed(files) => SnapshotFiles::Listed(
                files
                    .into_iter()
                    .map(|f| ParquetFileRef {
                        path: format!("{prefix}/{}", f.path),
                        ..f
                    })
                    .collect(),
            ),
            SnapshotFiles::Table(table) => SnapshotFiles::Table(TableFiles {
                path_prefix: Some(Arc::from(prefix)),
                ..table
            }),
        }
    }

    /// How many files the table has in all (for logs and plans).
    pub fn total(&self) -> usize {
        match self {
            SnapshotFiles::Listed(files) => files.len(),
            SnapshotFiles::Table(table) => table.list.len(),
        }
    }
}

impl TableFiles {
    fn overlapping(&self, min_ns: i64, max_ns: i64) -> Vec<ParquetFileRef> {
        let lo = self.visible_from.map_or(min_ns, |f| min_ns.max(f.0));
        let hi = self
            .visible_before
            .map_or(max_ns, |b| max_ns.min(b.0.saturating_sub(1)));
        self.list
            .overlapping(lo, hi)
            .into_iter()
            .filter(|f| {
                self.only
                    .as_ref()
                    .is_none_or(|o| o.applies_to(f.deletes_through(), f.time_min, f.time_max))
            })
            .map(|f| ParquetFileRef {
                path: match &self.path_prefix {
                    Some(prefix) => format!("{prefix}/{}", f.path),
                    None => f.path.clone(),
                },
                size_bytes: f.size_bytes,
                rows: f.rows,
                time_min: f.time_min,
                time_max: f.time_max,
                columns: Arc::clone(&f.columns),
                tag_distinct: f.tag_distinct.clone(),
                tombstones: self
                    .tombstones
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.applies_to(f.deletes_through(), f.time_min, f.time_max))
                    .map(|(i, _)| i)
                    .collect(),
            })
            .collect()
    }
}

/// The part of storage the query engine depends on. Implemented by `Storage`; the
/// indirection keeps quiver-query testable with a hand-built catalog.
pub trait TableSource: Send + Sync + 'static {
    /// Databases that hold at least one measurement.
    fn databases(&self) -> Vec<String>;
    /// Measurements of `database`, sorted by name.
    fn measurements(&self, database: &str) -> Vec<String>;
    /// The measurement of `database` that `name` refers to: `name` itself when it
    /// exists, else the one measurement equal to it ignoring ASCII case (`None` when
    /// there is none, or several). Planning resolves every table through this, so
    /// sources with many measurements answer it without listing them all.
    fn resolve_measurement(&self, database: &str, name: &str) -> Option<String> {
        resolve_name(name, &self.measurements(database)).map(str::to_string)
    }
    /// A consistent snapshot of one measurement, or `None` if it does not exist.
    fn table(&self, database: &str, measurement: &str) -> Option<TableSnapshot>;
    /// Like [`TableSource::table`], for a source whose measurement may live on another
    /// node (a group this node does not hold): the snapshot is fetched from a member,
    /// and an unreachable group is an error, never an empty table. Local sources
    /// answer at once.
    fn fetch_table(
        &self,
        database: &str,
        measurement: &str,
    ) -> futures::future::BoxFuture<'static, crate::Result<Option<TableSnapshot>>> {
        let snapshot = self.table(database, measurement);
        Box::pin(std::future::ready(Ok(snapshot)))
    }
    /// The object store holding the Parquet files named by [`ParquetFileRef::path`].
    fn object_store(&self) -> Arc<dyn object_store::ObjectStore>;
    /// The nodes holding the measurement when this node does not (a data group placed
    /// elsewhere), so that a query can run its scan there instead of pulling the rows
    /// here. `None` when the rows are read on this node.
    fn held_elsewhere(&self, _database: &str, _measurement: &str) -> Option<HeldElsewhere> {
        None
    }
    /// The measurement's schema alone, for planning a scan that runs on another node:
    /// no rows cross the network. Sources that hold every table answer from a snapshot.
    fn fetch_schema(
        &self,
        database: &str,
        measurement: &str,
    ) -> futures::future::BoxFuture<'static, crate::Result<Option<SchemaRef>>> {
        let fetch = self.fetch_table(database, measurement);
        Box::pin(async move { Ok(fetch.await?.map(|s| s.schema)) })
    }
}

/// Where a measurement held by other nodes lives: its data group and that group's
/// members, the one to ask first leading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldElsewhere {
    /// The data group holding the measurement.
    pub group: u64,
    /// Node ids of the group's members, the preferred one first.
    pub members: Vec<u64>,
}

/// The exact name if present in `names`, else the only name equal to it ignoring ASCII
/// case (an unquoted SQL identifier arrives folded to lower case).
pub fn resolve_name<'a>(name: &str, names: &'a [String]) -> Option<&'a str> {
    if let Some(exact) = names.iter().find(|n| n.as_str() == name) {
        return Some(exact);
    }
    let mut folded = names.iter().filter(|n| n.eq_ignore_ascii_case(name));
    match (folded.next(), folded.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}
