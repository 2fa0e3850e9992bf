//! `POST /api/v1/write/msgpack`: Arc's MessagePack, columnar or rows. Its decode step
//! for the write pipeline (`write.rs`): MessagePack → Arrow, integers widened to stored
//! float columns, the schema checked. Any error refuses the whole request.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use quiver_storage::widen_integers_to_stored;

use super::error::ApiError;
use super::write::{database_of, now_ns, write, Decoded, Format};
use super::AppState;

/// Handles `POST /api/v1/write/msgpack`.
pub async fn write_msgpack(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let database = database_of(&headers, &params)?;
    let storage = app.storage.clone();
    let db = database.clone();
    let limits = app.config.limits;
    let decode = Box::new(move |payload: bytes::Bytes| {
        let stored = |measurement: &str| storage.schema_of(&db, measurement);
        let tables = quiver_storage::decode_msgpack(&payload, now_ns(), &limits, &stored)
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
        Ok(Decoded {
            tables,
            rejected: Vec::new(),
            lines_total: 0,
            accept_partial: false,
        })
    });
    write(
        &app,
        database,
        Format::MsgPack,
        &params,
        headers,
        body,
        decode,
    )
    .await
}
