//! `POST /api/v1/delete` (admin): rows of one measurement matching a predicate on time
//! and tags. The delete is a replicated tombstone: once its entry is applied, queries on
//! every node stop seeing the rows it matches that were written before it (rows in
//! memory included); compaction later rewrites them away. The answer counts the rows it
//! hid, from one consistent view taken after it applied.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use quiver_raft::{CommandResult, DeleteCommand};
use quiver_storage::lifecycle::{DeletePredicate, TagOp};
use quiver_storage::{
    validate_database_name, validate_measurement_name, ColumnKind, DeleteOutcome, LogIndex,
    TableKey, TimestampNs, View, ViewSource,
};
use serde::Deserialize;
use serde_json::json;

use super::body::json_body;
use super::error::ApiError;
use super::write::write_error;
use super::AppState;
use crate::auth::Permission;
use crate::groups::{one_group_source, Group, Route};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteRequest {
    database: String,
    measurement: String,
    #[serde(rename = "where", default)]
    predicate: String,
    /// Count the rows the delete would remove now, and remove nothing.
    #[serde(default)]
    dry_run: bool,
}

/// `POST /api/v1/delete` with `{"database", "measurement", "where"}` → 200 with the
/// number of rows deleted; with `"dry_run": true`, the number it would delete now, and
/// nothing deleted.
pub async fn delete(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    app.auth
        .check_request(&headers, &params, Permission::Admin)?;
    let request: DeleteRequest = json_body(
        &body,
        r#"{"database": "db", "measurement": "cpu", "where": "host = 'a' AND time < '2026-01-02T00:00:00Z'"}"#,
    )?;
    validate_database_name(&request.database).map_err(|e| ApiError::bad_request(e.to_string()))?;
    validate_measurement_name(&request.measurement)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    match app.groups.route(&request.database, &request.measurement) {
        Route::Local(group) => delete_in(&app, &group, request).await,
        // The measurement lives in a group other nodes hold: a member runs the delete
        // and counts its rows, and its answer is this one.
        Route::Remote(remote) => {
            let (status, body) = remote
                .delete(
                    &serde_json::from_slice(&body)
                        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?,
                )
                .await
                .map_err(write_error)?;
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let value: serde_json::Value = serde_json::from_str(&body)
                .unwrap_or_else(|_| json!({"success": false, "error": body}));
            if status.is_success() {
                Ok(Json(value))
            } else {
                let message = value
                    .get("error")
                    .and_then(|e| e.as_str())
                    .map_or_else(|| value.to_string(), str::to_string);
                Err(ApiError::with_status(status, message))
            }
        }
    }
}

/// A delete sent by a node that does not hold the measurement's group
/// (`POST /internal/groups/{group}/delete`): run here as if a client had sent it, the
/// answer as (status, JSON body). The sender checked the client's token.
pub async fn delete_for_peer(app: &AppState, body: &str) -> (u16, String) {
    let answer = async {
        let request: DeleteRequest = json_body(body.as_bytes(), "{}")?;
        match app.groups.route(&request.database, &request.measurement) {
            Route::Local(group) => delete_in(app, &group, request).await,
            Route::Remote(r) => Err(ApiError::with_status(
                StatusCode::MISDIRECTED_REQUEST,
                format!("this node is not a member of group {}", r.id()),
            )),
        }
    }
    .await;
    match answer {
        Ok(Json(value)) => (200, value.to_string()),
        Err(e) => (
            e.status.as_u16(),
            json!({"success": false, "error": e.message}).to_string(),
        ),
    }
}

/// Runs a delete in `group`, which holds the measurement.
async fn delete_in(
    app: &AppState,
    group: &Group,
    request: DeleteRequest,
) -> Result<Json<serde_json::Value>, ApiError> {
    let not_found = || {
        ApiError::with_status(
            StatusCode::NOT_FOUND,
            format!(
                "no measurement {:?} in database {:?}",
                request.measurement, request.database
            ),
        )
    };
    let schema = group
        .storage
        .schema_of(&request.database, &request.measurement)
        .ok_or_else(not_found)?;
    let tags = schema.tag_columns();
    let fields: Vec<String> = schema
        .arrow()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|n| matches!(schema.kind(n), Some(ColumnKind::Field(_))))
        .collect();
    let predicate = quiver_query::parse_delete_where(&request.predicate, &tags, &fields)
        .map_err(|e| ApiError::bad_request(format!("where: {e}")))?;
    if request.dry_run {
        let would = count_matching(
            app,
            group,
            &request.database,
            &request.measurement,
            &predicate,
        )
        .await?;
        return Ok(Json(
            json!({"success": true, "dry_run": true, "would_delete": would}),
        ));
    }
    let command = DeleteCommand {
        table: TableKey::new(request.database.as_str(), request.measurement.as_str()),
        predicate,
        proposal: 0,
    };
    let (result, index) = group.node.delete(command).await.map_err(write_error)?;
    match result {
        CommandResult::Deleted(DeleteOutcome::Recorded) => {}
        CommandResult::Deleted(DeleteOutcome::NoSuchTable) => return Err(not_found()),
        other => return Err(ApiError::internal(format!("unexpected result {other:?}"))),
    }
    let deleted = count_hidden(app, group, &request.database, &request.measurement, index).await?;
    tracing::info!(database = %request.database, measurement = %request.measurement,
        predicate = %request.predicate, index, deleted, "delete applied");
    Ok(Json(
        json!({"success": true, "deleted": deleted, "index": index}),
    ))
}

/// Rows visible now that `predicate` matches: what the delete would hide if it were
/// applied now (rows written in between would be hidden too). Counted through the query
/// engine with the predicate as SQL, a missing tag reading as `''` as in the tombstone.
async fn count_matching(
    app: &AppState,
    group: &Group,
    database: &str,
    measurement: &str,
    predicate: &DeletePredicate,
) -> Result<u64, ApiError> {
    let sql = format!(
        "SELECT count(*) FROM {} WHERE {}",
        sql_identifier(measurement),
        predicate_sql(predicate)
    );
    let source = one_group_source(
        &app.groups,
        group.id,
        Arc::new(ViewSource {
            storage: group.storage.clone(),
            view: View::at(TimestampNs::now()),
        }),
    );
    let output = app
        .query
        .execute_over(source, database, &sql)
        .await
        .map_err(|e| ApiError::internal(format!("counting the rows failed: {e}")))?;
    first_count(&output.batches)
        .ok_or_else(|| ApiError::internal("the count of matching rows is unreadable"))
}

/// The predicate as a SQL condition (`TRUE` for an empty one).
fn predicate_sql(predicate: &DeletePredicate) -> String {
    let mut parts = Vec::new();
    if let Some(from) = predicate.time_from {
        parts.push(format!("\"time\" >= to_timestamp_nanos({})", from.0));
    }
    if let Some(before) = predicate.time_before {
        parts.push(format!("\"time\" < to_timestamp_nanos({})", before.0));
    }
    for condition in &predicate.tags {
        let column = format!("coalesce({}, '')", sql_identifier(&condition.tag));
        let values: Vec<String> = condition.values.iter().map(|v| sql_string(v)).collect();
        parts.push(match condition.op {
            TagOp::Eq => format!("{column} = {}", values.join("")),
            TagOp::NotEq => format!("{column} <> {}", values.join("")),
            TagOp::In => format!("{column} IN ({})", values.join(", ")),
            TagOp::NotIn => format!("{column} NOT IN ({})", values.join(", ")),
        });
    }
    if parts.is_empty() {
        "TRUE".to_string()
    } else {
        parts.join(" AND ")
    }
}

fn sql_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn sql_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// The single Int64 a `SELECT count(*)` answered.
fn first_count(batches: &[arrow::record_batch::RecordBatch]) -> Option<u64> {
    batches
        .first()
        .filter(|b| b.num_rows() == 1)
        .and_then(|b| {
            arrow::array::AsArray::as_primitive_opt::<arrow::datatypes::Int64Type>(b.column(0))
                .map(|c| c.value(0))
        })
        .map(|count| u64::try_from(count).unwrap_or(0))
}

/// Rows the tombstone at `index` hides, counted through the query engine over the view
/// of exactly those rows.
async fn count_hidden(
    app: &AppState,
    group: &Group,
    database: &str,
    measurement: &str,
    index: u64,
) -> Result<u64, ApiError> {
    let source = one_group_source(
        &app.groups,
        group.id,
        Arc::new(ViewSource {
            storage: group.storage.clone(),
            view: View {
                hidden_by: Some(LogIndex(index)),
                ..View::at(TimestampNs::now())
            },
        }),
    );
    let sql = format!(
        "SELECT count(*) FROM \"{}\"",
        measurement.replace('"', "\"\"")
    );
    let output = app
        .query
        .execute_over(source, database, &sql)
        .await
        .map_err(|e| {
            ApiError::internal(format!(
                "the delete is applied; counting its rows failed: {e}"
            ))
        })?;
    first_count(&output.batches)
        .ok_or_else(|| ApiError::internal("the delete is applied; its row count is unreadable"))
}
