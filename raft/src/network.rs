//! Node-to-node transport for openraft: HTTP POSTs to the peer's own port under
//! `/internal/raft/`, MessagePack bodies, the cluster secret in a header.
//!
//! The peer answers 200 with the MessagePack of `Result<Response, RaftError>`; any other
//! status or a broken connection is a transport failure, which openraft retries on its
//! next heartbeat. Snapshots travel in openraft's chunks (`snapshot_max_chunk_size`), so
//! neither side holds a whole snapshot in memory.

use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::peer_client::{PeerClient, PeerError};
use crate::types::{NodeId, TypeConfig};

/// `/internal/` paths of the Raft RPCs.
pub mod paths {
    /// AppendEntries (also heartbeats).
    pub const APPEND: &str = "/internal/raft/append";
    /// RequestVote.
    pub const VOTE: &str = "/internal/raft/vote";
    /// One chunk of InstallSnapshot.
    pub const SNAPSHOT: &str = "/internal/raft/snapshot";
}

/// Builds [`HttpPeer`] connections.
#[derive(Clone)]
pub struct HttpNetworkFactory {
    source: NodeId,
    client: PeerClient,
}

impl HttpNetworkFactory {
    /// Connections from node `source` presenting the client's secret.
    pub fn new(source: NodeId, client: PeerClient) -> Self {
        HttpNetworkFactory { source, client }
    }
}

/// The connection to one peer.
pub struct HttpPeer {
    source: NodeId,
    target: NodeId,
    node: BasicNode,
    client: PeerClient,
}

impl RaftNetworkFactory<TypeConfig> for HttpNetworkFactory {
    type Network = HttpPeer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> HttpPeer {
        HttpPeer {
            source: self.source,
            target,
            node: node.clone(),
            client: self.client.clone(),
        }
    }
}

impl HttpPeer {
    async fn rpc<Req, Resp, E>(
        &self,
        action: RPCTypes,
        path: &str,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let ttl = option.hard_ttl();
        let answer: Result<Result<Resp, E>, PeerError> =
            self.client.call(&self.node.addr, path, request, ttl).await;
        match answer {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(remote)) => Err(RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                remote,
            ))),
            Err(PeerError::Timeout { .. }) => Err(RPCError::Timeout(Timeout {
                action,
                id: self.source,
                target: self.target,
                timeout: ttl.max(Duration::from_millis(1)),
            })),
            Err(e @ (PeerError::Unreachable { .. } | PeerError::Refused { .. })) => {
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
            Err(e @ PeerError::Protocol { .. }) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }
}

impl RaftNetwork<TypeConfig> for HttpPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.rpc(RPCTypes::AppendEntries, paths::APPEND, &rpc, &option)
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.rpc(RPCTypes::InstallSnapshot, paths::SNAPSHOT, &rpc, &option)
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.rpc(RPCTypes::Vote, paths::VOTE, &rpc, &option).await
    }
}
