//! Frozen segments to Parquet: the background writer's step, and files adopted from
//! peers; both written durably before the catalog records them.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Storage, TableKey};
use crate::catalog::read_staged_footer;
use crate::error::{Error, Result};
use crate::meta::FileMeta;
use crate::parquet_encode::{encode_segment, SegmentSource};
use crate::table_state::Frozen;

/// First wait after a table's segment failed to be written.
const PERSIST_BACKOFF_MS_MIN: u64 = 100;
/// Longest wait between two attempts to write one table's segment.
const PERSIST_BACKOFF_MS_MAX: u64 = 30_000;

/// Segment writes failing with none succeeding in between.
#[derive(Debug, Clone)]
pub(crate) struct Failing {
    since: Instant,
    error: String,
}

/// A table waiting out failed segment writes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    failures: u32,
    retry_at: Instant,
}

impl Storage {
    /// Waits until a segment may be waiting to be written.
    pub async fn frozen_ready(&self) {
        self.frozen_wakeup.notified().await
    }

    /// Notified each time a flush or a merge has freed memory: what
    /// [`crate::heap::release_after_frees`] waits on.
    pub fn memory_freed_signal(&self) -> Arc<tokio::sync::Notify> {
        self.memory_freed.clone()
    }

    /// Whether any frozen segment waits to be written.
    pub fn has_frozen(&self) -> bool {
        self.tables
            .read()
            .values()
            .any(|t| !t.state.read().frozen.is_empty())
    }

    /// Writes the oldest frozen segment of a table not waiting out a failure, as
    /// Parquet, and records it. Returns false if nothing is due now. On error the
    /// segment stays in memory (still queryable), its table waits (doubling, up to
    /// [`PERSIST_BACKOFF_MS_MAX`]) before it is tried again, and the other tables go
    /// on: nothing is dropped, and one table that cannot be written stalls no other.
    pub async fn persist_next(&self) -> Result<bool> {
        let now = Instant::now();
        let next = {
            let backoff = self.persist_backoff.lock();
            let tables = self.tables.read();
            tables
                .values()
                .filter(|t| backoff.get(&t.key).is_none_or(|b| b.retry_at <= now))
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
        let written = match self.injected_persist_failure() {
            Some(e) => Err(e),
            None => self.write_segment(&table.key, &segment).await,
        };
        let files = match written {
            Ok(files) => files,
            Err(e) => return Err(self.persist_failed(&table.key, now, e)),
        };
        let released = {
            let mut state = table.state.write();
            if !state.oldest_segment_ends_at(segment.log_last) {
                // A snapshot installed meanwhile replaced this table's memory: the rows
                // are in what it installed. The files stay on disk, listed nowhere, until
                // the next start deletes them (the newest snapshot does not list them).
                tracing::info!(table = %table.key, log_last = segment.log_last.0,
                    "a segment written while a snapshot was installed is not recorded");
                return Ok(true);
            }
            if let Err(e) = self.catalog.insert(&files) {
                drop(state);
                return Err(self.persist_failed(&table.key, now, e));
            }
            state.segment_written(segment.log_last, files.clone())
        };
        if self.persist_failing.lock().take().is_some() {
            tracing::info!(location = %self.files.describe(), "segments are being written again");
        }
        {
            let mut backoff = self.persist_backoff.lock();
            if backoff.remove(&table.key).is_some() {
                tracing::info!(table = %table.key, "segment written after earlier failures");
            }
            metrics::gauge!("quiver_tables_failing_to_flush").set(backoff.len() as f64);
        }
        self.memory_bytes
            .fetch_sub(released.min(self.memory_bytes()), Ordering::Relaxed);
        self.memory_freed.notify_one();
        let bytes: u64 = files.iter().map(|f| f.size_bytes).sum();
        metrics::counter!("quiver_flush_segments_total").increment(1);
        metrics::counter!("quiver_flush_rows_total").increment(segment.rows as u64);
        metrics::counter!("quiver_parquet_bytes_written_total").increment(bytes);
        tracing::info!(table = %table.key, rows = segment.rows, files = files.len(), bytes,
            log_first = segment.log_first.0, log_last = segment.log_last.0,
            ms = started.elapsed().as_millis() as u64, "segment written");
        Ok(true)
    }

    /// Puts a table whose segment could not be written into backoff (other tables go
    /// on) and says so.
    fn persist_failed(&self, key: &TableKey, now: Instant, e: Error) -> Error {
        {
            let mut failing = self.persist_failing.lock();
            let since = failing.as_ref().map_or(now, |f| f.since);
            *failing = Some(Failing {
                since,
                error: e.to_string(),
            });
        }
        let mut backoff = self.persist_backoff.lock();
        let entry = backoff.entry(key.clone()).or_insert(Backoff {
            failures: 0,
            retry_at: now,
        });
        entry.failures = entry.failures.saturating_add(1);
        let wait_ms =
            (PERSIST_BACKOFF_MS_MIN << entry.failures.min(16)).min(PERSIST_BACKOFF_MS_MAX);
        entry.retry_at = Instant::now() + Duration::from_millis(wait_ms);
        let failures = entry.failures;
        metrics::gauge!("quiver_tables_failing_to_flush").set(backoff.len() as f64);
        Error::SegmentNotWritten {
            table: key.to_string(),
            failures,
            retry_ms: wait_ms,
            source: Box::new(e),
        }
    }

    /// Why segments cannot be written, when every write for at least `for_at_least` has
    /// failed (none succeeded since the first failure): the store is unreachable or
    /// full, and buffers fill while it is. Names where the files go and the last error.
    pub fn flush_failing(&self, for_at_least: Duration) -> Option<String> {
        let failing = self.persist_failing.lock();
        let f = failing.as_ref()?;
        let failed_for = f.since.elapsed();
        (failed_for >= for_at_least).then(|| {
            format!(
                "writing Parquet files to {} has failed for {} s: {}",
                self.files.describe(),
                failed_for.as_secs(),
                f.error
            )
        })
    }

    /// How long until a table waiting out a failed write may be tried again, if any
    /// table with a frozen segment waits.
    pub fn next_persist_retry(&self) -> Option<Duration> {
        let now = Instant::now();
        self.persist_backoff
            .lock()
            .values()
            .map(|b| b.retry_at.saturating_duration_since(now))
            .min()
    }

    /// Encodes a segment and writes its files durably (on local disk each through a
    /// temporary file, fsynced before it is renamed into place, then its directory
    /// fsynced; in a bucket as uploads visible only once complete), so a power loss never
    /// leaves an empty or partial file under a final name.
    async fn write_segment(&self, key: &TableKey, segment: &Frozen) -> Result<Vec<FileMeta>> {
        let settings = self.config.parquet.clone();
        let (database, measurement) = (key.database.clone(), key.measurement.clone());
        let segment_owned = segment.clone();
        let guard = self.background_io();
        let encoded = tokio::task::spawn_blocking(move || {
            let source = SegmentSource {
                database: &database,
                measurement: &measurement,
                schema: &segment_owned.schema,
                batches: &segment_owned.batches,
                log_first: segment_owned.log_first,
                log_last: segment_owned.log_last,
                sort_lead: segment_owned.sort_lead.as_deref(),
            };
            encode_segment(&source, &settings)
        })
        .await
        .map_err(|e| Error::Catalog(format!("segment encoder task failed: {e}")))??;
        let mut metas = Vec::with_capacity(encoded.len());
        for file in encoded {
            self.make_way_for(&file.meta).await?;
            self.files.write(&file.meta.path, file.bytes).await?;
            metas.push(file.meta);
        }
        drop(guard);
        Ok(metas)
    }

    /// Clears `meta`'s name of any other file before it is written (see
    /// `FileStore::make_way`).
    pub(crate) async fn make_way_for(&self, meta: &FileMeta) -> Result<()> {
        self.files
            .make_way(meta, &crate::catalog::quarantine_dir(&self.config.dir))
            .await
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

    /// Makes the next `count` segment writes fail as a disk error would (before any
    /// byte is written): the fault point the simulation and tests use to check that a
    /// failed flush loses nothing and is retried.
    pub fn inject_persist_failures(&self, count: u32) {
        self.persist_faults.fetch_add(count, Ordering::SeqCst);
    }

    fn injected_persist_failure(&self) -> Option<Error> {
        self.persist_faults
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()
            .map(|_| Error::Io {
                path: self.config.dir.join("parquet"),
                source: std::io::Error::other("injected persist failure"),
            })
    }

    /// Where a file being received from a peer is staged: inside the storage directory,
    /// so adopting it is a rename on the same filesystem.
    pub fn incoming_path(&self, meta: &FileMeta) -> PathBuf {
        let name = crate::paths::staging_name(&meta.path);
        self.staging_path(&format!("{name}.part"))
    }

    /// Where a file named `name` is built before it is installed (a peer's file, a
    /// compaction output). What a crash leaves there is removed at the next open.
    pub(crate) fn staging_path(&self, name: &str) -> PathBuf {
        staging_dir(&self.config.dir).join(name)
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
        let (staged_owned, expected) = (staged.to_path_buf(), meta.clone());
        let guard = self.background_io();
        tokio::task::spawn_blocking(move || {
            // Checked before the move, so a wrong file never sits under a final name.
            let found = read_staged_footer(&staged_owned, &expected.path)?;
            if found != expected {
                return Err(Error::Corrupt {
                    path: expected.path.clone(),
                    reason: format!("footer describes {found:?}, expected {expected:?}"),
                });
            }
            Ok(())
        })
        .await
        .map_err(|e| Error::Catalog(format!("file check task failed: {e}")))??;
        self.make_way_for(meta).await?;
        self.files.install(staged, &meta.path).await?;
        drop(guard);
        self.catalog.insert(std::slice::from_ref(meta))?;
        let table = self.table(&TableKey::new(
            meta.database.as_str(),
            meta.measurement.as_str(),
        ));
        table.state.write().add_file(meta.clone())?;
        self.note_compaction_output_adopted(meta)
    }
}

/// The staging directory under a storage directory.
pub(crate) fn staging_dir(storage_dir: &Path) -> PathBuf {
    storage_dir.join("incoming")
}

/// Removes what a crash left in the staging directory: files being received or built
/// then, never installed. Returns how many.
pub(crate) fn clear_staging(storage_dir: &Path) -> Result<usize> {
    let dir = staging_dir(storage_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(source) => return Err(Error::Io { path: dir, source }),
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_file() {
            std::fs::remove_file(&path).map_err(|source| Error::Io { path, source })?;
            removed += 1;
        }
    }
    Ok(removed)
}
