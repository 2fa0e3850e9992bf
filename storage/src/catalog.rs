//! The sled catalog: an index over the Parquet files, never the truth.
//!
//! Every file describes itself ([`FileMeta`] in its footer), so whenever sled cannot be
//! opened, holds entries it cannot parse, or disagrees with the files in the object
//! store, the catalog is rebuilt from the footers and the node says so. Files of a
//! segment whose sibling files are missing (a crash mid-flush, or lost files) are moved
//! to quarantine, never deleted: the log replays the segment if it still holds it, and
//! if it does not (a log purged past it, a lost WAL) the quarantined files are the only
//! copy of their rows.
//!
//! A file whose footer cannot be read during a rebuild (damaged, not Quiver's, another
//! format version, or naming another path) does not stop the node: it is moved to
//! `quarantine/` beside the catalog, with an error naming it, and reported. Its rows are
//! still in the log or on the other replicas.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::async_reader::MetadataFetch;
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::compaction::{split_superseded, CompactionJob};
use crate::error::{Error, Result};
use crate::file_store::FileStore;
use crate::meta::{FileMeta, FILE_META_KEY, FILE_META_VERSION};

const FILES_TREE: &str = "files";

/// Which Parquet files are live when storage opens. The caller knows: the newest
/// snapshot lists the files its state holds, and every file written since is rebuilt
/// by replaying the log after it. The files alone cannot tell: a compaction, a
/// retention drop or a delete removes some files of a flushed segment, and the rest
/// then look like the remains of a flush a crash interrupted.
#[derive(Debug, Clone)]
pub enum FileSet {
    /// The newest snapshot's manifest and the compactions it still queues: exactly
    /// the listed files, except that a queued compaction whose output is already on
    /// disk (it ran after the snapshot was taken) counts as done: its output replaces
    /// its inputs. Trusted at open without reading the disk; the sweep that follows
    /// (`Storage::sweep`) deletes any other file and reports a listed file that is
    /// missing (`SweepReport::lacking`) for the caller to fetch from a peer.
    Manifest {
        /// The manifest.
        files: Vec<FileMeta>,
        /// The compactions the snapshot queues.
        jobs: Vec<CompactionJob>,
    },
    /// No snapshot, and the log holds every entry since the first: no file is needed,
    /// replay writes them all again. The sweep deletes every file replay does not write.
    Nothing,
    /// Neither is known (tools, tests, or a node whose snapshots were lost after its
    /// log was purged): the files' own footers decide, conservatively.
    Footers,
}

/// What opening the catalog found; surfaced in logs and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatalogReport {
    /// Why the catalog was rebuilt from the files, if it was.
    pub rebuilt_because: Option<String>,
    /// Files of incomplete segments, moved to quarantine (also in `quarantined`).
    pub incomplete_files_quarantined: Vec<String>,
    /// Files that could not be read while rebuilding, moved to the quarantine
    /// directory (object paths, as they were in the store).
    pub quarantined: Vec<String>,
    /// Temporary files of interrupted writes that were removed.
    pub temp_files_removed: Vec<String>,
    /// Files a compaction output replaced (left by a crash before their deletion),
    /// deleted.
    pub superseded_files_deleted: Vec<String>,
    /// Files the snapshot lists that a compaction it queues replaced after it was
    /// taken (its output is on disk): not live, but kept on disk until a newer snapshot
    /// is durable, since this node may still send the snapshot that lists them.
    pub replaced_since_snapshot: Vec<FileMeta>,
    /// Files live at open.
    pub files: usize,
}

/// The sled-backed index of Parquet files. Clones share the database.
#[derive(Clone)]
pub struct Catalog {
    db: sled::Db,
    files: sled::Tree,
}

impl Catalog {
    /// Opens the catalog in `dir` and decides which files in `files` are live, as `set`
    /// says (see [`FileSet`]), moving unreadable files to quarantine. Returns the live
    /// files' metadata.
    pub async fn open(
        dir: &Path,
        local: &FileStore,
        quarantine_dir: &Path,
        set: FileSet,
    ) -> Result<(Catalog, Vec<FileMeta>, CatalogReport)> {
        let mut report = CatalogReport::default();
        let started = std::time::Instant::now();
        let (catalog, files) = match set {
            FileSet::Footers => {
                let listed = list_files(local, &mut report).await?;
                open_from_footers(dir, local, quarantine_dir, listed, &mut report).await?
            }
            FileSet::Manifest { files, jobs } => {
                open_from_manifest(dir, local, (files, &jobs), &mut report).await?
            }
            FileSet::Nothing => {
                open_from_manifest(dir, local, (Vec::new(), &[]), &mut report).await?
            }
        };
        report.files = files.len();
        tracing::info!(
            files = files.len(),
            ms = started.elapsed().as_millis() as u64,
            "catalog opened"
        );
        Ok((catalog, files, report))
    }

    fn read_all(&self) -> Result<Vec<FileMeta>> {
        let mut out = Vec::new();
        for item in self.files.iter() {
            let (_, value) = item.map_err(|e| Error::Catalog(e.to_string()))?;
            let meta: FileMeta =
                serde_json::from_slice(&value).map_err(|e| Error::Catalog(e.to_string()))?;
            out.push(meta);
        }
        Ok(out)
    }

    /// Records newly written files, durably, in one batch.
    pub fn insert(&self, metas: &[FileMeta]) -> Result<()> {
        let mut batch = sled::Batch::default();
        for meta in metas {
            let value = serde_json::to_vec(meta).map_err(|e| Error::Catalog(e.to_string()))?;
            batch.insert(meta.path.as_bytes(), value);
        }
        self.files
            .apply_batch(batch)
            .map_err(|e| Error::Catalog(e.to_string()))?;
        self.db.flush().map_err(|e| Error::Catalog(e.to_string()))?;
        Ok(())
    }

    /// Forgets a file.
    pub fn remove(&self, path: &str) -> Result<()> {
        self.files
            .remove(path.as_bytes())
            .map_err(|e| Error::Catalog(e.to_string()))?;
        Ok(())
    }

    /// Calls `f` with the path of every entry, without parsing a value: a file's name
    /// is its table, hour and log range, and a name is never written with other bytes,
    /// so an entry under the right path is the right entry (a damaged value is found
    /// when the footers path reads it). Not parsing a million entries is most of the
    /// time a comparison with the live files takes.
    pub(crate) fn for_each_path(&self, mut f: impl FnMut(&str)) -> Result<()> {
        for key in self.files.iter().keys() {
            let key = key.map_err(|e| Error::Catalog(e.to_string()))?;
            f(&String::from_utf8_lossy(&key));
        }
        Ok(())
    }

    /// Removes the `stale` entries and adds `missing`, in one durable batch.
    pub(crate) fn apply(&self, stale: &[String], missing: &[FileMeta]) -> Result<()> {
        if stale.is_empty() && missing.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for key in stale {
            batch.remove(key.as_bytes());
        }
        for meta in missing {
            let value = serde_json::to_vec(meta).map_err(|e| Error::Catalog(e.to_string()))?;
            batch.insert(meta.path.as_bytes(), value);
        }
        self.files
            .apply_batch(batch)
            .map_err(|e| Error::Catalog(e.to_string()))?;
        self.db.flush().map_err(|e| Error::Catalog(e.to_string()))?;
        Ok(())
    }
}

/// [`FileSet::Footers`]: the sled catalog if it agrees with the files, else a rebuild
/// from their footers; files of a segment that a crash left incomplete are quarantined
/// (the log replays them if it still holds them), and files a compaction output
/// replaced are deleted.
async fn open_from_footers(
    dir: &Path,
    local: &FileStore,
    quarantine_dir: &Path,
    listed: BTreeMap<String, u64>,
    report: &mut CatalogReport,
) -> Result<(Catalog, Vec<FileMeta>)> {
    let store = &local.reader();
    let existing = match open_sled(dir) {
        Ok(catalog) => match catalog.read_all() {
            Ok(entries) => match agree(&entries, &listed) {
                None => Some((catalog, entries)),
                Some(reason) => {
                    report.rebuilt_because = Some(reason);
                    drop(catalog);
                    None
                }
            },
            Err(e) => {
                report.rebuilt_because = Some(format!("entries unreadable: {e}"));
                drop(catalog);
                None
            }
        },
        Err(e @ Error::CatalogLocked { .. }) => return Err(e),
        Err(e) => {
            report.rebuilt_because = Some(format!("sled failed to open: {e}"));
            None
        }
    };
    let (catalog, entries) = match existing {
        Some(found) => found,
        None => {
            let reason = report.rebuilt_because.clone().unwrap_or_default();
            tracing::warn!(dir = %dir.display(), %reason, files = listed.len(), "rebuilding the catalog from the Parquet files");
            let mut entries = Vec::with_capacity(listed.len());
            for (path, size) in &listed {
                match read_footer(store, path, *size).await {
                    Ok(meta) => entries.push(meta),
                    Err(e) => {
                        local
                            .quarantine(quarantine_dir, path, &e.to_string())
                            .await?;
                        report.quarantined.push(path.clone());
                    }
                }
            }
            reset_dir(dir)?;
            let catalog = open_sled(dir)?;
            catalog.insert(&entries)?;
            (catalog, entries)
        }
    };
    // A segment some of whose files are missing: a crash mid-flush (the log replays the
    // segment) or lost files. Which, the footers cannot tell, and this open does not know
    // whether the log still holds the segment, so its files are moved aside, never
    // deleted: if replay writes them again the copies are redundant, if not they are
    // the only copy of their rows.
    let (complete, incomplete) = split_incomplete(entries);
    for meta in &incomplete {
        local
            .quarantine(
                quarantine_dir,
                &meta.path,
                "its segment is incomplete (a crash mid-flush, which replay redoes, or lost files)",
            )
            .await?;
        report.quarantined.push(meta.path.clone());
        report.incomplete_files_quarantined.push(meta.path.clone());
        catalog.remove(&meta.path)?;
    }
    let (complete, superseded) = split_superseded(complete);
    for meta in &superseded {
        tracing::info!(path = %meta.path, "deleting a file a compaction replaced");
        local.delete(&meta.path).await?;
        catalog.remove(&meta.path)?;
        report.superseded_files_deleted.push(meta.path.clone());
    }
    Ok((catalog, complete))
}

/// [`FileSet::Manifest`] (and [`FileSet::Nothing`], an empty manifest): exactly the
/// listed files, trusted without looking at the disk, so a start does not walk a
/// million files. Only the outputs of the compactions the snapshot queues are looked up
/// (a few): one on disk ran after the snapshot was taken, so it is live and its inputs
/// are gone. The disk and sled are brought to this set afterwards, while the node
/// serves, by `Storage::sweep` (files left by an earlier life deleted, files the
/// manifest lists but the disk lacks fetched from peers).
async fn open_from_manifest(
    dir: &Path,
    local: &FileStore,
    (manifest, jobs): (Vec<FileMeta>, &[CompactionJob]),
    report: &mut CatalogReport,
) -> Result<(Catalog, Vec<FileMeta>)> {
    let store = local.reader();
    let mut live = Vec::with_capacity(manifest.len());
    // Outputs of queued compactions that ran after the snapshot: done, their inputs
    // replaced (an output is written durably before its inputs are removed).
    let mut consumed: BTreeSet<String> = BTreeSet::new();
    let outputs: BTreeSet<&str> = jobs.iter().map(|job| job.output.as_str()).collect();
    let in_manifest: BTreeSet<&str> = manifest
        .iter()
        .filter_map(|m| outputs.get(m.path.as_str()).copied())
        .collect();
    // Looked up a few at a time: with a cold page cache each is a wait on the disk.
    let queued: Vec<&CompactionJob> = jobs
        .iter()
        .filter(|job| !in_manifest.contains(job.output.as_str()))
        .collect();
    let mut found: Vec<(&CompactionJob, Option<FileMeta>)> = Vec::with_capacity(queued.len());
    for chunk in queued.chunks(JOB_LOOKUPS_AT_ONCE) {
        let outputs = futures::future::join_all(chunk.iter().map(|job| done_output(&store, job)));
        found.extend(chunk.iter().copied().zip(outputs.await));
    }
    for (job, output) in found {
        if let Some(meta) = output {
            consumed.extend(job.request.inputs.iter().map(|i| i.path.clone()));
            live.push(meta);
        }
    }
    let (replaced, listed_live): (Vec<FileMeta>, Vec<FileMeta>) = manifest
        .into_iter()
        .partition(|m| consumed.contains(&m.path));
    live.extend(listed_live);
    // A later queued compaction may consume an earlier one's output. Such an output is
    // not listed by the snapshot: it leaves with the sweep.
    live.retain(|m| !consumed.contains(&m.path));
    report.replaced_since_snapshot = replaced;
    let catalog = match open_sled(dir) {
        Ok(catalog) => catalog,
        Err(e @ Error::CatalogLocked { .. }) => return Err(e),
        Err(e) => {
            // Refilled by the sweep, in the background.
            let reason = format!("sled unusable: {e}");
            tracing::warn!(dir = %dir.display(), %reason,
                "rebuilding the catalog from the snapshot's manifest, in the background");
            report.rebuilt_because = Some(reason);
            reset_dir(dir)?;
            open_sled(dir)?
        }
    };
    Ok((catalog, live))
}

/// Queued compactions whose output is looked up at once at open.
const JOB_LOOKUPS_AT_ONCE: usize = 16;

/// The output of `job` if it is on disk and readable: the compaction ran after the
/// snapshot that queues it was taken. An unreadable one is merged again.
async fn done_output(store: &Arc<dyn ObjectStore>, job: &CompactionJob) -> Option<FileMeta> {
    let size = match store.head(&ObjectPath::from(job.output.as_str())).await {
        Ok(found) => found.size,
        Err(object_store::Error::NotFound { .. }) => return None,
        Err(e) => {
            tracing::warn!(path = %job.output, error = %e,
                "cannot look up a compaction output the snapshot queues; it is merged again");
            return None;
        }
    };
    match read_footer(store, &job.output, size).await {
        Ok(meta) => Some(meta),
        Err(e) => {
            tracing::warn!(path = %job.output, error = %e,
                "a compaction output the snapshot queues is unreadable; it is merged again");
            None
        }
    }
}

/// How long opening the catalog waits for a lock that another holder still has: a
/// storage of this process that is closing (sled's flusher thread lets go of the lock
/// a moment after the last handle is dropped). Other processes are kept out by the
/// node's directory lock.
const SLED_LOCK_WAIT_MS: u64 = 10_000;

/// sled's page cache. Its default (1 GiB) filled with the catalog of a million files
/// (1.3 GB of entries) once a start had walked it; the catalog is written on every flush
/// but read whole only when it is rebuilt, so a small cache loses nothing.
const SLED_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Pause between attempts while the lock is held.
const SLED_LOCK_RETRY_MS: u64 = 20;

fn open_sled(dir: &Path) -> Result<Catalog> {
    let started = std::time::Instant::now();
    loop {
        match open_sled_once(dir) {
            Err(Error::CatalogLocked { .. })
                if started.elapsed().as_millis() < u128::from(SLED_LOCK_WAIT_MS) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(SLED_LOCK_RETRY_MS));
            }
            Err(Error::CatalogLocked { dir, .. }) => {
                return Err(Error::CatalogLocked {
                    dir,
                    waited_ms: started.elapsed().as_millis() as u64,
                })
            }
            other => return other,
        }
    }
}

fn open_sled_once(dir: &Path) -> Result<Catalog> {
    // sled can panic on some corrupt files instead of returning an error; a catalog is
    // never worth a crash, so treat a panic as "unopenable" and rebuild.
    let dir_owned = dir.to_path_buf();
    let opened = std::panic::catch_unwind(move || -> Result<Catalog> {
        let db = sled::Config::new()
            .path(&dir_owned)
            .cache_capacity(SLED_CACHE_BYTES)
            .open()
            .map_err(|e| match e {
                // sled 0.34 reports a held lock only in the message of an `Other`
                // error; the test below fails if a new sled words it otherwise.
                sled::Error::Io(io) if io.to_string().starts_with("could not acquire lock") => {
                    Error::CatalogLocked {
                        dir: dir_owned.clone(),
                        waited_ms: 0,
                    }
                }
                other => Error::Catalog(other.to_string()),
            })?;
        let files = db
            .open_tree(FILES_TREE)
            .map_err(|e| Error::Catalog(e.to_string()))?;
        Ok(Catalog { db, files })
    });
    match opened {
        Ok(result) => result,
        Err(_) => Err(Error::Catalog("sled panicked while opening".into())),
    }
}

fn reset_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// Every Parquet file under the data prefix, with its size. Removes the temporary
/// files of writes a crash interrupted (`{name}.parquet.tmp`) on the way.
async fn list_files(
    local: &FileStore,
    report: &mut CatalogReport,
) -> Result<BTreeMap<String, u64>> {
    let (files, temps_removed) = local.list().await?;
    for path in temps_removed {
        tracing::info!(path, "removed the temporary file of an interrupted write");
        report.temp_files_removed.push(path);
    }
    Ok(files)
}

/// Why the catalog's entries and the files disagree, if they do.
fn agree(entries: &[FileMeta], listed: &BTreeMap<String, u64>) -> Option<String> {
    let mut seen = BTreeSet::new();
    for meta in entries {
        match listed.get(&meta.path) {
            None => return Some(format!("catalog lists {} which does not exist", meta.path)),
            Some(&size) if size != meta.size_bytes => {
                return Some(format!(
                    "{} is {size} bytes, catalog says {}",
                    meta.path, meta.size_bytes
                ))
            }
            Some(_) => {}
        }
        seen.insert(meta.path.as_str());
    }
    listed
        .keys()
        .find(|p| !seen.contains(p.as_str()))
        .map(|p| format!("{p} is not in the catalog"))
}

/// Reads a file's self-description from its footer.
pub(crate) async fn read_footer(
    store: &Arc<dyn ObjectStore>,
    path: &str,
    size: u64,
) -> Result<FileMeta> {
    let fetch = StoreFetch {
        store: store.clone(),
        path: ObjectPath::from(path),
    };
    let metadata = ParquetMetaDataReader::new()
        .load_and_finish(fetch, size)
        .await?;
    file_meta_of(&metadata, path, size)
}

/// Reads the self-description of a file outside the store (one received from a peer,
/// before it is moved in), expected to belong at object path `path`.
pub(crate) fn read_staged_footer(file: &Path, path: &str) -> Result<FileMeta> {
    let io = |source| Error::Io {
        path: file.to_path_buf(),
        source,
    };
    let opened = std::fs::File::open(file).map_err(io)?;
    let size = opened.metadata().map_err(io)?.len();
    let metadata = ParquetMetaDataReader::new().parse_and_finish(&opened)?;
    file_meta_of(&metadata, path, size)
}

/// Checks and returns the [`FileMeta`] a footer carries for the file at `path`.
fn file_meta_of(metadata: &ParquetMetaData, path: &str, size: u64) -> Result<FileMeta> {
    let value = metadata
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == FILE_META_KEY))
        .and_then(|k| k.value.clone())
        .ok_or_else(|| Error::Corrupt {
            path: path.to_string(),
            reason: format!("no {FILE_META_KEY} metadata"),
        })?;
    let meta: FileMeta = serde_json::from_str(&value).map_err(|e| Error::Corrupt {
        path: path.to_string(),
        reason: format!("bad {FILE_META_KEY}: {e}"),
    })?;
    if meta.version != FILE_META_VERSION {
        return Err(Error::Corrupt {
            path: path.to_string(),
            reason: format!(
                "file metadata version {} (this build reads {FILE_META_VERSION})",
                meta.version
            ),
        });
    }
    if meta.path != path {
        return Err(Error::Corrupt {
            path: path.to_string(),
            reason: format!("file says it is {}", meta.path),
        });
    }
    Ok(FileMeta {
        size_bytes: size,
        ..meta
    })
}

/// Reads byte ranges of one object for the footer reader.
struct StoreFetch {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
}

impl MetadataFetch for StoreFetch {
    fn fetch(
        &mut self,
        range: std::ops::Range<u64>,
    ) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            self.store
                .get_range(&self.path, range)
                .await
                .map_err(|e| ParquetError::External(Box::new(e)))
        }
        .boxed()
    }
}

/// Splits files into those of complete segments and those of a flush a crash
/// interrupted. A segment with fewer files than it was split into is interrupted only
/// if it is its table's newest flushed segment (segments are recorded in log order, so
/// a later one proves this one was recorded) and no compaction output covers its log
/// range (a compaction, or a retention or delete rewrite, consumes files of recorded
/// segments only, and that is the other way a segment loses files).
fn split_incomplete(entries: Vec<FileMeta>) -> (Vec<FileMeta>, Vec<FileMeta>) {
    // A compaction output is a segment of its own (one file), told apart from a flushed
    // segment of the same log range by the index of the entry that made it.
    type SegmentKey = (String, String, u64, u64, Option<u64>);
    let key = |m: &FileMeta| -> SegmentKey {
        (
            m.database.clone(),
            m.measurement.clone(),
            m.log_first.0,
            m.log_last.0,
            m.compaction.map(|c| c.index.0),
        )
    };
    let mut counts: BTreeMap<SegmentKey, u32> = BTreeMap::new();
    let mut newest_flush: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for m in &entries {
        *counts.entry(key(m)).or_default() += 1;
        if m.compaction.is_none() {
            let newest = newest_flush
                .entry((m.database.as_str(), m.measurement.as_str()))
                .or_default();
            *newest = (*newest).max(m.log_last.0);
        }
    }
    let interrupted: BTreeSet<SegmentKey> = entries
        .iter()
        .filter(|m| {
            m.compaction.is_none()
                && counts.get(&key(m)).is_some_and(|&n| n < m.segment_files)
                && newest_flush.get(&(m.database.as_str(), m.measurement.as_str()))
                    == Some(&m.log_last.0)
                && !entries.iter().any(|o| {
                    o.compaction.is_some()
                        && o.database == m.database
                        && o.measurement == m.measurement
                        && o.log_first <= m.log_first
                        && m.log_last <= o.log_last
                })
        })
        .map(key)
        .collect();
    entries
        .into_iter()
        .partition(|m| !interrupted.contains(&key(m)))
}

/// The directory of the catalog inside the storage directory.
pub fn catalog_dir(storage_dir: &Path) -> PathBuf {
    storage_dir.join("catalog")
}

/// Where unreadable Parquet files are moved, inside the storage directory.
pub fn quarantine_dir(storage_dir: &Path) -> PathBuf {
    storage_dir.join("quarantine")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_catalog_is_locked_not_unusable_and_opens_once_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let held = open_sled(dir.path()).unwrap();
        // A rebuild here would wipe a catalog someone is using; the error must say
        // "locked", which callers pass on instead of rebuilding.
        assert!(matches!(
            open_sled_once(dir.path()),
            Err(Error::CatalogLocked { .. })
        ));
        let waiter = {
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || open_sled(&dir).map(|_| ()))
        };
        drop(held);
        waiter.join().unwrap().unwrap();
    }
}
