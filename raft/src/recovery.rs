//! What a node restarts from, read before storage opens: its newest snapshot, and
//! whether the log still holds every entry since the first. Together they decide
//! which Parquet files are live ([`FileSet`]): the snapshot's manifest when there is
//! one (the files written after it come back by replaying the log after it); none at
//! all when there is no snapshot and the log was never purged (replay writes every
//! file again); the files' own footers only when neither is known.

use std::path::Path;

use quiver_storage::{FileSet, MemoryImage};

use crate::durable_file::read_durable;
use crate::error::Error;
use crate::log_store::PURGED_FILE;
use crate::snapshot_file::{latest_snapshot, read_snapshot, snapshot_dir};
use crate::types::{LogId, SnapshotMeta};

/// See the module documentation.
pub struct Recovered {
    /// The newest snapshot on disk, read whole.
    pub(crate) snapshot: Option<(SnapshotMeta, MemoryImage)>,
    /// Whether the log was ever purged (then it no longer starts at the first entry).
    log_purged: bool,
}

impl Recovered {
    /// Reads the newest snapshot in `data_dir` and the purge point in `wal_dir`.
    pub fn load(data_dir: &Path, wal_dir: &Path) -> Result<Recovered, Error> {
        let snapshot = match latest_snapshot(&snapshot_dir(data_dir))? {
            Some(path) => Some(read_snapshot(&path)?),
            None => None,
        };
        let purged: Option<LogId> =
            read_durable(&wal_dir.join(PURGED_FILE)).map_err(Error::PurgePoint)?;
        Ok(Recovered {
            snapshot,
            log_purged: purged.is_some(),
        })
    }

    /// The Parquet files storage must open with.
    pub fn file_set(&self) -> FileSet {
        match (&self.snapshot, self.log_purged) {
            (Some((_, image)), _) => FileSet::Manifest {
                files: image.files.clone(),
                jobs: image.compactions.clone(),
            },
            (None, false) => FileSet::Nothing,
            (None, true) => {
                tracing::error!(
                    "the log was purged but no snapshot is left: opening the Parquet files as \
                     their footers describe them; rows below the purge point that no file \
                     holds are lost on this node (re-seed it from a peer)"
                );
                FileSet::Footers
            }
        }
    }

    /// The snapshot's last log id, if there is one.
    pub fn snapshot_last_log_id(&self) -> Option<LogId> {
        self.snapshot.as_ref().and_then(|(m, _)| m.last_log_id)
    }
}
