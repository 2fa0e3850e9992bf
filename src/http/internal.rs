//! `/internal/`: node-to-node traffic on the public port — Raft RPCs, requests forwarded
//! to the leader, and Parquet files for snapshot catch-up. Every call must present the
//! shared cluster secret; a node without one refuses all of them.

use axum::body::{Body, Bytes};
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

use super::AppState;

/// A refused internal call: status and reason.
type Refusal = (StatusCode, String);

fn authorized(app: &AppState, headers: &HeaderMap) -> Result<(), Refusal> {
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

fn encode<T: Serialize>(value: &T) -> Response {
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
pub async fn append(State(app): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = authorized(&app, &headers) {
        return r.into_response();
    }
    let request: AppendEntriesRequest<TypeConfig> = match decode(&body) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    encode(&app.node.raft.append_entries(request).await)
}

/// `POST /internal/raft/vote`.
pub async fn vote(State(app): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = authorized(&app, &headers) {
        return r.into_response();
    }
    let request: VoteRequest<u64> = match decode(&body) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    encode(&app.node.raft.vote(request).await)
}

/// `POST /internal/raft/snapshot`: one chunk of a snapshot.
pub async fn snapshot(State(app): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = authorized(&app, &headers) {
        return r.into_response();
    }
    let request: InstallSnapshotRequest<TypeConfig> = match decode(&body) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    encode(&app.node.raft.install_snapshot(request).await)
}

/// `POST /internal/forward`: a follower's request for the leader.
pub async fn forward(State(app): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = authorized(&app, &headers) {
        return r.into_response();
    }
    let request: LeaderRequest = match decode(&body) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    let answer: Result<LeaderAnswer, WriteError> = app.node.serve_leader(request).await;
    encode(&answer)
}

/// `GET /internal/files/{path}`: a Parquet file, streamed.
pub async fn file(
    State(app): State<AppState>,
    headers: HeaderMap,
    Path(path): Path<String>,
) -> Response {
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
    let full = app.storage.config().dir.join("parquet").join(&path);
    match tokio::fs::File::open(&full).await {
        Ok(file) => {
            let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024);
            (
                [(header::CONTENT_TYPE, "application/vnd.apache.parquet")],
                Body::from_stream(stream),
            )
                .into_response()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            (StatusCode::NOT_FOUND, format!("{path}: not here")).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{path}: {e}")).into_response(),
    }
}
