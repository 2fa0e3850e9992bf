//! Rows per batch, counted by the server: the SQL half of [`crate::audit`].
//!
//! The batch of a stored row is computed back from its host tag (`host-N` or `host_N`,
//! [`crate::RowKind::host_column`]) and `time`:
//! `seq = (time − start) / interval × hosts + N`, `batch = seq / batch_rows`. The count
//! runs in time slices of about [`AUDIT_ROWS_PER_QUERY`] rows, each keeping only the
//! batches it owns (a time step's rows can belong to two batches); the last slice has
//! no upper time bound, so rows written past the run's end show up as stray.

use std::collections::BTreeMap;

use crate::batch::BatchShape;
use crate::error::{Error, Result};
use crate::target::Target;

/// Rows one counting query covers.
pub const AUDIT_ROWS_PER_QUERY: u64 = 5_000_000;

/// Rows the server stores per batch id for a run of `batches` batches of `batch_rows`
/// rows with `shape`, in `shape.measurement` of the target's database.
pub async fn count_batches(
    target: &Target,
    shape: &BatchShape,
    batch_rows: u64,
    batches: u64,
) -> Result<BTreeMap<u64, u64>> {
    if shape.interval_ns <= 0 || batch_rows == 0 {
        return Err(Error::InvalidArgs(
            "the audit needs a positive interval and batch size".into(),
        ));
    }
    let per_query = (AUDIT_ROWS_PER_QUERY / batch_rows).max(1);
    let table = shape.measurement.replace('"', "\"\"");
    let mut counts = BTreeMap::new();
    let mut first = 0u64;
    loop {
        let end = (first + per_query).min(batches);
        let last_slice = end >= batches;
        let time_lo = shape.time_of(first * batch_rows);
        let upper = if last_slice {
            String::new()
        } else {
            format!(
                " AND time <= to_timestamp_nanos({})",
                shape.time_of(end * batch_rows - 1)
            )
        };
        let sql = format!(
            "SELECT (((CAST(time AS BIGINT) - {start}) / {interval}) * {hosts} \
             + CAST(substr(\"{host}\", 6) AS BIGINT)) / {batch_rows} AS batch, count(*) AS n \
             FROM \"{table}\" WHERE time >= to_timestamp_nanos({time_lo}){upper} GROUP BY 1",
            start = shape.start_ns,
            interval = shape.interval_ns,
            hosts = shape.hosts,
            host = shape.kind.host_column(),
        );
        for row in target.sql(&sql).await? {
            let (Some(batch), Some(n)) = (
                row.first().and_then(serde_json::Value::as_i64),
                row.get(1).and_then(serde_json::Value::as_u64),
            ) else {
                return Err(Error::malformed("batch count", format!("row {row:?}")));
            };
            let Ok(batch) = u64::try_from(batch) else {
                continue; // before the run's start: not this run's rows
            };
            if batch >= first && (batch < end || last_slice) {
                *counts.entry(batch).or_insert(0) += n;
            }
        }
        if last_slice {
            return Ok(counts);
        }
        first = end;
    }
}
