//! The read side of storage: what a query sees of one measurement at one instant.
//!
//! A [`TableSnapshot`] is a consistent cut: rows still in memory (the live buffer and
//! segments frozen but not yet written) plus the Parquet files the catalog lists. A row
//! is in exactly one of the two at any instant, so a query over the union never sees a
//! row twice or misses one that was acknowledged.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::ids::TimestampNs;
use crate::lifecycle::DeletePredicate;

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
}

/// Everything a query needs to read one measurement, captured under the storage lock.
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    /// Database the measurement belongs to.
    pub database: String,
    /// Measurement (table) name.
    pub measurement: String,
    /// The measurement's merged schema: `time`, then tags (sorted by name), then fields
    /// (sorted by name). Every in-memory batch below already has exactly this schema;
    /// Parquet files may lack newer columns, which read as nulls.
    pub schema: SchemaRef,
    /// Tag column names in sort order (the order files are sorted by, before `time`).
    pub tag_columns: Vec<String>,
    /// Rows not yet in Parquet: the live buffer and frozen segments, conformed to `schema`.
    pub memory: Vec<RecordBatch>,
    /// Parquet files, in the order they were written.
    pub files: Vec<ParquetFileRef>,
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
            files,
            visible_from: None,
            visible_before: None,
            tombstones: Vec::new(),
            only_matching: None,
        }
    }
}

/// The part of storage the query engine depends on. Implemented by `Storage`; the
/// indirection keeps quiver-query testable with a hand-built catalog.
pub trait TableSource: Send + Sync + 'static {
    /// Databases that hold at least one measurement.
    fn databases(&self) -> Vec<String>;
    /// Measurements of `database`, sorted by name.
    fn measurements(&self, database: &str) -> Vec<String>;
    /// A consistent snapshot of one measurement, or `None` if it does not exist.
    fn table(&self, database: &str, measurement: &str) -> Option<TableSnapshot>;
    /// The object store holding the Parquet files named by [`ParquetFileRef::path`].
    fn object_store(&self) -> Arc<dyn object_store::ObjectStore>;
}
