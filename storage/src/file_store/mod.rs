//! Where a node's Parquet files live: its own data directory (the default), or an
//! S3-compatible bucket (`storage.object_store = "s3://bucket/prefix"`).
//!
//! Everything else stays on local disk whichever is chosen: the WAL, the vote, the
//! snapshots and the sled catalog. A file is immutable once written under its name
//! (a name is a log range, and replaying a range gives the same bytes), which is what
//! lets the bucket be read through caches and lets a failed upload simply be retried.
//!
//! Each node writes under its own prefix (`{prefix}/node-{id}/`), so replicas sharing
//! a bucket never delete each other's files; files reach followers the way they do on
//! local disk, through the leader's `/internal/files/` (see `raft::state_machine`).
//!
//! One type per job: [`FileStore`] (this file) is what storage calls; `bucket` builds the
//! S3 client from settings; `cache` keeps whole files read by queries on local disk;
//! `transfer` moves bytes between local files and the bucket.

mod bucket;
mod cache;
mod local_listing;
mod owner;
mod transfer;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

pub use bucket::{open_at_url, BucketSettings, OWNER_BEAT_MS_DEFAULT};
pub use owner::INSTANCE_FILE;

use crate::durable::{install_file_durably, replace_file_durably};
use crate::error::{Error, Result};
use crate::meta::FileMeta;
use crate::paths::DATA_PREFIX;

/// Where quarantined files go inside the bucket (beside `data/`, under the node's
/// prefix), as `quarantine/` beside the catalog does on local disk.
const BUCKET_QUARANTINE_PREFIX: &str = "quarantine";

/// See the module documentation.
pub struct FileStore {
    place: Place,
    /// What queries and footer reads go through: the local directory, or the bucket
    /// behind the whole-file cache when one is configured.
    reader: Arc<dyn ObjectStore>,
    /// Local directory for files on their way in or out (downloads for a merge,
    /// uploads being built); cleared at open.
    staging: PathBuf,
    /// Paths written since storage opened, recorded while the start's sweep of the
    /// files on disk is pending (see `store::sweep`), so the sweep never deletes a file
    /// this process wrote. `None` once the sweep is done (or when none is due).
    written_since_open: tokio::sync::Mutex<Option<HashSet<String>>>,
}

enum Place {
    Local(Arc<LocalFileSystem>),
    Bucket {
        store: Arc<dyn ObjectStore>,
        url: String,
        claim: Box<BucketClaim>,
    },
}

/// This process's claim on its bucket prefix (see `owner`).
struct BucketClaim {
    settings: BucketSettings,
    /// The claim, once made.
    owner: tokio::sync::OnceCell<owner::Owner>,
    /// Set when another process took the prefix over: nothing is written any more.
    lost_to: parking_lot::Mutex<Option<String>>,
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore")
            .field("location", &self.describe())
            .finish_non_exhaustive()
    }
}

impl FileStore {
    /// Files in `parquet_dir` on local disk.
    pub fn local(parquet_dir: &Path, staging: PathBuf) -> Result<FileStore> {
        let local = Arc::new(LocalFileSystem::new_with_prefix(parquet_dir)?);
        Ok(FileStore {
            reader: local.clone(),
            place: Place::Local(local),
            staging,
            written_since_open: tokio::sync::Mutex::new(None),
        })
    }

    /// Files in the bucket `settings` names, under this node's prefix; whole files read
    /// by queries are kept in `cache_dir` up to `settings.cache_bytes_max` bytes.
    pub fn bucket(
        settings: &BucketSettings,
        cache_dir: &Path,
        staging: PathBuf,
    ) -> Result<FileStore> {
        let (store, url) = bucket::open(settings)?;
        let reader: Arc<dyn ObjectStore> = if settings.cache_bytes_max > 0 {
            Arc::new(cache::WholeFileCache::open(
                store.clone(),
                cache_dir,
                settings.cache_bytes_max,
            )?)
        } else {
            store.clone()
        };
        Ok(FileStore {
            place: Place::Bucket {
                store,
                url,
                claim: Box::new(BucketClaim {
                    settings: settings.clone(),
                    owner: tokio::sync::OnceCell::new(),
                    lost_to: parking_lot::Mutex::new(None),
                }),
            },
            reader,
            staging,
            written_since_open: tokio::sync::Mutex::new(None),
        })
    }

    /// Claims the bucket prefix for the data directory `dir` (see `owner`), before
    /// anything is read, written or deleted there. Nothing to do on local disk, which
    /// the node's directory lock guards.
    pub(crate) async fn claim(&self, dir: &Path) -> Result<()> {
        let Place::Bucket { store, url, claim } = &self.place else {
            return Ok(());
        };
        let settings = &claim.settings;
        let rules = owner::ClaimRules {
            node_id: settings.node_id,
            clustered: settings.clustered,
            beat_ms: settings.owner_beat_ms.max(1),
            adopt: settings.adopt,
        };
        let claimed = owner::claim(&**store, url, dir, rules).await?;
        let instance = claimed.instance().await;
        tracing::info!(location = %url, %instance, "this data directory writes the bucket prefix");
        // A second claim (never made) keeps the first.
        let _ = claim.owner.set(claimed);
        Ok(())
    }

    /// Keeps the claim on the bucket prefix alive, one beat every
    /// `storage.object_store_owner_beat_ms`, until another process takes the prefix over
    /// (then this store refuses every write, and the loop ends). Never ends on local
    /// disk or before a claim.
    pub(crate) async fn keep_claim(&self) {
        let Place::Bucket { store, url, claim } = &self.place else {
            return std::future::pending().await;
        };
        let Some(owner) = claim.owner.get() else {
            return std::future::pending().await;
        };
        let beat = std::time::Duration::from_millis(claim.settings.owner_beat_ms.max(1));
        loop {
            tokio::time::sleep(beat).await;
            match owner.beat(&**store, url).await {
                Ok(()) => {}
                Err(Error::PrefixTakenOver { url, by }) => {
                    tracing::error!(location = %url, %by,
                        "another process took this node's bucket prefix over: no file is written there any more");
                    metrics::gauge!("quiver_storage_prefix_lost").set(1.0);
                    *claim.lost_to.lock() = Some(by);
                    return;
                }
                Err(e) => tracing::warn!(location = %url, error = %e,
                    "cannot renew the bucket prefix's owner marker; trying again at the next beat"),
            }
        }
    }

    /// Refuses writes and deletions once another process took the prefix over.
    fn check_still_ours(&self) -> Result<()> {
        if let Place::Bucket { url, claim, .. } = &self.place {
            if let Some(by) = claim.lost_to.lock().clone() {
                return Err(Error::PrefixTakenOver {
                    url: url.clone(),
                    by,
                });
            }
        }
        Ok(())
    }

    /// Where the files are, for logs and error messages (`s3://bucket/prefix/node-1`, or
    /// the local directory).
    pub fn describe(&self) -> String {
        match &self.place {
            Place::Local(local) => local.to_string(),
            Place::Bucket { url, .. } => url.clone(),
        }
    }

    /// The store queries and footer reads go through.
    pub fn reader(&self) -> Arc<dyn ObjectStore> {
        self.reader.clone()
    }

    /// The store files are written to and deleted from.
    fn writer(&self) -> Arc<dyn ObjectStore> {
        match &self.place {
            Place::Local(local) => local.clone(),
            Place::Bucket { store, .. } => store.clone(),
        }
    }

    /// Every Parquet file under the data prefix, with its size. On local disk, removes
    /// the temporary files of writes a crash interrupted on the way (returned); a bucket
    /// has none (an upload is visible only once complete).
    pub(crate) async fn list(&self) -> Result<(BTreeMap<String, u64>, Vec<String>)> {
        let prefix = ObjectPath::from(DATA_PREFIX);
        match &self.place {
            Place::Local(local) => {
                let data_dir = local.path_to_filesystem(&prefix)?;
                let listing = blocking(move || local_listing::list(&data_dir, DATA_PREFIX)).await?;
                Ok((listing.files, listing.temps_removed))
            }
            Place::Bucket { store, .. } => {
                let objects: Vec<object_store::ObjectMeta> =
                    store.list(Some(&prefix)).try_collect().await?;
                let files = objects
                    .into_iter()
                    .filter(|o| o.location.as_ref().ends_with(".parquet"))
                    .map(|o| (o.location.to_string(), o.size))
                    .collect();
                Ok((files, Vec::new()))
            }
        }
    }

    /// Makes sure that writing the file `expected` describes destroys no other file. A
    /// file already under its name that describes itself the same way is the same file
    /// (names are log ranges and a range gives the same rows: a retry, or replay writing
    /// what an earlier life wrote) and may be written over. Any other file there (one of
    /// an earlier life whose log this node no longer holds, whose rows may exist nowhere
    /// else) is moved to quarantine first, never overwritten.
    pub(crate) async fn make_way(&self, expected: &FileMeta, quarantine_dir: &Path) -> Result<()> {
        let store = self.writer();
        let size = match store.head(&ObjectPath::from(expected.path.as_str())).await {
            Ok(found) => found.size,
            Err(object_store::Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let reason = match crate::catalog::read_footer(&store, &expected.path, size).await {
            Ok(found) if found == *expected => return Ok(()),
            Ok(found) => format!(
                "another file held the name: {} rows over log {}..={} ({size} bytes), \
                 where this node writes {} rows over log {}..={}",
                found.rows,
                found.log_first.0,
                found.log_last.0,
                expected.rows,
                expected.log_first.0,
                expected.log_last.0
            ),
            Err(e) => format!("an unreadable file held the name ({e})"),
        };
        metrics::counter!("quiver_storage_name_collisions_total").increment(1);
        self.quarantine(quarantine_dir, &expected.path, &reason)
            .await
            .map(|_| ())
    }

    /// Writes a whole file under `path`, durably: on local disk through a temporary
    /// file fsynced before its rename; in a bucket as one upload, visible only once
    /// complete.
    pub(crate) async fn write(&self, path: &str, bytes: Bytes) -> Result<()> {
        self.check_still_ours()?;
        self.note_written(path).await;
        match &self.place {
            Place::Local(local) => {
                let target = local.path_to_filesystem(&ObjectPath::from(path))?;
                blocking(move || {
                    replace_file_durably(&target, |w| {
                        std::io::Write::write_all(w, &bytes).map_err(|source| Error::Io {
                            path: target.clone(),
                            source,
                        })
                    })
                })
                .await
            }
            Place::Bucket { store, .. } => {
                transfer::upload_bytes(store, &ObjectPath::from(path), bytes).await
            }
        }
    }

    /// Moves a complete file built in `staged` (local disk) to `path`, durably. The
    /// staged file is gone afterwards when this succeeds.
    pub(crate) async fn install(&self, staged: &Path, path: &str) -> Result<()> {
        self.check_still_ours()?;
        self.note_written(path).await;
        match &self.place {
            Place::Local(local) => {
                let target = local.path_to_filesystem(&ObjectPath::from(path))?;
                let staged = staged.to_path_buf();
                blocking(move || install_file_durably(&staged, &target)).await
            }
            Place::Bucket { store, .. } => {
                transfer::upload_file(store, staged, &ObjectPath::from(path)).await?;
                remove_local(staged)
            }
        }
    }

    /// A local file holding `path`'s bytes, for readers that need one (a merge): the
    /// file itself on local disk; a download into the staging directory from a bucket,
    /// removed when the copy drops.
    pub(crate) async fn local_copy(&self, path: &str, size: u64) -> Result<LocalCopy> {
        match &self.place {
            Place::Local(local) => Ok(LocalCopy {
                path: local.path_to_filesystem(&ObjectPath::from(path))?,
                owned: false,
            }),
            Place::Bucket { store, .. } => {
                let target = self
                    .staging
                    .join(format!("download-{}", crate::paths::staging_name(path)));
                transfer::download(store, &ObjectPath::from(path), &target, size).await?;
                Ok(LocalCopy {
                    path: target,
                    owned: true,
                })
            }
        }
    }

    /// Starts recording the paths written from now on, for a sweep to come.
    pub(crate) async fn record_writes(&self) {
        *self.written_since_open.lock().await = Some(HashSet::new());
    }

    /// Stops recording written paths: the sweep is over.
    pub(crate) async fn stop_recording_writes(&self) {
        *self.written_since_open.lock().await = None;
    }

    /// Records `path` as written, before a byte of it reaches its final name: a sweep
    /// deleting under the same lock either sees it here or deletes the old file first.
    async fn note_written(&self, path: &str) {
        if let Some(written) = self.written_since_open.lock().await.as_mut() {
            written.insert(path.to_string());
        }
    }

    /// Whether `path` was written since recording started.
    pub(crate) async fn written_since_open(&self, path: &str) -> bool {
        self.written_since_open
            .lock()
            .await
            .as_ref()
            .is_some_and(|w| w.contains(path))
    }

    /// Deletes `path` unless it was written since recording started; the check and
    /// the deletion hold the lock writers record under. Returns whether it deleted.
    pub(crate) async fn delete_unless_written(&self, path: &str) -> Result<bool> {
        let written = self.written_since_open.lock().await;
        if written.as_ref().is_some_and(|w| w.contains(path)) {
            return Ok(false);
        }
        self.delete(path).await?;
        drop(written);
        Ok(true)
    }

    /// Runs `f` with the paths written since recording started (none when not
    /// recording), holding the lock writers record under: no write starts meanwhile.
    pub(crate) async fn with_writes_held<T>(&self, f: impl FnOnce(&HashSet<String>) -> T) -> T {
        let written = self.written_since_open.lock().await;
        match written.as_ref() {
            Some(w) => f(w),
            None => f(&HashSet::new()),
        }
    }

    /// Deletes `path`; a file already gone is not an error.
    pub(crate) async fn delete(&self, path: &str) -> Result<()> {
        self.check_still_ours()?;
        match self.writer().delete(&ObjectPath::from(path)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Streams `path`'s bytes (a peer fetching a file for a snapshot). `None` if there
    /// is no such file.
    pub async fn open_stream(
        &self,
        path: &str,
    ) -> Result<Option<futures::stream::BoxStream<'static, object_store::Result<Bytes>>>> {
        match self.writer().get(&ObjectPath::from(path)).await {
            Ok(got) => Ok(Some(got.into_stream())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Moves an unreadable file out of the data prefix, loudly, never over an earlier
    /// copy: to `quarantine_dir` on local disk, to `quarantine/` beside `data/` in a
    /// bucket.
    pub(crate) async fn quarantine(
        &self,
        quarantine_dir: &Path,
        path: &str,
        reason: &str,
    ) -> Result<String> {
        let moved_to = match &self.place {
            Place::Local(local) => {
                let local = local.clone();
                let (dir, path_owned) = (quarantine_dir.to_path_buf(), path.to_string());
                blocking(move || local_quarantine(&local, &dir, &path_owned)).await?
            }
            Place::Bucket { store, url, .. } => {
                self.check_still_ours()?;
                let from = ObjectPath::from(path);
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                let to = ObjectPath::from(format!("{BUCKET_QUARANTINE_PREFIX}/{path}.{stamp}"));
                store.copy(&from, &to).await?;
                store.delete(&from).await?;
                format!("{url}/{to}")
            }
        };
        tracing::error!(path, reason, moved_to = %moved_to,
            "quarantined an unreadable Parquet file; its rows are still in the log or on other replicas");
        Ok(moved_to)
    }
}

/// A local file holding an object's bytes (see [`FileStore::local_copy`]).
pub(crate) struct LocalCopy {
    path: PathBuf,
    /// Downloaded for this use, so removed on drop.
    owned: bool,
}

impl LocalCopy {
    /// Where the bytes are.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LocalCopy {
    fn drop(&mut self) {
        if self.owned {
            if let Err(e) = std::fs::remove_file(&self.path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %self.path.display(), error = %e,
                        "cannot remove a downloaded copy; the next start clears it");
                }
            }
        }
    }
}

fn remove_local(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Catalog(format!("a file task failed: {e}")))?
}

/// Most quarantined copies of one path kept side by side (`x.parquet`, `x.parquet.1`...).
const QUARANTINE_COPIES_MAX: u32 = 100;

/// Moves a local file to the same relative path under `quarantine_dir`. No fsync: if a
/// power loss undoes the move, the next start finds the file unreadable again and
/// moves it again.
fn local_quarantine(local: &LocalFileSystem, quarantine_dir: &Path, path: &str) -> Result<String> {
    let object = ObjectPath::from(path);
    let from = local.path_to_filesystem(&object)?;
    let relative: PathBuf = object.parts().map(|p| p.as_ref().to_string()).collect();
    let mut to = quarantine_dir.join(&relative);
    for copy in 1..=QUARANTINE_COPIES_MAX {
        if !to.exists() {
            break;
        }
        if copy == QUARANTINE_COPIES_MAX {
            return Err(Error::Corrupt {
                path: path.to_string(),
                reason: format!(
                    "cannot quarantine: {QUARANTINE_COPIES_MAX} copies already in {}",
                    quarantine_dir.display()
                ),
            });
        }
        to = quarantine_dir.join(format!("{}.{copy}", relative.display()));
    }
    let io = |at: &Path| {
        let at = at.to_path_buf();
        move |source| Error::Io { path: at, source }
    };
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    std::fs::rename(&from, &to).map_err(io(&from))?;
    Ok(to.display().to_string())
}
