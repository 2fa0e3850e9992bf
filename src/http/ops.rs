//! Operations endpoints: health, readiness, Prometheus metrics and the measurements
//! list.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use quiver_storage::lifecycle::format_duration_ns;
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;
use crate::auth::Permission;

/// `GET /health`: the process is up and Raft runs (liveness). 503 once Raft has
/// stopped for good: the node is about to exit so that its supervisor restarts it.
pub async fn health(State(app): State<AppState>) -> Response {
    let uptime_sec = app.started.elapsed().as_secs();
    let version = env!("CARGO_PKG_VERSION");
    match app.groups.fatal() {
        None => Json(json!({"status": "ok", "uptime_sec": uptime_sec, "version": version}))
            .into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "failed", "success": false, "error": format!("raft stopped: {reason}"),
                        "uptime_sec": uptime_sec, "version": version})),
        )
            .into_response(),
    }
}

/// `GET|HEAD /ping`: InfluxDB clients check liveness here.
pub async fn ping() -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut().insert(
        "x-influxdb-version",
        axum::http::HeaderValue::from_static("quiver"),
    );
    r
}

/// How long every segment write must have failed (the disk or the bucket refusing)
/// before `/ready` says so: a blip is retried quietly, an outage is reported.
const FLUSH_FAILING_UNREADY_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// `GET /ready`: 200 when this node can take writes: Raft runs, the log is replayed,
/// a leader with a quorum is known, both volumes are above their free-space
/// watermarks, and segments can be written (to disk or the bucket). Otherwise 503 with
/// the reason (readiness: take it out of rotation).
pub async fn ready(State(app): State<AppState>) -> Response {
    let reason = app
        .groups
        .unready_reason()
        .or_else(|| super::admission::cannot_take_rows(&app).map(|(_, why)| why))
        .or_else(|| app.groups.flush_failing(FLUSH_FAILING_UNREADY_AFTER));
    match reason {
        None => (StatusCode::OK, Json(json!({"status": "ready"}))).into_response(),
        Some(reason) => {
            let mut r = (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "not ready", "success": false, "error": reason})),
            )
                .into_response();
            r.headers_mut().insert(header::RETRY_AFTER, 1.into());
            r
        }
    }
}

/// `GET /metrics`: Prometheus text format. Open to anyone who reaches the port (a
/// scraper needs no token for the node's own health), but the series labelled with a
/// database or measurement name are shown only to a request with a valid token: names
/// say what a node holds, and a node with authentication on does not tell strangers.
pub async fn metrics(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    crate::telemetry::refresh_gauges(&app);
    let rendered = app.prometheus.render();
    let named = !app.auth.enabled()
        || app
            .auth
            .authenticates(&headers, params.get("p").map(String::as_str));
    let body = if named {
        rendered
    } else {
        without_named_series(&rendered)
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// `rendered` without the samples that carry a `database` or `measurement` label.
fn without_named_series(rendered: &str) -> String {
    let mut out = String::with_capacity(rendered.len());
    for line in rendered.lines() {
        let sample = !line.starts_with('#');
        if sample && (line.contains("database=\"") || line.contains("measurement=\"")) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn rfc3339(ns: Option<i64>) -> Value {
    match ns {
        Some(ns) => Value::String(
            chrono::DateTime::from_timestamp_nanos(ns)
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        ),
        None => Value::Null,
    }
}

/// The database a listing is narrowed to: `?database=`, or InfluxDB's `?db=`.
fn database_param(params: &HashMap<String, String>) -> Option<&str> {
    params
        .get("database")
        .or_else(|| params.get("db"))
        .map(String::as_str)
}

/// `GET /api/v1/storage?database=`: what each table holds on this node, for operators
/// watching compaction and retention: files, rows, bytes, time range, rows still in
/// memory, compactions waiting, the tag files sort by first and the retention in force
/// (`null`: forever), per database and measurement, plus totals.
pub async fn storage(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let grant = app
        .auth
        .check_request(&headers, &params, Permission::Read)?;
    let database = database_param(&params);
    // Retention is shown to whoever may read the database (the rules themselves are
    // listed and changed with an admin token, /api/v1/retention).
    let retention = app.storage.with_policies(|p| p.retention.clone());
    let rule_of = |database: &str| retention.get(database).cloned().unwrap_or_default();
    let mut databases: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    let (mut files, mut bytes, mut rows, mut pending) = (0usize, 0u64, 0u64, 0usize);
    for s in app.groups.summaries_everywhere(database).await {
        if grant.database(&s.key.database).is_err() {
            continue;
        }
        files += s.file_count;
        bytes += s.file_bytes;
        rows += s.rows;
        pending += s.compactions_pending;
        databases
            .entry(s.key.database.clone())
            .or_default()
            .push(json!({
                "measurement": s.key.measurement,
                "files": s.file_count,
                "bytes": s.file_bytes,
                "rows": s.rows,
                "rows_in_memory": s.memory_rows,
                "oldest": rfc3339(s.time_min),
                "newest": rfc3339(s.time_max),
                "compactions_pending": s.compactions_pending,
                "sort_lead": s.sort_lead,
                "retention": rule_of(&s.key.database)
                    .for_measurement(&s.key.measurement)
                    .map(format_duration_ns),
            }));
    }
    let databases: Vec<Value> = databases
        .into_iter()
        .map(|(name, measurements)| {
            let retention = rule_of(&name).duration_ns.map(format_duration_ns);
            json!({"database": name, "retention": retention, "measurements": measurements})
        })
        .collect();
    // Files under the node's prefix it kept without being able to account for them (a
    // lost disk or WAL volume): node-wide, their paths only for a token of every database.
    let unaccounted = app.storage.unaccounted_files();
    let mut unaccounted_doc = json!({
        "files": unaccounted.files,
        "bytes": unaccounted.bytes,
        "log_end_max": unaccounted.log_end_max,
    });
    if grant.all_databases() {
        unaccounted_doc["examples"] = json!(unaccounted.examples);
    }
    Ok(Json(json!({
        "success": true,
        "files": files,
        "bytes": bytes,
        "rows": rows,
        "compactions_pending": pending,
        "location": app.storage.file_store().describe(),
        "unaccounted": unaccounted_doc,
        "databases": databases,
    })))
}

/// `GET /api/v1/measurements?database=`: tables with their file counts and time range,
/// as `{"success": true, "measurements": [...]}`.
pub async fn measurements(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let grant = app
        .auth
        .check_request(&headers, &params, Permission::Read)?;
    let database = database_param(&params);
    let list: Vec<Value> = app
        .groups
        .summaries_everywhere(database)
        .await
        .into_iter()
        .filter(|s| grant.database(&s.key.database).is_ok())
        .map(|s| {
            json!({
                "database": s.key.database,
                "measurement": s.key.measurement,
                "file_count": s.file_count,
                "total_size_mb": s.file_bytes as f64 / (1024.0 * 1024.0),
                "row_count": s.rows,
                "min_time": rfc3339(s.time_min),
                "max_time": rfc3339(s.time_max),
            })
        })
        .collect();
    // API.md shows a bare array; Arc's SDK (`list_measurements`) reads
    // `{"success": true, "measurements": [...]}`, and working with Arc's clients
    // unchanged is the promise, so the list is wrapped.
    Ok(Json(json!({"success": true, "measurements": list})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_leave_the_metrics_without_a_token() {
        let rendered = "# TYPE quiver_table_rows gauge\nquiver_table_rows{database=\"secret\",measurement=\"m\"} 3\nquiver_buffer_rows 0\n";
        let shown = without_named_series(rendered);
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("quiver_buffer_rows 0"), "{shown}");
    }
}
