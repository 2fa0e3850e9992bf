//! What a node of the cluster does for a node joining it (`quiver serve --join URL`,
//! [`crate::join`]): tell it the cluster's settings, and add it to the cluster; and
//! where this node's query worker listens, for nodes that learn it.

use std::collections::{BTreeMap, BTreeSet};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use quiver_raft::GroupId;

use super::internal::{authorized, authorized_body, encode, SMALL_BODY_BYTES_MAX};
use super::AppState;
use crate::join::{ClusterSettings, JoinAnswer, JoinRequest};

/// `GET /internal/cluster/settings`: the settings a joining node takes.
pub async fn settings(State(app): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(refusal) = authorized(&app, &headers) {
        return refusal.into_response();
    }
    let peers = match app.config.peers() {
        Ok(peers) => peers,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let members: BTreeMap<GroupId, Vec<(u64, String)>> = match &app.mover {
        Some(mover) => (1..=app.groups.data_count() as GroupId)
            .map(|group| (group, mover.members_of(group)))
            .filter(|(_, members)| !members.is_empty())
            .collect(),
        None => BTreeMap::new(),
    };
    encode(&ClusterSettings {
        peers,
        data_groups: app.config.cluster.data_groups,
        replication: app.config.cluster.replication,
        members,
        nodes: app.node.member_addrs_by_id(),
        query_workers: app.config.cluster.query_workers.clone(),
    })
}

/// `POST /internal/cluster/join` `{node_id, addr}`: adds the node to the metadata group
/// (with one data group, to the one group) as a learner, waits for it to catch up,
/// and makes it a voter. Asking again for a voter changes nothing; an id the cluster
/// already knows at another address is refused (409), since two nodes would answer to
/// one id.
pub async fn join(State(app): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let request: JoinRequest =
        match authorized_body(&app, &headers, body, SMALL_BODY_BYTES_MAX).await {
            Ok(request) => request,
            Err(response) => return response,
        };
    if request.node_id == 0 {
        return (StatusCode::BAD_REQUEST, "node_id must be at least 1").into_response();
    }
    let wanted = quiver_raft::base_url(&request.addr);
    if let Some(known) = app.node.member_addr(request.node_id) {
        if quiver_raft::base_url(&known) != wanted {
            return (
                StatusCode::CONFLICT,
                format!(
                    "node {} is already a member of the cluster at {known}, not {wanted}: \
                     choose another --node-id, or remove node {} first",
                    request.node_id, request.node_id
                ),
            )
                .into_response();
        }
    }
    let add = BTreeSet::from([request.node_id]);
    for group in super::cluster::groups_changed(&app) {
        let step = match group
            .node
            .add_learner(request.node_id, wanted.clone())
            .await
        {
            Ok(()) => group.node.change_voters(add.clone(), BTreeSet::new()).await,
            Err(e) => Err(e),
        };
        if let Err(e) = step {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("adding node {} failed: {e}; ask again", request.node_id),
            )
                .into_response();
        }
    }
    tracing::info!(node = request.node_id, addr = %wanted, "a node joined the cluster");
    encode(&JoinAnswer {
        voters: app.node.voters().into_iter().map(|(id, _)| id).collect(),
    })
}

/// `GET /internal/query-worker`: where this node's query worker listens (`None`
/// without one), for nodes whose `cluster.query_workers` does not list it.
pub async fn query_worker(State(app): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(refusal) = authorized(&app, &headers) {
        return refusal.into_response();
    }
    let own = match app.query_workers {
        Some(_) => crate::query_workers::own_worker(&app.config),
        None => None,
    };
    encode(&own)
}
