//! One [`RowBatchBuilder`] per measurement, kept in the order measurements first appear,
//! and the body-wide limits on them: how many measurements, and how many bytes their
//! batches weigh once padded.

use std::collections::HashMap;

use super::{LineError, LpTable, Refusal};
use crate::ids::validate_measurement_name;
use crate::limits::{ByteBudget, WriteLimits};
use crate::rows::{FieldValue, RowBatchBuilder};
use crate::schema::MeasurementSchema;

struct Table {
    builder: RowBatchBuilder,
    /// The first line accepted into this table and its excerpt: where an internal error
    /// in building the batch is reported (see [`Tables::finish`]).
    first_line: usize,
    first_text: String,
    /// The 1-based line number of every row, in row order: lets a later stage (the
    /// schema check against stored data) reject single rows by line.
    lines: Vec<usize>,
}

/// What a measurement already stores, looked up once per measurement per body.
pub(super) type StoredSchemas<'s> = &'s dyn Fn(&str) -> Option<MeasurementSchema>;

/// The builders of one body.
pub(super) struct Tables<'s> {
    stored: StoredSchemas<'s>,
    limits: WriteLimits,
    /// What the batches will weigh once finished, against `write_decoded_bytes_max`.
    budget: ByteBudget,
    tables: Vec<Table>,
    by_name: HashMap<String, usize>,
    /// The table of the previous line: consecutive lines usually share a measurement,
    /// so this saves a hash lookup per line.
    last: Option<usize>,
}

impl<'s> Tables<'s> {
    pub(super) fn new(stored: StoredSchemas<'s>, limits: &WriteLimits) -> Self {
        Tables {
            stored,
            limits: *limits,
            budget: ByteBudget::new(limits),
            tables: Vec::new(),
            by_name: HashMap::new(),
            last: None,
        }
    }

    /// Appends one row to `measurement`'s batch, creating the batch on first use.
    /// `text` is called for the line's excerpt only when a table is created.
    pub(super) fn push(
        &mut self,
        measurement: &str,
        time_ns: i64,
        tags: &[(&str, &str)],
        fields: &[(&str, FieldValue<'_>)],
        line: usize,
        text: impl FnOnce() -> String,
    ) -> Result<(), Refusal> {
        let i = self.index(measurement, line, text)?;
        let table = &mut self.tables[i];
        let before = table.builder.bytes_when_finished();
        table
            .builder
            .push_row(time_ns, tags, fields)
            .map_err(|e| Refusal::Line(e.0))?;
        table.lines.push(line);
        let after = table.builder.bytes_when_finished();
        self.budget.recharge(before, after).map_err(Refusal::Body)
    }

    /// Charges `bytes` (the report of a rejected line) to the write's byte budget.
    pub(super) fn charge(&mut self, bytes: usize) -> crate::error::Result<()> {
        self.budget.charge(bytes)
    }

    fn index(
        &mut self,
        measurement: &str,
        line: usize,
        text: impl FnOnce() -> String,
    ) -> Result<usize, Refusal> {
        if let Some(i) = self.last {
            if self.tables[i].builder.measurement() == measurement {
                return Ok(i);
            }
        }
        let i = match self.by_name.get(measurement) {
            Some(&i) => i,
            None => {
                validate_measurement_name(measurement).map_err(|e| e.to_string())?;
                if self.tables.len() >= self.limits.measurements_per_write_max {
                    return Err(Refusal::Body(
                        self.limits.too_many_measurements(measurement),
                    ));
                }
                let i = self.tables.len();
                let builder = RowBatchBuilder::new(measurement, false)
                    .with_columns_max(self.limits.columns_per_table_max);
                self.tables.push(Table {
                    builder: match (self.stored)(measurement) {
                        Some(schema) => builder.with_stored_schema(schema),
                        None => builder,
                    },
                    first_line: line,
                    first_text: text(),
                    lines: Vec::new(),
                });
                self.by_name.insert(measurement.to_string(), i);
                i
            }
        };
        self.last = Some(i);
        Ok(i)
    }

    /// Finishes every batch that has rows, in first-seen order.
    ///
    /// Finishing only fails on a bug in the builder. The rows are then lost, and each
    /// is reported in `rejected` (under the table's first line: per-row line numbers are
    /// not kept for a path that should never run) so that no row disappears silently.
    pub(super) fn finish(self, rejected: &mut Vec<LineError>) -> Vec<LpTable> {
        let mut out = Vec::with_capacity(self.tables.len());
        let mut lost = false;
        for table in self.tables {
            let name = table.builder.measurement().to_string();
            let rows = table.builder.rows();
            match table.builder.finish() {
                Ok(Some(batch)) => {
                    debug_assert_eq!(batch.num_rows(), rows);
                    debug_assert_eq!(table.lines.len(), rows);
                    out.push(LpTable {
                        measurement: name,
                        batch,
                        lines: table.lines,
                    });
                }
                // Every line of this measurement was rejected.
                Ok(None) => {}
                Err(e) => {
                    debug_assert!(false, "building the batch of {name:?} failed: {e}");
                    lost = true;
                    for _ in 0..rows {
                        rejected.push(LineError {
                            line: table.first_line,
                            error: format!(
                                "measurement {name:?}: internal error building the batch, all {rows} of its rows lost: {e}"
                            ),
                            text: table.first_text.clone(),
                        });
                    }
                }
            }
        }
        if lost {
            rejected.sort_by_key(|e| e.line);
        }
        out
    }
}
