//! One Raft node: the wiring that builds config → WAL → log store → storage → state
//! machine → Raft, plus the node's two background duties — writing frozen segments as
//! Parquet, and (on the leader) deciding when buffers are flushed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{CheckIsLeaderError, ClientWriteError, InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest,
};
use openraft::{BasicNode, ChangeMembers, ServerState, SnapshotPolicy};
use quiver_storage::Storage;
use quiver_wal::{Wal, WalConfig};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::command::{Command, CommandResult, FlushCommand, WriteCommand};
use crate::error::{Error, WriteError};
use crate::forward::{LeaderAnswer, LeaderRequest, FORWARD_PATH};
use crate::log_store::LogStore;
use crate::network::{HttpNetworkFactory, ReplicationLimits, Takers};
use crate::peer_client::{PeerClient, PeerError, PeerTls};
use crate::recovery::Recovered;
use crate::state_machine::StateMachine;
use crate::types::{NodeId, Raft, TypeConfig, Vote};
use crate::vote_barrier::{EntriesVerdict, VoteBarrier};

/// How often applied, fully replicated entries leave the log's cache.
const LOG_CACHE_RELEASE_INTERVAL: Duration = Duration::from_millis(200);
/// A leader that has not heard from a quorum for this many maximal election timeouts
/// is treated as cut off: it refuses writes (503) and reports itself unready.
const QUORUM_LOST_ELECTIONS: u64 = 3;
/// Time a forwarded request may take beyond its deadline, for the trip to the leader.
const FORWARD_MARGIN_MS: u64 = 2_000;
/// Least time a follower waits to apply a write it forwarded, even past the deadline.
const APPLY_WAIT_MS_MIN: u64 = 100;
/// Deadline of membership changes (a learner may need a snapshot first).
const MEMBERSHIP_TIMEOUT_MS: u64 = 120_000;
/// Where a peer's [`PeerState`] is read.
pub const PEER_STATE_PATH: &str = "/internal/state";
/// How long a starting node waits for a peer's state.
const BOOTSTRAP_PROBE_TIMEOUT_MS: u64 = 1_000;
/// Pause between two rounds of asking the peers.
const BOOTSTRAP_PROBE_INTERVAL_MS: u64 = 250;
/// A forming node logs that it still waits every this many rounds.
const BOOTSTRAP_LOG_EVERY_ROUNDS: u64 = 40;
/// How often a flush waiting for disk space checks again.
const DISK_RECHECK_MS: u64 = 500;
/// How often the leader asks its followers whether they take entries.
const TAKERS_POLL_MS: u64 = 500;

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

/// Lets Raft start elections only while the vote barrier is open. The barrier stops the
/// node granting votes to others, but a candidate votes for itself: a node that lost
/// entries it had acknowledged, standing with a peer behind it, would win without them
/// (the cluster simulation found a wiped node elected at index 74 after 76 had been
/// committed with its old self in the majority, seed 59).
///
/// Nor while it refuses entries (its disk or buffers, see `RaftNode::note_takes_entries`):
/// a follower that refuses the entries a leader sends never hears a heartbeat (a
/// lagging follower's heartbeats carry entries), and its elections would depose the
/// leader every election timeout.
fn stand_for_election_when_allowed(raft: &Raft, barrier: &VoteBarrier, refusing: &AtomicBool) {
    raft.runtime_config()
        .elect(barrier.refusal().is_none() && !refusing.load(Ordering::Relaxed));
}

/// A node whose log was purged past its newest snapshot (see
/// [`Recovered::log_lost`]) cannot rebuild its state from what it holds: it closes its
/// vote barrier (it may have lost entries it acknowledged), erases its log and purge
/// point down to its snapshot, and is sent the rest by the leader. Each step is
/// idempotent, so a crash part-way starts over again at the next start.
fn start_over(
    config: &RaftConfig,
    fs: &Arc<dyn quiver_wal::WalFs>,
    barrier: &VoteBarrier,
    recovered: &Recovered,
) -> Result<(), Error> {
    let snapshot = recovered.snapshot_last_log_id();
    tracing::error!(
        node_id = config.node_id,
        ?snapshot,
        "this node's log was purged past its newest snapshot (a snapshot install that did \
         not finish): erasing the log; it catches up from the leader and votes again once \
         it has"
    );
    // Where the log ended, recorded before a byte of it goes: the barrier still lets
    // this node vote for candidates at least as up to date as that. A log that cannot
    // be read says nothing, and the barrier then stays wholly closed.
    let log_end = Wal::open_with_fs(config.wal.clone(), fs.clone())
        .map_err(Error::from)
        .and_then(|wal| {
            crate::log_store::last_log_id_on_disk(&wal, recovered.purged()).map_err(Error::from)
        })
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read where the log ended before erasing it");
            None
        });
    barrier.close_erasing(log_end)?;
    let erased = Wal::erase_with_fs(&config.wal.dir, &**fs)?;
    crate::log_store::reset_points(&config.wal.dir, snapshot)?;
    metrics::counter!("quiver_raft_logs_erased_total").increment(1);
    tracing::info!(files = erased, "log erased");
    Ok(())
}

/// A single node whose log directory is new while its data directory is not (it holds
/// a snapshot, or was marked by an earlier start) lost its log, or runs without the
/// volume it lives on: starting would begin a new log at index 1, whose files would
/// take the names (log ranges) of files the old log wrote, and whose indexes would make
/// those files look covered, so a later start's sweep would delete them as garbage. It
/// has no peer to catch up from: the operator decides (mount the volume, or `quiver
/// restore`, which starts the log after the files). A member of a cluster is sent the
/// cluster's own log by its leader, so its files keep their meaning.
fn refuse_a_lost_log_alone(config: &RaftConfig, recovered: &Recovered) -> Result<(), Error> {
    if config.peers.len() > 1 {
        return Ok(());
    }
    let wal_known = VoteBarrier::directory_known(&config.wal.dir, config.node_id)?;
    let data_known = VoteBarrier::directory_known(&config.data_dir, config.node_id)?;
    let snapshot = recovered.snapshot_last_log_id();
    if wal_known || !(data_known || snapshot.is_some()) {
        return Ok(());
    }
    Err(Error::LogLost {
        wal_dir: config.wal.dir.display().to_string(),
        data_dir: config.data_dir.display().to_string(),
        snapshot: snapshot.map(|l| l.index),
    })
}

/// A member whose log lost entries it may have acknowledged must not vote until it has
/// them again (see [`VoteBarrier`]). The static voter set's own path (an empty log in a
/// new directory, below) covers the initial voters; this covers the others:
///
/// * a member added later (`add-learner`, `promote`) that lost its data starts with
///   an empty log in a new directory, and nothing in its settings says it is a voter:
///   its peers do. Closed when a peer lists it among the voters, or when no peer
///   answers (it cannot tell, so it assumes the worst);
/// * a node restored from an old copy of its disks starts on a known directory with a
///   log shorter than what it acknowledged: the leader's replication state says how far
///   it had matched. Closed when the log ends before that (also after a `wal.sync =
///   batch` power loss that lost acknowledged entries).
///
/// Peers are asked at once, each within [`BOOTSTRAP_PROBE_TIMEOUT_MS`]; the node serves
/// no vote before this returns.
async fn close_barrier_if_votes_were_lost(
    config: &RaftConfig,
    peers: &PeerClient,
    raft: &Raft,
    barrier: &VoteBarrier,
    known: bool,
    initialized: bool,
) -> Result<(), Error> {
    let static_voter = config.peers.iter().any(|(id, _)| *id == config.node_id);
    if (!known && static_voter) || barrier.refusal().is_some() {
        // The static set's path, or already closed.
        return Ok(());
    }
    if known && !initialized {
        return Ok(());
    }
    let timeout = Duration::from_millis(BOOTSTRAP_PROBE_TIMEOUT_MS);
    let others: Vec<&(NodeId, String)> = config
        .peers
        .iter()
        .filter(|(id, _)| *id != config.node_id)
        .collect();
    let answers = futures::future::join_all(
        others
            .iter()
            .map(|(_, addr)| peers.get::<PeerState>(addr, PEER_STATE_PATH, timeout)),
    )
    .await;
    let states: Vec<PeerState> = answers.into_iter().filter_map(Result::ok).collect();
    let node_id = config.node_id;
    if !known {
        let voter = states.iter().any(|s| s.voters.contains(&node_id));
        if voter || states.is_empty() {
            tracing::warn!(
                node_id,
                peers_answering = states.len(),
                "this node starts with an empty log in a new directory while it is (or may be) a \
                 voter added after the cluster formed: it votes again once it has caught up"
            );
            barrier.close_lost_vote()?;
        }
        return Ok(());
    }
    let own_last = raft.metrics().borrow().last_log_index.unwrap_or(0);
    let matched = states
        .iter()
        .filter_map(|s| s.matched.as_ref()?.get(&node_id).copied())
        .max();
    if let Some(matched) = matched.filter(|m| *m > own_last) {
        tracing::error!(
            node_id,
            matched,
            own_last,
            "the leader saw this node's log reach an index it no longer holds (restored from \
             an old copy, or a lost tail): it votes again once it has caught up"
        );
        barrier.close_lost_vote()?;
    }
    Ok(())
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

/// Snapshots are at least this many build times apart: building them takes at most
/// about 1/20 of the node's time.
const SNAPSHOT_BUILD_SHARE: u32 = 20;

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
    barrier: Arc<VoteBarrier>,
    bootstrap_pending: Arc<AtomicBool>,
    config: Arc<RaftConfig>,
    /// A handle on the state machine openraft owns, for the start's file sweep.
    state_machine: StateMachine,
    /// The highest log index the snapshot and the log held at start: the start's sweep
    /// deletes no file beyond it (see `Storage::sweep`).
    covered_at_open: u64,
    /// Followers that refuse entries now (their disk or memory), learned by replication.
    takers: Takers,
    /// Whether this node refuses entries now (see [`RaftNode::note_takes_entries`]).
    refusing_entries: Arc<AtomicBool>,
}

/// What a node tells a peer that starts with an empty log (`GET /internal/state`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerState {
    /// The node answering.
    pub node_id: NodeId,
    /// Whether it belongs to an initialised cluster.
    pub initialized: bool,
    /// The last index in its log; past 0 the cluster has more than its first
    /// membership entry, so it is not forming any more.
    pub last_log_index: Option<u64>,
    /// The voters it knows.
    pub voters: Vec<NodeId>,
    /// Its vote: a node that lost its own learns from these which leaders are stale
    /// (see `VoteBarrier`). Absent from a peer too old to report it.
    #[serde(default)]
    pub vote: Option<Vote>,
    /// Why it refuses entries now (a volume under its watermark, full buffers), if it
    /// does: the leader polls this (see `RaftNode::takers_loop`). Filled by the node's
    /// HTTP layer, which watches the volumes.
    #[serde(default)]
    pub entries_refused: Option<String>,
    /// On a leader: how far each follower's log is known to match its own (a node
    /// restored from an old copy learns from this that it lost entries it acknowledged).
    #[serde(default)]
    pub matched: Option<BTreeMap<NodeId, u64>>,
}

impl RaftNode {
    /// Opens everything and starts Raft. A node whose log and vote are empty
    /// initialises itself as a one-voter cluster; otherwise it resumes. Reads the newest
    /// snapshot itself; a node opens storage with it first and calls
    /// [`RaftNode::start_recovered`].
    pub async fn start(config: RaftConfig, storage: Arc<Storage>) -> Result<RaftNode, Error> {
        let recovered = Recovered::load(&config.data_dir, &config.wal.dir)?;
        Self::start_recovered(config, storage, recovered).await
    }

    /// [`RaftNode::start`] from a snapshot already read (storage was opened with its
    /// [`Recovered::file_set`]).
    pub async fn start_recovered(
        config: RaftConfig,
        storage: Arc<Storage>,
        recovered: Recovered,
    ) -> Result<RaftNode, Error> {
        Self::start_with(config, storage, recovered, Seams::default()).await
    }

    /// [`RaftNode::start_recovered`] with the disk under the WAL and the network to the
    /// peers replaced by `seams` (the simulation's).
    pub async fn start_with(
        config: RaftConfig,
        storage: Arc<Storage>,
        recovered: Recovered,
        seams: Seams,
    ) -> Result<RaftNode, Error> {
        let wal_dir = config.wal.dir.clone();
        let wal_fs: Arc<dyn quiver_wal::WalFs> =
            seams.wal_fs.unwrap_or_else(|| Arc::new(quiver_wal::OsFs));
        let barrier = Arc::new(VoteBarrier::load(&wal_dir)?);
        refuse_a_lost_log_alone(&config, &recovered)?;
        if recovered.log_lost() && config.peers.len() > 1 {
            start_over(&config, &wal_fs, &barrier, &recovered)?;
        }
        let wal = Wal::open_with_fs(config.wal.clone(), wal_fs)?;
        let log = LogStore::open(wal, &wal_dir).await?;
        log.set_commit_floor(recovered.snapshot_last_log_id());
        let covered_at_open = recovered
            .snapshot_last_log_id()
            .map(|l| l.index)
            .max(log.last_index_at_open())
            .unwrap_or(0);
        if config.peers.len() > 1 {
            log.forget_own_leadership(config.node_id);
        }
        let peers = match seams.transport {
            Some(transport) => PeerClient::over(transport, &config.secret),
            None => PeerClient::new(&config.secret, &config.peer_tls)?,
        };
        let sm = StateMachine::open_recovered(
            storage.clone(),
            &config.data_dir,
            config.node_id,
            peers.clone(),
            recovered.snapshot,
        )
        .await?;
        let state_machine = sm.clone();
        let takers = Takers::default();
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
            // Off until the vote barrier is known (below): a node that may not vote must
            // not stand either, since a candidate votes for itself.
            enable_elect: false,
            ..Default::default()
        }
        .validate()
        .map_err(|e| Error::Config(e.to_string()))?;
        let raft = Raft::new(
            config.node_id,
            Arc::new(raft_config),
            HttpNetworkFactory::new(
                config.node_id,
                peers.clone(),
                config.replication,
                takers.clone(),
            ),
            log.clone(),
            sm,
        )
        .await?;
        let initialized = raft.is_initialized().await?;
        // Whether this log directory has been this node's before: then an empty log is
        // one that never durably held an entry (so never acknowledged one), not a lost
        // one, and the node may vote at once.
        let known = VoteBarrier::directory_known(&wal_dir, config.node_id)?;
        let joining =
            !config.peers.is_empty() && !config.peers.iter().any(|(id, _)| *id == config.node_id);
        if config.peers.len() > 1 {
            close_barrier_if_votes_were_lost(&config, &peers, &raft, &barrier, known, initialized)
                .await?;
        }
        let mut bootstrap_pending = false;
        if joining {
            tracing::info!(
                node_id = config.node_id,
                "not in cluster.peers: waiting to be added (quiver cluster add-learner)"
            );
        } else if !initialized && config.peers.is_empty() {
            let mut members = BTreeMap::new();
            members.insert(
                config.node_id,
                BasicNode::new(config.advertise_addr.clone()),
            );
            tracing::info!(
                node_id = config.node_id,
                "initialising a new single-voter cluster"
            );
            if let Err(e) = raft.initialize(members).await {
                tracing::warn!(error = %e, "initialise skipped");
            }
        } else if !initialized {
            // An empty log in a static voter set: the cluster is forming, this node lost
            // its data, or it never stored an entry before it stopped. In the first two
            // cases it must not vote until the peers tell which.
            if !known {
                barrier.close_lost_vote()?;
            }
            bootstrap_pending = true;
        }
        VoteBarrier::mark_directory(&wal_dir, config.node_id)?;
        // After the log's mark: a data directory marked and a log directory not is a
        // lost (or unmounted) log, never a first start that stopped half-way.
        VoteBarrier::mark_directory(&config.data_dir, config.node_id)?;
        if let Some(reason) = barrier.refusal() {
            tracing::warn!(node_id = config.node_id, "{reason}");
        }
        stand_for_election_when_allowed(&raft, &barrier, &AtomicBool::new(false));
        Ok(RaftNode {
            raft,
            storage,
            log,
            peers,
            barrier,
            bootstrap_pending: Arc::new(AtomicBool::new(bootstrap_pending)),
            config: Arc::new(config),
            state_machine,
            covered_at_open,
            takers,
            refusing_entries: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Records whether this node takes entries now (the HTTP layer, which watches the
    /// volumes and memory, calls this as it answers a leader); while it does not, it
    /// does not stand for election either.
    pub fn note_takes_entries(&self, takes: bool) {
        if self.refusing_entries.swap(!takes, Ordering::Relaxed) == takes {
            stand_for_election_when_allowed(&self.raft, &self.barrier, &self.refusing_entries);
        }
    }

    /// Whether this node may grant a vote now (see [`VoteBarrier`]).
    pub fn may_vote(&self, request: &VoteRequest<NodeId>) -> Result<(), String> {
        // The barrier learns the log's end after each AppendEntries, from metrics that
        // may lag the append they follow; with no later AppendEntries (the leader gone)
        // it would wait forever for a log it already has.
        self.open_barrier_if_caught_up();
        match self.barrier.refusal_for(request.last_log_id.as_ref()) {
            Some(reason) => {
                metrics::counter!("quiver_votes_refused_total").increment(1);
                Err(reason)
            }
            None => Ok(()),
        }
    }

    /// Whether the vote barrier withholds this node's vote (and its candidacy) now: the
    /// cluster simulation checks that such a node never stands or leads.
    pub fn vote_withheld(&self) -> bool {
        self.barrier.refusal().is_some()
    }

    /// This node's state for a peer deciding how to start.
    pub fn peer_state(&self) -> PeerState {
        let m = self.raft.metrics().borrow().clone();
        let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
        PeerState {
            node_id: self.config.node_id,
            initialized: !voters.is_empty(),
            last_log_index: m.last_log_index,
            voters,
            vote: Some(m.vote),
            entries_refused: None,
            matched: m.replication.as_ref().map(|r| {
                r.iter()
                    .filter_map(|(id, l)| Some((*id, l.as_ref()?.index)))
                    .collect()
            }),
        }
    }

    /// Whether this node takes entries or snapshot chunks from a leader now: not while
    /// it lost its vote and has not heard every peer's (see [`VoteBarrier`]). The
    /// internal routes answer 503 with the reason, as for a refused vote.
    pub fn may_take_entries(&self, leader_vote: &Vote) -> Result<(), String> {
        match self.barrier.entries_verdict(leader_vote) {
            EntriesVerdict::NotYet(reason) => {
                metrics::counter!("quiver_entries_refused_total").increment(1);
                Err(reason)
            }
            EntriesVerdict::Take | EntriesVerdict::Stale(_) => Ok(()),
        }
    }

    /// Takes a snapshot chunk from the leader (the `/internal/raft/snapshot` handler).
    /// A leader older than a vote the peers hold is answered with that vote instead,
    /// when this node lost its own (see [`VoteBarrier`]).
    pub async fn install_snapshot(
        &self,
        request: InstallSnapshotRequest<TypeConfig>,
    ) -> Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        if let EntriesVerdict::Stale(floor) = self.barrier.entries_verdict(&request.vote) {
            tracing::warn!(leader_vote = %request.vote, %floor,
                "refused a snapshot from a stale leader (a peer holds a newer vote)");
            return Ok(InstallSnapshotResponse { vote: floor });
        }
        self.raft.install_snapshot(request).await
    }

    /// Takes an AppendEntries from the leader (the `/internal/raft/append` handler): the
    /// vote barrier learns the leader's commit index and opens once the log reaches it.
    pub async fn append_entries(
        &self,
        request: AppendEntriesRequest<TypeConfig>,
    ) -> Result<AppendEntriesResponse<NodeId>, openraft::error::RaftError<NodeId>> {
        if let EntriesVerdict::Stale(floor) = self.barrier.entries_verdict(&request.vote) {
            tracing::warn!(leader_vote = %request.vote, %floor,
                "refused entries from a stale leader (a peer holds a newer vote)");
            return Ok(AppendEntriesResponse::HigherVote(floor));
        }
        let leader_term = request.vote.leader_id().term;
        let leader_commit = request.leader_commit.map(|l| (l.leader_id.term, l.index));
        if let Err(e) = self
            .barrier
            .observe_leader_commit(leader_term, leader_commit)
        {
            tracing::warn!(error = %e, "cannot record the vote barrier's target");
        }
        let response = self.raft.append_entries(request).await;
        if response.is_ok() {
            self.open_barrier_if_caught_up();
        }
        response
    }

    /// Opens the vote barrier once the log has reached the index a leader named.
    fn open_barrier_if_caught_up(&self) {
        let last = self.raft.metrics().borrow().last_log_index;
        match self.barrier.observe_log(last) {
            Ok(true) => {
                stand_for_election_when_allowed(&self.raft, &self.barrier, &self.refusing_entries);
                tracing::info!(
                    last_log_index = ?last,
                    "caught up with the cluster: this node votes again"
                )
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "cannot open the vote barrier"),
        }
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.config.node_id
    }

    /// Whether this node currently leads.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// Why this node cannot serve writes now, or `None` when it can (the `/ready`
    /// answer): Raft stopped (a storage or log failure), the log is still being
    /// replayed, no leader is known, or this node leads without hearing from a quorum.
    pub fn unready_reason(&self) -> Option<String> {
        let m = self.raft.metrics().borrow().clone();
        if let Err(fatal) = &m.running_state {
            return Some(format!("raft stopped: {fatal}"));
        }
        if let Some(target) = self.log.committed_at_open() {
            let applied = m.last_applied.map(|l| l.index);
            if applied.is_none_or(|a| a < target) {
                return Some(format!(
                    "replaying the log: applied {} of {target}",
                    applied.unwrap_or(0)
                ));
            }
        }
        match m.current_leader {
            None if self.bootstrap_pending.load(Ordering::Relaxed) => {
                Some("forming the cluster: waiting for a majority of cluster.peers".to_string())
            }
            None => Some("no leader known".to_string()),
            Some(leader) if leader == m.id => self.quorum_lost(&m),
            Some(_) => None,
        }
    }

    /// The fatal error that stopped Raft, if it stopped: nothing in this process can
    /// recover from it, so the node exits and its supervisor restarts it. A Raft core
    /// that panicked reports nothing any more; its closed metrics channel tells.
    pub fn fatal(&self) -> Option<String> {
        let metrics = self.raft.metrics();
        if metrics.has_changed().is_err() {
            return Some("the raft core has stopped (it panicked or shut down)".to_string());
        }
        let m = metrics.borrow();
        m.running_state.as_ref().err().map(|f| f.to_string())
    }

    /// On a leader: why a write cannot commit now because too few voters take entries:
    /// this one takes them (the caller checked its own volumes and memory), the
    /// followers named in `takers` do not (their disk or buffers). Proposing anyway would
    /// only time out (an unknown outcome, 504) where a refusal (503) is the truth.
    fn takers_refusal(&self, m: &openraft::RaftMetrics<NodeId, BasicNode>) -> Option<String> {
        let refusing = self.takers.refusing();
        if refusing.is_empty() {
            return None;
        }
        let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
        let refusing: Vec<&(NodeId, String)> = refusing
            .iter()
            .filter(|(id, _)| voters.contains(id) && *id != self.config.node_id)
            .collect();
        let able = voters.len() - refusing.len();
        (able < voters.len() / 2 + 1).then(|| {
            let who: Vec<String> = refusing
                .iter()
                .map(|(id, why)| format!("node {id}: {why}"))
                .collect();
            format!(
                "too few voters can take entries now ({able} of {}): {}",
                voters.len(),
                who.join("; ")
            )
        })
    }

    /// The followers refusing entries now (for `/api/v1/cluster/status`).
    pub fn followers_refusing_entries(&self) -> Vec<(NodeId, String)> {
        self.takers.refusing()
    }

    /// On a leader: why it cannot commit, when no quorum has acknowledged it for longer
    /// than an election would take. openraft 0.9 leaders do not step down by themselves.
    fn quorum_lost(&self, m: &openraft::RaftMetrics<NodeId, BasicNode>) -> Option<String> {
        let voters = m.membership_config.membership().voter_ids().count();
        if voters <= 1 {
            return None;
        }
        let limit_ms = self.config.election_timeout_ms_max * QUORUM_LOST_ELECTIONS;
        match m.millis_since_quorum_ack {
            Some(ms) if ms > limit_ms => Some(format!(
                "leading without a quorum: last acknowledged {ms} ms ago"
            )),
            _ => None,
        }
    }

    /// Proposes rows and waits until they are committed and applied, on whichever node
    /// leads (forwarded when it is not this one), within `write_timeout_ms`. Once the
    /// leader answers, this node also waits until it has applied the entry itself, so a
    /// local read here right after sees the write (read-your-writes through a follower).
    pub async fn write(&self, command: WriteCommand) -> Result<CommandResult, WriteError> {
        self.commit(LeaderRequest::Write(command)).await
    }

    /// Proposes a change of the replicated settings (tokens, lifecycle rules), like
    /// [`RaftNode::write`]: committed on the leader, applied here before it returns.
    pub async fn change_policy(
        &self,
        change: quiver_storage::PolicyChange,
    ) -> Result<CommandResult, WriteError> {
        self.commit(LeaderRequest::Policy(change)).await
    }

    /// Proposes a delete like [`RaftNode::write`]; returns the entry's index too (the
    /// tombstone's, which tells which rows it hides).
    pub async fn delete(
        &self,
        command: crate::command::DeleteCommand,
    ) -> Result<(CommandResult, u64), WriteError> {
        self.commit_indexed(LeaderRequest::Delete(command)).await
    }

    async fn commit(&self, request: LeaderRequest) -> Result<CommandResult, WriteError> {
        self.commit_indexed(request).await.map(|(result, _)| result)
    }

    async fn commit_indexed(
        &self,
        request: LeaderRequest,
    ) -> Result<(CommandResult, u64), WriteError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.write_timeout_ms);
        let (result, index) = match self.on_leader(request, deadline).await? {
            LeaderAnswer::Committed { result, index } => (result, index),
            other => return Err(WriteError::Unknown(format!("unexpected answer {other:?}"))),
        };
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(APPLY_WAIT_MS_MIN));
        if self
            .raft
            .wait(Some(wait))
            .applied_index_at_least(Some(index), "forwarded entry applied here")
            .await
            .is_err()
        {
            // Committed all the same: answering an error would make the client send it
            // twice. The read-your-writes promise is what slipped; count it.
            metrics::counter!("quiver_write_visibility_waits_expired_total").increment(1);
            tracing::warn!(
                index,
                "a committed entry was not yet applied on this node at its deadline"
            );
        }
        Ok((result, index))
    }

    /// Waits until this node has applied everything committed when the call began, as
    /// the leader confirms it: a read after this sees every write acknowledged before.
    pub async fn read_barrier(&self) -> Result<(), WriteError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.write_timeout_ms);
        let index = match self.on_leader(LeaderRequest::ReadIndex, deadline).await? {
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
        self.on_leader(
            LeaderRequest::AddLearner { node_id, addr },
            self.membership_deadline(),
        )
        .await
        .map(|_| ())
    }

    /// Promotes learners to voters and removes members.
    pub async fn change_voters(
        &self,
        add: BTreeSet<NodeId>,
        remove: BTreeSet<NodeId>,
    ) -> Result<(), WriteError> {
        self.on_leader(
            LeaderRequest::ChangeVoters { add, remove },
            self.membership_deadline(),
        )
        .await
        .map(|_| ())
    }

    /// Membership changes wait for a learner to catch up: they get a long deadline.
    fn membership_deadline(&self) -> Instant {
        Instant::now() + Duration::from_millis(MEMBERSHIP_TIMEOUT_MS)
    }

    /// The addresses of every member (voters and learners), from the current membership.
    pub fn member_addrs(&self) -> Vec<String> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(_, n)| n.addr.clone())
            .collect()
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
    /// done), waits and tries again until `leader_wait_ms` (or `deadline`) has passed.
    async fn on_leader(
        &self,
        request: LeaderRequest,
        deadline: Instant,
    ) -> Result<LeaderAnswer, WriteError> {
        let leader_deadline =
            deadline.min(Instant::now() + Duration::from_millis(self.config.leader_wait_ms));
        loop {
            let leader = self.raft.metrics().borrow().current_leader;
            let result = match leader {
                Some(id) if id == self.config.node_id => {
                    self.serve_leader_until(request.clone(), deadline).await
                }
                Some(id) => match self.member_addr(id) {
                    Some(addr) => self.forward(&addr, &request, deadline).await,
                    None => Err(WriteError::NotLeader { leader: None }),
                },
                None => Err(WriteError::NotLeader { leader: None }),
            };
            match result {
                Err(WriteError::NotLeader { leader }) if Instant::now() < leader_deadline => {
                    metrics::counter!("quiver_leader_retries_total").increment(1);
                    let wait = leader_deadline.saturating_duration_since(Instant::now());
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
        deadline: Instant,
    ) -> Result<LeaderAnswer, WriteError> {
        // The leader holds the request to the same deadline; the margin covers the trip.
        let timeout = deadline.saturating_duration_since(Instant::now())
            + Duration::from_millis(FORWARD_MARGIN_MS);
        let answer: Result<Result<LeaderAnswer, WriteError>, PeerError> =
            self.peers.call(addr, FORWARD_PATH, request, timeout).await;
        metrics::counter!("quiver_forwarded_total").increment(1);
        match answer {
            Ok(result) => result,
            // Never reached the leader: as good as "not the leader", so it is retried.
            Err(PeerError::Refused { .. }) => Err(WriteError::NotLeader { leader: None }),
            // The leader refused the call before acting on it (wrong secret, bad request).
            Err(e @ PeerError::Protocol { .. }) if e.refused_before_acting() => {
                Err(WriteError::Unavailable(e.to_string()))
            }
            Err(e) => Err(WriteError::Unknown(e.to_string())),
        }
    }

    /// Serves a request as the leader (the `/internal/forward` handler calls this) within
    /// `write_timeout_ms`. A node that does not lead answers `NotLeader` and does nothing.
    pub async fn serve_leader(&self, request: LeaderRequest) -> Result<LeaderAnswer, WriteError> {
        let deadline = Instant::now() + Duration::from_millis(self.config.write_timeout_ms);
        self.serve_leader_until(request, deadline).await
    }

    async fn serve_leader_until(
        &self,
        request: LeaderRequest,
        deadline: Instant,
    ) -> Result<LeaderAnswer, WriteError> {
        match request {
            LeaderRequest::Write(command) => {
                let m = self.raft.metrics().borrow().clone();
                // Refused before anything is appended: a true 503.
                if let Some(reason) = self.takers_refusal(&m).or_else(|| self.quorum_lost(&m)) {
                    return Err(WriteError::Unavailable(reason));
                }
                self.propose_until(Command::Write(command), deadline)
                    .await
                    .map(|(result, index)| LeaderAnswer::Committed { result, index })
            }
            LeaderRequest::Policy(change) => self
                .propose_until(Command::Policy(change), deadline)
                .await
                .map(|(result, index)| LeaderAnswer::Committed { result, index }),
            LeaderRequest::Delete(delete) => self
                .propose_until(Command::Delete(delete), deadline)
                .await
                .map(|(result, index)| LeaderAnswer::Committed { result, index }),
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
        let deadline = Instant::now() + Duration::from_millis(self.config.write_timeout_ms);
        self.propose_until(command, deadline)
            .await
            .map(|(result, _)| result)
    }

    /// Proposes `command` and waits for its commit and apply until `deadline`. Past the
    /// deadline, or when Raft stops after taking the entry, the outcome is unknown
    /// (the entry may be in the log and be committed later); a Raft already stopped
    /// when the call began appended nothing.
    async fn propose_until(
        &self,
        command: Command,
        deadline: Instant,
    ) -> Result<(CommandResult, u64), WriteError> {
        if let Some(fatal) = self.fatal() {
            return Err(WriteError::Unavailable(format!("raft stopped: {fatal}")));
        }
        let budget = deadline.saturating_duration_since(Instant::now());
        let mut command = command;
        let tracked = command.stamp_proposal().map(|id| self.log.track(id));
        match tokio::time::timeout(budget, self.raft.client_write(command)).await {
            Ok(Ok(response)) => Ok((response.data, response.log_id.index)),
            Ok(Err(RaftError::Fatal(e))) => Err(WriteError::Unknown(format!(
                "raft stopped while the entry was pending: {e}"
            ))),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))))
                if tracked.as_ref().is_some_and(|t| t.appended()) =>
            {
                // Appended here, then removed by a new leader's log: another node may
                // still hold and commit it. Proposing it again could write it twice.
                metrics::counter!("quiver_write_outcomes_unknown_total", "reason" => "truncated")
                    .increment(1);
                Err(WriteError::Unknown(
                    "the entry was appended, then leadership changed and it was removed here; \
                     another node may still commit it"
                        .to_string(),
                ))
            }
            Ok(Err(e)) => Err(client_write_error(e)),
            Err(_) => {
                metrics::counter!("quiver_write_deadlines_expired_total").increment(1);
                Err(WriteError::Unknown(format!(
                    "not committed within http.write_timeout_ms ({} ms); it may still be",
                    self.config.write_timeout_ms
                )))
            }
        }
    }

    /// Starts the background duties; they end when Raft shuts down. They log in the
    /// caller's span, as openraft's own tasks do (the simulation tells its clusters
    /// apart by it).
    pub fn spawn_background(&self) -> Vec<JoinHandle<()>> {
        let mut tasks = vec![
            tokio::spawn(self.clone().persist_loop().in_current_span()),
            tokio::spawn(self.clone().flush_policy_loop().in_current_span()),
            tokio::spawn(self.clone().compaction_loop().in_current_span()),
            tokio::spawn(self.clone().log_cache_loop().in_current_span()),
        ];
        if self.storage.sweep_due() {
            let state_machine = self.state_machine.clone();
            let covered = quiver_storage::LogIndex(self.covered_at_open);
            tasks.push(tokio::spawn(
                async move { state_machine.sweep_files(covered).await }.in_current_span(),
            ));
        }
        if self.bootstrap_pending.load(Ordering::Relaxed) {
            tasks.push(tokio::spawn(
                self.clone().bootstrap_loop().in_current_span(),
            ));
        }
        if self.barrier.awaits_vote_floor() {
            tasks.push(tokio::spawn(
                self.clone().vote_floor_loop().in_current_span(),
            ));
        }
        if self.config.peers.len() > 1 {
            tasks.push(tokio::spawn(self.clone().takers_loop().in_current_span()));
        }
        tasks.push(tokio::spawn(
            self.clone().joint_membership_loop().in_current_span(),
        ));
        tasks
    }

    /// On the leader, asks every other voter every [`TAKERS_POLL_MS`] whether it takes
    /// entries, so a follower whose disk filled is known before a write is proposed to
    /// it (and one that has room again, before the next write is refused). Replication
    /// teaches the same, but only when entries are sent.
    async fn takers_loop(self) {
        loop {
            tokio::time::sleep(Duration::from_millis(TAKERS_POLL_MS)).await;
            if self.raft.metrics().borrow().running_state.is_err() {
                return;
            }
            if !self.is_leader() {
                continue;
            }
            for (id, addr) in self.other_peers() {
                match self.peer_state_of(addr).await {
                    Ok(PeerState {
                        entries_refused: Some(reason),
                        ..
                    }) => self.takers.refused(*id, &reason),
                    Ok(_) => self.takers.took(*id),
                    // Unreachable: the quorum check covers it.
                    Err(_) => {}
                }
            }
        }
    }

    /// A node of a static voter set that starts with an empty log asks its peers what
    /// they hold. If the cluster already has entries, this node lost its data or joins
    /// late: it does not initialise, and it votes only after catching up (its vote
    /// barrier stays closed until a leader has brought it up to date). If a majority of
    /// the set (itself included) is reachable and none has more than the first
    /// membership entry, the cluster is forming: it opens its barrier and initialises.
    async fn bootstrap_loop(self) {
        let mut rounds: u64 = 0;
        loop {
            rounds += 1;
            let mut fresh = 1usize; // this node
            let mut existing: Option<PeerState> = None;
            for (id, addr) in self.other_peers() {
                match self.peer_state_of(addr).await {
                    Ok(state) if state.last_log_index.is_some_and(|l| l > 0) => {
                        existing = Some(state);
                        break;
                    }
                    Ok(_) => fresh += 1,
                    Err(e) => tracing::debug!(peer = id, error = %e, "peer not reachable yet"),
                }
            }
            if let Some(state) = existing {
                tracing::warn!(
                    node_id = self.config.node_id,
                    peer = state.node_id,
                    peer_last_log_index = ?state.last_log_index,
                    member = state.voters.contains(&self.config.node_id),
                    "this node's log is empty but the cluster already holds entries (its data \
                     was lost, or it started late): not initialising; it will not vote until \
                     a leader has brought it up to date"
                );
                self.bootstrap_pending.store(false, Ordering::Relaxed);
                return;
            }
            let majority = self.config.peers.len() / 2 + 1;
            if fresh >= majority {
                match self.barrier.open() {
                    Err(e) => tracing::error!(error = %e, "cannot open the vote barrier; retrying"),
                    Ok(()) => {
                        stand_for_election_when_allowed(
                            &self.raft,
                            &self.barrier,
                            &self.refusing_entries,
                        );
                        let members: BTreeMap<NodeId, BasicNode> = self
                            .config
                            .peers
                            .iter()
                            .map(|(id, addr)| (*id, BasicNode::new(addr.clone())))
                            .collect();
                        tracing::info!(node_id = self.config.node_id, voters = ?members.keys().collect::<Vec<_>>(),
                            "initialising the static voter set from cluster.peers");
                        // Every node of a forming set calls this with the same members:
                        // each writes the same first membership entry, so they form one
                        // cluster whichever starts first.
                        if let Err(e) = self.raft.initialize(members).await {
                            tracing::info!(error = %e, "initialise skipped");
                        }
                        self.bootstrap_pending.store(false, Ordering::Relaxed);
                        return;
                    }
                }
            }
            if rounds.is_multiple_of(BOOTSTRAP_LOG_EVERY_ROUNDS) {
                tracing::info!(
                    reachable_fresh = fresh,
                    majority,
                    "waiting for a majority of cluster.peers to form the cluster"
                );
            }
            if self.raft.metrics().borrow().running_state.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(BOOTSTRAP_PROBE_INTERVAL_MS)).await;
        }
    }

    /// The voters of `cluster.peers` other than this node.
    fn other_peers(&self) -> impl Iterator<Item = &(NodeId, String)> {
        self.config
            .peers
            .iter()
            .filter(|(id, _)| *id != self.config.node_id)
    }

    /// Asks the peer at `addr` what it holds (`GET /internal/state`).
    async fn peer_state_of(&self, addr: &str) -> Result<PeerState, PeerError> {
        let timeout = Duration::from_millis(BOOTSTRAP_PROBE_TIMEOUT_MS);
        self.peers.get(addr, PEER_STATE_PATH, timeout).await
    }

    /// A node that lost its vote with its data asks every peer for its vote until all
    /// have answered, and records the newest as the oldest leader term it takes entries
    /// from (see [`VoteBarrier`]). Ends early if the barrier opens (the cluster was
    /// forming) or Raft stops.
    async fn vote_floor_loop(self) {
        let mut rounds: u64 = 0;
        while self.barrier.awaits_vote_floor() {
            rounds += 1;
            let mut newest: Option<Vote> = None;
            let mut silent = Vec::new();
            for (id, addr) in self.other_peers() {
                match self.peer_state_of(addr).await {
                    Ok(PeerState {
                        vote: Some(vote), ..
                    }) => {
                        if newest.is_none_or(|n| vote.leader_id().term > n.leader_id().term) {
                            newest = Some(vote);
                        }
                    }
                    Ok(_) => silent.push((*id, "does not report its vote".to_string())),
                    Err(e) => silent.push((*id, e.to_string())),
                }
            }
            if silent.is_empty() {
                let floor = newest.unwrap_or_default();
                match self.barrier.set_vote_floor(floor) {
                    Ok(()) => {
                        tracing::info!(node_id = self.config.node_id, %floor,
                            "heard every peer's vote: taking entries from leaders of term {} or later",
                            floor.leader_id().term);
                        return;
                    }
                    Err(e) => tracing::error!(error = %e, "cannot record the vote floor; retrying"),
                }
            } else if rounds % BOOTSTRAP_LOG_EVERY_ROUNDS == 1 {
                tracing::warn!(node_id = self.config.node_id, waiting_for = ?silent,
                    "this node lost its data and its vote: it takes no entries until every \
                     peer has told it its vote");
            }
            if self.raft.metrics().borrow().running_state.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(BOOTSTRAP_PROBE_INTERVAL_MS)).await;
        }
    }

    /// Writes frozen segments as Parquet, retrying failures with backoff (the segment
    /// stays in memory meanwhile), and takes a snapshot once the flushed data makes one
    /// cheap, so the log below it can be purged.
    async fn persist_loop(self) {
        let mut last_snapshot = Instant::now();
        let mut persisted_since_snapshot = false;
        let mut disk_low_logged = false;
        loop {
            if let Some(free) = self.data_volume_low() {
                if !disk_low_logged {
                    tracing::warn!(free_bytes = free, free_bytes_min = self.config.data_free_bytes_min,
                        "data volume below storage.free_bytes_min: segments stay in memory until space returns");
                    disk_low_logged = true;
                }
                metrics::gauge!("quiver_flush_waiting_for_disk").set(1.0);
                tokio::time::sleep(Duration::from_millis(DISK_RECHECK_MS)).await;
                continue;
            }
            if disk_low_logged {
                tracing::info!("data volume has room again: writing segments");
                disk_low_logged = false;
                metrics::gauge!("quiver_flush_waiting_for_disk").set(0.0);
            }
            match self.storage.persist_next().await {
                Ok(true) => {
                    persisted_since_snapshot = true;
                    continue;
                }
                Ok(false) => {}
                Err(e) => {
                    // The table waits out its own backoff inside storage; the others go on.
                    tracing::error!(error = %e, "writing a segment failed; it stays in memory and is retried");
                    metrics::counter!("quiver_flush_failures_total").increment(1);
                    continue;
                }
            }
            if persisted_since_snapshot && last_snapshot.elapsed() >= self.snapshot_gap() {
                if self.raft.trigger().snapshot().await.is_err() {
                    return;
                }
                last_snapshot = Instant::now();
                persisted_since_snapshot = false;
            }
            let mut wait = if persisted_since_snapshot {
                self.snapshot_gap().saturating_sub(last_snapshot.elapsed())
            } else {
                Duration::from_secs(3600)
            };
            if let Some(retry) = self.storage.next_persist_retry() {
                wait = wait.min(retry);
            }
            tokio::select! {
                _ = self.storage.frozen_ready() => {}
                _ = tokio::time::sleep(wait.max(Duration::from_millis(10))) => {}
            }
        }
    }

    /// Free bytes of the data volume when below `data_free_bytes_min`.
    fn data_volume_low(&self) -> Option<u64> {
        if self.config.data_free_bytes_min == 0 {
            return None;
        }
        let free = fs2::available_space(&self.storage.config().dir).ok()?;
        (free < self.config.data_free_bytes_min).then_some(free)
    }

    /// On the leader, proposes a flush entry whenever a buffer passes a threshold.
    /// Releases cached log entries nobody will read from memory again: those applied
    /// here and, on a leader, matched by every follower (a lagging follower keeps its
    /// entries cached, up to the cache's cap). Under sustained ingest the cache
    /// otherwise held its whole cap (256 MiB) of entries already in Parquet or buffers.
    async fn log_cache_loop(self) {
        let mut tick = tokio::time::interval(LOG_CACHE_RELEASE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let through = {
                let metrics = self.raft.metrics();
                let m = metrics.borrow();
                if m.running_state.is_err() {
                    return;
                }
                let applied = m.last_applied.map(|l| l.index);
                let matched = match &m.replication {
                    // Every member's matched index; one not yet known keeps everything.
                    Some(progress) => progress
                        .values()
                        .map(|matched| matched.map(|l| l.index))
                        .try_fold(u64::MAX, |low, m| m.map(|m| low.min(m))),
                    None => Some(u64::MAX),
                };
                applied.zip(matched).map(|(a, m)| a.min(m))
            };
            if let Some(index) = through {
                self.log.release_cached_through(index);
            }
            metrics::gauge!("quiver_raft_log_cache_bytes").set(self.log.cached_bytes() as f64);
        }
    }

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

    /// Compaction on this node: on the leader, proposes merges its policy finds due;
    /// on every node, carries out committed merges one at a time (on a low-priority
    /// thread) and deletes replaced files after their grace period. Merges wait while
    /// the data volume is low: an output is written before its inputs go.
    async fn compaction_loop(self) {
        let interval = Duration::from_millis(self.config.compaction_check_interval_ms.max(1));
        let mut next_policy = Instant::now() + interval;
        let mut last_snapshot_asked: Option<Instant> = None;
        loop {
            if self.raft.metrics().borrow().running_state.is_err() {
                return;
            }
            self.storage.delete_condemned().await;
            // Removed files leave the disk only once a snapshot no longer lists them.
            let awaiting_snapshot = self.storage.condemned_awaiting_snapshot();
            let snapshot_gap = self.snapshot_gap();
            if awaiting_snapshot && last_snapshot_asked.is_none_or(|t| t.elapsed() >= snapshot_gap)
            {
                if self.raft.trigger().snapshot().await.is_err() {
                    return;
                }
                last_snapshot_asked = Some(Instant::now());
            }
            if Instant::now() >= next_policy {
                next_policy = Instant::now() + interval;
                if self.is_leader() && self.data_volume_low().is_none() {
                    self.propose_compactions().await;
                }
            }
            let mut ran = false;
            if self.data_volume_low().is_none() {
                match self.storage.compact_next().await {
                    Ok(did) => ran = did,
                    Err(e) => {
                        // The job stays queued; it is tried again at the next check.
                        tracing::error!(error = %e, "compaction failed; retrying later");
                        metrics::counter!("quiver_compaction_failures_total").increment(1);
                    }
                }
            }
            metrics::gauge!("quiver_compaction_backlog")
                .set(self.storage.compaction_backlog() as f64);
            if ran {
                continue;
            }
            let mut wait = next_policy.saturating_duration_since(Instant::now());
            if let Some(due) = self.storage.next_condemned_due() {
                wait = wait.min(due);
            }
            if awaiting_snapshot {
                wait = wait.min(snapshot_gap);
            }
            tokio::select! {
                _ = self.storage.compaction_queued() => {}
                _ = tokio::time::sleep(wait.max(Duration::from_millis(10))) => {}
            }
        }
    }

    /// Least time between two snapshots: `raft.snapshot_interval_ms_min`, or
    /// [`SNAPSHOT_BUILD_SHARE`] times the last build when that is longer. A snapshot's
    /// manifest grows with the file count (about 400 MB at a million files, 2.5-3.5 s to
    /// build), and a compaction backlog asks for one every interval so replaced files
    /// may go: at 10 s that kept the disk busy writing snapshots.
    fn snapshot_gap(&self) -> Duration {
        Duration::from_millis(self.config.snapshot_interval_ms_min)
            .max(self.state_machine.last_snapshot_build() * SNAPSHOT_BUILD_SHARE)
    }

    /// Proposes every merge the compaction policy finds due now (one per table).
    async fn propose_compactions(&self) {
        let now_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        for request in self
            .storage
            .compaction_candidates(quiver_storage::TimestampNs(now_ns))
        {
            let table = request.table.clone();
            match self.propose(Command::Compact(request)).await {
                Ok(CommandResult::Compaction(outcome)) => {
                    tracing::debug!(%table, ?outcome, "compaction proposed")
                }
                Ok(other) => tracing::warn!(%table, ?other, "unexpected answer to a compaction"),
                Err(e) => {
                    tracing::warn!(%table, error = %e, "compaction proposal failed");
                    return;
                }
            }
        }
    }

    /// On the leader: proposes one window of a continuous query, which this node ran.
    /// Elsewhere `NotLeader`: only the leader computes windows.
    pub async fn propose_cq_window(
        &self,
        window: crate::command::CqWindowCommand,
    ) -> Result<CommandResult, WriteError> {
        if !self.is_leader() {
            return Err(WriteError::NotLeader { leader: None });
        }
        self.propose(Command::CqWindow(window)).await
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

#[cfg(test)]
mod start_over_tests {
    use super::*;
    use crate::command::FlushCommand;
    use crate::types::Entry;
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::{CommittedLeaderId, EntryPayload, LogId};
    use quiver_storage::TableKey;
    use quiver_wal::SyncMode;

    fn log_id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, 2), index)
    }

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: log_id(term, index),
            payload: EntryPayload::Normal(Command::Flush(FlushCommand {
                tables: vec![TableKey::new("db", "m")],
            })),
        }
    }

    /// A log purged past any snapshot (a snapshot install that failed) is erased, and
    /// the node still votes for candidates at least as up to date as the erased log,
    /// never for one behind it, across restarts and a second erase of a shortened log.
    #[tokio::test]
    async fn an_erased_log_still_votes_for_candidates_at_least_as_up_to_date_as_it_was() {
        let root = tempfile::tempdir().unwrap();
        let config = RaftConfig {
            data_dir: root.path().join("data"),
            wal: WalConfig {
                dir: root.path().join("wal"),
                sync: SyncMode::Fsync,
                ..WalConfig::default()
            },
            ..RaftConfig::default()
        };
        {
            let wal = Wal::open(config.wal.clone()).unwrap();
            let mut log = LogStore::open(wal, &config.wal.dir).await.unwrap();
            log.blocking_append((0..10).map(|i| entry(2, i)).collect::<Vec<_>>())
                .await
                .unwrap();
            log.purge(log_id(2, 6)).await.unwrap();
        }
        let recovered = Recovered::load(&config.data_dir, &config.wal.dir).unwrap();
        assert!(recovered.log_lost(), "purged with no snapshot");
        let fs: Arc<dyn quiver_wal::WalFs> = Arc::new(quiver_wal::OsFs);
        let barrier = VoteBarrier::load(&config.wal.dir).unwrap();
        start_over(&config, &fs, &barrier, &recovered).unwrap();

        let wal = Wal::open(config.wal.clone()).unwrap();
        assert_eq!(wal.last_index(), None, "the log is erased");
        drop(wal);
        let barrier = VoteBarrier::load(&config.wal.dir).unwrap();
        assert!(barrier.refusal().is_some(), "it does not stand itself");
        assert!(barrier.refusal_for(Some(&log_id(2, 9))).is_none());
        assert!(barrier.refusal_for(Some(&log_id(3, 4))).is_none());
        assert!(barrier.refusal_for(Some(&log_id(2, 8))).is_some());
        assert!(barrier.refusal_for(Some(&log_id(1, 50))).is_some());
        assert!(barrier.refusal_for(None).is_some());
        // Erasing again (a crash part-way left a shorter log) keeps the furthest end.
        barrier.close_erasing(Some(log_id(2, 7))).unwrap();
        let barrier = VoteBarrier::load(&config.wal.dir).unwrap();
        assert!(barrier.refusal_for(Some(&log_id(2, 8))).is_some());
        assert!(barrier.refusal_for(Some(&log_id(2, 9))).is_none());
    }
}
