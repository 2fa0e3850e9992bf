//! The types results leave the engine with. Tags are string views inside the engine
//! (see `provider`), but not every Arrow consumer reads views yet (pyarrow before 16,
//! older Arrow JS and Go releases); results carry them as plain `Utf8` (and byte views
//! as `Binary`), as they did before the engine used views, also inside lists, structs,
//! maps and dictionaries that SQL builds (`array_agg(host)`). [`cast_columns`] also
//! brings memory batches into the engine's types (`provider`).

use std::sync::Arc;

use arrow::compute::cast;
use arrow::datatypes::{DataType, FieldRef, Fields, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use crate::error::Error;

/// The result schema clients see, or `None` when `schema` already is it.
pub(crate) fn client_schema(schema: &SchemaRef) -> Option<SchemaRef> {
    let fields: Vec<Option<FieldRef>> = schema.fields().iter().map(client_field).collect();
    if fields.iter().all(Option::is_none) {
        return None;
    }
    let fields: Vec<FieldRef> = fields
        .into_iter()
        .zip(schema.fields())
        .map(|(new, old)| new.unwrap_or_else(|| Arc::clone(old)))
        .collect();
    Some(Arc::new(Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    )))
}

/// `field` with its type as clients see it, or `None` when it already is.
fn client_field(field: &FieldRef) -> Option<FieldRef> {
    client_type(field.data_type())
        .map(|data_type| Arc::new(field.as_ref().clone().with_data_type(data_type)))
}

/// `data_type` without views anywhere inside it, or `None` when it has none.
fn client_type(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::Utf8View => Some(DataType::Utf8),
        DataType::BinaryView => Some(DataType::Binary),
        DataType::List(item) => client_field(item).map(DataType::List),
        DataType::LargeList(item) => client_field(item).map(DataType::LargeList),
        DataType::FixedSizeList(item, size) => {
            client_field(item).map(|item| DataType::FixedSizeList(item, *size))
        }
        DataType::Map(entries, sorted) => {
            client_field(entries).map(|entries| DataType::Map(entries, *sorted))
        }
        DataType::Struct(fields) => {
            let new: Vec<Option<FieldRef>> = fields.iter().map(client_field).collect();
            if new.iter().all(Option::is_none) {
                return None;
            }
            let fields: Fields = new
                .into_iter()
                .zip(fields.iter())
                .map(|(new, old)| new.unwrap_or_else(|| Arc::clone(old)))
                .collect();
            Some(DataType::Struct(fields))
        }
        DataType::Dictionary(key, value) => {
            client_type(value).map(|value| DataType::Dictionary(key.clone(), Box::new(value)))
        }
        _ => None,
    }
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
    // A projection may have no columns (`count(*)`): the rows still count.
    RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray, Float64Array, StringViewArray};
    use arrow::datatypes::Field;

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

    #[test]
    fn views_inside_lists_and_structs_become_plain_strings() {
        use arrow::array::{ListBuilder, StringViewBuilder};

        let mut hosts = ListBuilder::new(StringViewBuilder::new());
        hosts.values().append_value("a");
        hosts.values().append_value("b");
        hosts.append(true);
        hosts.append(false);
        let hosts = hosts.finish();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "hosts",
            hosts.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(hosts)]).unwrap();
        let out_schema = client_schema(&schema).unwrap();
        let out = to_client(&batch, &out_schema).unwrap();
        let DataType::List(item) = out.schema().field(0).data_type().clone() else {
            panic!("{:?}", out.schema());
        };
        assert_eq!(item.data_type(), &DataType::Utf8);
        let list = out.column(0).as_list::<i32>();
        let first = list.value(0);
        assert_eq!(first.as_string::<i32>().value(1), "b");
        assert!(list.is_null(1));

        let nested = DataType::Struct(Fields::from(vec![
            Field::new("h", DataType::Utf8View, true),
            Field::new("v", DataType::Float64, true),
        ]));
        let DataType::Struct(fields) = client_type(&nested).unwrap() else {
            panic!("a struct stays a struct");
        };
        assert_eq!(fields[0].data_type(), &DataType::Utf8);
        assert_eq!(fields[1].data_type(), &DataType::Float64);
        assert!(client_type(&DataType::Float64).is_none());
    }
}
