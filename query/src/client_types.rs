//! The types results leave the engine with. Tags are string views inside the engine
//! (see `provider`), but not every Arrow consumer reads views yet (pyarrow before 16,
//! older Arrow JS and Go releases); results carry them as plain `Utf8`, as they did
//! before the engine used views. Only top-level columns are views here, since nothing
//! Quiver stores nests. [`cast_columns`] also brings memory batches into the engine's
//! types (`provider`).

use std::sync::Arc;

use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use crate::error::Error;

/// The result schema clients see, or `None` when `schema` already is it.
pub(crate) fn client_schema(schema: &SchemaRef) -> Option<SchemaRef> {
    if !schema
        .fields()
        .iter()
        .any(|f| f.data_type() == &DataType::Utf8View)
    {
        return None;
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|field| match field.data_type() {
            DataType::Utf8View => field.as_ref().clone().with_data_type(DataType::Utf8),
            _ => field.as_ref().clone(),
        })
        .collect();
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

/// `batch` in `schema` (from [`client_schema`] of the batch's own schema).
pub(crate) fn to_client(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, Error> {
    Ok(cast_columns(batch, schema)?)
}

/// `batch` with each column cast to the type `schema` gives it (same columns, same
/// order); columns already of that type are shared, not copied.
pub(crate) fn cast_columns(
    batch: &RecordBatch,
    schema: &SchemaRef,
) -> Result<RecordBatch, ArrowError> {
    debug_assert_eq!(batch.num_columns(), schema.fields().len());
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                Ok(Arc::clone(column))
            } else {
                cast(column, field.data_type())
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(Arc::clone(schema), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray, Float64Array, StringViewArray};

    #[test]
    fn views_become_plain_strings_and_nothing_else_changes() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("host", DataType::Utf8View, true),
            Field::new("v", DataType::Float64, false),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringViewArray::from(vec![
                    Some("a"),
                    None,
                    Some("a long host name over twelve bytes"),
                ])),
                Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0])),
            ],
        )
        .unwrap();
        let out_schema = client_schema(&schema).unwrap();
        let out = to_client(&batch, &out_schema).unwrap();
        assert_eq!(out.schema().field(0).data_type(), &DataType::Utf8);
        let hosts = out.column(0).as_string::<i32>();
        assert_eq!(hosts.value(0), "a");
        assert!(hosts.is_null(1));
        assert_eq!(hosts.value(2), "a long host name over twelve bytes");
        assert_eq!(out.column(1), batch.column(1));
        assert!(client_schema(&out_schema).is_none());
    }
}
