//! `POST /api/v1/query` (Arc JSON envelope) and `POST /api/v1/query/arrow` (Arrow IPC
//! stream): read-only SQL against the selected database, streamed as it is produced.

use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use quiver_query::encode::Format;
use quiver_query::QueryAccess;
use serde::Deserialize;

use super::error::ApiError;
use super::query_response::stream_query;
use super::write::database_of;
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

/// Checks the token and the consistency asked for; returns the database to query.
async fn prepare(
    app: &AppState,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
    request: &QueryRequest,
) -> Result<(String, QueryAccess), ApiError> {
    let grant = app.auth.check_request(headers, params, Permission::Read)?;
    let mut params = params.clone();
    if let Some(db) = &request.database {
        params.entry("db".into()).or_insert_with(|| db.clone());
    }
    let database = database_of(headers, &params)?;
    grant.database(&database)?;
    match request.consistency.as_deref() {
        None | Some("local") => {}
        Some("linearizable") => {
            app.groups.read_barrier().await.map_err(|e| {
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
    Ok((database, grant.query_access()))
}

async fn run(
    app: &AppState,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &[u8],
    format: Format,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let request = parse_request(body)?;
    let (database, access) = prepare(app, params, headers, &request).await?;
    stream_query(app, &database, &access, &request.sql, format, started).await
}

/// Handles `POST /api/v1/query`.
pub async fn query_json(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    run(&app, &params, &headers, &body, Format::ArcJson).await
}

/// Handles `POST /api/v1/query/arrow`.
pub async fn query_arrow(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    run(&app, &params, &headers, &body, Format::ArrowIpc).await
}
