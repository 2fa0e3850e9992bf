//! The data model's column rules: what a tag, a field and `time` are in Arrow, and how a
//! measurement's schema grows as new columns arrive.
//!
//! A measurement's schema is a set of named columns, each a tag or a field of one type.
//! New columns may appear at any time (they are nullable; older rows read them as null);
//! a column never changes kind or type. The Arrow schema is canonical: `time` first, tags
//! sorted by name, fields sorted by name, so batches from different writers line up.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef, TimeUnit};

use crate::error::{Error, Result};

/// Name of the timestamp column in every measurement.
pub const TIME_COLUMN: &str = "time";

/// Arrow type of the `time` column: nanoseconds, no time zone (UTC by convention).
pub const TIME_TYPE: DataType = DataType::Timestamp(TimeUnit::Nanosecond, None);

/// The Arrow type of a tag column: dictionary-encoded strings.
pub fn tag_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// `schema` with every tag (dictionary of strings) declared as `as_type` instead: what
/// Parquet files record (`Utf8`) and what the query engine declares (`Utf8View`), both
/// for speed of reading; see `parquet_encode` and the query crate's provider.
pub fn with_tags_as(schema: &Schema, as_type: &DataType) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            DataType::Dictionary(_, value) if value.as_ref() == &DataType::Utf8 => {
                field.as_ref().clone().with_data_type(as_type.clone())
            }
            _ => field.as_ref().clone(),
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// Key type of tag dictionaries, for builders.
pub type TagKey = Int32Type;

/// The type of a field value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldType {
    /// 64-bit float.
    Float,
    /// Signed 64-bit integer.
    Integer,
    /// Unsigned 64-bit integer.
    UInteger,
    /// Boolean.
    Boolean,
    /// UTF-8 string.
    String,
}

impl FieldType {
    /// The Arrow type that stores this field type.
    pub fn arrow_type(self) -> DataType {
        match self {
            FieldType::Float => DataType::Float64,
            FieldType::Integer => DataType::Int64,
            FieldType::UInteger => DataType::UInt64,
            FieldType::Boolean => DataType::Boolean,
            FieldType::String => DataType::Utf8,
        }
    }

    /// A short name for error messages.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Float => "float",
            FieldType::Integer => "integer",
            FieldType::UInteger => "unsigned",
            FieldType::Boolean => "boolean",
            FieldType::String => "string",
        }
    }
}

/// What a column is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnKind {
    /// The timestamp column.
    Time,
    /// An indexed string dimension, dictionary-encoded.
    Tag,
    /// A measured value of one type.
    Field(FieldType),
}

impl ColumnKind {
    /// Reads the kind back from an Arrow type, or `None` for a type Quiver never stores.
    pub fn from_arrow(name: &str, data_type: &DataType) -> Option<ColumnKind> {
        match data_type {
            DataType::Timestamp(TimeUnit::Nanosecond, None) if name == TIME_COLUMN => {
                Some(ColumnKind::Time)
            }
            // Buffered rows may hold narrower keys than the schema's (`tag_keys`).
            DataType::Dictionary(key, value)
                if matches!(**key, DataType::Int32 | DataType::UInt16 | DataType::UInt8)
                    && **value == DataType::Utf8 =>
            {
                Some(ColumnKind::Tag)
            }
            DataType::Float64 => Some(ColumnKind::Field(FieldType::Float)),
            DataType::Int64 => Some(ColumnKind::Field(FieldType::Integer)),
            DataType::UInt64 => Some(ColumnKind::Field(FieldType::UInteger)),
            DataType::Boolean => Some(ColumnKind::Field(FieldType::Boolean)),
            DataType::Utf8 => Some(ColumnKind::Field(FieldType::String)),
            _ => None,
        }
    }

    /// The Arrow type that stores this kind.
    pub fn arrow_type(self) -> DataType {
        match self {
            ColumnKind::Time => TIME_TYPE,
            ColumnKind::Tag => tag_type(),
            ColumnKind::Field(t) => t.arrow_type(),
        }
    }

    /// A short name for error messages.
    pub fn name(self) -> &'static str {
        match self {
            ColumnKind::Time => "time",
            ColumnKind::Tag => "tag",
            ColumnKind::Field(t) => t.name(),
        }
    }
}

/// Builds the canonical Arrow schema for a set of columns: `time`, tags by name, fields
/// by name. `time` is non-nullable; everything else is nullable.
pub fn canonical_schema<'a>(columns: impl IntoIterator<Item = (&'a str, ColumnKind)>) -> SchemaRef {
    let mut tags: Vec<(&str, ColumnKind)> = Vec::new();
    let mut fields: Vec<(&str, ColumnKind)> = Vec::new();
    for (name, kind) in columns {
        match kind {
            ColumnKind::Time => {}
            ColumnKind::Tag => tags.push((name, kind)),
            ColumnKind::Field(_) => fields.push((name, kind)),
        }
    }
    tags.sort_by(|a, b| a.0.cmp(b.0));
    fields.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::with_capacity(1 + tags.len() + fields.len());
    out.push(Field::new(TIME_COLUMN, TIME_TYPE, false));
    for (name, kind) in tags.into_iter().chain(fields) {
        out.push(Field::new(name, kind.arrow_type(), true));
    }
    Arc::new(Schema::new(out))
}

/// One measurement's columns, grown only by adding nullable columns.
#[derive(Debug, Clone)]
pub struct MeasurementSchema {
    columns: BTreeMap<String, ColumnKind>,
    arrow: SchemaRef,
}

impl Default for MeasurementSchema {
    fn default() -> Self {
        Self::from_columns(BTreeMap::new())
    }
}

impl MeasurementSchema {
    fn from_columns(columns: BTreeMap<String, ColumnKind>) -> Self {
        let arrow = canonical_schema(columns.iter().map(|(n, k)| (n.as_str(), *k)));
        MeasurementSchema { columns, arrow }
    }

    /// The canonical Arrow schema of all columns seen so far.
    pub fn arrow(&self) -> &SchemaRef {
        &self.arrow
    }

    /// Columns the measurement has, `time` included.
    pub fn columns_len(&self) -> usize {
        self.columns.len() + 1
    }

    /// The kind of a column, if the measurement has it.
    pub fn kind(&self, column: &str) -> Option<ColumnKind> {
        if column == TIME_COLUMN {
            return Some(ColumnKind::Time);
        }
        self.columns.get(column).copied()
    }

    /// Tag column names in sort order.
    pub fn tag_columns(&self) -> Vec<String> {
        self.columns
            .iter()
            .filter(|(_, k)| **k == ColumnKind::Tag)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Checks `batch_schema` against this schema. Returns the grown schema when the batch
    /// brings new columns, `None` when nothing changes, or the first conflict.
    pub fn merge(
        &self,
        measurement: &str,
        batch_schema: &Schema,
    ) -> Result<Option<MeasurementSchema>> {
        let mut added: Vec<(String, ColumnKind)> = Vec::new();
        for field in batch_schema.fields() {
            let got = ColumnKind::from_arrow(field.name(), field.data_type()).ok_or_else(|| {
                Error::InvalidPayload(format!(
                    "column {:?} has unsupported type {}",
                    field.name(),
                    field.data_type()
                ))
            })?;
            match self.kind(field.name()) {
                Some(existing) if existing == got => {}
                Some(existing) => {
                    return Err(Error::SchemaConflict {
                        measurement: measurement.to_string(),
                        column: field.name().clone(),
                        existing: existing.name().to_string(),
                        got: got.name().to_string(),
                    })
                }
                None => added.push((field.name().clone(), got)),
            }
        }
        if added.is_empty() {
            return Ok(None);
        }
        let mut columns = self.columns.clone();
        columns.extend(added);
        Ok(Some(Self::from_columns(columns)))
    }
}

impl MeasurementSchema {
    /// The columns of `batch_schema` whose kind differs from the stored one, with
    /// (stored, offered) kinds: what a line-protocol write needs to refuse only the
    /// rows that carry them. Columns of unsupported type are listed with `None`.
    pub fn conflicting_columns(
        &self,
        batch_schema: &Schema,
    ) -> Vec<(String, ColumnKind, Option<ColumnKind>)> {
        batch_schema
            .fields()
            .iter()
            .filter_map(|field| {
                let got = ColumnKind::from_arrow(field.name(), field.data_type());
                let existing = self.kind(field.name())?;
                (got != Some(existing)).then(|| (field.name().clone(), existing, got))
            })
            .collect()
    }
}

/// Casts integer columns of `batch` to float where `stored` keeps them as float.
/// MessagePack writers do not tell `1` from `1.0` (Python sends whole floats as
/// integers), so a batch that happens to hold only whole numbers must not be refused
/// for a float column. Line protocol, which does tell them apart, never calls this.
pub fn widen_integers_to_stored(
    batch: RecordBatch,
    stored: &MeasurementSchema,
) -> Result<RecordBatch> {
    let float = ColumnKind::Field(FieldType::Float);
    let schema = batch.schema();
    let widen: Vec<usize> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| f.data_type() == &DataType::Int64 && stored.kind(f.name()) == Some(float))
        .map(|(i, _)| i)
        .collect();
    if widen.is_empty() {
        return Ok(batch);
    }
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    let mut columns = batch.columns().to_vec();
    for i in widen {
        columns[i] = arrow::compute::cast(&columns[i], &DataType::Float64)?;
        fields[i] = fields[i].clone().with_data_type(DataType::Float64);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())),
        columns,
    )?)
}

/// Rewrites `batch` to have exactly `schema`: columns in schema order, missing ones as
/// nulls, tag keys widened to the schema's (buffered rows keep them narrower, see
/// `tag_keys`). The batch's columns must be a subset of the schema, of the same kind.
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().as_ref() == schema.as_ref() {
        return Ok(batch.clone());
    }
    let rows = batch.num_rows();
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .map(|field| match batch.column_by_name(field.name()) {
            Some(column) if column.data_type() == field.data_type() => Ok(column.clone()),
            Some(column) => Ok(arrow::compute::cast(column, field.data_type())?),
            None => Ok(new_null_array(field.data_type(), rows)),
        })
        .collect::<Result<_>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// As [`conform`], but each column keeps its own type (tag keys their width): what the
/// flush reads, which writes tags through one dictionary of its own and needs no wide
/// copy of the keys.
pub(crate) fn align(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().as_ref() == schema.as_ref() {
        return Ok(batch.clone());
    }
    let rows = batch.num_rows();
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        match batch.column_by_name(field.name()) {
            Some(column) => {
                fields.push(
                    field
                        .as_ref()
                        .clone()
                        .with_data_type(column.data_type().clone()),
                );
                columns.push(column.clone());
            }
            None => {
                fields.push(field.as_ref().clone());
                columns.push(new_null_array(field.data_type(), rows));
            }
        }
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())),
        columns,
    )?)
}

/// `batch` with `change` applied to each column (`None`: keep it), the schema following
/// the new types; `batch` itself when nothing changed.
pub(crate) fn map_columns(
    batch: &RecordBatch,
    mut change: impl FnMut(&ArrayRef) -> Result<Option<ArrayRef>>,
) -> Result<RecordBatch> {
    let schema = batch.schema();
    let mut fields: Option<Vec<Field>> = None;
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    for (i, column) in batch.columns().iter().enumerate() {
        let Some(changed) = change(column)? else {
            continue;
        };
        debug_assert_eq!(changed.len(), column.len());
        let fields = fields
            .get_or_insert_with(|| schema.fields().iter().map(|f| f.as_ref().clone()).collect());
        fields[i] = fields[i]
            .clone()
            .with_data_type(changed.data_type().clone());
        columns[i] = changed;
    }
    let Some(fields) = fields else {
        return Ok(batch.clone());
    };
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())),
        columns,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_of(cols: &[(&str, ColumnKind)]) -> Schema {
        canonical_schema(cols.iter().copied()).as_ref().clone()
    }

    #[test]
    fn canonical_order_is_time_tags_fields() {
        let s = schema_of(&[
            ("b", ColumnKind::Field(FieldType::Float)),
            ("host", ColumnKind::Tag),
            ("a", ColumnKind::Field(FieldType::Integer)),
            ("dc", ColumnKind::Tag),
        ]);
        let names: Vec<&str> = s.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["time", "dc", "host", "a", "b"]);
    }

    #[test]
    fn merge_adds_columns_and_rejects_type_changes() {
        let base = MeasurementSchema::default();
        let first = schema_of(&[("usage", ColumnKind::Field(FieldType::Float))]);
        let grown = base.merge("cpu", &first).unwrap().unwrap();
        assert_eq!(
            grown.kind("usage"),
            Some(ColumnKind::Field(FieldType::Float))
        );
        assert!(grown.merge("cpu", &first).unwrap().is_none());
        let conflict = schema_of(&[("usage", ColumnKind::Field(FieldType::Integer))]);
        let err = grown.merge("cpu", &conflict).unwrap_err().to_string();
        assert!(
            err.contains("usage") && err.contains("float") && err.contains("integer"),
            "{err}"
        );
        let as_tag = schema_of(&[("usage", ColumnKind::Tag)]);
        assert!(grown.merge("cpu", &as_tag).is_err());
    }
}
