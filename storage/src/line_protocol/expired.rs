//! Rows older than their measurement's retention, refused line by line before they
//! enter the log, as InfluxDB refuses "points beyond retention policy": stored only to
//! be dropped later would look written and then vanish.

use arrow::compute::filter_record_batch;

use super::{LineError, LpTable};
use crate::error::Result;
use crate::ids::TimestampNs;
use crate::lifecycle::format_duration_ns;
use crate::store::{rows_at_or_after, Storage};

/// Drops the rows of `tables` older than their measurement's retention at `now`,
/// appending one [`LineError`] per refused row (empty excerpt, kept in line order).
pub fn reject_expired_rows(
    storage: &Storage,
    database: &str,
    tables: Vec<LpTable>,
    now: TimestampNs,
    rejected: &mut Vec<LineError>,
) -> Result<Vec<LpTable>> {
    let mut out = Vec::with_capacity(tables.len());
    let mut refused_any = false;
    for table in tables {
        let Some(from) = storage.writable_from(database, &table.measurement, now) else {
            out.push(table);
            continue;
        };
        let Some(keep) = rows_at_or_after(&table.batch, from) else {
            out.push(table);
            continue;
        };
        if keep.true_count() == table.batch.num_rows() {
            out.push(table);
            continue;
        }
        refused_any = true;
        let retention = storage
            .with_policies(|p| p.retention_ns(database, &table.measurement))
            .map(format_duration_ns)
            .unwrap_or_default();
        let cutoff = chrono::DateTime::from_timestamp_nanos(from.0)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut lines = Vec::with_capacity(keep.true_count());
        for (row, line) in table.lines.iter().enumerate() {
            if keep.value(row) {
                lines.push(*line);
            } else {
                rejected.push(LineError {
                    line: *line,
                    error: format!(
                        "point is older than the retention of {database}.{} ({retention}): its time is before {cutoff}",
                        table.measurement
                    ),
                    text: String::new(),
                });
            }
        }
        if lines.is_empty() {
            continue;
        }
        out.push(LpTable {
            measurement: table.measurement,
            batch: filter_record_batch(&table.batch, &keep)?,
            lines,
        });
    }
    if refused_any {
        rejected.sort_by_key(|e| e.line);
    }
    Ok(out)
}
