//! Row-at-a-time construction of one measurement's Arrow batch.
//!
//! Row-shaped inputs (MessagePack rows, line protocol) describe each row as tags and
//! fields by name. [`RowBatchBuilder`] validates a whole row before it touches any
//! column, so a rejected row leaves no trace, then appends its values straight into
//! Arrow builders: no per-row heap objects.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, RecordBatch, StringBuilder,
    StringDictionaryBuilder, TimestampNanosecondArray, UInt64Builder,
};

use crate::error::{Error, Result};
use crate::schema::{
    canonical_schema, ColumnKind, FieldType, MeasurementSchema, TagKey, TIME_COLUMN,
};

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

enum ColumnData {
    Tag(StringDictionaryBuilder<TagKey>),
    Float(Float64Builder),
    Integer(Int64Builder),
    UInteger(UInt64Builder),
    Boolean(BooleanBuilder),
    String(StringBuilder),
}

impl ColumnData {
    fn new(kind: ColumnKind) -> Self {
        match kind {
            ColumnKind::Tag | ColumnKind::Time => ColumnData::Tag(StringDictionaryBuilder::new()),
            ColumnKind::Field(FieldType::Float) => ColumnData::Float(Float64Builder::new()),
            ColumnKind::Field(FieldType::Integer) => ColumnData::Integer(Int64Builder::new()),
            ColumnKind::Field(FieldType::UInteger) => ColumnData::UInteger(UInt64Builder::new()),
            ColumnKind::Field(FieldType::Boolean) => ColumnData::Boolean(BooleanBuilder::new()),
            ColumnKind::Field(FieldType::String) => ColumnData::String(StringBuilder::new()),
        }
    }

    fn append_nulls(&mut self, n: usize) {
        match self {
            ColumnData::Tag(b) => b.append_nulls(n),
            ColumnData::Float(b) => b.append_nulls(n),
            ColumnData::Integer(b) => b.append_nulls(n),
            ColumnData::UInteger(b) => b.append_nulls(n),
            ColumnData::Boolean(b) => b.append_nulls(n),
            ColumnData::String(b) => b.append_nulls(n),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            ColumnData::Tag(b) => Arc::new(b.finish()),
            ColumnData::Float(b) => Arc::new(b.finish()),
            ColumnData::Integer(b) => Arc::new(b.finish()),
            ColumnData::UInteger(b) => Arc::new(b.finish()),
            ColumnData::Boolean(b) => Arc::new(b.finish()),
            ColumnData::String(b) => Arc::new(b.finish()),
        }
    }
}

struct Column {
    name: String,
    kind: ColumnKind,
    data: ColumnData,
    /// Rows appended so far (values and nulls); equals the builder's row count after
    /// every committed row.
    len: usize,
    /// Stamp of the last row attempt that named this column, to find duplicate keys.
    seen_attempt: u64,
}

/// Builds one measurement's batch row by row. See the module documentation.
pub struct RowBatchBuilder {
    measurement: String,
    time: Vec<i64>,
    columns: Vec<Column>,
    by_name: HashMap<String, usize>,
    attempt: u64,
    widen_integers: bool,
    /// What the measurement already stores, when the caller knows: a column's first
    /// value in this batch must match it, so a type conflict with stored data is refused
    /// on the offending row instead of poisoning the whole batch.
    stored: Option<MeasurementSchema>,
}

impl RowBatchBuilder {
    /// A builder for `measurement`. With `widen_integers`, an integer value arriving for a
    /// float column (or the reverse) is stored as float instead of refused: MessagePack
    /// writers do not distinguish `1` from `1.0`, line protocol does.
    pub fn new(measurement: impl Into<String>, widen_integers: bool) -> Self {
        RowBatchBuilder {
            measurement: measurement.into(),
            time: Vec::new(),
            columns: Vec::new(),
            by_name: HashMap::new(),
            attempt: 0,
            widen_integers,
            stored: None,
        }
    }

    /// Checks every new column against the kinds `stored` already has.
    pub fn with_stored_schema(mut self, stored: MeasurementSchema) -> Self {
        self.stored = Some(stored);
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
        self.attempt += 1;
        let attempt = self.attempt;
        // Validation pass: no column is mutated until every key checks out.
        let mut new_columns: Vec<(&str, ColumnKind)> = Vec::new();
        let mut widen: Vec<usize> = Vec::new();
        for (name, kind) in tags.iter().map(|(n, _)| (*n, ColumnKind::Tag)).chain(
            fields
                .iter()
                .map(|(n, v)| (*n, ColumnKind::Field(v.field_type()))),
        ) {
            if name == TIME_COLUMN {
                return Err(RowError(format!(
                    "{TIME_COLUMN:?} cannot be a tag or field name"
                )));
            }
            if name.is_empty() {
                return Err(RowError("empty tag or field name".into()));
            }
            match self.by_name.get(name) {
                Some(&i) => {
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
                        None => kind,
                    };
                    new_columns.push((name, kind));
                }
            }
        }
        // Commit pass.
        let rows = self.time.len();
        for i in widen {
            self.widen_to_float(i);
        }
        for (name, kind) in new_columns {
            let mut data = ColumnData::new(kind);
            data.append_nulls(rows);
            self.by_name.insert(name.to_string(), self.columns.len());
            self.columns.push(Column {
                name: name.to_string(),
                kind,
                data,
                len: rows,
                seen_attempt: attempt,
            });
        }
        for (name, value) in tags {
            if let Some(&i) = self.by_name.get(*name) {
                let column = &mut self.columns[i];
                if let ColumnData::Tag(b) = &mut column.data {
                    b.append(value).map_err(|e| RowError(e.to_string()))?;
                    column.len += 1;
                }
            }
        }
        for (name, value) in fields {
            if let Some(&i) = self.by_name.get(*name) {
                let column = &mut self.columns[i];
                append_field(&mut column.data, value);
                column.len += 1;
            }
        }
        self.time.push(time_ns);
        let rows = self.time.len();
        for column in &mut self.columns {
            if column.len < rows {
                column.data.append_nulls(rows - column.len);
                column.len = rows;
            }
            debug_assert_eq!(column.len, rows, "column {} out of step", column.name);
        }
        Ok(())
    }

    fn widen_to_float(&mut self, i: usize) {
        let column = &mut self.columns[i];
        if let ColumnData::Integer(b) = &mut column.data {
            let ints = b.finish();
            let mut floats = Float64Builder::with_capacity(ints.len());
            for v in ints.iter() {
                floats.append_option(v.map(|v| v as f64));
            }
            column.data = ColumnData::Float(floats);
            column.kind = ColumnKind::Field(FieldType::Float);
        }
    }

    /// Finishes the batch (canonical column order), or `None` if no row was added.
    pub fn finish(mut self) -> Result<Option<RecordBatch>> {
        if self.time.is_empty() {
            return Ok(None);
        }
        let schema = canonical_schema(self.columns.iter().map(|c| (c.name.as_str(), c.kind)));
        let mut arrays: HashMap<String, ArrayRef> = HashMap::with_capacity(self.columns.len());
        for column in &mut self.columns {
            arrays.insert(column.name.clone(), column.data.finish());
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

fn append_field(data: &mut ColumnData, value: &FieldValue<'_>) {
    match (data, value) {
        (ColumnData::Float(b), FieldValue::Float(v)) => b.append_value(*v),
        (ColumnData::Float(b), FieldValue::Integer(v)) => b.append_value(*v as f64),
        (ColumnData::Integer(b), FieldValue::Integer(v)) => b.append_value(*v),
        (ColumnData::UInteger(b), FieldValue::UInteger(v)) => b.append_value(*v),
        (ColumnData::Boolean(b), FieldValue::Boolean(v)) => b.append_value(*v),
        (ColumnData::String(b), FieldValue::String(v)) => b.append_value(v),
        (data, _) => {
            // Unreachable after validation; keep the column in step rather than panic.
            debug_assert!(false, "field type changed between validation and commit");
            data.append_nulls(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Float64Type;

    #[test]
    fn rows_with_missing_fields_get_nulls_not_zeros() {
        let mut b = RowBatchBuilder::new("cpu", false);
        b.push_row(1, &[("host", "a")], &[("x", FieldValue::Float(1.0))])
            .unwrap();
        b.push_row(2, &[], &[("y", FieldValue::Integer(7))])
            .unwrap();
        let batch = b.finish().unwrap().unwrap();
        assert_eq!(batch.num_rows(), 2);
        let x = batch.column_by_name("x").unwrap();
        assert!(x.is_null(1));
        let y = batch.column_by_name("y").unwrap();
        assert!(y.is_null(0));
        assert!(batch.column_by_name("host").unwrap().is_null(1));
    }

    #[test]
    fn a_rejected_row_leaves_no_trace() {
        let mut b = RowBatchBuilder::new("cpu", false);
        b.push_row(1, &[], &[("x", FieldValue::Float(1.0))])
            .unwrap();
        let err = b
            .push_row(2, &[("new", "t")], &[("x", FieldValue::String("s"))])
            .unwrap_err();
        assert!(err.0.contains("\"x\""), "{err}");
        let err = b.push_row(
            3,
            &[],
            &[("x", FieldValue::Float(1.0)), ("x", FieldValue::Float(2.0))],
        );
        assert!(err.unwrap_err().0.contains("duplicate"));
        b.push_row(4, &[], &[("x", FieldValue::Float(4.0))])
            .unwrap();
        let batch = b.finish().unwrap().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert!(batch.column_by_name("new").is_none());
        let x = batch
            .column_by_name("x")
            .unwrap()
            .as_primitive::<Float64Type>();
        assert_eq!(x.values().to_vec(), vec![1.0, 4.0]);
    }

    #[test]
    fn integers_widen_to_float_only_when_allowed() {
        let mut strict = RowBatchBuilder::new("m", false);
        strict
            .push_row(1, &[], &[("v", FieldValue::Integer(1))])
            .unwrap();
        assert!(strict
            .push_row(2, &[], &[("v", FieldValue::Float(1.5))])
            .is_err());

        let mut lenient = RowBatchBuilder::new("m", true);
        lenient
            .push_row(1, &[], &[("v", FieldValue::Integer(1))])
            .unwrap();
        lenient
            .push_row(2, &[], &[("v", FieldValue::Float(1.5))])
            .unwrap();
        lenient
            .push_row(3, &[], &[("v", FieldValue::Integer(2))])
            .unwrap();
        let batch = lenient.finish().unwrap().unwrap();
        let v = batch
            .column_by_name("v")
            .unwrap()
            .as_primitive::<Float64Type>();
        assert_eq!(v.values().to_vec(), vec![1.0, 1.5, 2.0]);
    }

    #[test]
    fn tag_and_field_with_the_same_name_is_refused() {
        let mut b = RowBatchBuilder::new("m", false);
        let err = b
            .push_row(1, &[("a", "x")], &[("a", FieldValue::Float(1.0))])
            .unwrap_err();
        assert!(err.0.contains("duplicate"), "{err}");
    }
}
