//! Node-to-node transport for openraft: HTTP POSTs to the peer's own port under
//! `/internal/raft/`, MessagePack bodies, the cluster secret in a header.
//!
//! The peer answers 200 with the MessagePack of `Result<Response, RaftError>`; any other
//! status or a broken connection is a transport failure, which openraft retries on its
//! next heartbeat. Snapshots travel in openraft's chunks (`snapshot_max_chunk_size`), so
//! neither side holds a whole snapshot in memory.
//!
//! Replication is bounded by bytes, not only by openraft's entry count: one
//! AppendEntries carries at most `replication_bytes_max` of entries (always at least
//! one) and reports the rest as not yet sent (`PartialSuccess`), so openraft sends them
//! next. openraft 0.9 gives every AppendEntries the heartbeat interval (50 ms) as its
//! deadline, which a large entry on a real link cannot meet; so the transfer runs in its
//! own task under `replication_timeout_ms` and survives openraft's deadline: when
//! openraft asks again for the same range, it joins the transfer already on the wire
//! instead of starting it over (see [`InFlight`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, EntryPayload};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::command::Command;
use crate::peer_client::{PeerClient, PeerError};
use crate::types::{Entry, LogId, NodeId, TypeConfig, Vote};

/// `/internal/` paths of the Raft RPCs.
pub mod paths {
    /// AppendEntries (also heartbeats).
    pub const APPEND: &str = "/internal/raft/append";
    /// RequestVote.
    pub const VOTE: &str = "/internal/raft/vote";
    /// One chunk of InstallSnapshot.
    pub const SNAPSHOT: &str = "/internal/raft/snapshot";
}

/// How log entries travel to followers (the `[raft]` replication settings).
#[derive(Debug, Clone, Copy)]
pub struct ReplicationLimits {
    /// Most entry bytes in one AppendEntries (one entry is always sent, however large).
    pub bytes_max: usize,
    /// Longest one AppendEntries carrying entries may take, transfer and the follower's
    /// fsync included. Independent of the heartbeat interval.
    pub timeout_ms: u64,
}

impl Default for ReplicationLimits {
    fn default() -> Self {
        ReplicationLimits {
            bytes_max: 8 << 20,
            timeout_ms: 30_000,
        }
    }
}

/// Bytes an entry occupies on the wire, estimated without encoding it again.
pub(crate) fn entry_wire_bytes(entry: &Entry) -> usize {
    const OVERHEAD_BYTES: usize = 128;
    match &entry.payload {
        EntryPayload::Normal(Command::Write(w)) => w.bytes() + OVERHEAD_BYTES,
        _ => OVERHEAD_BYTES,
    }
}

/// What a follower answering 503 to entries (not to heartbeats) puts first in its
/// reason: it cannot take entries now (a volume under its watermark, full buffers).
pub const ENTRIES_REFUSED_PREFIX: &str = "entries refused: ";

/// Followers that refuse entries now, and why (learned from their answers; cleared
/// by the next entries they take). The leader refuses writes when too few voters can
/// take them (see `RaftNode::takers_refusal`).
#[derive(Clone, Default)]
pub struct Takers(Arc<Mutex<HashMap<NodeId, String>>>);

impl Takers {
    /// The followers refusing entries now, with their reasons.
    pub fn refusing(&self) -> Vec<(NodeId, String)> {
        let mut out: Vec<(NodeId, String)> =
            self.0.lock().iter().map(|(k, v)| (*k, v.clone())).collect();
        out.sort();
        out
    }

    pub(crate) fn refused(&self, node: NodeId, reason: &str) {
        let mut refusing = self.0.lock();
        if !refusing.contains_key(&node) {
            tracing::warn!(follower = node, %reason, "a follower refuses entries");
        }
        refusing.insert(node, reason.to_string());
    }

    pub(crate) fn took(&self, node: NodeId) {
        if self.0.lock().remove(&node).is_some() {
            tracing::info!(follower = node, "the follower takes entries again");
        }
    }
}

/// Builds [`HttpPeer`] connections.
#[derive(Clone)]
pub struct HttpNetworkFactory {
    source: NodeId,
    client: PeerClient,
    limits: ReplicationLimits,
    in_flight: Arc<Mutex<HashMap<NodeId, InFlight>>>,
    takers: Takers,
}

impl HttpNetworkFactory {
    /// Connections from node `source` presenting the client's secret; followers'
    /// refusals of entries are recorded in `takers`.
    pub fn new(
        source: NodeId,
        client: PeerClient,
        limits: ReplicationLimits,
        takers: Takers,
    ) -> Self {
        HttpNetworkFactory {
            source,
            client,
            limits,
            in_flight: Arc::default(),
            takers,
        }
    }
}

/// The connection to one peer.
pub struct HttpPeer {
    source: NodeId,
    target: NodeId,
    node: BasicNode,
    client: PeerClient,
    limits: ReplicationLimits,
    in_flight: Arc<Mutex<HashMap<NodeId, InFlight>>>,
    takers: Takers,
}

impl RaftNetworkFactory<TypeConfig> for HttpNetworkFactory {
    type Network = HttpPeer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> HttpPeer {
        HttpPeer {
            source: self.source,
            target,
            node: node.clone(),
            client: self.client.clone(),
            limits: self.limits,
            in_flight: self.in_flight.clone(),
            takers: self.takers.clone(),
        }
    }
}

/// What an AppendEntries transfer ended with, shareable between the openraft attempts
/// that wait for it.
#[derive(Clone)]
enum TransferOutcome {
    Answered(Arc<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>>),
    Failed(Arc<PeerError>),
}

type Transfer = Shared<BoxFuture<'static, TransferOutcome>>;

/// An AppendEntries on the wire to one follower: entries `(prev, last]` sent under
/// `vote`. A later attempt for a range starting at `prev` that includes `last` joins it.
struct InFlight {
    vote: Vote,
    prev: Option<LogId>,
    last: Option<LogId>,
    transfer: Transfer,
}

fn copy_response(r: &AppendEntriesResponse<NodeId>) -> AppendEntriesResponse<NodeId> {
    match r {
        AppendEntriesResponse::Success => AppendEntriesResponse::Success,
        AppendEntriesResponse::PartialSuccess(l) => AppendEntriesResponse::PartialSuccess(*l),
        AppendEntriesResponse::Conflict => AppendEntriesResponse::Conflict,
        AppendEntriesResponse::HigherVote(v) => AppendEntriesResponse::HigherVote(*v),
    }
}

impl HttpPeer {
    async fn rpc<Req, Resp, E>(
        &self,
        action: RPCTypes,
        path: &str,
        request: &Req,
        ttl: Duration,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let answer: Result<Result<Resp, E>, PeerError> =
            self.client.call(&self.node.addr, path, request, ttl).await;
        match answer {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(remote)) => Err(self.remote(remote)),
            Err(e) => Err(self.transport(action, ttl, &e)),
        }
    }

    fn remote<E: std::error::Error>(&self, remote: E) -> RPCError<NodeId, BasicNode, E> {
        RPCError::RemoteError(RemoteError::new_with_node(
            self.target,
            self.node.clone(),
            remote,
        ))
    }

    fn transport<E: std::error::Error>(
        &self,
        action: RPCTypes,
        ttl: Duration,
        e: &PeerError,
    ) -> RPCError<NodeId, BasicNode, E> {
        match e {
            PeerError::Timeout { .. } => RPCError::Timeout(Timeout {
                action,
                id: self.source,
                target: self.target,
                timeout: ttl.max(Duration::from_millis(1)),
            }),
            // 503: the peer is up but takes nothing now (a node that lost its data and
            // waits for its peers' votes); openraft backs off only from an unreachable
            // peer, and would otherwise retry at once, in a tight loop.
            PeerError::Unreachable { .. }
            | PeerError::Refused { .. }
            | PeerError::Protocol {
                status: Some(503), ..
            } => RPCError::Unreachable(Unreachable::new(e)),
            PeerError::Protocol { .. } => RPCError::Network(NetworkError::new(e)),
        }
    }

    /// Starts sending `rpc` in its own task, or joins the transfer of the same range
    /// already on the wire. Returns the transfer and the last entry it carries.
    fn transfer(&self, rpc: AppendEntriesRequest<TypeConfig>) -> (Transfer, Option<LogId>) {
        let last = rpc.entries.last().map(|e| e.log_id);
        let mut in_flight = self.in_flight.lock();
        if let Some(current) = in_flight.get(&self.target) {
            let joins = current.vote == rpc.vote
                && current.prev == rpc.prev_log_id
                && current.last.is_some()
                && current.last <= last;
            if joins {
                metrics::counter!("quiver_replication_transfers_joined_total").increment(1);
                return (current.transfer.clone(), current.last);
            }
        }
        let client = self.client.clone();
        let addr = self.node.addr.clone();
        let timeout = Duration::from_millis(self.limits.timeout_ms);
        let (vote, prev) = (rpc.vote, rpc.prev_log_id);
        let task = tokio::spawn(async move {
            let answer: Result<Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>, _> =
                client.call(&addr, paths::APPEND, &rpc, timeout).await;
            match answer {
                Ok(result) => TransferOutcome::Answered(Arc::new(result)),
                Err(e) => TransferOutcome::Failed(Arc::new(e)),
            }
        });
        let target_addr = self.node.addr.clone();
        let transfer: Transfer = async move {
            match task.await {
                Ok(outcome) => outcome,
                Err(e) => TransferOutcome::Failed(Arc::new(PeerError::Protocol {
                    addr: target_addr,
                    status: None,
                    message: format!("replication task failed: {e}"),
                })),
            }
        }
        .boxed()
        .shared();
        in_flight.insert(
            self.target,
            InFlight {
                vote,
                prev,
                last,
                transfer: transfer.clone(),
            },
        );
        (transfer, last)
    }

    fn finished(&self, last: Option<LogId>) {
        let mut in_flight = self.in_flight.lock();
        if in_flight.get(&self.target).is_some_and(|f| f.last == last) {
            in_flight.remove(&self.target);
        }
    }
}

/// How many leading entries fit in `bytes_max` (at least one).
fn entries_within(entries: &[Entry], bytes_max: usize) -> usize {
    let mut bytes = 0usize;
    let mut count = 0usize;
    for entry in entries {
        bytes = bytes.saturating_add(entry_wire_bytes(entry));
        if count > 0 && bytes > bytes_max {
            break;
        }
        count += 1;
    }
    count
}

impl RaftNetwork<TypeConfig> for HttpPeer {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        if rpc.entries.is_empty() {
            // A heartbeat: small, and late is as good as lost.
            return self
                .rpc(
                    RPCTypes::AppendEntries,
                    paths::APPEND,
                    &rpc,
                    option.hard_ttl(),
                )
                .await;
        }
        let asked_last = rpc.entries.last().map(|e| e.log_id);
        let fits = entries_within(&rpc.entries, self.limits.bytes_max);
        rpc.entries.truncate(fits);
        let (transfer, sent_last) = self.transfer(rpc);
        // Answer openraft just before its own deadline (the heartbeat interval); the
        // transfer goes on, and the next attempt joins it.
        let wait = option
            .hard_ttl()
            .saturating_sub(Duration::from_millis(5))
            .max(option.soft_ttl())
            .max(Duration::from_millis(1));
        let outcome = match tokio::time::timeout(wait, transfer).await {
            Ok(outcome) => outcome,
            Err(_) => {
                return Err(RPCError::Timeout(Timeout {
                    action: RPCTypes::AppendEntries,
                    id: self.source,
                    target: self.target,
                    timeout: wait,
                }))
            }
        };
        self.finished(sent_last);
        match &outcome {
            TransferOutcome::Answered(result) if result.is_ok() => self.takers.took(self.target),
            TransferOutcome::Failed(e) => {
                if let PeerError::Protocol {
                    status: Some(503),
                    message,
                    ..
                } = e.as_ref()
                {
                    if let Some(at) = message.find(ENTRIES_REFUSED_PREFIX) {
                        let reason = &message[at + ENTRIES_REFUSED_PREFIX.len()..];
                        self.takers.refused(self.target, reason);
                    }
                }
            }
            TransferOutcome::Answered(_) => {}
        }
        match outcome {
            TransferOutcome::Answered(result) => match result.as_ref() {
                Ok(AppendEntriesResponse::Success) if sent_last < asked_last => {
                    Ok(AppendEntriesResponse::PartialSuccess(sent_last))
                }
                Ok(response) => Ok(copy_response(response)),
                Err(remote) => Err(self.remote(remote.clone())),
            },
            TransferOutcome::Failed(e) => Err(self.transport(
                RPCTypes::AppendEntries,
                Duration::from_millis(self.limits.timeout_ms),
                &e,
            )),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.rpc(
            RPCTypes::InstallSnapshot,
            paths::SNAPSHOT,
            &rpc,
            option.hard_ttl(),
        )
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.rpc(RPCTypes::Vote, paths::VOTE, &rpc, option.hard_ttl())
            .await
    }
}
