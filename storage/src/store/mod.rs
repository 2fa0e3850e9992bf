//! [`Storage`]: the tables of one node, applying log entries and writing Parquet.
//!
//! The state machine calls [`Storage::apply_write`] and [`Storage::apply_flush`] in log
//! order; both are deterministic, so every replica holds the same rows at every index.
//! A background task calls [`Storage::persist_next`] to turn frozen segments into
//! Parquet files. Queries read through [`TableSource`](crate::TableSource).
//!
//! One file per job: this one holds the types and opening; `apply` the log entries,
//! `persist` the Parquet writes, `memory_image` what snapshots carry, `source` what
//! queries read.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use crate::catalog::{catalog_dir, quarantine_dir, Catalog, CatalogReport, FileSet};
use crate::compaction::CompactionSettings;
use crate::durable::create_dir_all_durably;
use crate::error::Result;
use crate::file_store::{BucketSettings, FileStore};
use crate::ids::LogIndex;
use crate::meta::FileMeta;
use crate::parquet_encode::ParquetSettings;
use crate::policies::{Policies, PolicyChange, PolicyOutcome};
use crate::table_state::TableState;

mod apply;
mod compact;
mod condemned;
mod lifecycle;
mod memory_image;
mod persist;
mod source;
mod sweep;

pub use lifecycle::{rows_at_or_after, split_past_retention, DeleteOutcome};
pub use memory_image::{MemoryImage, TableImage};
pub(crate) use persist::staging_dir;
pub use source::{View, ViewSource};
pub use sweep::{SweepReport, UnaccountedFiles};

/// Storage settings (the `[storage]` section of the node's configuration).
#[derive(Debug, Clone)]
pub struct StorageConfig {
    /// Directory for Parquet files and the catalog.
    pub dir: PathBuf,
    /// A table's live buffer is flushed once it holds this many rows.
    pub flush_rows_max: usize,
    /// ... or this many bytes.
    pub flush_bytes_max: usize,
    /// ... or its oldest row has waited this long.
    pub flush_age_ms: u64,
    /// ... or no row has arrived for this long while it holds at least
    /// `flush_idle_bytes_min`: a burst that ended (a backfill, a batch job, a collector
    /// that stopped) goes to Parquet and gives its memory back without waiting for
    /// `flush_age_ms`. 0: never.
    pub flush_idle_ms: u64,
    /// The smallest buffer an idle flush writes: small buffers of sparse writers wait
    /// for `flush_age_ms`, so they do not become one small file per pause.
    pub flush_idle_bytes_min: usize,
    /// Memory all buffers (live and frozen) may hold before writes are refused with
    /// 503; flushes start at half of it.
    pub memory_bytes_max: usize,
    /// How Parquet is written.
    pub parquet: ParquetSettings,
    /// When and how files are merged.
    pub compaction: CompactionSettings,
    /// The bucket Parquet files go to; `None`: `dir/parquet` on local disk.
    pub object_store: Option<BucketSettings>,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            dir: PathBuf::from("quiver-data/storage"),
            flush_rows_max: 2_000_000,
            flush_bytes_max: 256 * 1024 * 1024,
            flush_age_ms: 120_000,
            flush_idle_ms: 10_000,
            flush_idle_bytes_min: 16 * 1024 * 1024,
            memory_bytes_max: 2 * 1024 * 1024 * 1024,
            parquet: ParquetSettings::default(),
            compaction: CompactionSettings::default(),
            object_store: None,
        }
    }
}

/// A table's identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TableKey {
    /// Database name.
    pub database: String,
    /// Measurement name.
    pub measurement: String,
}

impl TableKey {
    /// Builds a key.
    pub fn new(database: impl Into<String>, measurement: impl Into<String>) -> Self {
        TableKey {
            database: database.into(),
            measurement: measurement.into(),
        }
    }
}

impl std::fmt::Display for TableKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.database, self.measurement)
    }
}

/// What storage found when it opened, for logs and tests.
#[derive(Debug, Clone, Default)]
pub struct OpenReport {
    /// The catalog's report.
    pub catalog: CatalogReport,
    /// Tables found in the files.
    pub tables: usize,
}

/// Counts for `/metrics` and the measurements endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// Rows in live buffers.
    pub active_rows: usize,
    /// Frozen segments not yet written.
    pub frozen_segments: usize,
    /// Bytes held by live and frozen rows.
    pub memory_bytes: usize,
    /// Parquet files.
    pub files: usize,
    /// Bytes of Parquet files.
    pub file_bytes: u64,
    /// Rows in Parquet files.
    pub file_rows: u64,
}

/// One table's summary for `GET /api/v1/measurements`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSummary {
    /// The table.
    pub key: TableKey,
    /// Parquet files.
    pub file_count: usize,
    /// Bytes of Parquet files.
    pub file_bytes: u64,
    /// Rows in files and memory.
    pub rows: u64,
    /// Smallest time in files and memory, if any rows.
    pub time_min: Option<i64>,
    /// Largest time.
    pub time_max: Option<i64>,
    /// Rows in memory (live buffer and frozen segments), not yet in Parquet.
    pub memory_rows: u64,
    /// Compactions committed but not yet carried out here.
    pub compactions_pending: usize,
    /// The tag new files sort by first (`None`: tags in name order, undecided or
    /// decided so); see `sort_lead`.
    pub sort_lead: Option<String>,
}

/// Where whole files read from a bucket are cached, inside the storage directory.
pub(crate) const OBJECT_CACHE_DIR: &str = "object-cache";

struct Table {
    key: TableKey,
    state: RwLock<TableState>,
}

/// See the module documentation.
pub struct Storage {
    config: StorageConfig,
    files: FileStore,
    catalog: Catalog,
    tables: RwLock<BTreeMap<TableKey, Arc<Table>>>,
    memory_bytes: AtomicUsize,
    frozen_wakeup: tokio::sync::Notify,
    /// Tables whose last segment write failed, and when they may be tried again: one
    /// table that cannot be written never holds up the others.
    persist_backoff: parking_lot::Mutex<BTreeMap<TableKey, persist::Backoff>>,
    /// Since when segment writes have failed without one succeeding, and the last
    /// error: what `/ready` and the memory refusal report.
    persist_failing: parking_lot::Mutex<Option<persist::Failing>>,
    /// Replicated settings (tokens, lifecycle rules), changed only by log entries.
    policies: RwLock<Policies>,
    /// Wakes the compactor when a `Compact` entry is applied.
    compaction_wakeup: tokio::sync::Notify,
    /// Notified when a flush or merge has freed memory (see [`crate::heap`]).
    memory_freed: Arc<tokio::sync::Notify>,
    /// Files replaced by compactions, waiting out their grace period.
    condemned: parking_lot::Mutex<Vec<condemned::Condemned>>,
    /// Segment writes still to fail (see `Storage::inject_persist_failures`).
    persist_faults: std::sync::atomic::AtomicU32,
    /// File operations running on threads of their own (see `Storage::background_io`).
    io_in_flight: Arc<AtomicUsize>,
    /// Counts removals of files from the tables; a memory image records the count it
    /// saw before it read the tables (see [`Storage::snapshot_durable`]).
    file_generation: AtomicU64,
    /// The highest generation a durable snapshot has recorded: a file removed at or
    /// below it is listed by no snapshot any more, so it may leave the disk.
    durable_generation: AtomicU64,
    /// The files live at open, until the start's sweep has run (see `sweep`).
    live_at_open: parking_lot::Mutex<Option<sweep::LiveAtOpen>>,
    /// What the start's sweep kept without proof (see [`UnaccountedFiles`]).
    unaccounted: parking_lot::Mutex<UnaccountedFiles>,
    report: OpenReport,
}

/// A file operation running on a thread of its own, counted while it lives (see
/// [`Storage::background_io`]).
#[must_use = "the operation counts only while the guard lives"]
pub struct IoGuard(Arc<AtomicUsize>);

impl Drop for IoGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Storage {
    /// Opens storage in `config.dir` with the files their own footers describe
    /// ([`FileSet::Footers`]); for tools and tests. A node opens with
    /// [`Storage::open_with`] and the newest snapshot's manifest.
    pub async fn open(config: StorageConfig) -> Result<Storage> {
        Self::open_with(config, FileSet::Footers).await
    }

    /// Opens storage in `config.dir` holding the files `files` names (see [`FileSet`]),
    /// bringing the disk and the catalog to that set. Buffers start empty; the caller
    /// restores them (snapshot, replay).
    pub async fn open_with(config: StorageConfig, files: FileSet) -> Result<Storage> {
        let parquet_dir = config.dir.join("parquet");
        create_dir_all_durably(&parquet_dir)?;
        let stale = persist::clear_staging(&config.dir)?;
        if stale > 0 {
            tracing::info!(
                files = stale,
                "removed files a crash left half received or half built"
            );
        }
        let staging = persist::staging_dir(&config.dir);
        let file_store = match &config.object_store {
            None => FileStore::local(&parquet_dir, staging)?,
            Some(bucket) => {
                let store = FileStore::bucket(bucket, &config.dir.join(OBJECT_CACHE_DIR), staging)?;
                tracing::info!(location = %store.describe(), "Parquet files are kept in a bucket");
                store
            }
        };
        // Before anything under a bucket prefix is read, written or deleted: is it ours?
        file_store.claim(&config.dir).await?;
        // Opening from a manifest trusts it; the disk is swept once the node serves.
        let sweep_due = !matches!(files, FileSet::Footers);
        let (catalog, files, catalog_report) = Catalog::open(
            &catalog_dir(&config.dir),
            &file_store,
            &quarantine_dir(&config.dir),
            files,
        )
        .await?;
        let replaced = catalog_report.replaced_since_snapshot.clone();
        let live_at_open = if sweep_due {
            file_store.record_writes().await;
            // The replaced files are kept too: they leave as condemned files (below).
            Some(sweep::LiveAtOpen::of(files.iter().chain(&replaced)))
        } else {
            None
        };
        let mut by_table: BTreeMap<TableKey, Vec<FileMeta>> = BTreeMap::new();
        for meta in files {
            let key = TableKey::new(meta.database.clone(), meta.measurement.clone());
            by_table.entry(key).or_default().push(meta);
        }
        let mut tables = BTreeMap::new();
        for (key, files) in by_table {
            let state = TableState::with_files(files)?;
            tables.insert(
                key.clone(),
                Arc::new(Table {
                    key,
                    state: RwLock::new(state),
                }),
            );
        }
        let report = OpenReport {
            tables: tables.len(),
            catalog: catalog_report,
        };
        let storage = Storage {
            config,
            files: file_store,
            catalog,
            tables: RwLock::new(tables),
            memory_bytes: AtomicUsize::new(0),
            frozen_wakeup: tokio::sync::Notify::new(),
            persist_backoff: parking_lot::Mutex::new(BTreeMap::new()),
            persist_failing: parking_lot::Mutex::new(None),
            policies: RwLock::new(Policies::default()),
            compaction_wakeup: tokio::sync::Notify::new(),
            memory_freed: Arc::new(tokio::sync::Notify::new()),
            condemned: parking_lot::Mutex::new(Vec::new()),
            persist_faults: std::sync::atomic::AtomicU32::new(0),
            io_in_flight: Arc::new(AtomicUsize::new(0)),
            file_generation: AtomicU64::new(0),
            durable_generation: AtomicU64::new(0),
            live_at_open: parking_lot::Mutex::new(live_at_open),
            unaccounted: parking_lot::Mutex::new(UnaccountedFiles::default()),
            report,
        };
        // Listed by the snapshot this node restarted from, which it may still send to a
        // peer: deleted once a newer snapshot is durable, like any removed file. Deleted
        // at once, a follower sent that snapshot could fetch them from no one and failed
        // its install forever (found by the simulation, seed 138).
        if !replaced.is_empty() {
            tracing::info!(
                files = replaced.len(),
                "files a compaction replaced after the snapshot are kept until the next one"
            );
            storage.condemn(&replaced)?;
        }
        Ok(storage)
    }

    /// Keeps this node's claim on its bucket prefix alive while it runs (see
    /// `FileStore::keep_claim`); returns only if another process took the prefix over.
    pub async fn keep_bucket_claim(&self) {
        self.files.keep_claim().await
    }

    /// Counts a file operation that runs on a thread of its own (a segment, a merge, a
    /// snapshot being written) until the guard drops, so a node that stops can wait
    /// until nothing writes into its directories any more ([`Storage::io_in_flight`]).
    pub fn background_io(&self) -> IoGuard {
        self.io_in_flight
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        IoGuard(self.io_in_flight.clone())
    }

    /// File operations still running on threads of their own.
    pub fn io_in_flight(&self) -> usize {
        self.io_in_flight.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Applies a committed change of the replicated settings at `index`.
    pub fn apply_policy(&self, index: LogIndex, change: PolicyChange) -> PolicyOutcome {
        self.policies.write().apply(index, change)
    }

    /// Whether a write with this id was applied lately (see [`crate::write_ids`]).
    pub fn write_applied(&self, id: &str) -> bool {
        self.policies.read().recent_writes.contains(id)
    }

    /// Records the id of a write just applied.
    pub fn remember_write(&self, id: &str) {
        self.policies.write().recent_writes.remember(id);
    }

    /// The replicated settings now (a copy).
    pub fn policies(&self) -> Policies {
        self.policies.read().clone()
    }

    /// Runs `f` over the replicated settings without copying them.
    pub fn with_policies<T>(&self, f: impl FnOnce(&Policies) -> T) -> T {
        f(&self.policies.read())
    }

    /// What opening found.
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// The settings storage runs with.
    pub fn config(&self) -> &StorageConfig {
        &self.config
    }

    /// Where the Parquet files are.
    pub fn file_store(&self) -> &FileStore {
        &self.files
    }

    fn table(&self, key: &TableKey) -> Arc<Table> {
        if let Some(t) = self.tables.read().get(key) {
            return t.clone();
        }
        self.tables
            .write()
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Table {
                    key: key.clone(),
                    state: RwLock::new(TableState::default()),
                })
            })
            .clone()
    }

    /// Counts for metrics.
    pub fn stats(&self) -> StorageStats {
        let mut stats = StorageStats {
            memory_bytes: self.memory_bytes(),
            ..Default::default()
        };
        for table in self.tables.read().values() {
            let state = table.state.read();
            stats.active_rows += state.active_rows;
            stats.frozen_segments += state.frozen.len();
            stats.files += state.files.len();
            stats.file_bytes += state.files.iter().map(|f| f.size_bytes).sum::<u64>();
            stats.file_rows += state.files.iter().map(|f| f.rows).sum::<u64>();
        }
        stats
    }

    /// Per-table summaries, optionally of one database.
    pub fn summaries(&self, database: Option<&str>) -> Vec<TableSummary> {
        let tables = self.tables.read();
        tables
            .iter()
            .filter(|(k, _)| database.is_none_or(|d| k.database == d))
            .map(|(key, table)| {
                let state = table.state.read();
                let mut time_min = state.files.iter().map(|f| f.time_min.0).min();
                let mut time_max = state.files.iter().map(|f| f.time_max.0).max();
                let file_rows: u64 = state.files.iter().map(|f| f.rows).sum();
                let mut rows = file_rows;
                for batch in state
                    .frozen
                    .iter()
                    .flat_map(|f| f.batches.iter())
                    .chain(state.active.iter().map(|b| &b.batch))
                {
                    rows += batch.num_rows() as u64;
                    if let Some((lo, hi)) = batch_time_range(batch) {
                        time_min = Some(time_min.map_or(lo, |t| t.min(lo)));
                        time_max = Some(time_max.map_or(hi, |t| t.max(hi)));
                    }
                }
                TableSummary {
                    key: key.clone(),
                    file_count: state.files.len(),
                    file_bytes: state.files.iter().map(|f| f.size_bytes).sum(),
                    rows,
                    time_min,
                    time_max,
                    memory_rows: rows - file_rows,
                    compactions_pending: state.pending.len(),
                    sort_lead: state.sort.lead().map(str::to_string),
                }
            })
            .collect()
    }
}

fn batch_time_range(batch: &RecordBatch) -> Option<(i64, i64)> {
    use arrow::array::AsArray;
    use arrow::datatypes::TimestampNanosecondType;
    let time = batch
        .column_by_name(crate::schema::TIME_COLUMN)?
        .as_primitive_opt::<TimestampNanosecondType>()?;
    let lo = time.values().iter().min()?;
    let hi = time.values().iter().max()?;
    Some((*lo, *hi))
}
