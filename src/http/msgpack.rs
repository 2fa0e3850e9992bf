//! `POST /api/v1/write/msgpack`: Arc's MessagePack, columnar or rows. Its decode step
//! for the write pipeline (`write.rs`): MessagePack → Arrow, integers widened to stored
//! float columns, the schema checked. Any error refuses the whole request.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use quiver_storage::widen_integers_to_stored;

use super::error::ApiError;
use super::write::{database_of, now_ns, write, Decoded, Expired, Format};
use super::AppState;

/// Handles `POST /api/v1/write/msgpack`.
pub async fn write_msgpack(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let database = database_of(&headers, &params)?;
    let groups = app.groups.clone();
    let db = database.clone();
    let limits = app.config.limits;
    let decode = Box::new(move |payload: bytes::Bytes| {
        let stored = |measurement: &str| groups.schema_of(&db, measurement);
        let tables = quiver_storage::decode_msgpack(&payload, now_ns(), &limits, &stored)
            .map_err(super::write::decode_error)?;
        let tables = tables
            .into_iter()
            .map(|(measurement, batch)| {
                let batch = match groups.schema_of(&db, &measurement) {
                    Some(stored) => widen_integers_to_stored(batch, &stored)?,
                    None => batch,
                };
                Ok((measurement, batch))
            })
            .collect::<quiver_storage::Result<Vec<_>>>()
            .map_err(|e| ApiError::internal(e.to_string()))?;
        groups
            .check_write(&db, &tables)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let (tables, expired) = refuse_expired(&groups.first().storage, &db, tables)?;
        Ok(Decoded {
            tables,
            rejected: Vec::new(),
            lines_total: 0,
            unit: "lines",
            accept_partial: false,
            expired,
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

/// Decoded rows per measurement.
pub(super) type Tables = Vec<(String, arrow::record_batch::RecordBatch)>;

/// Rows older than their measurement's retention are not written (the others are):
/// says how many, of how many, and why. Shared by the formats that refuse a request as
/// a whole (MessagePack, Prometheus remote write).
pub(super) fn refuse_expired(
    storage: &quiver_storage::Storage,
    database: &str,
    tables: Tables,
) -> Result<(Tables, Option<Expired>), ApiError> {
    let now = quiver_storage::TimestampNs::now();
    let rows_total: usize = tables.iter().map(|(_, b)| b.num_rows()).sum();
    let mut kept = Vec::with_capacity(tables.len());
    let mut expired: Option<Expired> = None;
    for (measurement, batch) in tables {
        let Some(from) = storage.writable_from(database, &measurement, now) else {
            kept.push((measurement, batch));
            continue;
        };
        let (batch, old) = quiver_storage::split_past_retention(&batch, from)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        if old > 0 {
            let e = expired.get_or_insert_with(|| Expired {
                rows: 0,
                rows_total,
                first: String::new(),
            });
            e.rows += old;
            if e.first.is_empty() {
                let retention = storage
                    .with_policies(|p| p.retention_ns(database, &measurement))
                    .map(quiver_storage::lifecycle::format_duration_ns)
                    .unwrap_or_default();
                let cutoff = chrono::DateTime::from_timestamp_nanos(from.0)
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                e.first = format!(
                    "rows of {database}.{measurement} older than its retention ({retention}, before {cutoff})"
                );
            }
        }
        if batch.num_rows() > 0 {
            kept.push((measurement, batch));
        }
    }
    Ok((kept, expired))
}
