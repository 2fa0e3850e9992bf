//! `/api/v1/backup/...` (admin): what `quiver backup` copies from a running node.
//!
//! * `GET /api/v1/backup`: this node's id and the groups it runs.
//! * `POST /api/v1/backup/groups/{group}/snapshot`: a snapshot of the group holding every
//!   entry committed when the call began (`quiver_raft::snapshot_for_backup`), streamed;
//!   its log position in the `x-quiver-snapshot-index` and `-term` headers.
//! * `GET /api/v1/backup/groups/{group}/files/{path}`: one Parquet file the snapshot
//!   lists, streamed from local disk or the bucket, as peers fetch them for a snapshot.
//!
//! Peers use `/internal/` with the cluster secret; an operator's tool has a token, and a
//! single node has no `/internal/` at all, hence these routes.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use quiver_raft::{is_servable_path, GroupId};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

use super::error::ApiError;
use super::AppState;
use crate::auth::Permission;
use crate::groups::{group_dirs, Group};

/// Longest a backup waits for its snapshot to be built.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(300);
/// Size of the pieces a snapshot is streamed in.
const CHUNK_BYTES: usize = 1 << 20;
/// Header with the snapshot's last log index.
pub const SNAPSHOT_INDEX_HEADER: &str = "x-quiver-snapshot-index";
/// Header with the snapshot's last log term.
pub const SNAPSHOT_TERM_HEADER: &str = "x-quiver-snapshot-term";

fn admin(
    app: &AppState,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> Result<(), ApiError> {
    app.auth
        .check_request(headers, params, Permission::Admin)
        .map(|_| ())
        .map_err(ApiError::from)
}

fn group_of(app: &AppState, id: GroupId) -> Result<Group, ApiError> {
    app.groups.get(id).ok_or_else(|| {
        ApiError::with_status(
            StatusCode::NOT_FOUND,
            format!("this node does not run group {id}"),
        )
    })
}

/// `GET /api/v1/backup`: `{"node_id", "data_groups", "groups": [ids],
/// "remote_groups": [{"id", "members": [addresses]}]}`. The groups this node does not
/// run (placed on other nodes) are listed with their members, so a backup of the
/// cluster takes each of them from one of its members.
pub async fn describe(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    admin(&app, &headers, &params)?;
    let groups: Vec<GroupId> = app.groups.all().iter().map(|g| g.id).collect();
    let remote: Vec<Value> = app
        .groups
        .remote()
        .iter()
        .map(|r| json!({"id": r.id(), "members": r.member_addrs()}))
        .collect();
    Ok(Json(json!({
        "success": true,
        "node_id": app.config.cluster.node_id,
        "data_groups": app.config.cluster.data_groups,
        "groups": groups,
        "remote_groups": remote,
        "version": env!("CARGO_PKG_VERSION"),
    })))
}

/// `POST /api/v1/backup/groups/{group}/snapshot`: the snapshot file, streamed.
pub async fn snapshot(
    State(app): State<AppState>,
    Path(group): Path<GroupId>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&app, &headers, &params)?;
    let group = group_of(&app, group)?;
    let dirs = group_dirs(&app.config.storage.dir, &app.config.wal_dir(), group.id);
    let taken = quiver_raft::snapshot_for_backup(&group.node, &dirs.data, SNAPSHOT_TIMEOUT)
        .await
        .map_err(|e| match e {
            quiver_raft::BackupError::Barrier(_) => ApiError::overloaded(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("group {}: {e}", group.id),
                1,
            ),
            other => ApiError::internal(format!("group {}: {other}", group.id)),
        })?;
    let (index, term) = taken
        .meta
        .last_log_id
        .map_or((0, 0), |l| (l.index, l.leader_id.term));
    metrics::counter!("quiver_backup_snapshots_total").increment(1);
    let chunks = futures::stream::unfold(Some(taken.file), |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; CHUNK_BYTES];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, taken.size_bytes.to_string()),
            (
                header::HeaderName::from_static(SNAPSHOT_INDEX_HEADER),
                index.to_string(),
            ),
            (
                header::HeaderName::from_static(SNAPSHOT_TERM_HEADER),
                term.to_string(),
            ),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}

/// `GET /api/v1/backup/groups/{group}/files/{path}`: one Parquet file, streamed.
pub async fn file(
    State(app): State<AppState>,
    Path((group, path)): Path<(GroupId, String)>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&app, &headers, &params)?;
    let group = group_of(&app, group)?;
    if !is_servable_path(&path) {
        return Err(ApiError::bad_request(format!("not a file path: {path:?}")));
    }
    match group.storage.file_store().open_stream(&path).await {
        Ok(Some(stream)) => Ok((
            [(header::CONTENT_TYPE, "application/vnd.apache.parquet")],
            Body::from_stream(stream.map(|r| r.map_err(std::io::Error::other))),
        )
            .into_response()),
        Ok(None) => Err(ApiError::with_status(
            StatusCode::NOT_FOUND,
            format!("{path}: not here (a compaction may have replaced it)"),
        )),
        Err(e) => Err(ApiError::internal(format!("{path}: {e}"))),
    }
}
