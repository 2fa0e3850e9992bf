//! Moving data group replicas: `POST /api/v1/cluster/groups/{group}/move`,
//! `POST /api/v1/cluster/drain`, `POST /api/v1/cluster/rebalance`, and the steps nodes ask of each other
//! (`/internal/groups/{group}/{host,retire,move}`); `src/groups/moves.rs` does the work.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use quiver_raft::GroupId;
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::json_body;
use super::error::ApiError;
use super::internal::{authorized_body, encode, SMALL_BODY_BYTES_MAX};
use super::AppState;
use crate::auth::Permission;
use crate::groups::moves::{MembersMessage, MoveError, MoveRequest, Mover};

#[derive(Debug, Deserialize)]
struct MoveBody {
    from: u64,
    to: u64,
}

#[derive(Debug, Deserialize)]
struct DrainBody {
    node_id: u64,
}

fn mover(app: &AppState) -> Result<Arc<Mover>, ApiError> {
    app.mover.clone().ok_or_else(|| {
        ApiError::bad_request(
            "this cluster has one data group, on every node: there is no replica to move \
             (cluster.data_groups = 1)",
        )
    })
}

fn move_error(e: MoveError) -> ApiError {
    match e {
        MoveError::Invalid(m) => ApiError::bad_request(m),
        MoveError::NotHere(m) => ApiError::with_status(StatusCode::CONFLICT, m),
        MoveError::Failed(m) => ApiError::overloaded(StatusCode::SERVICE_UNAVAILABLE, m, 1),
    }
}

fn members_json(members: &[(u64, String)]) -> Vec<u64> {
    members.iter().map(|(id, _)| *id).collect()
}

/// `POST /api/v1/cluster/groups/{group}/move` `{"from": 3, "to": 4}` (admin): moves the
/// group's replica on node `from` to node `to`, with its files; answers once `to` is a
/// voter and `from` has left. Asking again finishes a move that failed part way.
pub async fn move_replica(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    let mover = mover(&app)?;
    let request: MoveBody = json_body(&body, r#"{"from": 3, "to": 4}"#)?;
    let request = MoveRequest {
        group,
        from: request.from,
        to: request.to,
    };
    let members = mover.move_anywhere(request).await.map_err(move_error)?;
    Ok(Json(json!({
        "success": true,
        "group": group,
        "members": members_json(&members),
    })))
}

/// `POST /api/v1/cluster/drain` `{"node_id": 3}` (admin): moves every data group replica
/// off the node, one at a time, to the nodes holding fewest; answers with the moves.
pub async fn drain(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    let mover = mover(&app)?;
    let request: DrainBody = json_body(&body, r#"{"node_id": 3}"#)?;
    let moves = mover.drain(request.node_id).await.map_err(move_error)?;
    Ok(Json(json!({
        "success": true,
        "node_id": request.node_id,
        "moves": moves
            .iter()
            .map(|m| json!({"group": m.group, "from": m.from, "to": m.to}))
            .collect::<Vec<_>>(),
    })))
}

/// `POST /api/v1/cluster/rebalance` (admin): moves replicas from the nodes holding
/// most to those holding fewest until no two differ by more than one; answers with the
/// moves.
pub async fn rebalance(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    let mover = mover(&app)?;
    let moves = mover.rebalance().await.map_err(move_error)?;
    Ok(Json(json!({
        "success": true,
        "moves": moves
            .iter()
            .map(|m| json!({"group": m.group, "from": m.from, "to": m.to}))
            .collect::<Vec<_>>(),
    })))
}

/// `GET /api/v1/cluster/balance` (read): the byte balance as this node sees it: each
/// group's members and bytes, each node's bytes and share of the mean, and the move the
/// metadata leader would make next (`null`: none).
pub async fn balance(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Read)?;
    let mover = mover(&app)?;
    let holdings = mover.holdings();
    let loads = holdings.loads();
    let mean = loads.values().sum::<u64>() as f64 / loads.len().max(1) as f64;
    let next = holdings.next_move(crate::groups::moves::balance::TOLERANCE);
    Ok(Json(json!({
        "success": true,
        "node_id": app.config.cluster.node_id,
        "decides": app.groups.first().node.is_leader(),
        "paused": !app.config.cluster.balance_replicas,
        "bytes_min": app.config.cluster.balance_bytes_min,
        "tolerance": crate::groups::moves::balance::TOLERANCE,
        "groups": holdings.members.iter().map(|(g, m)| json!({
            "id": g,
            "members": m,
            "bytes": holdings.bytes.get(g),
        })).collect::<Vec<_>>(),
        "nodes": loads.iter().map(|(n, l)| json!({
            "node_id": n,
            "bytes": l,
            "of_mean": if mean > 0.0 { *l as f64 / mean } else { 0.0 },
        })).collect::<Vec<_>>(),
        "next_move": if mover.nodes_down().is_empty() {
            next.map(|m| json!({"group": m.group, "from": m.from, "to": m.to}))
        } else {
            None
        },
        "nodes_down": mover.nodes_down().iter().map(|(n, d)| json!({
            "node_id": n,
            "down_ms": d.as_millis() as u64,
        })).collect::<Vec<_>>(),
        "under_replicated": mover.under_replicated(),
        "rereplicate_after_ms": app.config.cluster.rereplicate_after_ms,
    })))
}

/// `POST /internal/groups/{group}/host`: start the group here, waiting to be added.
pub async fn host(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    members_step(app, group, headers, body, Step::Host).await
}

/// `POST /internal/groups/{group}/retire`: this node left the group; delete its copy.
pub async fn retire(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    members_step(app, group, headers, body, Step::Retire).await
}

/// The two steps of a move another node asks of this one with a list of members.
enum Step {
    Host,
    Retire,
}

async fn members_step(
    app: AppState,
    group: GroupId,
    headers: HeaderMap,
    body: Body,
    step: Step,
) -> Response {
    let message: MembersMessage =
        match authorized_body(&app, &headers, body, SMALL_BODY_BYTES_MAX).await {
            Ok(m) => m,
            Err(response) => return response,
        };
    let answer = match (&app.mover, step) {
        (Some(mover), Step::Host) => mover.host(group, message).await,
        (Some(mover), Step::Retire) => mover.retire(group, message).await,
        (None, _) => Err("this node runs one data group".to_string()),
    };
    encode(&answer)
}

/// `POST /internal/groups/{group}/move`: drive a move (this node is a voter of the
/// group); 404 when it is not, so the asker tries another member.
pub async fn drive(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let request: MoveRequest =
        match authorized_body(&app, &headers, body, SMALL_BODY_BYTES_MAX).await {
            Ok(r) => r,
            Err(response) => return response,
        };
    let Some(mover) = &app.mover else {
        return (StatusCode::NOT_FOUND, "this node runs one data group").into_response();
    };
    if request.group != group {
        return (
            StatusCode::BAD_REQUEST,
            "the group in the path and the body differ",
        )
            .into_response();
    }
    let answer: Result<Vec<(u64, String)>, String> = match mover.drive(request).await {
        Err(MoveError::NotHere(m)) => return (StatusCode::NOT_FOUND, m).into_response(),
        other => other.map_err(|e| e.to_string()),
    };
    encode(&answer)
}

/// `POST /internal/leading`: the data groups this node leads, for another node
/// spreading leaders (`src/groups/moves/leaders.rs`).
pub async fn leading(State(app): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    if let Err(response) = authorized_body::<()>(&app, &headers, body, SMALL_BODY_BYTES_MAX).await {
        return response;
    }
    let led: Vec<GroupId> = app
        .mover
        .as_ref()
        .map(|m| m.leading_here())
        .unwrap_or_default();
    encode(&led)
}
