//! The start's sweep: bringing the disk and the catalog to the files storage opened
//! with, after the node already serves.
//!
//! A node opens from its newest snapshot's manifest without reading the disk (see
//! [`FileSet::Manifest`](crate::FileSet)): walking a million files took 10 s with a
//! warm page cache and minutes with a cold one, all of it before `/ready`. What that
//! walk was for is done here instead, once, in the background:
//!
//! * files an earlier life left that the manifest does not list are deleted, but only
//!   when the node can prove them garbage: their name's log range ends at or below the
//!   highest index its snapshot and log held at open (`covered_through`), so whatever
//!   they held is in the snapshot, comes back by replay, or was removed by an entry the
//!   node holds. Any other file is *unaccounted*: kept, logged, counted in
//!   [`UnaccountedFiles`] (`/api/v1/storage`, `quiver_storage_unaccounted_files`). An
//!   empty or lost local state proves nothing: a node whose disk was lost and whose files
//!   are in a bucket must not delete them (`quiver restore` adopts them), nor a node whose
//!   WAL volume was lost the files written after its snapshot;
//! * files the manifest lists that the disk lacks, or holds with another size, are
//!   taken out of their tables and reported ([`SweepReport::lacking`]) for the caller
//!   to fetch from a peer (wrong-sized ones are quarantined first);
//! * sled is made to hold exactly the live files.
//!
//! It runs while replay, flushes, compactions and snapshot installs write and delete
//! files, so it decides only from what cannot change under it: a file is deleted only
//! if it was not live at open and this process has not written it since (the file
//! store records every path written until the sweep ends, and deletes under the same
//! lock). A file live at open is never deleted here, whatever happened to it since:
//! compactions and retention delete their own inputs when no snapshot needs them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Instant;

use super::{Storage, TableKey};
use crate::catalog::quarantine_dir;
use crate::error::{Error, Result};
use crate::ids::LogIndex;
use crate::meta::FileMeta;
use crate::paths::log_end_of;

/// What the sweep found and did; logged, and read by tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Whether a sweep ran (one is due only after an open from a manifest).
    pub ran: bool,
    /// Parquet files on disk when it looked.
    pub listed: usize,
    /// Temporary files of interrupted writes that were removed.
    pub temp_files_removed: Vec<String>,
    /// Files not live at open and not written since, proven garbage, deleted.
    pub unlisted_files_deleted: Vec<String>,
    /// Files not live at open that the node cannot prove garbage: kept (see
    /// [`UnaccountedFiles`]).
    pub unaccounted: Vec<String>,
    /// Files live since open that the disk lacks or holds with another size (those
    /// quarantined), taken out of their tables: the caller fetches them from a peer.
    pub lacking: Vec<FileMeta>,
    /// Catalog entries removed (files no longer live) and added (live files sled
    /// did not hold).
    pub catalog_removed: usize,
    /// See `catalog_removed`.
    pub catalog_added: usize,
}

/// Parquet files under this node's data prefix that were not live at open and that it
/// cannot prove are garbage (module documentation): the files of an earlier life whose
/// local state was lost, or written after the snapshot of a node whose log was lost.
/// They are kept, never read by queries, and reported until an operator adopts them
/// (`quiver restore`) or a later start proves them garbage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnaccountedFiles {
    /// How many.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The highest log index their names hold (`None`: no name Quiver writes).
    pub log_end_max: Option<u64>,
    /// A few of their paths, for the operator.
    pub examples: Vec<String>,
}

/// Paths of unaccounted files named in logs and `/api/v1/storage`.
const UNACCOUNTED_EXAMPLES_MAX: usize = 10;

/// The paths live at open, as hashes: enough to never delete one of them (a collision
/// can only spare a file that should have gone), at 8 bytes a file.
#[derive(Debug, Default)]
pub(crate) struct LiveAtOpen(HashSet<u64>);

impl LiveAtOpen {
    pub(crate) fn of<'a>(files: impl IntoIterator<Item = &'a FileMeta>) -> LiveAtOpen {
        LiveAtOpen(files.into_iter().map(|f| path_hash(&f.path)).collect())
    }

    fn contains(&self, path: &str) -> bool {
        self.0.contains(&path_hash(path))
    }
}

fn path_hash(path: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    path.hash(&mut hasher);
    hasher.finish()
}

impl Storage {
    /// Whether the start's sweep has yet to run.
    pub fn sweep_due(&self) -> bool {
        self.live_at_open.lock().is_some()
    }

    /// Runs the start's sweep (see the module documentation), once; later calls do
    /// nothing. `covered_through`: the highest log index the node's snapshot and log
    /// held at open; a file not live at open is deleted only if its name ends at or
    /// below it. On an error the sweep is over all the same (files not deleted stay
    /// until the next start's sweep; nothing live is touched).
    pub async fn sweep(&self, covered_through: LogIndex) -> Result<SweepReport> {
        let Some(live_at_open) = self.live_at_open.lock().take() else {
            return Ok(SweepReport::default());
        };
        let result = self.sweep_with(&live_at_open, covered_through).await;
        self.files.stop_recording_writes().await;
        result
    }

    /// Files kept by the last sweep because nothing proved them garbage (see
    /// [`UnaccountedFiles`]).
    pub fn unaccounted_files(&self) -> UnaccountedFiles {
        self.unaccounted.lock().clone()
    }

    async fn sweep_with(
        &self,
        live_at_open: &LiveAtOpen,
        covered_through: LogIndex,
    ) -> Result<SweepReport> {
        let started = Instant::now();
        let mut report = SweepReport {
            ran: true,
            ..SweepReport::default()
        };
        let (listed, temps_removed) = self.files.list().await?;
        let listed_ms = started.elapsed().as_millis() as u64;
        report.listed = listed.len();
        report.temp_files_removed = temps_removed;
        let mut unaccounted = UnaccountedFiles::default();
        for (path, size) in listed.iter().filter(|(p, _)| !live_at_open.contains(p)) {
            let end = log_end_of(path);
            if end.is_some_and(|end| end <= covered_through) {
                if self.files.delete_unless_written(path).await? {
                    report.unlisted_files_deleted.push(path.clone());
                }
            } else if !self.files.written_since_open(path).await {
                unaccounted.files += 1;
                unaccounted.bytes += size;
                unaccounted.log_end_max = unaccounted.log_end_max.max(end.map(|e| e.0));
                if unaccounted.examples.len() < UNACCOUNTED_EXAMPLES_MAX {
                    unaccounted.examples.push(path.clone());
                }
                report.unaccounted.push(path.clone());
            }
        }
        self.report_unaccounted(unaccounted, covered_through);
        report.lacking = self.take_out_lacking(&listed).await?;
        drop(listed);
        let compared_ms = started.elapsed().as_millis() as u64;
        self.sync_catalog(&mut report).await?;
        tracing::info!(
            listed = report.listed,
            deleted = report.unlisted_files_deleted.len(),
            unaccounted = report.unaccounted.len(),
            lacking = report.lacking.len(),
            catalog_removed = report.catalog_removed,
            catalog_added = report.catalog_added,
            listed_ms,
            compared_ms,
            ms = started.elapsed().as_millis() as u64,
            "swept the Parquet files against the ones opened with"
        );
        Ok(report)
    }

    /// Records, logs and publishes what the sweep kept without proof.
    fn report_unaccounted(&self, found: UnaccountedFiles, covered_through: LogIndex) {
        metrics::gauge!("quiver_storage_unaccounted_files").set(found.files as f64);
        metrics::gauge!("quiver_storage_unaccounted_bytes").set(found.bytes as f64);
        if found.files > 0 {
            tracing::error!(
                files = found.files,
                bytes = found.bytes,
                log_end_max = ?found.log_end_max,
                covered_through = covered_through.0,
                location = %self.files.describe(),
                examples = ?found.examples,
                "Parquet files this node cannot account for are kept, not deleted: its \
                 snapshot and log end before them (a lost disk or WAL volume, or files \
                 of another node). Their rows are not queryable until they are adopted: \
                 stop the node and run `quiver restore` (docs/operations.md)"
            );
        }
        *self.unaccounted.lock() = found;
    }

    /// Live files the listing lacks or holds with another size, and not written since
    /// open (those were written after the listing, or are being rewritten): out of
    /// their tables, and quarantined if the disk holds other bytes under the name. A
    /// live file cannot have been deleted before the listing without leaving its table
    /// first, so one still in its table and not listed is lost.
    async fn take_out_lacking(&self, listed: &BTreeMap<String, u64>) -> Result<Vec<FileMeta>> {
        let mut suspects = Vec::new();
        for table in self.tables.read().values() {
            let state = table.state.read();
            suspects.extend(
                state
                    .files
                    .iter()
                    .filter(|f| listed.get(&f.path) != Some(&f.size_bytes))
                    .cloned(),
            );
        }
        let mut lacking = Vec::new();
        for meta in suspects {
            if self.files.written_since_open(&meta.path).await {
                continue;
            }
            if let Some(size) = listed.get(&meta.path) {
                let reason = format!(
                    "{size} bytes on disk, the file's metadata says {}",
                    meta.size_bytes
                );
                self.files
                    .quarantine(&quarantine_dir(&self.config.dir), &meta.path, &reason)
                    .await?;
            }
            let key = TableKey::new(meta.database.as_str(), meta.measurement.as_str());
            let table = self.tables.read().get(&key).cloned();
            if let Some(table) = table {
                let mut state = table.state.write();
                let taken = state.files.take_where(|f| f.path == meta.path);
                if !taken.is_empty() {
                    state.recompute_flushed_through();
                    lacking.push(meta);
                }
            }
        }
        if !lacking.is_empty() {
            tracing::warn!(
                files = lacking.len(),
                "Parquet files this node opened with are missing from its disk"
            );
        }
        Ok(lacking)
    }

    /// Makes sled hold exactly the live files, comparing path hashes (16 bytes a file,
    /// where copying the files' metadata took hundreds of MB at a million files).
    /// Entries of files written since open are kept whatever the tables say (the file
    /// may be on its way into one); the removal is decided and applied holding the lock
    /// writers record under, so no entry of a file written meanwhile is lost. A live
    /// file sled lacks is added only if it is still in its table just before; one a
    /// compaction removes in that instant leaves an entry the next sweep removes.
    async fn sync_catalog(&self, report: &mut SweepReport) -> Result<()> {
        // Live path hash -> whether sled holds it.
        let mut live: HashMap<u64, bool> = HashMap::new();
        for table in self.tables.read().values() {
            live.extend(
                table
                    .state
                    .read()
                    .files
                    .iter()
                    .map(|f| (path_hash(&f.path), false)),
            );
        }
        let catalog = self.catalog.clone();
        let (live, stale) = tokio::task::spawn_blocking(move || -> Result<_> {
            let mut stale = Vec::new();
            catalog.for_each_path(|path| match live.get_mut(&path_hash(path)) {
                Some(held) => *held = true,
                None => stale.push(path.to_string()),
            })?;
            Ok((live, stale))
        })
        .await
        .map_err(|e| Error::Catalog(format!("the catalog sweep failed: {e}")))??;
        let mut missing = Vec::new();
        for table in self.tables.read().values() {
            missing.extend(
                table
                    .state
                    .read()
                    .files
                    .iter()
                    .filter(|f| live.get(&path_hash(&f.path)) == Some(&false))
                    .cloned(),
            );
        }
        drop(live);
        let catalog = &self.catalog;
        self.files
            .with_writes_held(|written| {
                let stale: Vec<String> =
                    stale.into_iter().filter(|p| !written.contains(p)).collect();
                let missing: Vec<FileMeta> =
                    missing.into_iter().filter(|f| self.has_file(f)).collect();
                if let Some(first) = missing.first() {
                    // sled lost entries (or was started empty): say which.
                    tracing::warn!(
                        files = missing.len(),
                        "rebuilding the catalog: {} is not in the catalog",
                        first.path
                    );
                }
                catalog.apply(&stale, &missing)?;
                report.catalog_removed = stale.len();
                report.catalog_added = missing.len();
                Ok(())
            })
            .await
    }
}
