//! `/internal/`: node-to-node traffic on the public port — Raft RPCs, requests forwarded
//! to the leader, this node's log state for a starting peer, and Parquet files for
//! snapshot catch-up. Mounted only on a node with a cluster secret; every call must
//! present it, and it is checked before a byte of the body is read. Bodies are bounded
//! per route (a vote is tiny, an AppendEntries holds at most one WAL record's worth).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use quiver_raft::{
    is_servable_path, secret_matches, LeaderAnswer, LeaderRequest, TypeConfig, WriteError,
    SECRET_HEADER,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::admission::{cannot_take_rows, Charge, ChargeRefused};
use super::AppState;
use crate::groups::Group;
use quiver_raft::{GroupId, FIRST_GROUP};

/// A refused internal call: status and reason.
type Refusal = (StatusCode, String);

/// Largest vote or state request.
pub(super) const SMALL_BODY_BYTES_MAX: usize = 64 * 1024;
/// Room for framing around the payload of a bounded request.
pub(super) const ENVELOPE_BYTES: usize = 1 << 20;
/// Largest snapshot chunk (openraft's `snapshot_max_chunk_size` default is 3 MiB).
const SNAPSHOT_CHUNK_BYTES_MAX: usize = 3 << 20;

/// Largest AppendEntries body: the replication batch, or one entry of the largest size
/// the WAL can hold (entries older than `raft.entry_bytes_max` may be that large).
fn append_body_bytes_max(app: &AppState) -> usize {
    let one_entry = quiver_wal::format::PAYLOAD_BYTES_MAX as usize;
    app.config.raft.replication_bytes_max.max(one_entry) + ENVELOPE_BYTES
}

/// Checks the secret, then reads at most `bytes_max` of the body and decodes it.
pub(super) async fn authorized_body<T: DeserializeOwned>(
    app: &AppState,
    headers: &HeaderMap,
    body: Body,
    bytes_max: usize,
) -> Result<T, Response> {
    authorized(app, headers).map_err(IntoResponse::into_response)?;
    let bytes = axum::body::to_bytes(body, bytes_max).await.map_err(|e| {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("internal request body over {bytes_max} bytes or unreadable: {e}"),
        )
            .into_response()
    })?;
    decode(&bytes).map_err(IntoResponse::into_response)
}

pub(super) fn authorized(app: &AppState, headers: &HeaderMap) -> Result<(), Refusal> {
    let presented = headers
        .get(SECRET_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if secret_matches(&app.config.cluster.secret, presented) {
        Ok(())
    } else {
        metrics::counter!("quiver_internal_refused_total").increment(1);
        Err((
            StatusCode::UNAUTHORIZED,
            "cluster secret missing or wrong".to_string(),
        ))
    }
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, Refusal> {
    rmp_serde::from_slice(body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("undecodable internal request: {e}"),
        )
    })
}

pub(super) fn encode<T: Serialize>(value: &T) -> Response {
    match rmp_serde::to_vec_named(value) {
        Ok(bytes) => (
            [(header::CONTENT_TYPE, quiver_raft::INTERNAL_CONTENT_TYPE)],
            bytes,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the answer: {e}"),
        )
            .into_response(),
    }
}

/// `POST /internal/raft/append`.
async fn append_in(app: AppState, group: GroupId, headers: HeaderMap, body: Body) -> Response {
    let group = match group_of(&app, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    let bytes_max = append_body_bytes_max(&app);
    let request: AppendEntriesRequest<TypeConfig> =
        match authorized_body(&app, &headers, body, bytes_max).await {
            Ok(r) => r,
            Err(response) => return response,
        };
    if let Err(reason) = group.node.may_take_entries(&request.vote) {
        return (StatusCode::SERVICE_UNAVAILABLE, reason).into_response();
    }
    // Entries are refused while this node cannot take them (its volume under the
    // watermark, its buffers full), so it never appends until its disk is full and Raft
    // stops; heartbeats still pass, so it does not start elections. The leader learns
    // the reason (see `RaftNode::takers_refusal`) and refuses writes once a majority of
    // voters cannot take them.
    if !request.entries.is_empty() {
        let refusal = cannot_take_rows(&app);
        group.node.note_takes_entries(refusal.is_none());
        if let Some((reason, message)) = refusal {
            metrics::counter!("quiver_entries_refused_total", "reason" => reason).increment(1);
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{}{message}", quiver_raft::ENTRIES_REFUSED_PREFIX),
            )
                .into_response();
        }
    }
    encode(&group.node.append_entries(request).await)
}

/// `POST /internal/raft/vote`. A node whose log was lost refuses to vote until it is
/// part of the cluster again (see `RaftNode::may_vote`).
async fn vote_in(app: AppState, group: GroupId, headers: HeaderMap, body: Body) -> Response {
    let group = match group_of(&app, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    let request: VoteRequest<u64> =
        match authorized_body(&app, &headers, body, SMALL_BODY_BYTES_MAX).await {
            Ok(r) => r,
            Err(response) => return response,
        };
    if let Err(reason) = group.node.may_vote(&request) {
        return (StatusCode::SERVICE_UNAVAILABLE, reason).into_response();
    }
    encode(&group.node.raft.vote(request).await)
}

/// `POST /internal/raft/snapshot`: one chunk of a snapshot.
async fn snapshot_in(app: AppState, group: GroupId, headers: HeaderMap, body: Body) -> Response {
    let group = match group_of(&app, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    let request: InstallSnapshotRequest<TypeConfig> = match authorized_body(
        &app,
        &headers,
        body,
        SNAPSHOT_CHUNK_BYTES_MAX + ENVELOPE_BYTES,
    )
    .await
    {
        Ok(r) => r,
        Err(response) => return response,
    };
    if let Err(reason) = group.node.may_take_entries(&request.vote) {
        return (StatusCode::SERVICE_UNAVAILABLE, reason).into_response();
    }
    // A snapshot written onto a full volume would fail part-way, and a failed install
    // stops Raft: refused until there is room (the leader tries again).
    if let Some(reason) = app.data_volume.low().or_else(|| app.wal_volume.low()) {
        metrics::counter!("quiver_entries_refused_total", "reason" => "disk").increment(1);
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}{reason}", quiver_raft::ENTRIES_REFUSED_PREFIX),
        )
            .into_response();
    }
    encode(&group.node.install_snapshot(request).await)
}

/// `POST /internal/forward`: a follower's request for the leader. A forwarded write
/// holds its bytes against this node's write budget too, like a write sent here.
async fn forward_in(app: AppState, group: GroupId, headers: HeaderMap, body: Body) -> Response {
    let group = match group_of(&app, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    let bytes_max = app.config.raft.entry_bytes_max + ENVELOPE_BYTES;
    let request: LeaderRequest = match authorized_body(&app, &headers, body, bytes_max).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    let mut charge = Charge::default();
    if let LeaderRequest::Write(_) | LeaderRequest::Delete(_) = &request {
        // The leader's own limits hold for writes sent through a follower too.
        if let Some((reason, message)) = cannot_take_rows(&app) {
            metrics::counter!("quiver_writes_refused_total", "reason" => reason).increment(1);
            let answer: Result<LeaderAnswer, WriteError> = Err(WriteError::Unavailable(format!(
                "the leader refuses: {message}"
            )));
            return encode(&answer);
        }
    }
    if let LeaderRequest::Write(command) = &request {
        if let Err(refused) = app.write_budget.try_charge(&mut charge, command.bytes()) {
            let reason = match refused {
                ChargeRefused::Busy => "the leader's write budget is in use; retry later".to_string(),
                ChargeRefused::TooLarge { bytes, bytes_max } => format!(
                    "the write needs {bytes} bytes, more than the leader's http.write_bytes_in_flight_max ({bytes_max})"
                ),
            };
            let answer: Result<LeaderAnswer, WriteError> = Err(WriteError::Unavailable(reason));
            return encode(&answer);
        }
    }
    let answer: Result<LeaderAnswer, WriteError> = group.node.serve_leader(request).await;
    drop(charge);
    encode(&answer)
}

/// `GET /internal/state`: whether this node belongs to an initialised cluster and who
/// its voters are; a peer starting with an empty log asks before it bootstraps.
async fn state_in(app: AppState, group: GroupId, headers: HeaderMap) -> Response {
    let group = match group_of(&app, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    if let Err(r) = authorized(&app, &headers) {
        return r.into_response();
    }
    let mut state = group.node.peer_state();
    state.entries_refused = cannot_take_rows(&app).map(|(_, why)| why);
    encode(&state)
}

/// `GET /internal/files/{path}`: a Parquet file, streamed.
async fn file_in(app: AppState, group: GroupId, headers: HeaderMap, path: String) -> Response {
    let group = match group_of(&app, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    if let Err(r) = authorized(&app, &headers) {
        return r.into_response();
    }
    if !is_servable_path(&path) {
        return (
            StatusCode::BAD_REQUEST,
            format!("not a file path: {path:?}"),
        )
            .into_response();
    }
    // From local disk or from the bucket, whichever holds this node's files.
    match group.storage.file_store().open_stream(&path).await {
        Ok(Some(stream)) => (
            [(header::CONTENT_TYPE, "application/vnd.apache.parquet")],
            Body::from_stream(stream),
        )
            .into_response(),
        Ok(None) => (StatusCode::NOT_FOUND, format!("{path}: not here")).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{path}: {e}")).into_response(),
    }
}

/// The group a call names, if this node runs it.
pub(super) fn group_of(app: &AppState, group: GroupId) -> Result<Group, Refusal> {
    // A group this node is taking a replica of answers too: its Raft must hear the
    // leader before it is a voter.
    app.groups.running(group).ok_or_else(|| {
        (
            StatusCode::NOT_FOUND,
            format!("this node is not a member of group {group}"),
        )
    })
}

/// The handlers of one route shape each: the first group's routes (`/internal/raft/...`,
/// as before groups existed) and every other group's (`/internal/groups/{group}/...`).
macro_rules! group_routes {
    ($($first:ident, $other:ident => $inner:ident;)*) => {$(
        #[doc = concat!("The first group's `", stringify!($first), "` route.")]
        pub async fn $first(State(app): State<AppState>, headers: HeaderMap, body: Body) -> Response {
            $inner(app, FIRST_GROUP, headers, body).await
        }

        #[doc = concat!("Another group's `", stringify!($first), "` route.")]
        pub async fn $other(
            State(app): State<AppState>,
            Path(group): Path<GroupId>,
            headers: HeaderMap,
            body: Body,
        ) -> Response {
            $inner(app, group, headers, body).await
        }
    )*};
}

group_routes! {
    append, group_append => append_in;
    vote, group_vote => vote_in;
    snapshot, group_snapshot => snapshot_in;
    forward, group_forward => forward_in;
}

/// `GET /internal/state` of the first group.
pub async fn state(State(app): State<AppState>, headers: HeaderMap) -> Response {
    state_in(app, FIRST_GROUP, headers).await
}

/// `GET /internal/groups/{group}/state`.
pub async fn group_state(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    headers: HeaderMap,
) -> Response {
    state_in(app, group, headers).await
}

/// `GET /internal/files/{path}` of the first group.
pub async fn file(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(path): Path<String>,
) -> Response {
    file_in(app, FIRST_GROUP, headers, path).await
}

/// `GET /internal/groups/{group}/files/{path}`.
pub async fn group_file(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path((group, path)): Path<(GroupId, String)>,
) -> Response {
    file_in(app, group, headers, path).await
}
