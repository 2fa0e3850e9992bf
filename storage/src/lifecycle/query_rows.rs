//! A query's result as rows to write: what a continuous query stores in its target
//! measurement. The `time` column becomes the row's time; string columns become tags;
//! numbers and booleans become fields (the rule MessagePack's columnar form follows).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::schema::{canonical_schema, ColumnKind, FieldType, TIME_COLUMN, TIME_TYPE};

fn kind_of(name: &str, data_type: &DataType) -> Result<ColumnKind> {
    Ok(match data_type {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => ColumnKind::Tag,
        DataType::Dictionary(_, v)
            if matches!(**v, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) =>
        {
            ColumnKind::Tag
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Decimal128(..) => {
            ColumnKind::Field(FieldType::Float)
        }
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            ColumnKind::Field(FieldType::Integer)
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            ColumnKind::Field(FieldType::UInteger)
        }
        DataType::Boolean => ColumnKind::Field(FieldType::Boolean),
        other => {
            return Err(Error::InvalidPayload(format!(
                "column {name:?} of the query's result is {other}: a continuous query's columns must be time, strings (tags), numbers or booleans (fields)"
            )))
        }
    })
}

/// Converts one result batch into a batch in the canonical write schema. Refuses a
/// result without a non-null `time` timestamp column, or with columns of other types.
pub fn query_rows_for_write(batch: &RecordBatch) -> Result<RecordBatch> {
    let schema = batch.schema();
    let time_index = schema.index_of(TIME_COLUMN).map_err(|_| {
        Error::InvalidPayload(
            "a continuous query's result needs a `time` column (e.g. `time_bucket(...) AS time`)"
                .into(),
        )
    })?;
    let time = batch.column(time_index);
    if !matches!(time.data_type(), DataType::Timestamp(..)) {
        return Err(Error::InvalidPayload(format!(
            "the result's `time` column is {}, not a timestamp",
            time.data_type()
        )));
    }
    let time = cast(time, &TIME_TYPE)?;
    if time.null_count() > 0 {
        return Err(Error::InvalidPayload(
            "the result's `time` column holds nulls".into(),
        ));
    }
    let mut columns: Vec<(String, ColumnKind, ArrayRef)> = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        if i == time_index {
            continue;
        }
        let kind = kind_of(field.name(), field.data_type())?;
        columns.push((field.name().clone(), kind, batch.column(i).clone()));
    }
    let target = canonical_schema(columns.iter().map(|(n, k, _)| (n.as_str(), *k)));
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(target.fields().len());
    for field in target.fields() {
        if field.name() == TIME_COLUMN {
            arrays.push(Arc::clone(&time));
            continue;
        }
        let Some((_, _, array)) = columns.iter().find(|(n, _, _)| n == field.name()) else {
            return Err(Error::InvalidPayload(format!(
                "the result names column {:?} twice",
                field.name()
            )));
        };
        arrays.push(cast(array, field.data_type())?);
    }
    if target.fields().len() != columns.len() + 1 {
        return Err(Error::InvalidPayload(
            "the result names a column twice".into(),
        ));
    }
    Ok(RecordBatch::try_new(target, arrays)?)
}

#[cfg(test)]
mod tests {
    use arrow::array::{Float64Array, Int64Array, StringArray, TimestampNanosecondArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    #[test]
    fn strings_become_tags_and_numbers_fields() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("value", DataType::Float64, true),
            Field::new("host", DataType::Utf8, true),
            Field::new("time", TIME_TYPE, false),
            Field::new("n", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Float64Array::from(vec![1.5])),
                Arc::new(StringArray::from(vec!["a"])),
                Arc::new(TimestampNanosecondArray::from(vec![7])),
                Arc::new(Int64Array::from(vec![3])),
            ],
        )
        .unwrap();
        let out = query_rows_for_write(&batch).unwrap();
        let schema = out.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["time", "host", "n", "value"]);
        assert_eq!(
            out.schema().field(1).data_type(),
            &crate::schema::tag_type()
        );
        let no_time = batch.project(&[0, 1]).unwrap();
        assert!(query_rows_for_write(&no_time)
            .unwrap_err()
            .to_string()
            .contains("`time`"));
    }
}
