//! Row-at-a-time construction of one measurement's Arrow batch.
//!
//! Row-shaped inputs (MessagePack rows, line protocol) describe each row as tags and
//! fields by name. [`RowBatchBuilder`] validates a whole row before it touches any
//! column, so a rejected row leaves no trace, then appends its values straight into
//! Arrow builders: no per-row heap objects.
//!
//! Columns are padded with nulls lazily: a column that a row does not mention is not
//! touched, and catches up (one bulk `append_nulls`) only when it next receives a value
//! or when the batch is finished; a column that first appears at row N starts there,
//! and its N leading nulls are put in front only by `finish`. So a row costs work in
//! proportion to its own width, and adding a column costs O(1): a body where every line
//! brings a new field is linear, not quadratic. The width of a measurement is capped
//! ([`WriteLimits::columns_per_table_max`]), and the builder knows what its batch will
//! weigh once padded ([`RowBatchBuilder::bytes_when_finished`]) so a decoder can refuse a
//! write before the padding is ever allocated.

mod column;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, TimestampNanosecondArray};

use crate::error::{Error, Result};
use crate::limits::{WriteLimits, COLUMN_BYTES_FIXED};
use crate::schema::{canonical_schema, ColumnKind, FieldType, MeasurementSchema, TIME_COLUMN};
use column::{slot_bytes, Column};

/// Most rows one builder takes: tag dictionaries have `i32` keys, and every row may
/// bring a new tag value.
const ROWS_MAX: usize = i32::MAX as usize;

/// One field value as it arrives, borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldValue<'a> {
    /// 64-bit float.
    Float(f64),
    /// Signed integer.
    Integer(i64),
    /// Unsigned integer.
    UInteger(u64),
    /// Boolean.
    Boolean(bool),
    /// String.
    String(&'a str),
}

impl FieldValue<'_> {
    /// The field type this value would create.
    pub fn field_type(&self) -> FieldType {
        match self {
            FieldValue::Float(_) => FieldType::Float,
            FieldValue::Integer(_) => FieldType::Integer,
            FieldValue::UInteger(_) => FieldType::UInteger,
            FieldValue::Boolean(_) => FieldType::Boolean,
            FieldValue::String(_) => FieldType::String,
        }
    }
}

/// Why one row was refused. The row is not added; the builder stays usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RowError(pub String);

/// Builds one measurement's batch row by row. See the module documentation.
pub struct RowBatchBuilder {
    measurement: String,
    time: Vec<i64>,
    columns: Vec<Column>,
    by_name: HashMap<String, usize>,
    /// Column of each key of the last row taken (tags, then fields): the next row
    /// usually names the same keys in the same order, and a name compared where it
    /// was costs far less than two hash lookups per key (which were 40 % of parsing a
    /// ten-tag, ten-field line).
    last_keys: Vec<usize>,
    /// The previous `last_keys`, reused as the next row's scratch (no allocation per row).
    spare_keys: Vec<usize>,
    attempt: u64,
    widen_integers: bool,
    /// What the measurement already stores, when the caller knows: a column's first
    /// value in this batch must match it, so a type conflict with stored data is refused
    /// on the offending row instead of poisoning the whole batch.
    stored: Option<MeasurementSchema>,
    /// Most columns the measurement may have, `time` and stored columns included.
    columns_max: usize,
    /// Columns of this batch the stored schema does not have.
    columns_new: usize,
    /// Bytes per row once every column is padded: `time` plus each column's slot.
    row_bytes: usize,
    /// Bytes of slots appended so far (values and nulls, `time` included).
    slot_bytes_held: usize,
    /// Bytes of string values, of distinct tag values (dictionary entries, with their
    /// 4-byte offsets) and each column's fixed cost (`COLUMN_BYTES_FIXED` + its name).
    variable_bytes: usize,
}

impl RowBatchBuilder {
    /// A builder for `measurement`. With `widen_integers`, an integer value arriving for a
    /// float column (or the reverse) is stored as float instead of refused: MessagePack
    /// writers do not distinguish `1` from `1.0`, line protocol does. The width cap is
    /// [`WriteLimits::default`]'s until [`Self::with_columns_max`] sets another.
    pub fn new(measurement: impl Into<String>, widen_integers: bool) -> Self {
        RowBatchBuilder {
            measurement: measurement.into(),
            time: Vec::new(),
            columns: Vec::new(),
            by_name: HashMap::new(),
            last_keys: Vec::new(),
            spare_keys: Vec::new(),
            attempt: 0,
            widen_integers,
            stored: None,
            columns_max: WriteLimits::default().columns_per_table_max,
            columns_new: 0,
            row_bytes: slot_bytes(ColumnKind::Time),
            slot_bytes_held: 0,
            variable_bytes: 0,
        }
    }

    /// Checks every new column against the kinds `stored` already has, and counts the
    /// stored columns against the width cap.
    pub fn with_stored_schema(mut self, stored: MeasurementSchema) -> Self {
        self.stored = Some(stored);
        self
    }

    /// Caps the measurement's width at `columns_max` columns, counting `time` and the
    /// stored columns: a row that would add a column past it is refused. Stored columns
    /// beyond a cap lowered later stay writable; only new ones are refused.
    pub fn with_columns_max(mut self, columns_max: usize) -> Self {
        self.columns_max = columns_max;
        self
    }

    /// The measurement this builder is for.
    pub fn measurement(&self) -> &str {
        &self.measurement
    }

    /// Rows committed so far.
    pub fn rows(&self) -> usize {
        self.time.len()
    }

    /// The kind a column has in this batch so far.
    pub fn column_kind(&self, name: &str) -> Option<ColumnKind> {
        self.by_name.get(name).map(|&i| self.columns[i].kind)
    }

    /// Bytes the builders hold now: the slots appended (values, and nulls only where a
    /// column caught up) plus string and dictionary bytes. Grows with the values given,
    /// not with rows × columns. An estimate in the units of [`slot_bytes`]; validity
    /// bitmaps and spare capacity are left out.
    pub fn bytes_held(&self) -> usize {
        self.slot_bytes_held + self.variable_bytes
    }

    /// Bytes the batch will take once [`Self::finish`] pads every column to the row
    /// count: rows × (every column's slot + `time`) plus string and dictionary bytes.
    /// What a decoder charges against [`WriteLimits::write_decoded_bytes_max`]; O(1).
    pub fn bytes_when_finished(&self) -> usize {
        self.time
            .len()
            .saturating_mul(self.row_bytes)
            .saturating_add(self.variable_bytes)
    }

    /// Columns the measurement has with this batch: `time`, the stored ones and the new
    /// ones this batch brings.
    pub fn columns_total(&self) -> usize {
        let stored = self.stored.as_ref().map_or(1, |s| s.columns_len());
        stored + self.columns_new
    }

    /// Validates and appends one row. On error nothing is appended.
    pub fn push_row(
        &mut self,
        time_ns: i64,
        tags: &[(&str, &str)],
        fields: &[(&str, FieldValue<'_>)],
    ) -> Result<(), RowError> {
        if fields.is_empty() {
            return Err(RowError("a row needs at least one field".into()));
        }
        if self.time.len() >= ROWS_MAX {
            return Err(RowError(format!(
                "measurement {:?}: more than {ROWS_MAX} rows in one request",
                self.measurement
            )));
        }
        self.attempt += 1;
        let attempt = self.attempt;
        // Validation pass: no column is mutated until every key checks out.
        let mut new_columns: Vec<(&str, ColumnKind)> = Vec::new();
        let mut columns_new = self.columns_new;
        let mut widen: Vec<usize> = Vec::new();
        // Each key's column (`usize::MAX`: new in this row, numbered at commit).
        let mut keys = std::mem::take(&mut self.spare_keys);
        keys.clear();
        for (position, (name, kind)) in tags
            .iter()
            .map(|(n, _)| (*n, ColumnKind::Tag))
            .chain(
                fields
                    .iter()
                    .map(|(n, v)| (*n, ColumnKind::Field(v.field_type()))),
            )
            .enumerate()
        {
            if name == TIME_COLUMN {
                return Err(RowError(format!(
                    "{TIME_COLUMN:?} cannot be a tag or field name"
                )));
            }
            if name.is_empty() {
                return Err(RowError("empty tag or field name".into()));
            }
            let known = match self.last_keys.get(position) {
                Some(&i) if self.columns[i].name == name => Some(i),
                _ => self.by_name.get(name).copied(),
            };
            keys.push(known.unwrap_or(usize::MAX));
            match known {
                Some(i) => {
                    let column = &mut self.columns[i];
                    if column.seen_attempt == attempt {
                        return Err(RowError(format!("duplicate key {name:?} in one row")));
                    }
                    column.seen_attempt = attempt;
                    if column.kind != kind {
                        if self.widen_integers && numeric_widening(column.kind, kind) {
                            if column.kind == ColumnKind::Field(FieldType::Integer) {
                                widen.push(i);
                            }
                        } else {
                            return Err(RowError(format!(
                                "column {name:?} is {} earlier in this request, got {}",
                                column.kind.name(),
                                kind.name()
                            )));
                        }
                    }
                }
                None => {
                    if new_columns.iter().any(|(n, _)| *n == name) {
                        return Err(RowError(format!("duplicate key {name:?} in one row")));
                    }
                    let stored = self.stored.as_ref().and_then(|s| s.kind(name));
                    let kind = match stored {
                        Some(stored) if stored == kind => kind,
                        // Stored floats take integers (MessagePack does not tell 1 from
                        // 1.0); stored integers never become floats.
                        Some(stored)
                            if self.widen_integers
                                && stored == ColumnKind::Field(FieldType::Float)
                                && kind == ColumnKind::Field(FieldType::Integer) =>
                        {
                            stored
                        }
                        Some(stored) => {
                            return Err(RowError(format!(
                                "column {name:?} is stored as {}, got {}",
                                stored.name(),
                                kind.name()
                            )))
                        }
                        None => {
                            columns_new += 1;
                            let total = self.columns_total() - self.columns_new + columns_new;
                            if total > self.columns_max {
                                return Err(RowError(format!(
                                    "measurement {:?}: column {name:?} would make it {total} \
                                     columns wide; the limit is {} (columns_per_table_max, \
                                     counting time, tags and fields)",
                                    self.measurement, self.columns_max
                                )));
                            }
                            kind
                        }
                    };
                    new_columns.push((name, kind));
                }
            }
        }
        // Commit pass. `rows` is this row's index: every column it touches catches up
        // to it first.
        let rows = self.time.len();
        for i in widen {
            self.columns[i].widen_to_float();
        }
        self.columns_new = columns_new;
        for (name, kind) in new_columns {
            let index = self.columns.len();
            self.by_name.insert(name.to_string(), index);
            self.columns.push(Column::new(name, kind, rows, attempt));
            self.row_bytes += slot_bytes(kind);
            self.variable_bytes += COLUMN_BYTES_FIXED + name.len();
            // Keys are unique in a row (checked above): this is the one key named so.
            let names = tags
                .iter()
                .map(|(n, _)| *n)
                .chain(fields.iter().map(|(n, _)| *n));
            if let Some(position) = names
                .zip(&keys)
                .position(|(n, &k)| k == usize::MAX && n == name)
            {
                keys[position] = index;
            }
        }
        debug_assert!(keys.iter().all(|&k| k < self.columns.len()));
        let (tag_keys, field_keys) = keys.split_at(tags.len());
        for ((name, value), &i) in tags.iter().zip(tag_keys) {
            debug_assert_eq!(self.columns[i].name, *name);
            let column = &mut self.columns[i];
            let (slots, grew) = column.append_tag(rows, value);
            self.slot_bytes_held += slots * slot_bytes(column.kind);
            self.variable_bytes += grew;
        }
        for ((name, value), &i) in fields.iter().zip(field_keys) {
            debug_assert_eq!(self.columns[i].name, *name);
            let column = &mut self.columns[i];
            let slots = column.append_field(rows, value);
            self.slot_bytes_held += slots * slot_bytes(column.kind);
            if let FieldValue::String(s) = value {
                self.variable_bytes += s.len();
            }
        }
        self.time.push(time_ns);
        self.slot_bytes_held += slot_bytes(ColumnKind::Time);
        self.spare_keys = std::mem::replace(&mut self.last_keys, keys);
        debug_assert!(self.columns_new == 0 || self.columns_total() <= self.columns_max);
        debug_assert!(self.bytes_held() <= self.bytes_when_finished());
        Ok(())
    }

    /// Finishes the batch (canonical column order), or `None` if no row was added.
    /// Every column is padded with nulls to the row count here, once.
    pub fn finish(mut self) -> Result<Option<RecordBatch>> {
        if self.time.is_empty() {
            return Ok(None);
        }
        let rows = self.time.len();
        let schema = canonical_schema(self.columns.iter().map(|c| (c.name.as_str(), c.kind)));
        let mut arrays: HashMap<String, ArrayRef> = HashMap::with_capacity(self.columns.len());
        for column in &mut self.columns {
            let array = column.finish(rows)?;
            debug_assert_eq!(array.len(), rows, "column {} out of step", column.name);
            arrays.insert(column.name.clone(), array);
        }
        let mut out: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        out.push(Arc::new(TimestampNanosecondArray::from(std::mem::take(
            &mut self.time,
        ))));
        for field in schema.fields().iter().skip(1) {
            let array = arrays
                .remove(field.name())
                .ok_or_else(|| Error::InvalidPayload(format!("column {:?} lost", field.name())))?;
            out.push(array);
        }
        Ok(Some(RecordBatch::try_new(schema, out)?))
    }
}

fn numeric_widening(existing: ColumnKind, got: ColumnKind) -> bool {
    let float = ColumnKind::Field(FieldType::Float);
    let int = ColumnKind::Field(FieldType::Integer);
    (existing == float && got == int) || (existing == int && got == float)
}
