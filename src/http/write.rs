//! `POST /api/v1/write/msgpack`: the first stage of a write.
//!
//! authenticate → read the body within limits → decompress → decode into Arrow (on a
//! blocking thread) → check the schema → encode the Raft command → propose and wait
//! until it is committed and applied → 204. Overload is refused before anything is
//! proposed, so a 429/503 never leaves rows behind.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use quiver_raft::{CommandResult, WriteCommand, WriteError};

use super::body::{decompress, read_limited};
use super::error::ApiError;
use super::AppState;
use crate::auth::Permission;

/// Seconds a client is told to wait when the node is overloaded.
const RETRY_AFTER_S: u32 = 1;

/// The database a write or query addresses: `x-arc-database`, then `db`, then
/// `bucket`, then `default`.
pub fn database_of(
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> Result<String, ApiError> {
    let db = headers
        .get("x-arc-database")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| params.get("db").cloned())
        .or_else(|| params.get("bucket").cloned())
        .unwrap_or_else(|| "default".to_string());
    quiver_storage::validate_database_name(&db)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(db)
}

fn now_ns() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
}

/// Handles `POST /api/v1/write/msgpack`.
pub async fn write_msgpack(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    app.auth.check(
        &headers,
        params.get("p").map(String::as_str),
        Permission::Write,
    )?;
    let database = database_of(&headers, &params)?;
    let _permit = app.write_permits.clone().try_acquire_owned().map_err(|_| {
        metrics::counter!("quiver_writes_refused_total", "reason" => "in_flight").increment(1);
        ApiError::overloaded(
            StatusCode::TOO_MANY_REQUESTS,
            "too many writes in flight; retry later",
            RETRY_AFTER_S,
        )
    })?;
    if app.storage.is_over_memory_limit() {
        metrics::counter!("quiver_writes_refused_total", "reason" => "memory").increment(1);
        return Err(ApiError::overloaded(
            StatusCode::SERVICE_UNAVAILABLE,
            "buffers are full while flushes catch up; retry later",
            RETRY_AFTER_S,
        ));
    }
    let raw = read_limited(body, &headers, app.config.http.body_bytes_max).await?;
    let decompressed_bytes_max = app.config.http.decompressed_bytes_max;
    let storage = app.storage.clone();
    let db = database.clone();
    let command = tokio::task::spawn_blocking(move || -> Result<WriteCommand, ApiError> {
        let payload = decompress(raw, &headers, decompressed_bytes_max)?;
        let tables = quiver_storage::decode_msgpack(&payload, now_ns())
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        storage
            .check_write(&db, &tables)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        WriteCommand::encode(&db, &tables).map_err(|e| ApiError::internal(e.to_string()))
    })
    .await
    .map_err(|e| ApiError::internal(format!("decoder task failed: {e}")))??;
    let rows = command.rows();
    propose(&app, command).await?;
    metrics::counter!("quiver_rows_written_total", "format" => "msgpack").increment(rows);
    Ok(StatusCode::NO_CONTENT)
}

/// Proposes a decoded write and maps the outcome to an answer.
pub async fn propose(app: &AppState, command: WriteCommand) -> Result<(), ApiError> {
    match app.node.write(command).await {
        Ok(CommandResult::Written { .. }) => Ok(()),
        Ok(CommandResult::Rejected { message }) => Err(ApiError::bad_request(message)),
        Ok(other) => Err(ApiError::internal(format!(
            "unexpected apply result {other:?}"
        ))),
        Err(WriteError::NotLeader { leader }) => Err(ApiError::overloaded(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("this node is not the leader (leader: {leader:?}); retry"),
            RETRY_AFTER_S,
        )),
        Err(WriteError::Unavailable(message)) => Err(ApiError::overloaded(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot commit writes now: {message}"),
            RETRY_AFTER_S,
        )),
    }
}
