//! One column of a [`super::RowBatchBuilder`]: an Arrow builder that starts where the
//! column first appeared and is padded with nulls only when it must be.

use std::sync::Arc;

use arrow::array::{
    new_null_array, ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder,
    StringDictionaryBuilder, UInt64Builder,
};
use arrow::compute::concat;

use super::FieldValue;
use crate::error::Result;
use crate::schema::{ColumnKind, FieldType, TagKey};

/// Bytes one row of a column of `kind` takes in Arrow, variable-length data aside:
/// 8 for numbers and time, the 4-byte key of a tag, the 4-byte offset of a string, and
/// a byte for a boolean (really two bits; rounded up). Validity bitmaps (a bit per
/// row) are left out.
pub(crate) fn slot_bytes(kind: ColumnKind) -> usize {
    match kind {
        ColumnKind::Time => 8,
        ColumnKind::Tag => 4,
        ColumnKind::Field(FieldType::Float | FieldType::Integer | FieldType::UInteger) => 8,
        ColumnKind::Field(FieldType::Boolean) => 1,
        ColumnKind::Field(FieldType::String) => 4,
    }
}

enum ColumnData {
    Tag(StringDictionaryBuilder<TagKey>),
    Float(Float64Builder),
    Integer(Int64Builder),
    UInteger(UInt64Builder),
    Boolean(BooleanBuilder),
    String(StringBuilder),
}

impl ColumnData {
    /// An empty builder that allocates nothing until it is used. Arrow's `new()`
    /// reserves 1,024 slots (8 KiB for a number, about 16 KiB for a tag with its hash
    /// table): with hundreds of sparse columns per table, that reserve, not the data,
    /// would be most of a write's memory. Builders grow by doubling, so starting empty
    /// costs a few reallocations per column.
    fn new(kind: ColumnKind) -> Self {
        match kind {
            ColumnKind::Tag | ColumnKind::Time => {
                ColumnData::Tag(StringDictionaryBuilder::with_capacity(0, 0, 0))
            }
            ColumnKind::Field(FieldType::Float) => {
                ColumnData::Float(Float64Builder::with_capacity(0))
            }
            ColumnKind::Field(FieldType::Integer) => {
                ColumnData::Integer(Int64Builder::with_capacity(0))
            }
            ColumnKind::Field(FieldType::UInteger) => {
                ColumnData::UInteger(UInt64Builder::with_capacity(0))
            }
            ColumnKind::Field(FieldType::Boolean) => {
                ColumnData::Boolean(BooleanBuilder::with_capacity(0))
            }
            ColumnKind::Field(FieldType::String) => {
                ColumnData::String(StringBuilder::with_capacity(0, 0))
            }
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

/// A column of the batch being built.
pub(super) struct Column {
    pub(super) name: String,
    pub(super) kind: ColumnKind,
    data: ColumnData,
    /// The row the column first appeared in: rows before it are null, and those nulls
    /// are only materialised by `finish`.
    start: usize,
    /// Slots appended so far from `start` on (values and nulls). Lags the row count
    /// while the column is not mentioned: the gap is filled with nulls when it next
    /// takes a value and at `finish`, never row by row.
    len: usize,
    /// Stamp of the last row attempt that named this column, to find duplicate keys.
    pub(super) seen_attempt: u64,
    /// Distinct values in a tag's dictionary: a key equal to it on append is a new value.
    dictionary_values: usize,
}

impl Column {
    /// A column of `kind` first appearing at row `start`, named by row attempt `attempt`.
    pub(super) fn new(name: &str, kind: ColumnKind, start: usize, attempt: u64) -> Self {
        Column {
            name: name.to_string(),
            kind,
            data: ColumnData::new(kind),
            start,
            len: 0,
            seen_attempt: attempt,
            dictionary_values: 0,
        }
    }

    /// Fills the gap between the slots appended and row `rows` with nulls, in one call.
    /// Returns how many nulls that took.
    fn catch_up(&mut self, rows: usize) -> usize {
        let end = self.start + self.len;
        debug_assert!(end <= rows, "column {} ahead of the rows", self.name);
        let gap = rows - end;
        if gap > 0 {
            self.data.append_nulls(gap);
            self.len += gap;
        }
        gap
    }

    /// Appends a tag value at row `row`. Returns the slots appended (nulls caught up
    /// plus the value) and the bytes the dictionary grew by (0 for a known value).
    pub(super) fn append_tag(&mut self, row: usize, value: &str) -> (usize, usize) {
        let slots = self.catch_up(row) + 1;
        let mut grew = 0;
        if let ColumnData::Tag(b) = &mut self.data {
            // Keys cannot run out: a dictionary has at most one value per row, and rows
            // are capped at `ROWS_MAX`.
            match b.append(value) {
                Ok(key) if key as usize == self.dictionary_values => {
                    self.dictionary_values += 1;
                    grew = 4 + value.len();
                }
                Ok(_) => {}
                Err(e) => {
                    debug_assert!(false, "tag dictionary full: {e}");
                    b.append_null();
                }
            }
        } else {
            debug_assert!(false, "tag value for field column {}", self.name);
            self.data.append_nulls(1);
        }
        self.len += 1;
        (slots, grew)
    }

    /// Appends a field value at row `row`. Returns the slots appended (nulls caught up
    /// plus the value).
    pub(super) fn append_field(&mut self, row: usize, value: &FieldValue<'_>) -> usize {
        let slots = self.catch_up(row) + 1;
        match (&mut self.data, value) {
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
        self.len += 1;
        slots
    }

    /// Turns an integer column into a float one, its values and nulls in place.
    /// Integers and floats both take 8 bytes a row: the batch's size is unchanged.
    pub(super) fn widen_to_float(&mut self) {
        if let ColumnData::Integer(b) = &mut self.data {
            let ints = b.finish();
            debug_assert_eq!(ints.len(), self.len);
            let mut floats = Float64Builder::with_capacity(ints.len());
            for v in ints.iter() {
                floats.append_option(v.map(|v| v as f64));
            }
            self.data = ColumnData::Float(floats);
            self.kind = ColumnKind::Field(FieldType::Float);
        }
    }

    /// The finished array of `rows` rows: the leading nulls before `start`, then the
    /// slots appended, then nulls up to `rows`.
    pub(super) fn finish(&mut self, rows: usize) -> Result<ArrayRef> {
        self.catch_up(rows);
        let array = self.data.finish();
        if self.start == 0 {
            return Ok(array);
        }
        let leading = new_null_array(array.data_type(), self.start);
        Ok(concat(&[leading.as_ref(), array.as_ref()])?)
    }
}
