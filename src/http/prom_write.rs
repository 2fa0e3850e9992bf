//! `POST /api/v1/prom/write?db=NAME`: Prometheus remote write 1.0 (a snappy-compressed
//! protobuf `WriteRequest`). Its decode step for the write pipeline (`write.rs`): one
//! measurement per metric name, labels as tags, each sample a row with a float `value`
//! and its millisecond time (`quiver_storage::prom_remote`). Stale markers are skipped
//! and counted (`quiver_prom_stale_samples_skipped_total`). A malformed series is
//! refused alone: the others are written and the answer is 400 listing the refused
//! series (`"line"` is the series' position, `"text"` its metric), which Prometheus logs
//! and does not resend; a body that is no `WriteRequest` is refused whole. 429 and 503
//! Prometheus retries. 204 once the rows are durable, like every other write.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};

use super::body::content_encoding;
use super::error::{ApiError, RejectedLine};
use super::msgpack::refuse_expired;
use super::write::{database_of, write, Decoded, Format};
use super::AppState;

/// Handles `POST /api/v1/prom/write` (database from `x-arc-database`, then `db`).
pub async fn write_prom(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let database = database_of(&headers, &params)?;
    let groups = app.groups.clone();
    let db = database.clone();
    let limits = app.config.limits;
    let snappy = content_encoding(&headers) == "snappy";
    let decode = Box::new(move |payload: bytes::Bytes| {
        let stored = |measurement: &str| groups.schema_of(&db, measurement);
        let out = quiver_storage::decode_prom_write(&payload, &limits, &stored).map_err(|e| {
            if matches!(
                e,
                quiver_storage::Error::NodeBusy(_) | quiver_storage::Error::LimitExceeded { .. }
            ) {
                return super::write::decode_error(e);
            }
            let hint = if snappy {
                ""
            } else {
                " (remote write 1.0 sends it snappy-compressed with Content-Encoding: snappy)"
            };
            ApiError::bad_request(format!("{e}{hint}"))
        })?;
        metrics::counter!("quiver_prom_stale_samples_skipped_total")
            .increment(out.stale_samples_skipped);
        metrics::counter!("quiver_prom_histograms_skipped_total").increment(out.histograms_skipped);
        groups
            .check_write(&db, &out.tables)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let (tables, expired) = refuse_expired(&groups.first().storage, &db, out.tables)?;
        let rejected = out
            .rejected
            .into_iter()
            .map(|r| RejectedLine {
                line: r.series,
                error: r.error,
                text: r.metric.unwrap_or_default(),
            })
            .collect();
        Ok(Decoded {
            tables,
            rejected,
            lines_total: out.series_total,
            unit: "series",
            accept_partial: true,
            expired,
        })
    });
    write(
        &app,
        database,
        Format::PromRemoteWrite,
        &params,
        headers,
        body,
        decode,
    )
    .await
}
