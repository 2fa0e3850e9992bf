//! quiver-raft: Quiver's replicated log and state machine on openraft 0.9.
//!
//! It owns the openraft type configuration, the log storage on quiver-wal (appends are
//! acknowledged to openraft only after the fsync that covers them), the vote and purge
//! point in small durable files beside the log (never in sled), the state machine that
//! applies commands to quiver-storage, snapshots, and the node-to-node network. It does
//! not parse client payloads: commands arrive already decoded.
#![deny(missing_docs)]
// openraft's trait methods return its `StorageError` (over 200 bytes); the helpers that
// feed them return the same type rather than boxing and unboxing on every call.
#![allow(clippy::result_large_err)]

mod backup;
mod command;
mod durable_file;
mod error;
mod file_transfer;
mod forward;
mod group;
mod joint_membership;
mod log_store;
mod network;
mod node;
mod peer_client;
mod recovery;
mod restore;
mod snapshot_file;
mod state_machine;
mod types;
mod vote_barrier;

pub use backup::{
    lay_down_backup, read_snapshot, snapshot_for_backup, BackupError, BackupSnapshot,
    SnapshotFileError,
};
pub use command::{
    Command, CommandResult, CqWindowCommand, DeleteCommand, FlushCommand, TablePayload,
    WriteCommand,
};
pub use error::{Error, WriteError};
pub use file_transfer::{is_servable_path, FILES_PATH};
pub use forward::{LeaderAnswer, LeaderRequest, FORWARD_PATH};
pub use group::{group_path, GroupId, FIRST_GROUP, GROUP_PATH_PREFIX};
pub use log_store::LogStore;
pub use network::{
    paths as raft_paths, HttpNetworkFactory, HttpPeer, ReplicationLimits, Takers,
    ENTRIES_REFUSED_PREFIX,
};
pub use node::{
    HandoverError, PeerState, RaftConfig, RaftNode, Seams, MEMBERSHIP_TIMEOUT_MS, PEER_STATE_PATH,
};
pub use peer_client::{
    base_url, peer_base_url, secret_matches, PeerClient, PeerError, PeerTls, PeerTransport,
    INTERNAL_CONTENT_TYPE, SECRET_HEADER,
};
pub use recovery::Recovered;
pub use restore::{restore, RestoreReport, RestoreSettings};
pub use state_machine::{SnapshotBuilder, StateMachine};
pub use types::{
    Entry, LogId, NodeId, Raft, SnapshotMeta, StorageError, StoredMembership, TypeConfig, Vote,
};
