//! `POST /api/v1/query` (Arc JSON envelope) and `POST /api/v1/query/arrow` (Arrow IPC
//! stream): read-only SQL against the selected database.

use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use quiver_query::{encode, QueryOutput};
use serde::Deserialize;

use super::error::ApiError;
use super::ingest::database_of;
use super::AppState;
use crate::auth::Permission;

/// The body of a query request.
#[derive(Debug, Deserialize)]
pub struct QueryRequest {
    /// The SQL statement.
    pub sql: String,
    /// `local` (default) or `linearizable`.
    #[serde(default)]
    pub consistency: Option<String>,
    /// Database, when no header names one.
    #[serde(default)]
    pub database: Option<String>,
}

fn parse_request(body: &[u8]) -> Result<QueryRequest, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "request body must be JSON like {{\"sql\": \"SELECT ...\"}}: {e}"
        ))
    })
}

fn query_error(e: quiver_query::Error) -> ApiError {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    ApiError::with_status(status, e.to_string())
}

async fn run(
    app: &AppState,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
    request: &QueryRequest,
) -> Result<(QueryOutput, f64), ApiError> {
    app.auth.check(
        headers,
        params.get("p").map(String::as_str),
        Permission::Read,
    )?;
    let mut params = params.clone();
    if let Some(db) = &request.database {
        params.entry("db".into()).or_insert_with(|| db.clone());
    }
    let database = database_of(headers, &params)?;
    match request.consistency.as_deref() {
        None | Some("local") => {}
        Some("linearizable") => {
            app.node.read_barrier().await.map_err(|e| {
                ApiError::overloaded(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("linearizable read unavailable: {e}"),
                    1,
                )
            })?;
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "consistency {other:?} must be \"local\" or \"linearizable\""
            )))
        }
    }
    let started = Instant::now();
    let output = app
        .query
        .execute(&database, &request.sql)
        .await
        .map_err(query_error)?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    metrics::histogram!("quiver_query_seconds").record(ms / 1000.0);
    Ok((output, ms))
}

/// Handles `POST /api/v1/query`.
pub async fn query_json(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request = parse_request(&body)?;
    let (output, ms) = run(&app, &params, &headers, &request).await?;
    let body = encode::arc_json(&output, ms).map_err(query_error)?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// Handles `POST /api/v1/query/arrow`.
pub async fn query_arrow(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request = parse_request(&body)?;
    let (output, _) = run(&app, &params, &headers, &request).await?;
    let body = encode::arrow_ipc_stream(&output).map_err(query_error)?;
    Ok((
        [(header::CONTENT_TYPE, "application/vnd.apache.arrow.stream")],
        body,
    )
        .into_response())
}
