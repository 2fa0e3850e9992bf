//! `pg_type_is_visible(oid)` and `pg_function_is_visible(oid)`: whether an object is on
//! the search path. SQLAlchemy's inspector selects the first for every type before it
//! lists a table's columns; `datafusion-pg-catalog` has only `pg_table_is_visible`.
//! Every type and function Quiver lists is built in (schema `pg_catalog`, always on
//! the search path), so both answer `true`, as Postgres does for them.

use std::sync::Arc;

use arrow::array::BooleanArray;
use arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};

/// Both functions, ready to register.
pub(crate) fn functions() -> Vec<Arc<ScalarUDF>> {
    ["pg_type_is_visible", "pg_function_is_visible"]
        .into_iter()
        .map(|name| Arc::new(visible(name)))
        .collect()
}

fn visible(name: &str) -> ScalarUDF {
    let always = |args: &[ColumnarValue]| -> Result<ColumnarValue> {
        Ok(match args.first() {
            Some(ColumnarValue::Array(oids)) => {
                ColumnarValue::Array(Arc::new(BooleanArray::from(vec![true; oids.len()])))
            }
            _ => ColumnarValue::Scalar(datafusion::common::ScalarValue::Boolean(Some(true))),
        })
    };
    create_udf(
        name,
        vec![DataType::Int32],
        DataType::Boolean,
        Volatility::Stable,
        Arc::new(always),
    )
}
