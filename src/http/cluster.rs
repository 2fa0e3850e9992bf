//! `/api/v1/cluster/...`: this node's view of the cluster, and membership changes
//! (admin only; run on the leader, forwarded there from any node).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use quiver_raft::WriteError;
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::json_body;
use super::error::ApiError;
use super::AppState;
use crate::auth::Permission;

/// How long the status call waits for a follower's `/health` before calling it
/// detached.
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);

/// `GET /api/v1/cluster/status`: role, term, leader, log positions, members, and on
/// the leader each follower's matched index, lag and whether it is attached (answering
/// and fully caught up right now).
pub async fn cluster_status(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Read)?;
    let m = app.node.raft.metrics().borrow().clone();
    let wal = app.node.log.wal().stats();
    let entry_bytes = wal
        .bytes_written
        .checked_div(wal.records.max(1))
        .unwrap_or(0);
    let membership = m.membership_config.membership().clone();
    let last = m.last_log_index.unwrap_or(0);
    let mut followers = Vec::new();
    if let Some(replication) = &m.replication {
        for (id, matched) in replication.iter().filter(|(id, _)| **id != m.id) {
            let matched_index = matched.map(|l| l.index);
            let lag = last.saturating_sub(matched_index.unwrap_or(0));
            let addr = membership.get_node(id).map(|n| n.addr.clone());
            let answering = match &addr {
                Some(addr) => probe(&app, addr).await,
                None => false,
            };
            followers.push(json!({
                "node_id": id,
                "addr": addr,
                "voter": membership.voter_ids().any(|v| v == *id),
                "matched_index": matched_index,
                "lag_entries": lag,
                "lag_bytes_estimate": lag * entry_bytes,
                "attached": answering && lag == 0,
            }));
        }
    }
    let nodes: Vec<Value> = membership
        .nodes()
        .map(|(id, node)| {
            json!({"node_id": id, "addr": node.addr,
                   "voter": membership.voter_ids().any(|v| v == *id)})
        })
        .collect();
    Ok(Json(json!({
        "success": true,
        "node_id": m.id,
        "role": format!("{:?}", m.state).to_lowercase(),
        "term": m.current_term,
        "leader": m.current_leader,
        "leader_addr": m.current_leader.and_then(|l| app.node.member_addr(l)),
        "last_log_index": m.last_log_index,
        "commit_index": app.node.log.committed().map(|l| l.index),
        "applied_index": m.last_applied.map(|l| l.index),
        "snapshot_index": m.snapshot.map(|l| l.index),
        "purged_index": m.purged.map(|l| l.index),
        "millis_since_quorum_ack": m.millis_since_quorum_ack,
        "wal": {"bytes_on_disk": wal.bytes_on_disk, "segments": wal.segments, "fsyncs": wal.fsyncs, "appends": wal.appends},
        "members": nodes,
        "followers": followers,
        "query_workers": app.query_workers.as_ref().map(|known| {
            known
                .by_node()
                .into_iter()
                .map(|(id, url)| (id.to_string(), Value::String(url.to_string())))
                .collect::<serde_json::Map<String, Value>>()
        }),
    })))
}

/// `GET /api/v1/cluster/groups`: every Raft group this node runs, with its voters,
/// learners, leader, applied index and what its data weighs here.
pub async fn cluster_groups(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Read)?;
    let mut groups: Vec<Value> = app
        .groups
        .all()
        .into_iter()
        .map(|g| {
            let m = g.node.raft.metrics().borrow().clone();
            let membership = m.membership_config.membership();
            let voters: Vec<u64> = membership.voter_ids().collect();
            let learners: Vec<u64> = membership.learner_ids().collect();
            let summaries = g.storage.summaries(None);
            json!({
                "id": g.id,
                "role": if g.id == quiver_raft::FIRST_GROUP && app.groups.is_sharded() {
                    "metadata"
                } else {
                    "data"
                },
                "members": voters,
                "learners": learners,
                "leader": m.current_leader,
                "applied_index": m.last_applied.map(|l| l.index),
                "measurements": summaries.len(),
                "rows": summaries.iter().map(|s| s.rows).sum::<u64>(),
                "bytes": summaries.iter().map(|s| s.file_bytes).sum::<u64>(),
                "held_here": true,
            })
        })
        .collect();
    // Groups this node is not a member of: members from placement, tables as last
    // listed by a member; their leader is what their members report.
    for remote in app.groups.remote() {
        let tables = remote.cached_catalog();
        groups.push(json!({
            "id": remote.id(),
            "role": "data",
            "members": remote.member_ids(),
            "learners": [],
            "leader": null,
            "applied_index": null,
            "measurements": tables.len(),
            "rows": tables.iter().map(|t| t.rows).sum::<u64>(),
            "bytes": tables.iter().map(|t| t.file_bytes).sum::<u64>(),
            "held_here": false,
        }));
    }
    groups.sort_by_key(|g| g["id"].as_u64());
    Ok(Json(
        json!({"success": true, "node_id": app.node.node_id(), "groups": groups}),
    ))
}

async fn probe(app: &AppState, addr: &str) -> bool {
    app.node.peers.probe(addr, "/health", PROBE_TIMEOUT).await
}

#[derive(Debug, Deserialize)]
struct AddLearner {
    node_id: u64,
    addr: String,
}

#[derive(Debug, Deserialize)]
struct NodeIds {
    node_ids: Vec<u64>,
}

fn admin(
    app: &AppState,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> Result<(), ApiError> {
    app.auth.check_request(headers, params, Permission::Admin)?;
    Ok(())
}

/// The groups a membership change applies to. With one data group that is the one
/// group, as it always was. With several, a node joins or leaves the metadata group
/// alone: data groups keep `cluster.replication` members, a new node gets replicas by
/// `move` or `rebalance`, and a node leaving must hold none (`drain`).
pub(super) fn groups_changed(app: &AppState) -> Vec<crate::groups::Group> {
    if app.mover.is_some() {
        vec![app.groups.first().clone()]
    } else {
        app.groups.all()
    }
}

/// Refuses to remove a node that still holds data group replicas (placed groups).
fn refuse_removing_replicas(app: &AppState, remove: &BTreeSet<u64>) -> Result<(), ApiError> {
    let Some(mover) = &app.mover else {
        return Ok(());
    };
    for group in 1..=app.groups.data_count() as quiver_raft::GroupId {
        let members: Vec<u64> = mover.members_of(group).iter().map(|(id, _)| *id).collect();
        if let Some(node) = remove.iter().find(|n| members.contains(n)) {
            return Err(ApiError::with_status(
                StatusCode::CONFLICT,
                format!(
                    "node {node} still holds a replica of data group {group} (members \
                     {members:?}): empty it first with quiver cluster drain --node-id {node} \
                     (which needs a node outside the group to take the replica)"
                ),
            ));
        }
    }
    Ok(())
}

fn membership_error(e: WriteError) -> ApiError {
    match e {
        WriteError::NotLeader { .. } => ApiError::overloaded(
            StatusCode::SERVICE_UNAVAILABLE,
            "no leader reachable; retry",
            1,
        ),
        other => ApiError::bad_request(format!("membership change failed: {other}")),
    }
}

/// `POST /api/v1/cluster/add-learner` `{"node_id": 4, "addr": "http://10.0.0.4:8000"}`:
/// returns once the learner has caught up with the log (or a snapshot).
pub async fn cluster_add_learner(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    admin(&app, &headers, &params)?;
    let request: AddLearner = json_body(&body, r#"{"node_id": 4, "addr": "http://host:8000"}"#)?;
    if request.node_id == 0 {
        return Err(ApiError::bad_request("node_id must be at least 1"));
    }
    for group in groups_changed(&app) {
        group
            .node
            .add_learner(request.node_id, request.addr.clone())
            .await
            .map_err(membership_error)?;
    }
    Ok(Json(json!({"success": true})))
}

/// `POST /api/v1/cluster/promote` `{"node_ids": [4]}`: learners become voters.
pub async fn cluster_promote(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    admin(&app, &headers, &params)?;
    let request: NodeIds = json_body(&body, r#"{"node_ids": [4]}"#)?;
    let add: BTreeSet<u64> = request.node_ids.into_iter().collect();
    for group in groups_changed(&app) {
        group
            .node
            .change_voters(add.clone(), BTreeSet::new())
            .await
            .map_err(membership_error)?;
    }
    Ok(Json(json!({"success": true})))
}

/// `POST /api/v1/cluster/remove` `{"node_ids": [3]}`: members leave the cluster.
pub async fn cluster_remove(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    admin(&app, &headers, &params)?;
    let request: NodeIds = json_body(&body, r#"{"node_ids": [3]}"#)?;
    let remove: BTreeSet<u64> = request.node_ids.into_iter().collect();
    refuse_removing_replicas(&app, &remove)?;
    // Data groups first: the first group's membership is what a node's peers see.
    for group in groups_changed(&app).into_iter().rev() {
        group
            .node
            .change_voters(BTreeSet::new(), remove.clone())
            .await
            .map_err(membership_error)?;
    }
    Ok(Json(json!({"success": true})))
}
