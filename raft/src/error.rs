//! Errors of quiver-raft.

use crate::types::NodeId;

/// Why the Raft layer could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The WAL could not be opened.
    #[error("wal: {0}")]
    Wal(#[from] quiver_wal::Error),
    /// The vote barrier file (beside the WAL) could not be read or written.
    #[error("vote barrier: {0}")]
    VoteBarrier(#[from] crate::durable_file::DurableFileError),
    /// The newest snapshot could not be read at start.
    #[error("snapshot: {0}")]
    Snapshot(#[from] crate::snapshot_file::SnapshotFileError),
    /// The log's purge point could not be read at start.
    #[error("purge point: {0}")]
    PurgePoint(crate::durable_file::DurableFileError),
    /// The log or state machine storage failed.
    #[error("raft storage: {0}")]
    Storage(#[from] openraft::StorageError<NodeId>),
    /// openraft rejected its configuration.
    #[error("raft config: {0}")]
    Config(String),
    /// openraft failed.
    #[error("raft: {0}")]
    Raft(#[from] openraft::error::Fatal<NodeId>),
    /// A single node's log directory holds no log while its data directory has one
    /// behind it (see `node::refuse_a_lost_log_alone`).
    #[error(
        "wal.dir {wal_dir} holds no log, but storage.dir {data_dir} was used with one{}: \
         the WAL volume was lost or is not mounted. If it is not mounted, mount it and start \
         again. If it is lost, run `quiver restore` with the same settings: it adopts the \
         Parquet files and starts the log after them (rows never flushed are lost). Nothing \
         was changed",
        snapshot.map(|s| format!(" (its snapshot reaches log index {s})")).unwrap_or_default()
    )]
    LogLost {
        /// The WAL directory.
        wal_dir: String,
        /// The data directory.
        data_dir: String,
        /// The newest snapshot's index, if there is one.
        snapshot: Option<u64>,
    },
    /// The Parquet files could not be read or claimed (`quiver restore`).
    #[error("{0}")]
    Files(#[from] quiver_storage::Error),
}

/// Why a proposal was not committed. Nothing of it was appended to the log, except
/// for [`WriteError::Unknown`], whose outcome nobody can know yet.
#[derive(Debug, Clone, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum WriteError {
    /// This node does not lead; the leader, if known, is named.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The current leader, if known.
        leader: Option<NodeId>,
    },
    /// The cluster cannot commit right now (no quorum, shutting down, storage failed).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The entry may have been appended (the leader's answer was lost, the proposal
    /// passed its deadline, or Raft stopped after accepting it): it may or may not be
    /// committed later. Never retried automatically; clients get 504.
    #[error("outcome unknown: {0}")]
    Unknown(String),
}
