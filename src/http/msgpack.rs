//! `POST /api/v1/write/msgpack`: Arc's MessagePack, columnar or rows.
//!
//! admit → decompress and decode into Arrow on a blocking thread → check the schema →
//! encode the Raft command → propose → 204. MessagePack errors reject the whole request.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use quiver_raft::WriteCommand;
use quiver_storage::widen_integers_to_stored;

use super::body::decompress;
use super::error::ApiError;
use super::ingest::{admit, database_of, now_ns, propose};
use super::AppState;

/// Handles `POST /api/v1/write/msgpack`.
pub async fn write_msgpack(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let database = database_of(&headers, &params)?;
    let admitted = admit(&app, &headers, &params, body).await?;
    let decompressed_bytes_max = app.config.http.decompressed_bytes_max;
    let storage = app.storage.clone();
    let db = database.clone();
    let raw = admitted.body.clone();
    let command = tokio::task::spawn_blocking(move || -> Result<WriteCommand, ApiError> {
        let payload = decompress(raw, &headers, decompressed_bytes_max)?;
        let tables = quiver_storage::decode_msgpack(&payload, now_ns())
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let tables = tables
            .into_iter()
            .map(|(measurement, batch)| {
                let batch = match storage.schema_of(&db, &measurement) {
                    Some(stored) => widen_integers_to_stored(batch, &stored)?,
                    None => batch,
                };
                Ok((measurement, batch))
            })
            .collect::<quiver_storage::Result<Vec<_>>>()
            .map_err(|e| ApiError::internal(e.to_string()))?;
        storage
            .check_write(&db, &tables)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        WriteCommand::encode(&db, &tables).map_err(|e| ApiError::internal(e.to_string()))
    })
    .await
    .map_err(|e| ApiError::internal(format!("decoder task failed: {e}")))??;
    let rows = command.rows();
    propose(&app, command).await?;
    drop(admitted);
    metrics::counter!("quiver_rows_written_total", "format" => "msgpack").increment(rows);
    Ok(StatusCode::NO_CONTENT)
}
