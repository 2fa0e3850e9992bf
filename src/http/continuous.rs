//! `/api/v1/continuous_queries` (admin): rollups the leader computes window by window
//! and writes into another measurement (`src/continuous.rs` runs them).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use quiver_storage::lifecycle::{format_duration_ns, parse_duration_ns, ContinuousQuery};
use quiver_storage::{
    validate_database_name, validate_measurement_name, LogIndex, PolicyChange, PolicyOutcome,
    TimestampNs,
};
use serde::Deserialize;
use serde_json::json;

use super::body::json_body;
use super::error::ApiError;
use super::tokens::commit;
use super::AppState;
use crate::auth::Permission;
use crate::continuous::compute_window;

/// Most continuous queries the cluster holds.
const CONTINUOUS_QUERIES_MAX: usize = 1_000;
/// Longest query text, in bytes.
const CQ_QUERY_BYTES_MAX: usize = 64 * 1024;
/// Backfill when the request names none.
const BACKFILL_DEFAULT: &str = "7d";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewContinuousQuery {
    name: String,
    database: String,
    query: String,
    into: String,
    every: String,
    #[serde(default)]
    lag: Option<String>,
    #[serde(default)]
    backfill: Option<String>,
}

fn time_text(t: TimestampNs) -> Option<String> {
    chrono::DateTime::from_timestamp_nanos(t.0)
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        .into()
}

fn cq_json(cq: &ContinuousQuery) -> serde_json::Value {
    json!({
        "name": cq.name,
        "database": cq.database,
        "query": cq.query,
        "into": cq.into,
        "every": format_duration_ns(cq.every_ns),
        "lag": if cq.lag_ns == 0 { "0".to_string() } else { format_duration_ns(cq.lag_ns) },
        "next_window_start": time_text(cq.next_window),
        "last_window_end": cq.last_window_end.and_then(time_text),
        "windows_written": cq.windows_written,
    })
}

fn duration(name: &str, text: &str) -> Result<i64, ApiError> {
    parse_duration_ns(text).map_err(|e| ApiError::bad_request(format!("{name}: {e}")))
}

/// `POST /api/v1/continuous_queries` → 201 with the query as stored.
pub async fn create(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    let request: NewContinuousQuery = json_body(
        &body,
        r#"{"name": "cpu_1h", "database": "db", "query": "SELECT time_bucket(INTERVAL '1 hour', time) AS time, host, avg(value) AS value FROM cpu GROUP BY 1, 2", "into": "cpu_1h", "every": "1h", "lag": "5m"}"#,
    )?;
    validate_database_name(&request.name)
        .map_err(|e| ApiError::bad_request(format!("name: {e}")))?;
    validate_database_name(&request.database).map_err(|e| ApiError::bad_request(e.to_string()))?;
    validate_measurement_name(&request.into)
        .map_err(|e| ApiError::bad_request(format!("into: {e}")))?;
    if request.query.len() > CQ_QUERY_BYTES_MAX {
        return Err(ApiError::bad_request(format!(
            "query is longer than {CQ_QUERY_BYTES_MAX} bytes"
        )));
    }
    let every_ns = duration("every", &request.every)?;
    if every_ns < 60_000_000_000 {
        return Err(ApiError::bad_request("every must be at least 1m"));
    }
    let lag_ns = match request.lag.as_deref() {
        None | Some("0") => 0,
        Some(text) => duration("lag", text)?,
    };
    let backfill_ns = duration(
        "backfill",
        request.backfill.as_deref().unwrap_or(BACKFILL_DEFAULT),
    )?;
    let sources = quiver_query::tables_read(&request.database, &request.query)
        .map_err(|e| ApiError::bad_request(format!("query: {e}")))?;
    if sources
        .iter()
        .any(|(db, m)| *db == request.database && m.eq_ignore_ascii_case(&request.into))
    {
        return Err(ApiError::bad_request(
            "the query reads its own target measurement (`into`)",
        ));
    }
    if app.groups.is_sharded() {
        // Windows are committed with the query's progress in one entry of one group,
        // while the target measurement lives in the group its name hashes to.
        return Err(ApiError::with_status(
            axum::http::StatusCode::NOT_IMPLEMENTED,
            "continuous queries need cluster.data_groups = 1 for now",
        ));
    }
    if app.storage.with_policies(|p| p.continuous_queries.len()) >= CONTINUOUS_QUERIES_MAX {
        return Err(ApiError::bad_request(format!(
            "the cluster holds {CONTINUOUS_QUERIES_MAX} continuous queries; drop some first"
        )));
    }
    let now = TimestampNs::now();
    let mut cq = ContinuousQuery {
        name: request.name.clone(),
        database: request.database.clone(),
        query: request.query.clone(),
        into: request.into.clone(),
        every_ns,
        lag_ns,
        next_window: TimestampNs(0),
        last_window_end: None,
        windows_written: 0,
        created_index: LogIndex(0),
    };
    let backfill_from = TimestampNs(now.0.saturating_sub(backfill_ns));
    cq.next_window = cq.window_start_of(backfill_from);
    // The query must run and give writable rows: try it on the window just before now.
    let probe = cq.window(cq.window_start_of(TimestampNs(now.0.saturating_sub(every_ns))));
    compute_window(&app.storage, &app.query, &cq, probe)
        .await
        .map_err(|e| ApiError::bad_request(format!("query: {e}")))?;
    match commit(&app, PolicyChange::CreateContinuousQuery(cq)).await? {
        PolicyOutcome::Applied => {}
        PolicyOutcome::Conflict(message) => {
            return Err(ApiError::with_status(StatusCode::CONFLICT, message))
        }
        other => {
            return Err(ApiError::internal(format!(
                "continuous query not created: {other:?}"
            )))
        }
    }
    let stored = app
        .storage
        .with_policies(|p| {
            p.continuous_queries
                .get(&quiver_storage::lifecycle::cq_key(
                    &request.database,
                    &request.name,
                ))
                .map(cq_json)
        })
        .ok_or_else(|| ApiError::internal("continuous query applied but not found"))?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"success": true, "continuous_query": stored})),
    )
        .into_response())
}

/// `GET /api/v1/continuous_queries[?database=db]`: every query with its progress.
pub async fn list(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    let database = params.get("database").cloned();
    let list: Vec<serde_json::Value> = app.storage.with_policies(|p| {
        p.continuous_queries
            .values()
            .filter(|cq| database.as_ref().is_none_or(|d| *d == cq.database))
            .map(cq_json)
            .collect()
    });
    Ok(Json(json!({"success": true, "continuous_queries": list})))
}

/// `DELETE /api/v1/continuous_queries/{db}/{name}` → 204; what it wrote stays.
pub async fn drop(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    Path((database, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    match commit(
        &app,
        PolicyChange::DropContinuousQuery {
            database: database.clone(),
            name: name.clone(),
        },
    )
    .await?
    {
        PolicyOutcome::Applied => Ok(StatusCode::NO_CONTENT),
        PolicyOutcome::NotFound => Err(ApiError::with_status(
            StatusCode::NOT_FOUND,
            format!("no continuous query {name:?} in {database:?}"),
        )),
        other => Err(ApiError::internal(format!(
            "continuous query not dropped: {other:?}"
        ))),
    }
}
