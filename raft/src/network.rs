//! Node-to-node transport for openraft.
//!
//! A single-voter cluster never sends a message, so this is the transport of a node that
//! has no peers: every call reports the target unreachable. The HTTP transport under
//! `/internal/` replaces it when clusters of several nodes land (issue 4).

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;

use crate::types::{NodeId, TypeConfig};

/// Builds [`NoPeers`] connections.
#[derive(Debug, Clone, Default)]
pub struct NoPeersFactory;

/// A connection to a peer that a single-node cluster does not have.
#[derive(Debug, Clone, Default)]
pub struct NoPeers;

fn unreachable<E: std::error::Error>(target: &str) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(format!(
        "node has no network to reach {target}"
    ))))
}

impl RaftNetworkFactory<TypeConfig> for NoPeersFactory {
    type Network = NoPeers;

    async fn new_client(&mut self, _target: NodeId, _node: &BasicNode) -> NoPeers {
        NoPeers
    }
}

impl RaftNetwork<TypeConfig> for NoPeers {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable("a peer"))
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        Err(unreachable("a peer"))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable("a peer"))
    }
}
