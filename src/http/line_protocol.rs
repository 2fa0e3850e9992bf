//! Line-protocol writes: InfluxDB 1.x `/write`, 2.x `/api/v2/write`, 3.x
//! `/api/v3/write_lp`, and Arc's `/api/v1/write/line-protocol`.
//!
//! Their decode step for the write pipeline (`write.rs`): valid lines become Arrow
//! batches, invalid ones are listed with their line numbers, rows whose field type
//! conflicts with the stored schema are dropped naming the line and column. The
//! pipeline writes the valid rows and answers 204, or 400 listing what was rejected;
//! with `accept_partial=false` any rejected line means nothing is written.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use quiver_storage::{
    fill_excerpts, parse_line_protocol_for, reject_conflicting_rows, reject_expired_rows,
    Precision, TimestampNs,
};

use super::error::{ApiError, RejectedLine, REJECTED_LISTED_MAX};
use super::write::{database_of, now_ns, write, Decoded, Format};
use super::AppState;

/// Which dialect of the endpoint: decides the precision spellings and defaults.
#[derive(Debug, Clone, Copy)]
enum Dialect {
    V1,
    V2,
    V3,
    Arc,
}

fn precision_of(dialect: Dialect, params: &HashMap<String, String>) -> Result<Precision, ApiError> {
    let Some(raw) = params
        .get("precision")
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
    else {
        return Ok(match dialect {
            Dialect::V3 => Precision::Auto,
            _ => Precision::Nanoseconds,
        });
    };
    let parsed = match dialect {
        Dialect::V1 => Precision::parse_v1(raw),
        Dialect::V2 | Dialect::Arc => Precision::parse_v2(raw),
        Dialect::V3 => Precision::parse_v3(raw),
    };
    parsed.ok_or_else(|| {
        let allowed = match dialect {
            Dialect::V1 => "ns (or n), u, ms, s, m or h",
            Dialect::V2 | Dialect::Arc => "ns, us, ms or s",
            Dialect::V3 => "auto, nanosecond, microsecond, millisecond or second",
        };
        ApiError::bad_request(format!("precision {raw:?} must be {allowed}"))
    })
}

fn flag(params: &HashMap<String, String>, name: &str, default: bool) -> Result<bool, ApiError> {
    match params.get(name).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v == "true" || v == "1" || v.is_empty() => Ok(true),
        Some(v) if v == "false" || v == "0" => Ok(false),
        Some(v) => Err(ApiError::bad_request(format!(
            "{name}={v:?} must be true or false"
        ))),
    }
}

/// Handles InfluxDB 1.x `POST /write` (`db`, `precision`, `rp` ignored).
pub async fn write_v1(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    handle(app, Dialect::V1, params, headers, body).await
}

/// Handles InfluxDB 2.x `POST /api/v2/write` (`bucket`, `org` ignored, `precision`).
pub async fn write_v2(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    handle(app, Dialect::V2, params, headers, body).await
}

/// Handles InfluxDB 3 `POST /api/v3/write_lp` (`db`, `precision` incl. `auto`,
/// `accept_partial`, `no_sync`).
pub async fn write_v3(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    handle(app, Dialect::V3, params, headers, body).await
}

/// Handles Arc's `POST /api/v1/write/line-protocol` (database from `x-arc-database`).
pub async fn write_arc(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    handle(app, Dialect::Arc, params, headers, body).await
}

async fn handle(
    app: AppState,
    dialect: Dialect,
    params: HashMap<String, String>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let database = database_of(&headers, &params)?;
    let precision = precision_of(dialect, &params)?;
    let accept_partial = flag(&params, "accept_partial", true)?;
    // `no_sync` asks to be acknowledged before the WAL is durable. Quiver always waits:
    // the flag is accepted and ignored, so the answer is never weaker than promised.
    flag(&params, "no_sync", false)?;
    let groups = app.groups.clone();
    let db = database.clone();
    let limits = app.config.limits;
    let decode = Box::new(move |payload: bytes::Bytes| {
        let stored = |measurement: &str| groups.schema_of(&db, measurement);
        let parsed = parse_line_protocol_for(&payload, precision, now_ns(), &limits, &stored)
            .map_err(super::write::decode_error)?;
        let mut rejected = parsed.rejected;
        // Retention rules are the same in every group (each holds the policies).
        let tables = reject_expired_rows(
            &groups.first().storage,
            &db,
            parsed.tables,
            TimestampNs::now(),
            &mut rejected,
        )
        .map_err(|e| ApiError::internal(e.to_string()))?;
        let mut checked = Vec::with_capacity(tables.len());
        for (route, part) in groups.partition(&db, tables, |t| &t.measurement) {
            match route {
                crate::groups::Route::Local(group) => checked.extend(
                    reject_conflicting_rows(&group.storage, &db, part, &mut rejected)
                        .map_err(|e| ApiError::internal(e.to_string()))?,
                ),
                // Another node's group: its members refuse a conflicting part as they
                // apply it (the whole part, named in the answer).
                crate::groups::Route::Remote(_) => {
                    checked.extend(part.into_iter().map(|t| (t.measurement, t.batch)))
                }
            }
        }
        let tables = checked;
        if groups.is_sharded() {
            rejected.sort_by_key(|r| r.line);
        }
        fill_excerpts(&payload, &mut rejected, REJECTED_LISTED_MAX);
        let rejected = rejected
            .into_iter()
            .map(|r| RejectedLine {
                line: r.line,
                error: r.error,
                text: r.text,
            })
            .collect();
        Ok(Decoded {
            tables,
            rejected,
            lines_total: parsed.lines_total,
            unit: "lines",
            accept_partial,
            expired: None,
        })
    });
    write(
        &app,
        database,
        Format::LineProtocol,
        &params,
        headers,
        body,
        decode,
    )
    .await
}
