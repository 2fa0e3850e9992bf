//! Errors of quiver-raft.

use crate::types::NodeId;

/// Why the Raft layer could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The WAL could not be opened.
    #[error("wal: {0}")]
    Wal(String),
    /// The log or state machine storage failed.
    #[error("raft storage: {0}")]
    Storage(#[from] openraft::StorageError<NodeId>),
    /// openraft rejected its configuration.
    #[error("raft config: {0}")]
    Config(String),
    /// openraft failed.
    #[error("raft: {0}")]
    Raft(String),
}

/// Why a proposal was not committed. Nothing of it was applied, except for
/// [`WriteError::Unknown`].
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
    /// The request reached the leader but its answer was lost (connection broken or
    /// timed out): it may or may not have been applied. Never retried automatically.
    #[error("outcome unknown: {0}")]
    Unknown(String),
}
