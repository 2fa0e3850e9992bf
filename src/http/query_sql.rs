//! `GET|POST /api/v3/query_sql`: InfluxDB 3's SQL endpoint. Parameters `db`, `q` and
//! `format` (`json` by default, `jsonl`, `csv`, `pretty`, `parquet`) come from the query
//! string, or for POST from a JSON body (`{"db": ..., "q": ..., "format": ...}`), whose
//! fields win over the query string.

use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use quiver_query::encode::Format;
use serde::Deserialize;

use super::error::ApiError;
use super::query_response::stream_query;
use super::AppState;
use crate::auth::Permission;

/// A POST body; every field may also come from the query string.
#[derive(Debug, Default, Deserialize)]
struct SqlRequest {
    #[serde(default)]
    db: Option<String>,
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    format: Option<String>,
}

/// Handles `GET /api/v3/query_sql`.
pub async fn query_sql_get(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    run(&app, &params, &headers, SqlRequest::default()).await
}

/// Handles `POST /api/v3/query_sql`.
pub async fn query_sql_post(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        SqlRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(format!(
                "request body must be JSON like {{\"db\": \"mydb\", \"q\": \"SELECT ...\", \
                 \"format\": \"json\"}}: {e}"
            ))
        })?
    };
    run(&app, &params, &headers, request).await
}

async fn run(
    app: &AppState,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
    request: SqlRequest,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let grant = app.auth.check_request(headers, params, Permission::Read)?;
    let param = |name: &str| params.get(name).cloned();
    let database = request
        .db
        .or_else(|| param("db"))
        .ok_or_else(|| ApiError::bad_request("missing parameter `db` (the database)"))?;
    quiver_storage::validate_database_name(&database)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    grant.database(&database)?;
    let sql = request
        .q
        .or_else(|| param("q"))
        .ok_or_else(|| ApiError::bad_request("missing parameter `q` (the SQL query)"))?;
    let format = match request.format.or_else(|| param("format")) {
        None => Format::Json,
        Some(name) => Format::from_name(&name).ok_or_else(|| {
            ApiError::bad_request(format!(
                "format {name:?} must be json, jsonl, csv, pretty or parquet"
            ))
        })?,
    };
    stream_query(app, &database, &grant.query_access(), &sql, format, started).await
}
