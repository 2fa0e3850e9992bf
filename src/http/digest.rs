//! `GET /api/v1/cluster/digest`: per table and per hour partition, the row count and an
//! order-independent content hash, so replicas can be compared (`quiver verify`).
//!
//! Each row is encoded with Arrow's row format over every column (time, tags, fields,
//! in the canonical column order), hashed with SHA-256, and the first 8 bytes are added
//! (wrapping) into its partition's sum: equal multisets of rows give equal digests
//! whatever the order or the split between buffer and Parquet.

use std::collections::{BTreeMap, HashMap};

use arrow::array::{Array, AsArray};
use arrow::datatypes::TimestampNanosecondType;
use arrow::row::{RowConverter, SortField};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::Json;
use futures::StreamExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::error::ApiError;
use super::AppState;
use crate::auth::Permission;

const HOUR_NS: i64 = 3_600_000_000_000;

#[derive(Default)]
struct Partition {
    rows: u64,
    hash: u64,
}

/// Handles `GET /api/v1/cluster/digest[?database=]`.
pub async fn digest(
    State(app): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let grant = app
        .auth
        .check_request(&headers, &params, Permission::Read)?;
    let applied = app
        .node
        .raft
        .metrics()
        .borrow()
        .last_applied
        .map(|l| l.index);
    let database = params.get("database").map(String::as_str);
    let mut tables = Vec::new();
    for summary in app.groups.summaries(database) {
        if grant.database(&summary.key.database).is_err() {
            continue;
        }
        let key = summary.key;
        let partitions = table_digest(&app, &key.database, &key.measurement).await?;
        tables.push(json!({
            "group": app.groups.route(&key.database, &key.measurement).id(),
            "database": key.database,
            "measurement": key.measurement,
            "rows": partitions.values().map(|p| p.rows).sum::<u64>(),
            "partitions": partitions
                .iter()
                .map(|(hour, p)| json!({
                    "hour_start_ns": hour * HOUR_NS,
                    "rows": p.rows,
                    "hash": format!("{:016x}", p.hash),
                }))
                .collect::<Vec<_>>(),
        }));
    }
    Ok(Json(json!({
        "success": true,
        "node_id": app.node.node_id(),
        "applied_index": applied,
        // Replicas are compared group by group: a node holds only its groups' tables.
        "groups_held": app.groups.holding_rows().iter().map(|g| g.id).collect::<Vec<_>>(),
        "tables": tables,
    })))
}

async fn table_digest(
    app: &AppState,
    database: &str,
    measurement: &str,
) -> Result<BTreeMap<i64, Partition>, ApiError> {
    let sql = format!("SELECT * FROM \"{}\"", measurement.replace('"', "\"\""));
    let mut stream = app
        .query
        .execute_stream(database, &sql)
        .await
        .map_err(|e| ApiError::internal(format!("{database}.{measurement}: {e}")))?;
    let schema = stream.schema();
    let time_index = schema
        .index_of(quiver_storage::TIME_COLUMN)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let converter = RowConverter::new(
        schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )
    .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut partitions: BTreeMap<i64, Partition> = BTreeMap::new();
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| ApiError::internal(e.to_string()))?;
        let rows = converter
            .convert_columns(batch.columns())
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let times = batch
            .column(time_index)
            .as_primitive_opt::<TimestampNanosecondType>()
            .ok_or_else(|| ApiError::internal("time column is not nanoseconds"))?;
        for (i, row) in rows.iter().enumerate() {
            let hour = if times.is_valid(i) {
                times.value(i).div_euclid(HOUR_NS)
            } else {
                i64::MIN
            };
            let digest = Sha256::digest(row.as_ref());
            let mut first = [0u8; 8];
            first.copy_from_slice(&digest[..8]);
            let p = partitions.entry(hour).or_default();
            p.rows += 1;
            p.hash = p.hash.wrapping_add(u64::from_le_bytes(first));
        }
    }
    Ok(partitions)
}
