//! Backups (`quiver backup` / `quiver restore --from`): the two places a backup meets a
//! group's Raft state.
//!
//! * Taking one: [`snapshot_for_backup`] asks a running group for a snapshot that holds
//!   every entry committed when the call began (a read barrier, then a snapshot at or
//!   past the applied index), and opens it. The snapshot is the same file a follower
//!   catching up receives: the Parquet manifest plus the rows not yet in Parquet, so a
//!   backup is consistent at one log index without stopping writes.
//! * Restoring one: [`lay_down_backup`] writes such a snapshot into the empty
//!   directories of a new single node, with that node as the only voter, the log's
//!   purge point at the snapshot and a vote in its term, as `quiver restore` does after
//!   a lost disk ([`crate::restore`]).
//!
//! Copying files, manifests and checksums is the binary's job, not this crate's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use quiver_storage::MemoryImage;

use crate::error::{Error, WriteError};
use crate::log_store::{reset_points, write_vote_at_least};
use crate::node::RaftNode;
use crate::restore::{single_voter, RestoreSettings};
use crate::snapshot_file::{latest_snapshot, read_meta, snapshot_dir, write_snapshot};
use crate::types::{SnapshotMeta, Vote};
use crate::vote_barrier::VoteBarrier;

pub use crate::snapshot_file::{read_snapshot, SnapshotFileError};

/// How often a snapshot is asked for again while waiting: openraft ignores a request
/// made while it builds one, and the one it was building may end below the target.
const SNAPSHOT_RETRIGGER_MS: u64 = 1_000;

/// Why a group could not hand out a snapshot for a backup.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The read barrier failed: this node could not learn what is committed.
    #[error("cannot learn the committed index: {0}")]
    Barrier(#[from] WriteError),
    /// No snapshot reached the target index in time.
    #[error("no snapshot reached log index {target} within {waited_ms} ms (newest at {newest:?})")]
    Timeout {
        /// The applied index the snapshot must reach.
        target: u64,
        /// How long the node waited.
        waited_ms: u64,
        /// The newest snapshot's index.
        newest: Option<u64>,
    },
    /// The snapshot file could not be found or read.
    #[error("{0}")]
    Snapshot(#[from] SnapshotFileError),
    /// The snapshot vanished between being listed and opened, every attempt.
    #[error("{path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

/// A snapshot opened for a backup: its metadata and the open file (a newer snapshot
/// may replace it on disk meanwhile; the open handle still reads this one).
#[derive(Debug)]
pub struct BackupSnapshot {
    /// Its log position and membership.
    pub meta: SnapshotMeta,
    /// The file, at its start.
    pub file: tokio::fs::File,
    /// Its length.
    pub size_bytes: u64,
}

/// Asks `node`'s group (whose data directory is `data_dir`) for a snapshot holding
/// everything committed when the call began, waiting at most `timeout`, and opens it.
/// Files that a compaction removes from now on stay on disk for another grace period
/// (`compaction.input_grace_ms`), long enough to copy the ones the snapshot lists.
pub async fn snapshot_for_backup(
    node: &RaftNode,
    data_dir: &Path,
    timeout: Duration,
) -> Result<BackupSnapshot, BackupError> {
    node.read_barrier().await?;
    let target = node
        .raft
        .metrics()
        .borrow()
        .last_applied
        .map_or(0, |l| l.index);
    let started = Instant::now();
    let snapshot_index = || node.raft.metrics().borrow().snapshot.map(|l| l.index);
    while snapshot_index().is_none_or(|i| i < target) {
        if started.elapsed() >= timeout {
            return Err(BackupError::Timeout {
                target,
                waited_ms: started.elapsed().as_millis() as u64,
                newest: snapshot_index(),
            });
        }
        // An error here means Raft is shutting down; the wait below then times out.
        let _ = node.raft.trigger().snapshot().await;
        let wait = Duration::from_millis(SNAPSHOT_RETRIGGER_MS);
        let _ = node
            .raft
            .wait(Some(wait))
            .metrics(
                |m| m.snapshot.is_some_and(|l| l.index >= target),
                "a snapshot for a backup",
            )
            .await;
    }
    node.storage.snapshot_handed_out();
    open_newest(&snapshot_dir(data_dir)).await
}

/// Opens the newest snapshot in `dir`; a snapshot replaced between listing and opening
/// is looked for again (a few times: snapshots are at least seconds apart).
async fn open_newest(dir: &Path) -> Result<BackupSnapshot, BackupError> {
    const ATTEMPTS_MAX: usize = 5;
    let mut last_error = None;
    for _ in 0..ATTEMPTS_MAX {
        let Some(path) = latest_snapshot(dir)? else {
            return Err(SnapshotFileError::Corrupt {
                path: dir.to_path_buf(),
                reason: "no snapshot in the directory".into(),
            }
            .into());
        };
        match tokio::fs::File::open(&path).await {
            Ok(file) => {
                let size_bytes = file
                    .metadata()
                    .await
                    .map_err(|source| BackupError::Open {
                        path: path.clone(),
                        source,
                    })?
                    .len();
                let meta = read_meta(&path)?;
                return Ok(BackupSnapshot {
                    meta,
                    file,
                    size_bytes,
                });
            }
            Err(source) => last_error = Some(BackupError::Open { path, source }),
        }
    }
    Err(last_error.unwrap_or_else(|| BackupError::Open {
        path: dir.to_path_buf(),
        source: std::io::Error::other("no snapshot could be opened"),
    }))
}

/// Writes a backed-up snapshot of one group into the directories of `settings` (a new
/// single node: it must hold no snapshot and no log), with that node as the only voter.
/// The Parquet files the image lists must already be in place. Returns the snapshot's
/// log index: the log goes on after it.
pub fn lay_down_backup(
    settings: &RestoreSettings,
    meta: &SnapshotMeta,
    image: &MemoryImage,
) -> Result<u64, Error> {
    let Some(last) = meta.last_log_id else {
        return Err(Error::Config(
            "the backed-up snapshot holds no log position".into(),
        ));
    };
    let term = last.leader_id.term.max(1);
    let restored = SnapshotMeta {
        last_log_id: Some(last),
        last_membership: single_voter(settings, last),
        snapshot_id: format!("backup-{}-{}", last.leader_id.term, last.index),
    };
    for dir in [&settings.data_dir, &settings.wal.dir] {
        std::fs::create_dir_all(dir).map_err(|source| {
            crate::durable_file::DurableFileError::Io {
                path: dir.display().to_string(),
                source,
            }
        })?;
    }
    write_snapshot(&snapshot_dir(&settings.data_dir), &restored, image)?;
    reset_points(&settings.wal.dir, Some(last))?;
    write_vote_at_least(&settings.wal.dir, Vote::new(term, settings.node_id))?;
    VoteBarrier::mark_directory(&settings.wal.dir, settings.node_id)?;
    VoteBarrier::mark_directory(&settings.data_dir, settings.node_id)?;
    Ok(last.index)
}
