//! The one openraft type configuration for Quiver.

use crate::command::{Command, CommandResult};

openraft::declare_raft_types!(
    /// Quiver's Raft types: commands carry Arrow IPC batches, snapshots are files
    /// (streamed, never held whole in memory).
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A node's id in the cluster.
pub type NodeId = u64;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id (term + index).
pub type LogId = openraft::LogId<NodeId>;
/// The Raft handle.
pub type Raft = openraft::Raft<TypeConfig>;
/// openraft's storage error, the error type of the storage traits.
pub type StorageError = openraft::StorageError<NodeId>;
/// A vote.
pub type Vote = openraft::Vote<NodeId>;
/// Snapshot metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;
/// A stored membership config.
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
