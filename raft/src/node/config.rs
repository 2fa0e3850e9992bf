//! The settings of a node's Raft side and the seams a simulation replaces.

use super::*;

/// Settings of the Raft layer (the `[raft]` and `[wal]` sections).
#[derive(Debug, Clone)]
pub struct RaftConfig {
    /// This node's id.
    pub node_id: NodeId,
    /// The group this Raft instance belongs to (its routes, its log and data
    /// directories are the caller's choice).
    pub group: crate::GroupId,
    /// Address other nodes and clients reach this node at.
    pub advertise_addr: String,
    /// Directory for snapshots (the data directory).
    pub data_dir: PathBuf,
    /// The WAL.
    pub wal: WalConfig,
    /// Leader heartbeat interval.
    pub heartbeat_interval_ms: u64,
    /// Election timeout range.
    pub election_timeout_ms_min: u64,
    /// Election timeout range.
    pub election_timeout_ms_max: u64,
    /// Least time between two snapshots (which allow the log to be purged).
    pub snapshot_interval_ms_min: u64,
    /// How often the leader checks whether a buffer must be flushed.
    pub flush_check_interval_ms: u64,
    /// How often the leader looks for files to merge (`compaction.check_interval_ms`).
    pub compaction_check_interval_ms: u64,
    /// The static voter set (`--peers`): id and address of every voter, this node
    /// included. Empty: a single-voter cluster of this node.
    pub peers: Vec<(NodeId, String)>,
    /// Shared secret presented on `/internal/` calls.
    pub secret: String,
    /// How peers are reached (https and the CA that verifies them).
    pub peer_tls: PeerTls,
    /// How long a write waits for a leader to exist before it is refused with 503.
    pub leader_wait_ms: u64,
    /// Longest a write may take from proposal to commit (leader wait included); past
    /// it the client gets 504 (outcome unknown), or 503 if nothing was proposed yet.
    pub write_timeout_ms: u64,
    /// How entries travel to followers.
    pub replication: ReplicationLimits,
    /// Below this many free bytes on the data volume, segments wait in memory instead
    /// of being written (`storage.free_bytes_min`); they are written once space returns.
    pub data_free_bytes_min: u64,
}

impl Default for RaftConfig {
    fn default() -> Self {
        RaftConfig {
            node_id: 1,
            group: crate::FIRST_GROUP,
            advertise_addr: "127.0.0.1:8000".into(),
            data_dir: PathBuf::from("quiver-data"),
            wal: WalConfig::default(),
            heartbeat_interval_ms: 50,
            election_timeout_ms_min: 150,
            election_timeout_ms_max: 300,
            snapshot_interval_ms_min: 10_000,
            flush_check_interval_ms: 200,
            compaction_check_interval_ms: 10_000,
            peers: Vec::new(),
            secret: String::new(),
            peer_tls: PeerTls::default(),
            leader_wait_ms: 3_000,
            write_timeout_ms: 4_000,
            replication: ReplicationLimits::default(),
            data_free_bytes_min: 0,
        }
    }
}

/// What a simulation replaces in a node: the disk under the WAL and the network to its
/// peers. The defaults are the real ones (the OS's file system, HTTP).
#[derive(Clone, Default)]
pub struct Seams {
    /// The WAL's file system (`quiver_wal::testing::SimFs` in the simulation).
    pub wal_fs: Option<Arc<dyn quiver_wal::WalFs>>,
    /// How `/internal/` calls travel.
    pub transport: Option<Arc<dyn crate::PeerTransport>>,
}
