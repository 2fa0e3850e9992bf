//! One Raft group on this node: the value that owns its log, state machine, Raft
//! handle and background loops. The jobs live in the files below: start-up and
//! recovery (`start`), proposing and forwarding (`propose`), membership changes
//! (`membership`), background duties (`duties`), settings (`config`); this file holds
//! the value itself and the vote barrier's checks on the internal routes.

mod config;
mod duties;
mod leadership;
mod membership;
mod propose;
mod start;

pub use config::{RaftConfig, Seams};
pub use leadership::HandoverError;
pub use start::PeerState;

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
pub const MEMBERSHIP_TIMEOUT_MS: u64 = 120_000;
/// Where a peer's [`PeerState`] is read.
pub const PEER_STATE_PATH: &str = "/internal/state";
/// How long a starting node waits for a peer's state.
const BOOTSTRAP_PROBE_TIMEOUT_MS: u64 = 1_000;
/// How long a starting node keeps asking silent peers for their state while no leader
/// has answered (a restored node learns only from a leader that it lost entries).
const BOOTSTRAP_PROBE_PATIENCE_MS: u64 = 3_000;
/// Pause between two rounds of asking the peers.
const BOOTSTRAP_PROBE_INTERVAL_MS: u64 = 250;
/// A forming node logs that it still waits every this many rounds.
const BOOTSTRAP_LOG_EVERY_ROUNDS: u64 = 40;
/// How often a flush waiting for disk space checks again.
const DISK_RECHECK_MS: u64 = 500;
/// How often the leader asks its followers whether they take entries.
const TAKERS_POLL_MS: u64 = 500;

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
    /// Whether this leader is handing leadership over now (see `leadership.rs`).
    yielding: Arc<AtomicBool>,
}

impl RaftNode {
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
        self.open_barrier_if_caught_up(None);
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
        let leader_vote = request.vote;
        let last_chunk = request.done;
        let snapshot_last = request.meta.last_log_id;
        let response = self.raft.install_snapshot(request).await;
        if let Ok(answer) = &response {
            if last_chunk && answer.vote == leader_vote {
                // A snapshot holds committed entries only: when its last one is of the
                // sending leader's term, it is a commit index of the leader's own term,
                // now held here, exactly what the vote barrier waits for. Without this a
                // node that caught up by snapshot and crashed before the next
                // AppendEntries kept its barrier closed, and with a second node restored
                // from an old copy no leader could be elected (simulation seed 124).
                let commit = snapshot_last.map(|l| (l.leader_id.term, l.index));
                if let Err(e) = self
                    .barrier
                    .observe_leader_commit(leader_vote.leader_id().term, commit)
                {
                    tracing::warn!(error = %e, "cannot record the vote barrier's target");
                }
                self.open_barrier_if_caught_up(snapshot_last.map(|l| l.index));
            }
        }
        response
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
        // Openraft answers Success only once the entries are flushed, so the log then
        // reaches the request's last entry even while the metrics lag behind.
        let sent_up_to = request
            .entries
            .last()
            .map(|e| e.log_id.index)
            .or(request.prev_log_id.map(|l| l.index));
        let response = self.raft.append_entries(request).await;
        if matches!(response, Ok(AppendEntriesResponse::Success)) {
            self.open_barrier_if_caught_up(sent_up_to);
        } else if response.is_ok() {
            self.open_barrier_if_caught_up(None);
        }
        response
    }

    /// Opens the vote barrier once the log has reached the index a leader named
    /// (`held`: an index the log is known to reach beyond what the metrics say).
    fn open_barrier_if_caught_up(&self, held: Option<u64>) {
        let last = self.raft.metrics().borrow().last_log_index.max(held);
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

    /// The group this instance belongs to.
    pub fn group(&self) -> crate::GroupId {
        self.config.group
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

    /// The followers refusing entries now (for `/api/v1/cluster/status`).
    pub fn followers_refusing_entries(&self) -> Vec<(NodeId, String)> {
        self.takers.refusing()
    }

    /// Stops Raft.
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "raft did not shut down cleanly");
        }
    }
}
