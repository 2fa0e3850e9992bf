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
    /// The log's purge point: it no longer holds the entries up to it.
    purged: Option<LogId>,
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
        Ok(Recovered { snapshot, purged })
    }

    /// Whether the log was purged past everything the newest snapshot holds (or with no
    /// snapshot at all): the entries between are gone, so neither the snapshot nor the
    /// log can bring the state machine to where it was. openraft purges a follower's log
    /// when it starts to install a leader's snapshot, before that install has succeeded;
    /// a node whose install failed (a file of it could not be fetched) and that
    /// restarted is left so. In a cluster it starts over from its peers
    /// ([`crate::RaftNode::start_with`] erases its log and closes its vote barrier).
    pub fn log_lost(&self) -> bool {
        match (self.purged, self.snapshot_last_log_id()) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(purged), Some(snapshot)) => snapshot.index < purged.index,
        }
    }

    /// The Parquet files storage must open with. `clustered`: the node has peers to
    /// catch up from, so a lost log (see [`Recovered::log_lost`]) starts it over.
    pub fn file_set(&self, clustered: bool) -> FileSet {
        match (&self.snapshot, self.purged.is_some()) {
            (Some((_, image)), _) => FileSet::Manifest {
                files: image.files.clone(),
                jobs: image.compactions.clone(),
            },
            (None, false) => FileSet::Nothing,
            (None, true) if clustered => {
                tracing::error!(
                    "the log was purged but no snapshot is left: this node starts over and \
                     is sent everything again by its peers"
                );
                FileSet::Nothing
            }
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

    /// The log's purge point, if it was ever purged.
    pub fn purged(&self) -> Option<LogId> {
        self.purged
    }

    /// The snapshot's last log id, if there is one.
    pub fn snapshot_last_log_id(&self) -> Option<LogId> {
        self.snapshot.as_ref().and_then(|(m, _)| m.last_log_id)
    }
}
