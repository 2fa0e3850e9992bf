//! Rows whose field type conflicts with what a measurement already stores.
//!
//! InfluxDB refuses exactly the lines that carry a field with the wrong type and keeps
//! the others; so does Quiver. A conflicting column is removed from the batch, the rows
//! holding a value in it are refused under their line numbers, and the rest is written.

use arrow::array::{Array, BooleanArray};
use arrow::compute::kernels::boolean::{not, or};
use arrow::compute::{filter_record_batch, is_not_null};
use arrow::record_batch::RecordBatch;

use super::{LineError, LpTable};
use crate::error::Result;
use crate::store::Storage;

/// Splits parsed tables into what can be written to `database` and the rows refused
/// because a field's type conflicts with the stored schema. The refused rows are
/// appended to `rejected` (kept in line order) with an empty excerpt; the caller, which
/// holds the body, fills it in with [`super::fill_excerpts`].
pub fn reject_conflicting_rows(
    storage: &Storage,
    database: &str,
    tables: Vec<LpTable>,
    rejected: &mut Vec<LineError>,
) -> Result<Vec<(String, RecordBatch)>> {
    let mut out = Vec::with_capacity(tables.len());
    let mut refused_any = false;
    for table in tables {
        let Some(stored) = storage.schema_of(database, &table.measurement) else {
            out.push((table.measurement, table.batch));
            continue;
        };
        let conflicts = stored.conflicting_columns(&table.batch.schema());
        if conflicts.is_empty() {
            out.push((table.measurement, table.batch));
            continue;
        }
        refused_any = true;
        let batch = &table.batch;
        let mut offending = BooleanArray::from(vec![false; batch.num_rows()]);
        let mut why: Vec<(usize, String)> = Vec::with_capacity(conflicts.len());
        for (column, existing, got) in &conflicts {
            let Some(index) = batch.schema().index_of(column).ok() else {
                continue;
            };
            offending = or(&offending, &is_not_null(batch.column(index))?)?;
            let got = got.map_or("an unsupported type", |k| k.name());
            why.push((
                index,
                format!(
                    "measurement {:?}: column {column:?} is stored as {} and this line writes it as {got}",
                    table.measurement,
                    existing.name()
                ),
            ));
        }
        for (row, line) in table.lines.iter().enumerate() {
            if !offending.value(row) {
                continue;
            }
            // Name the first conflicting column this row actually carries.
            let error = why
                .iter()
                .find(|(index, _)| batch.column(*index).is_valid(row))
                .map(|(_, message)| message.clone())
                .unwrap_or_default();
            rejected.push(LineError {
                line: *line,
                error,
                text: String::new(),
            });
        }
        let kept = filter_record_batch(batch, &not(&offending)?)?;
        if kept.num_rows() == 0 {
            continue;
        }
        let drop: Vec<usize> = why.iter().map(|(index, _)| *index).collect();
        let keep: Vec<usize> = (0..kept.num_columns())
            .filter(|i| !drop.contains(i))
            .collect();
        let kept = kept.project(&keep)?;
        debug_assert!(stored.conflicting_columns(&kept.schema()).is_empty());
        out.push((table.measurement, kept));
    }
    if refused_any {
        rejected.sort_by_key(|e| e.line);
    }
    Ok(out)
}
