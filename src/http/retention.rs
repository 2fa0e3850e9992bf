//! `/api/v1/retention` (admin): how long rows of a database, or of one of its
//! measurements, live. The rule lives in the replicated settings, so it holds on every
//! node from the entry that sets it: queries stop seeing older rows at once, writes of
//! older rows are refused, and the leader drops the files wholly past it.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use quiver_storage::lifecycle::{format_duration_ns, parse_duration_ns, RetentionRule};
use quiver_storage::{
    validate_database_name, validate_measurement_name, PolicyChange, PolicyOutcome,
};
use serde::Deserialize;
use serde_json::json;

use super::body::json_body;
use super::error::ApiError;
use super::tokens::commit;
use super::AppState;
use crate::auth::Permission;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetRetention {
    duration: String,
    #[serde(default)]
    measurement: Option<String>,
}

fn rule_json(database: &str, rule: &RetentionRule) -> serde_json::Value {
    let overrides: serde_json::Map<String, serde_json::Value> = rule
        .measurements
        .iter()
        .map(|(m, d)| (m.clone(), json!(format_duration_ns(*d))))
        .collect();
    json!({
        "database": database,
        "duration": rule.duration_ns.map(format_duration_ns),
        "measurements": overrides,
    })
}

/// `PUT /api/v1/retention/{db}` with `{"duration": "30d", "measurement"?: "cpu"}`.
pub async fn set(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    Path(database): Path<String>,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    validate_database_name(&database).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let request: SetRetention = json_body(
        &body,
        r#"{"duration": "30d"} or {"duration": "7d", "measurement": "cpu"}"#,
    )?;
    if let Some(m) = &request.measurement {
        validate_measurement_name(m).map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    let duration_ns =
        parse_duration_ns(&request.duration).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if duration_ns < quiver_storage::TimestampNs::HOUR_NS {
        return Err(ApiError::bad_request(format!(
            "duration {:?} is shorter than the shortest retention, 1h",
            request.duration
        )));
    }
    let change = PolicyChange::SetRetention {
        database: database.clone(),
        measurement: request.measurement.clone(),
        duration_ns,
    };
    match commit(&app, change).await? {
        PolicyOutcome::Applied => {}
        other => return Err(ApiError::internal(format!("retention not set: {other:?}"))),
    }
    let rule = app
        .storage
        .with_policies(|p| p.retention.get(&database).cloned())
        .unwrap_or_default();
    Ok(Json(
        json!({"success": true, "retention": rule_json(&database, &rule)}),
    ))
}

/// `GET /api/v1/retention`: every database's rule.
pub async fn list(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    let rules: Vec<serde_json::Value> = app.storage.with_policies(|p| {
        p.retention
            .iter()
            .map(|(db, rule)| rule_json(db, rule))
            .collect()
    });
    Ok(Json(json!({"success": true, "retention": rules})))
}

/// `DELETE /api/v1/retention/{db}[?measurement=cpu]`: rows live forever again (the
/// database's whole rule, or one measurement's override). 404 if there was none.
pub async fn clear(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    Path(database): Path<String>,
) -> Result<StatusCode, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    validate_database_name(&database).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let measurement = params.get("measurement").cloned();
    let change = PolicyChange::ClearRetention {
        database: database.clone(),
        measurement: measurement.clone(),
    };
    match commit(&app, change).await? {
        PolicyOutcome::Applied => Ok(StatusCode::NO_CONTENT),
        PolicyOutcome::NotFound => Err(ApiError::with_status(
            StatusCode::NOT_FOUND,
            match measurement {
                Some(m) => format!("{database} has no retention override for {m:?}"),
                None => format!("{database} has no retention"),
            },
        )),
        other => Err(ApiError::internal(format!(
            "retention not cleared: {other:?}"
        ))),
    }
}
