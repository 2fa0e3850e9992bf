//! `/internal/groups/{group}/{commit,barrier,table,catalog,range,delete}`: what a node
//! that is not a member of a data group asks a member (`src/groups/remote.rs` asks).
//! Each checks the cluster secret before reading the body, like every `/internal/`
//! route; a node that is not a member answers 404 and the asker tries another member.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use object_store::ObjectStoreExt;
use quiver_raft::{CommandResult, GroupId, LeaderRequest, WriteError};
use quiver_storage::{TableSnapshotWire, TableSource};

use super::admission::cannot_take_rows;
use super::internal::{authorized_body, encode, group_of, ENVELOPE_BYTES, SMALL_BODY_BYTES_MAX};
use super::AppState;
use crate::groups::remote::{RangeAnswer, RangeRequest, TableListing, TableRequest};

/// `POST .../commit`: a write, delete or rule for this group, committed through its
/// leader (forwarded when this member does not lead) and applied here before the
/// answer, as if a client had sent it to this node.
pub async fn commit(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let group = match group_of(&app, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    let bytes_max = app.config.raft.entry_bytes_max + ENVELOPE_BYTES;
    let request: LeaderRequest = match authorized_body(&app, &headers, body, bytes_max).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    let answer: Result<CommandResult, WriteError> = match request {
        LeaderRequest::Write(command) => match cannot_take_rows(&app) {
            // This member's own limits hold for rows sent through it.
            Some((reason, message)) => {
                metrics::counter!("quiver_writes_refused_total", "reason" => reason).increment(1);
                Err(WriteError::Unavailable(format!(
                    "a member of group {} refuses: {message}",
                    group.id
                )))
            }
            None => group.node.write(command).await,
        },
        LeaderRequest::Policy(change) => group.node.change_policy(change).await,
        other => Err(WriteError::Unavailable(format!(
            "not a request another node sends to a group's member: {other:?}"
        ))),
    };
    encode(&answer)
}

/// `POST .../barrier`: waits until this member has applied everything the group had
/// committed when the call arrived.
pub async fn barrier(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let group = match group_of(&app, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    if let Err(response) = authorized_body::<()>(&app, &headers, body, SMALL_BODY_BYTES_MAX).await {
        return response;
    }
    let answer: Result<(), WriteError> = group.node.read_barrier().await;
    encode(&answer)
}

/// `POST .../table`: a snapshot of one of the group's tables (`None`: no such table).
pub async fn table(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let group = match group_of(&app, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    let request: TableRequest =
        match authorized_body(&app, &headers, body, SMALL_BODY_BYTES_MAX).await {
            Ok(r) => r,
            Err(response) => return response,
        };
    let mut snapshot = group.storage.table(&request.database, &request.measurement);
    if request.schema_only {
        if let Some(s) = snapshot.as_mut() {
            s.memory.clear();
            s.files = quiver_storage::SnapshotFiles::Listed(Vec::new());
            s.tombstones.clear();
        }
    }
    let answer: Result<Option<TableSnapshotWire>, String> = snapshot
        .map(|s| TableSnapshotWire::from_snapshot(&s))
        .transpose()
        .map_err(|e| e.to_string());
    encode(&answer)
}

/// `POST .../catalog`: the group's tables.
pub async fn catalog(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let group = match group_of(&app, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    if let Err(response) = authorized_body::<()>(&app, &headers, body, SMALL_BODY_BYTES_MAX).await {
        return response;
    }
    let listing: Vec<TableListing> = group
        .storage
        .summaries(None)
        .into_iter()
        .map(|s| TableListing {
            database: s.key.database,
            measurement: s.key.measurement,
            rows: s.rows,
            file_count: s.file_count as u64,
            file_bytes: s.file_bytes,
            memory_rows: s.memory_rows,
            time_min: s.time_min,
            time_max: s.time_max,
        })
        .collect();
    encode(&listing)
}

/// Largest range one call returns (a Parquet column chunk is far smaller; a larger
/// read is an error rather than a huge answer).
const RANGE_BYTES_MAX: u64 = 256 << 20;

/// `POST .../range`: bytes of one of the group's files, from this member's disk or
/// bucket.
pub async fn range(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let group = match group_of(&app, group) {
        Ok(g) => g,
        Err(r) => return r.into_response(),
    };
    let request: RangeRequest =
        match authorized_body(&app, &headers, body, SMALL_BODY_BYTES_MAX).await {
            Ok(r) => r,
            Err(response) => return response,
        };
    if !quiver_raft::is_servable_path(&request.path) {
        return (
            StatusCode::BAD_REQUEST,
            format!("not a file path: {:?}", request.path),
        )
            .into_response();
    }
    let store = group.storage.object_store();
    let path = object_store::path::Path::from(request.path.as_str());
    let answer = async {
        let size = store.head(&path).await.map_err(|e| e.to_string())?.size;
        if request.head {
            return Ok(RangeAnswer {
                size,
                start: 0,
                data: bytes::Bytes::new(),
            });
        }
        let start = request.start.unwrap_or(0).min(size);
        let end = request.end.unwrap_or(size).min(size);
        if end.saturating_sub(start) > RANGE_BYTES_MAX {
            return Err(format!(
                "{}: a range of {} bytes is more than one call returns ({RANGE_BYTES_MAX})",
                request.path,
                end - start
            ));
        }
        let data = if start < end {
            store
                .get_range(&path, start..end)
                .await
                .map_err(|e| e.to_string())?
        } else {
            bytes::Bytes::new()
        };
        Ok(RangeAnswer { size, start, data })
    }
    .await;
    let answer: Result<RangeAnswer, String> = answer;
    encode(&answer)
}

/// `POST .../delete`: a delete request a node that does not hold the group passes on
/// (it checked the client's token); answered as (HTTP status, JSON body).
pub async fn delete(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(r) = group_of(&app, group) {
        return r.into_response();
    }
    let request: String = match authorized_body(&app, &headers, body, SMALL_BODY_BYTES_MAX).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    let answer = super::delete::delete_for_peer(&app, &request).await;
    encode(&answer)
}
