//! [`Storage`]: the tables of one node, applying log entries and writing Parquet.
//!
//! The state machine calls [`Storage::apply_write`] and [`Storage::apply_flush`] in log
//! order; both are deterministic, so every replica holds the same rows at every index.
//! A background task calls [`Storage::persist_next`] to turn frozen segments into
//! Parquet files. Queries read through [`TableSource`].

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use crate::catalog::{catalog_dir, quarantine_dir, read_staged_footer, Catalog, CatalogReport};
use crate::durable::{create_dir_all_durably, install_file_durably, replace_file_durably};
use crate::error::{Error, Result};
use crate::ids::{validate_database_name, LogIndex};
use crate::meta::FileMeta;
use crate::parquet_encode::{encode_segment, ParquetSettings, SegmentSource};
use crate::schema::MeasurementSchema;
use crate::table::{ParquetFileRef, TableSnapshot, TableSource};
use crate::table_state::{Buffered, Frozen, TableState};

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
    /// Memory all buffers (live and frozen) may hold before writes are refused with
    /// 503; flushes start at half of it.
    pub memory_bytes_max: usize,
    /// How Parquet is written.
    pub parquet: ParquetSettings,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            dir: PathBuf::from("quiver-data/storage"),
            flush_rows_max: 2_000_000,
            flush_bytes_max: 256 * 1024 * 1024,
            flush_age_ms: 120_000,
            memory_bytes_max: 2 * 1024 * 1024 * 1024,
            parquet: ParquetSettings::default(),
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
}

struct Table {
    key: TableKey,
    state: RwLock<TableState>,
}

/// See the module documentation.
pub struct Storage {
    config: StorageConfig,
    store: Arc<dyn ObjectStore>,
    local: Arc<LocalFileSystem>,
    catalog: Catalog,
    tables: RwLock<BTreeMap<TableKey, Arc<Table>>>,
    memory_bytes: AtomicUsize,
    frozen_wakeup: tokio::sync::Notify,
    report: OpenReport,
}

impl Storage {
    /// Opens storage in `config.dir`: checks or rebuilds the catalog and loads every
    /// table's files. Buffers start empty; the caller restores them (snapshot, replay).
    pub async fn open(config: StorageConfig) -> Result<Storage> {
        let parquet_dir = config.dir.join("parquet");
        create_dir_all_durably(&parquet_dir)?;
        let local = Arc::new(LocalFileSystem::new_with_prefix(&parquet_dir)?);
        let store: Arc<dyn ObjectStore> = local.clone();
        let (catalog, files, catalog_report) = Catalog::open(
            &catalog_dir(&config.dir),
            &local,
            &quarantine_dir(&config.dir),
        )
        .await?;
        let mut states: BTreeMap<TableKey, TableState> = BTreeMap::new();
        for meta in files {
            let key = TableKey::new(meta.database.clone(), meta.measurement.clone());
            states.entry(key).or_default().add_file(meta)?;
        }
        let mut tables = BTreeMap::new();
        for (key, mut state) in states {
            state.files.sort_by_key(|f| (f.log_last, f.time_min));
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
        Ok(Storage {
            config,
            store,
            local,
            catalog,
            tables: RwLock::new(tables),
            memory_bytes: AtomicUsize::new(0),
            frozen_wakeup: tokio::sync::Notify::new(),
            report,
        })
    }

    /// What opening found.
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// The settings storage runs with.
    pub fn config(&self) -> &StorageConfig {
        &self.config
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

    /// Checks a write against the tables' schemas without changing anything: the error
    /// a client gets before its rows enter the log.
    pub fn check_write(&self, database: &str, tables: &[(String, RecordBatch)]) -> Result<()> {
        validate_database_name(database)?;
        let existing = self.tables.read();
        let mut grown: BTreeMap<&str, MeasurementSchema> = BTreeMap::new();
        for (measurement, batch) in tables {
            let base = match grown.get(measurement.as_str()) {
                Some(s) => s.clone(),
                None => existing
                    .get(&TableKey::new(database, measurement.as_str()))
                    .map(|t| t.state.read().schema.clone())
                    .unwrap_or_default(),
            };
            if let Some(next) = base.merge(measurement, &batch.schema())? {
                grown.insert(measurement, next);
            }
        }
        Ok(())
    }

    /// The schema `database.measurement` has now, if it exists: for callers that decide
    /// row by row what conflicts with it.
    pub fn schema_of(&self, database: &str, measurement: &str) -> Option<MeasurementSchema> {
        self.tables
            .read()
            .get(&TableKey::new(database, measurement))
            .map(|t| t.state.read().schema.clone())
    }

    /// Applies a committed write entry. Either every table of the entry takes its rows
    /// or, on a schema conflict, none does (the same on every replica).
    pub fn apply_write(
        &self,
        index: LogIndex,
        database: &str,
        tables: &[(String, RecordBatch)],
    ) -> Result<usize> {
        self.check_write(database, tables)?;
        let now = Instant::now();
        let mut rows = 0;
        for (measurement, batch) in tables {
            let table = self.table(&TableKey::new(database, measurement.as_str()));
            let mut state = table.state.write();
            if state.holds(index) {
                continue;
            }
            if let Some(grown) = state.schema.merge(measurement, &batch.schema())? {
                state.schema = grown;
            }
            let bytes = state.append(index, batch.clone(), now);
            self.memory_bytes.fetch_add(bytes, Ordering::Relaxed);
            rows += batch.num_rows();
        }
        metrics::counter!("quiver_rows_applied_total").increment(rows as u64);
        Ok(rows)
    }

    /// Applies a committed flush entry: the named tables' live buffers become frozen
    /// segments, and the background writer is woken.
    pub fn apply_flush(&self, index: LogIndex, targets: &[TableKey]) {
        let mut froze = false;
        for key in targets {
            let table = self.tables.read().get(key).cloned();
            if let Some(table) = table {
                froze |= table.state.write().freeze(index);
            }
        }
        if froze {
            self.frozen_wakeup.notify_one();
        }
    }

    /// Tables whose live buffer passed a flush threshold. The leader proposes a flush
    /// entry for them; when memory runs high, the biggest buffers are flushed too.
    pub fn flush_candidates(&self, now: Instant) -> Vec<TableKey> {
        let age_max = Duration::from_millis(self.config.flush_age_ms);
        let tables = self.tables.read();
        let mut out = Vec::new();
        let mut sizes: Vec<(usize, TableKey)> = Vec::new();
        for (key, table) in tables.iter() {
            let state = table.state.read();
            if state.active.is_empty() {
                continue;
            }
            let old = state
                .active_since
                .is_some_and(|t| now.duration_since(t) >= age_max);
            if state.active_rows >= self.config.flush_rows_max
                || state.active_bytes >= self.config.flush_bytes_max
                || old
            {
                out.push(key.clone());
            } else {
                sizes.push((state.active_bytes, key.clone()));
            }
        }
        let mut memory = self.memory_bytes();
        if memory > self.config.memory_bytes_max / 2 {
            sizes.sort_by_key(|s| std::cmp::Reverse(s.0));
            for (bytes, key) in sizes {
                if memory <= self.config.memory_bytes_max / 2 {
                    break;
                }
                memory = memory.saturating_sub(bytes);
                out.push(key);
            }
        }
        out
    }

    /// Every table with rows in its live buffer (a flush-all, e.g. before shutdown).
    pub fn tables_with_live_rows(&self) -> Vec<TableKey> {
        self.tables
            .read()
            .iter()
            .filter(|(_, t)| !t.state.read().active.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Bytes held by live and frozen rows of all tables.
    pub fn memory_bytes(&self) -> usize {
        self.memory_bytes.load(Ordering::Relaxed)
    }

    /// Whether new writes must be refused until flushes catch up.
    pub fn is_over_memory_limit(&self) -> bool {
        self.memory_bytes() >= self.config.memory_bytes_max
    }

    /// Waits until a segment may be waiting to be written.
    pub async fn frozen_ready(&self) {
        self.frozen_wakeup.notified().await
    }

    /// Whether any frozen segment waits to be written.
    pub fn has_frozen(&self) -> bool {
        self.tables
            .read()
            .values()
            .any(|t| !t.state.read().frozen.is_empty())
    }

    /// Writes the oldest frozen segment as Parquet and records it. Returns false if
    /// nothing was waiting. On error the segment stays in memory (still queryable) and
    /// the caller retries: nothing is dropped.
    pub async fn persist_next(&self) -> Result<bool> {
        let next = {
            let tables = self.tables.read();
            tables
                .values()
                .filter_map(|t| {
                    t.state
                        .read()
                        .frozen
                        .front()
                        .map(|f| (f.log_last, t.clone(), f.clone()))
                })
                .min_by_key(|(log_last, _, _)| *log_last)
        };
        let Some((_, table, segment)) = next else {
            return Ok(false);
        };
        let started = Instant::now();
        let files = self.write_segment(&table.key, &segment).await?;
        self.catalog.insert(&files)?;
        let released = table
            .state
            .write()
            .segment_written(segment.log_last, files.clone());
        self.memory_bytes
            .fetch_sub(released.min(self.memory_bytes()), Ordering::Relaxed);
        let bytes: u64 = files.iter().map(|f| f.size_bytes).sum();
        metrics::counter!("quiver_flush_segments_total").increment(1);
        metrics::counter!("quiver_flush_rows_total").increment(segment.rows as u64);
        metrics::counter!("quiver_parquet_bytes_written_total").increment(bytes);
        tracing::info!(table = %table.key, rows = segment.rows, files = files.len(), bytes,
            log_first = segment.log_first.0, log_last = segment.log_last.0,
            ms = started.elapsed().as_millis() as u64, "segment written");
        Ok(true)
    }

    /// Encodes a segment and writes its files durably (each through a temporary file,
    /// fsynced before it is renamed into place, then its directory fsynced), so a power
    /// loss never leaves an empty or partial file under a final name.
    async fn write_segment(&self, key: &TableKey, segment: &Frozen) -> Result<Vec<FileMeta>> {
        let settings = self.config.parquet.clone();
        let (database, measurement) = (key.database.clone(), key.measurement.clone());
        let segment_owned = segment.clone();
        let local = self.local.clone();
        tokio::task::spawn_blocking(move || {
            let source = SegmentSource {
                database: &database,
                measurement: &measurement,
                schema: &segment_owned.schema,
                batches: &segment_owned.batches,
                log_first: segment_owned.log_first,
                log_last: segment_owned.log_last,
            };
            let encoded = encode_segment(&source, &settings)?;
            let mut metas = Vec::with_capacity(encoded.len());
            for file in encoded {
                let target =
                    local.path_to_filesystem(&ObjectPath::from(file.meta.path.as_str()))?;
                replace_file_durably(&target, |w| {
                    w.write_all(&file.bytes).map_err(|source| Error::Io {
                        path: target.clone(),
                        source,
                    })
                })?;
                metas.push(file.meta);
            }
            Ok(metas)
        })
        .await
        .map_err(|e| Error::Catalog(format!("segment writer task failed: {e}")))?
    }

    /// Whether this node already holds the Parquet file `meta` describes.
    pub fn has_file(&self, meta: &FileMeta) -> bool {
        self.tables
            .read()
            .get(&TableKey::new(
                meta.database.as_str(),
                meta.measurement.as_str(),
            ))
            .is_some_and(|t| t.state.read().files.iter().any(|f| f.path == meta.path))
    }

    /// Where a file being received from a peer is staged: inside the storage directory,
    /// so adopting it is a rename on the same filesystem.
    pub fn incoming_path(&self, meta: &FileMeta) -> PathBuf {
        let name = meta.path.replace('/', "_");
        self.config
            .dir
            .join("incoming")
            .join(format!("{name}.part"))
    }

    /// Takes a Parquet file written by another replica (snapshot catch-up), staged at
    /// `staged`: checks that its footer describes exactly `meta`, moves it into place,
    /// makes it durable and records it, as if this node had written it. Segments are
    /// deterministic (the same log range gives the same file on every replica), so the
    /// file is the one this node would have written itself.
    pub async fn adopt_file(&self, meta: &FileMeta, staged: &Path) -> Result<()> {
        let size = std::fs::metadata(staged)
            .map_err(|source| Error::Io {
                path: staged.to_path_buf(),
                source,
            })?
            .len();
        if size != meta.size_bytes {
            return Err(Error::Corrupt {
                path: staged.display().to_string(),
                reason: format!("received {size} bytes, expected {}", meta.size_bytes),
            });
        }
        let target = self
            .local
            .path_to_filesystem(&ObjectPath::from(meta.path.as_str()))?;
        let (staged_owned, expected) = (staged.to_path_buf(), meta.clone());
        tokio::task::spawn_blocking(move || {
            // Checked before the move, so a wrong file never sits under a final name.
            let found = read_staged_footer(&staged_owned, &expected.path)?;
            if found != expected {
                return Err(Error::Corrupt {
                    path: expected.path.clone(),
                    reason: format!("footer describes {found:?}, expected {expected:?}"),
                });
            }
            install_file_durably(&staged_owned, &target)
        })
        .await
        .map_err(|e| Error::Catalog(format!("file adoption task failed: {e}")))??;
        self.catalog.insert(std::slice::from_ref(meta))?;
        let table = self.table(&TableKey::new(
            meta.database.as_str(),
            meta.measurement.as_str(),
        ));
        let mut state = table.state.write();
        state.add_file(meta.clone())?;
        Ok(())
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
                let mut rows: u64 = state.files.iter().map(|f| f.rows).sum();
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
                }
            })
            .collect()
    }

    /// Rows not yet in Parquet and the list of files, captured per table under its lock
    /// so a segment written meanwhile is in one or the other, never in neither (cheap:
    /// batches are shared, not copied).
    pub fn memory_image(&self) -> MemoryImage {
        let tables = self.tables.read();
        let mut out = Vec::new();
        let mut files = Vec::new();
        for (key, table) in tables.iter() {
            let state = table.state.read();
            files.extend(state.files.iter().cloned());
            if state.frozen.is_empty() && state.active.is_empty() {
                continue;
            }
            out.push(TableImage {
                key: key.clone(),
                frozen: state.frozen.iter().cloned().collect(),
                active: state.active.clone(),
            });
        }
        MemoryImage { tables: out, files }
    }

    /// Every Parquet file, for a snapshot's manifest.
    pub fn files(&self) -> Vec<FileMeta> {
        let tables = self.tables.read();
        tables
            .values()
            .flat_map(|t| t.state.read().files.clone())
            .collect()
    }

    /// Drops every unwritten row (before installing a snapshot that replaces them).
    pub fn reset_memory(&self) {
        for table in self.tables.read().values() {
            let mut state = table.state.write();
            state.active.clear();
            state.active_rows = 0;
            state.active_bytes = 0;
            state.active_since = None;
            state.frozen.clear();
            state.frozen_through = state.flushed_through;
        }
        self.memory_bytes.store(0, Ordering::Relaxed);
    }

    /// Puts a snapshot's unwritten rows back, skipping what the files already hold
    /// (segments written after the snapshot was taken). Call before replaying the log.
    pub fn restore_memory(&self, image: MemoryImage) -> Result<()> {
        let now = Instant::now();
        let mut frozen_any = false;
        for TableImage {
            key,
            frozen,
            active,
        } in image.tables
        {
            let table = self.table(&key);
            let mut state = table.state.write();
            for segment in frozen {
                if segment.log_last <= state.frozen_through {
                    continue;
                }
                if let Some(grown) = state.schema.merge(&key.measurement, &segment.schema)? {
                    state.schema = grown;
                }
                self.memory_bytes
                    .fetch_add(segment.bytes, Ordering::Relaxed);
                state.frozen_through = segment.log_last;
                state.frozen.push_back(segment);
                frozen_any = true;
            }
            for buffered in active {
                if state.holds(buffered.index) {
                    continue;
                }
                if let Some(grown) = state
                    .schema
                    .merge(&key.measurement, &buffered.batch.schema())?
                {
                    state.schema = grown;
                }
                let bytes = state.append(buffered.index, buffered.batch, now);
                self.memory_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
        }
        if frozen_any {
            self.frozen_wakeup.notify_one();
        }
        Ok(())
    }
}

/// Rows in memory across all tables, as a snapshot carries them.
#[derive(Debug, Clone, Default)]
pub struct MemoryImage {
    /// Tables with unwritten rows.
    pub tables: Vec<TableImage>,
    /// Every Parquet file at capture time (the snapshot's manifest).
    pub files: Vec<FileMeta>,
}

/// One table's unwritten rows.
#[derive(Debug, Clone)]
pub struct TableImage {
    /// The table.
    pub key: TableKey,
    /// Frozen segments, oldest first.
    pub frozen: Vec<Frozen>,
    /// Live buffer, in log order.
    pub active: Vec<Buffered>,
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

impl TableSource for Storage {
    fn databases(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .tables
            .read()
            .keys()
            .map(|k| k.database.clone())
            .collect();
        out.dedup();
        out
    }

    fn measurements(&self, database: &str) -> Vec<String> {
        self.tables
            .read()
            .keys()
            .filter(|k| k.database == database)
            .map(|k| k.measurement.clone())
            .collect()
    }

    fn table(&self, database: &str, measurement: &str) -> Option<TableSnapshot> {
        let table = self
            .tables
            .read()
            .get(&TableKey::new(database, measurement))
            .cloned()?;
        let state = table.state.read();
        let memory = match state.memory_batches() {
            Ok(m) => m,
            Err(e) => {
                debug_assert!(false, "buffer batches do not conform to their schema: {e}");
                tracing::error!(table = %table.key, error = %e, "buffer does not conform to its schema");
                return None;
            }
        };
        Some(TableSnapshot {
            database: database.to_string(),
            measurement: measurement.to_string(),
            schema: state.schema.arrow().clone(),
            tag_columns: state.schema.tag_columns(),
            memory,
            files: state
                .files
                .iter()
                .map(|f| ParquetFileRef {
                    path: f.path.clone(),
                    size_bytes: f.size_bytes,
                    rows: f.rows,
                    time_min: f.time_min,
                    time_max: f.time_max,
                })
                .collect(),
        })
    }

    fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }
}
