//! One Raft node: the wiring that builds config → WAL → log store → storage → state
//! machine → Raft, plus the node's two background duties — writing frozen segments as
//! Parquet, and (on the leader) deciding when buffers are flushed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, ServerState, SnapshotPolicy};
use quiver_storage::Storage;
use quiver_wal::{Wal, WalConfig};
use tokio::task::JoinHandle;

use crate::command::{Command, CommandResult, FlushCommand, WriteCommand};
use crate::error::{Error, WriteError};
use crate::forward::{LeaderAnswer, LeaderRequest, FORWARD_PATH};
use crate::log_store::LogStore;
use crate::network::HttpNetworkFactory;
use crate::peer_client::{PeerClient, PeerError};
use crate::state_machine::StateMachine;
use crate::types::{NodeId, Raft};

/// Longest wait between two attempts to write a frozen segment after a failure.
const PERSIST_RETRY_MS_MAX: u64 = 5_000;

/// Settings of the Raft layer (the `[raft]` and `[wal]` sections).
#[derive(Debug, Clone)]
pub struct RaftConfig {
    /// This node's id.
    pub node_id: NodeId,
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
    /// The static voter set (`--peers`): id and address of every voter, this node
    /// included. Empty: a single-voter cluster of this node.
    pub peers: Vec<(NodeId, String)>,
    /// Shared secret presented on `/internal/` calls.
    pub secret: String,
    /// How long a write waits for a leader to exist before it is refused with 503.
    pub leader_wait_ms: u64,
}

impl Default for RaftConfig {
    fn default() -> Self {
        RaftConfig {
            node_id: 1,
            advertise_addr: "127.0.0.1:8000".into(),
            data_dir: PathBuf::from("quiver-data"),
            wal: WalConfig::default(),
            heartbeat_interval_ms: 50,
            election_timeout_ms_min: 150,
            election_timeout_ms_max: 300,
            snapshot_interval_ms_min: 10_000,
            flush_check_interval_ms: 200,
            peers: Vec::new(),
            secret: String::new(),
            leader_wait_ms: 3_000,
        }
    }
}

/// A running node's Raft side. Cheap to clone.
#[derive(Clone)]
pub struct RaftNode {
    /// The openraft handle.
    pub raft: Raft,
    /// The node's storage.
    pub storage: Arc<Storage>,
    /// The log store (WAL stats).
    pub log: LogStore,
    /// Calls to peers (forwarding, file transfer).
    pub peers: PeerClient,
    config: Arc<RaftConfig>,
}

impl RaftNode {
    /// Opens everything and starts Raft. A node whose log and vote are empty
    /// initialises itself as a one-voter cluster; otherwise it resumes.
    pub async fn start(config: RaftConfig, storage: Arc<Storage>) -> Result<RaftNode, Error> {
        let wal_dir = config.wal.dir.clone();
        let wal = Wal::open(config.wal.clone()).map_err(|e| Error::Wal(e.to_string()))?;
        let log = LogStore::open(wal, &wal_dir).await?;
        let peers = PeerClient::new(&config.secret);
        let sm = StateMachine::open(
            storage.clone(),
            &config.data_dir,
            config.node_id,
            peers.clone(),
        )
        .await?;
        let raft_config = openraft::Config {
            cluster_name: "quiver".into(),
            heartbeat_interval: config.heartbeat_interval_ms,
            election_timeout_min: config.election_timeout_ms_min,
            election_timeout_max: config.election_timeout_ms_max,
            // Snapshots are taken when flushed segments make them cheap (see below).
            snapshot_policy: SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: 0,
            purge_batch_size: 1,
            // A follower that needs the log is sent entries in batches of this size.
            max_payload_entries: 64,
            ..Default::default()
        }
        .validate()
        .map_err(|e| Error::Config(e.to_string()))?;
        let raft = Raft::new(
            config.node_id,
            Arc::new(raft_config),
            HttpNetworkFactory::new(config.node_id, peers.clone()),
            log.clone(),
            sm,
        )
        .await
        .map_err(|e| Error::Raft(e.to_string()))?;
        let joining =
            !config.peers.is_empty() && !config.peers.iter().any(|(id, _)| *id == config.node_id);
        if joining {
            tracing::info!(
                node_id = config.node_id,
                "not in cluster.peers: waiting to be added (quiver cluster add-learner)"
            );
        } else if !raft
            .is_initialized()
            .await
            .map_err(|e| Error::Raft(e.to_string()))?
        {
            let mut members = BTreeMap::new();
            if config.peers.is_empty() {
                members.insert(
                    config.node_id,
                    BasicNode::new(config.advertise_addr.clone()),
                );
                tracing::info!(
                    node_id = config.node_id,
                    "initialising a new single-voter cluster"
                );
            } else {
                for (id, addr) in &config.peers {
                    members.insert(*id, BasicNode::new(addr.clone()));
                }
                tracing::info!(node_id = config.node_id, voters = ?members.keys().collect::<Vec<_>>(),
                    "initialising the static voter set from cluster.peers");
            }
            // Every node of a static set calls this with the same members: each writes the
            // same first membership entry, so they form one cluster whichever starts first.
            if let Err(e) = raft.initialize(members).await {
                tracing::warn!(error = %e, "initialise skipped");
            }
        }
        Ok(RaftNode {
            raft,
            storage,
            log,
            peers,
            config: Arc::new(config),
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.config.node_id
    }

    /// Whether this node currently leads.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// Whether a leader is known and this node has applied everything that was
    /// committed before it started (the `/ready` condition).
    pub fn is_ready(&self) -> bool {
        let m = self.raft.metrics().borrow().clone();
        let replayed = match self.log.committed_at_open() {
            Some(target) => m.last_applied.is_some_and(|l| l.index >= target),
            None => true,
        };
        m.current_leader.is_some() && replayed
    }

    /// Proposes rows and waits until they are committed and applied, on whichever node
    /// leads (forwarded when it is not this one).
    pub async fn write(&self, command: WriteCommand) -> Result<CommandResult, WriteError> {
        match self.on_leader(LeaderRequest::Write(command)).await? {
            LeaderAnswer::Written(result) => Ok(result),
            other => Err(WriteError::Unavailable(format!(
                "unexpected answer {other:?}"
            ))),
        }
    }

    /// Waits until this node has applied everything committed when the call began, as
    /// the leader confirms it: a read after this sees every write acknowledged before.
    pub async fn read_barrier(&self) -> Result<(), WriteError> {
        let index = match self.on_leader(LeaderRequest::ReadIndex).await? {
            LeaderAnswer::ReadIndex(index) => index,
            other => {
                return Err(WriteError::Unavailable(format!(
                    "unexpected answer {other:?}"
                )))
            }
        };
        self.raft
            .wait(Some(Duration::from_millis(self.config.leader_wait_ms * 4)))
            .applied_index_at_least(index, "read index applied")
            .await
            .map(|_| ())
            .map_err(|e| WriteError::Unavailable(format!("read index not applied: {e}")))
    }

    /// Adds a learner; it starts receiving the log (or a snapshot) at once.
    pub async fn add_learner(&self, node_id: NodeId, addr: String) -> Result<(), WriteError> {
        self.on_leader(LeaderRequest::AddLearner { node_id, addr })
            .await
            .map(|_| ())
    }

    /// Promotes learners to voters and removes members.
    pub async fn change_voters(
        &self,
        add: BTreeSet<NodeId>,
        remove: BTreeSet<NodeId>,
    ) -> Result<(), WriteError> {
        self.on_leader(LeaderRequest::ChangeVoters { add, remove })
            .await
            .map(|_| ())
    }

    /// The address of a member, from the current membership.
    pub fn member_addr(&self, id: NodeId) -> Option<String> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.addr.clone())
    }

    /// Runs `request` on the leader: here when this node leads, else forwarded. While
    /// no leader is known, or the one asked says it no longer leads (so nothing was
    /// done), waits and tries again until `leader_wait_ms` has passed.
    async fn on_leader(&self, request: LeaderRequest) -> Result<LeaderAnswer, WriteError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.leader_wait_ms);
        loop {
            let leader = self.raft.metrics().borrow().current_leader;
            let result = match leader {
                Some(id) if id == self.config.node_id => self.serve_leader(request.clone()).await,
                Some(id) => match self.member_addr(id) {
                    Some(addr) => self.forward(&addr, &request).await,
                    None => Err(WriteError::NotLeader { leader: None }),
                },
                None => Err(WriteError::NotLeader { leader: None }),
            };
            match result {
                Err(WriteError::NotLeader { leader }) if Instant::now() < deadline => {
                    metrics::counter!("quiver_leader_retries_total").increment(1);
                    let wait = deadline.saturating_duration_since(Instant::now());
                    // Wake on the next metrics change (a new leader), or after a beat.
                    let _ = self
                        .raft
                        .wait(Some(wait.min(Duration::from_millis(50))))
                        .metrics(
                            |m| m.current_leader.is_some() && m.current_leader != leader,
                            "a leader",
                        )
                        .await;
                }
                other => return other,
            }
        }
    }

    async fn forward(
        &self,
        addr: &str,
        request: &LeaderRequest,
    ) -> Result<LeaderAnswer, WriteError> {
        let timeout = Duration::from_millis(self.config.leader_wait_ms.max(1_000) * 10);
        let answer: Result<Result<LeaderAnswer, WriteError>, PeerError> =
            self.peers.call(addr, FORWARD_PATH, request, timeout).await;
        metrics::counter!("quiver_forwarded_total").increment(1);
        match answer {
            Ok(result) => result,
            // Never reached the leader: as good as "not the leader", so it is retried.
            Err(PeerError::Refused { .. }) => Err(WriteError::NotLeader { leader: None }),
            Err(e @ PeerError::Protocol { .. }) => Err(WriteError::Unavailable(e.to_string())),
            Err(e) => Err(WriteError::Unknown(e.to_string())),
        }
    }

    /// Serves a request as the leader (the `/internal/forward` handler calls this). A
    /// node that does not lead answers `NotLeader` and does nothing.
    pub async fn serve_leader(&self, request: LeaderRequest) -> Result<LeaderAnswer, WriteError> {
        match request {
            LeaderRequest::Write(command) => self
                .propose(Command::Write(command))
                .await
                .map(LeaderAnswer::Written),
            LeaderRequest::ReadIndex => match self.raft.ensure_linearizable().await {
                Ok(read) => Ok(LeaderAnswer::ReadIndex(read.map(|l| l.index))),
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                    Err(WriteError::NotLeader {
                        leader: f.leader_id,
                    })
                }
                Err(e) => Err(WriteError::Unavailable(e.to_string())),
            },
            LeaderRequest::AddLearner { node_id, addr } => self
                .raft
                .add_learner(node_id, BasicNode::new(addr), true)
                .await
                .map(|_| LeaderAnswer::MembershipChanged)
                .map_err(client_write_error),
            LeaderRequest::ChangeVoters { add, remove } => {
                if !add.is_empty() {
                    self.raft
                        .change_membership(ChangeMembers::AddVoterIds(add), false)
                        .await
                        .map_err(client_write_error)?;
                }
                if !remove.is_empty() {
                    self.raft
                        .change_membership(ChangeMembers::RemoveVoters(remove), false)
                        .await
                        .map_err(client_write_error)?;
                }
                Ok(LeaderAnswer::MembershipChanged)
            }
        }
    }

    async fn propose(&self, command: Command) -> Result<CommandResult, WriteError> {
        self.raft
            .client_write(command)
            .await
            .map(|response| response.data)
            .map_err(client_write_error)
    }

    /// Starts the background duties; they end when Raft shuts down.
    pub fn spawn_background(&self) -> Vec<JoinHandle<()>> {
        vec![
            tokio::spawn(self.clone().persist_loop()),
            tokio::spawn(self.clone().flush_policy_loop()),
        ]
    }

    /// Writes frozen segments as Parquet, retrying failures with backoff (the segment
    /// stays in memory meanwhile), and takes a snapshot once the flushed data makes one
    /// cheap, so the log below it can be purged.
    async fn persist_loop(self) {
        let mut retry_ms = 100;
        let mut last_snapshot = Instant::now();
        let mut persisted_since_snapshot = false;
        let snapshot_gap = Duration::from_millis(self.config.snapshot_interval_ms_min);
        loop {
            match self.storage.persist_next().await {
                Ok(true) => {
                    retry_ms = 100;
                    persisted_since_snapshot = true;
                    continue;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(error = %e, retry_ms, "writing a segment failed; it stays in memory and is retried");
                    metrics::counter!("quiver_flush_failures_total").increment(1);
                    tokio::time::sleep(Duration::from_millis(retry_ms)).await;
                    retry_ms = (retry_ms * 2).min(PERSIST_RETRY_MS_MAX);
                    continue;
                }
            }
            if persisted_since_snapshot && last_snapshot.elapsed() >= snapshot_gap {
                if self.raft.trigger().snapshot().await.is_err() {
                    return;
                }
                last_snapshot = Instant::now();
                persisted_since_snapshot = false;
            }
            let wait = if persisted_since_snapshot {
                snapshot_gap.saturating_sub(last_snapshot.elapsed())
            } else {
                Duration::from_secs(3600)
            };
            tokio::select! {
                _ = self.storage.frozen_ready() => {}
                _ = tokio::time::sleep(wait.max(Duration::from_millis(10))) => {}
            }
        }
    }

    /// On the leader, proposes a flush entry whenever a buffer passes a threshold.
    async fn flush_policy_loop(self) {
        let interval = Duration::from_millis(self.config.flush_check_interval_ms);
        loop {
            tokio::time::sleep(interval).await;
            if self.raft.metrics().borrow().running_state.is_err() {
                return;
            }
            if !self.is_leader() {
                continue;
            }
            let tables = self.storage.flush_candidates(Instant::now());
            if tables.is_empty() {
                continue;
            }
            tracing::debug!(tables = tables.len(), "proposing a flush");
            if let Err(e) = self.propose(Command::Flush(FlushCommand { tables })).await {
                tracing::warn!(error = %e, "flush proposal failed");
            }
        }
    }

    /// Flushes every live buffer and waits until all segments are written (used by a
    /// clean shutdown and by tests).
    pub async fn flush_all(&self) -> Result<(), WriteError> {
        let tables = self.storage.tables_with_live_rows();
        if !tables.is_empty() {
            self.propose(Command::Flush(FlushCommand { tables }))
                .await?;
        }
        Ok(())
    }

    /// Stops Raft.
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft did not shut down cleanly");
        }
    }
}

fn client_write_error(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> WriteError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => WriteError::NotLeader {
            leader: f.leader_id,
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            WriteError::Unavailable(e.to_string())
        }
        RaftError::Fatal(e) => WriteError::Unavailable(format!("raft stopped: {e}")),
    }
}
