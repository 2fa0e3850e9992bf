//! The Postgres functions that name where a session is: `current_database()`,
//! `current_schema()` and `current_schemas(include_implicit)`. Drivers ask them before
//! anything else (SQLAlchemy takes `current_schema()` as the schema its inspector
//! lists; pgjdbc's type cache checks a type's schema against `current_schemas(true)`),
//! so they must name where the connection's tables are: its database, which is both
//! the Postgres database and the one schema of it ([`crate::pg_catalog`]). They read
//! the query's default schema (the database the query runs against), so one
//! registration serves every connection. They replace the `datafusion-pg-catalog`
//! versions, which answer `public` and the catalog's name.

use std::sync::Arc;

use arrow::array::{ArrayRef, ListBuilder, StringBuilder};
use arrow::datatypes::{DataType, Field};
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::pg_catalog::PG_CATALOG_SCHEMA;

/// `current_database()`, `current_schema()` and `current_schemas(bool)`, ready to
/// register.
pub(crate) fn functions() -> Vec<Arc<ScalarUDF>> {
    [Where::Database, Where::Schema, Where::Schemas]
        .into_iter()
        .map(|which| Arc::new(ScalarUDF::new_from_impl(SessionPlace::new(which))))
        .collect()
}

/// Which function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Where {
    Database,
    Schema,
    Schemas,
}

/// One of the three functions.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionPlace {
    which: Where,
    signature: Signature,
}

impl SessionPlace {
    fn new(which: Where) -> Self {
        let signature = match which {
            Where::Schemas => Signature::exact(vec![DataType::Boolean], Volatility::Stable),
            Where::Database | Where::Schema => Signature::nullary(Volatility::Stable),
        };
        SessionPlace { which, signature }
    }
}

fn list_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
}

impl ScalarUDFImpl for SessionPlace {
    fn name(&self) -> &str {
        match self.which {
            Where::Database => "current_database",
            Where::Schema => "current_schema",
            Where::Schemas => "current_schemas",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(match self.which {
            Where::Schemas => list_type(),
            Where::Database | Where::Schema => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let database = args.config_options.catalog.default_schema.clone();
        if self.which != Where::Schemas {
            return Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(database))));
        }
        let [arg] = args.args.as_slice() else {
            return exec_err!("current_schemas takes one argument");
        };
        let implicit = |value: Option<bool>| -> Vec<&str> {
            match value {
                Some(true) => vec![PG_CATALOG_SCHEMA, &database],
                _ => vec![&database],
            }
        };
        let rows: Vec<Option<bool>> = match arg {
            ColumnarValue::Scalar(ScalarValue::Boolean(v)) => vec![*v],
            ColumnarValue::Scalar(other) if other.is_null() => vec![None],
            ColumnarValue::Array(array) => {
                let Some(flags) = array.as_any().downcast_ref::<arrow::array::BooleanArray>()
                else {
                    return exec_err!("current_schemas takes a boolean");
                };
                flags.iter().collect()
            }
            ColumnarValue::Scalar(other) => {
                return exec_err!("current_schemas takes a boolean, not {other:?}")
            }
        };
        let mut out = ListBuilder::new(StringBuilder::new());
        for flag in &rows {
            for name in implicit(*flag) {
                out.values().append_value(name);
            }
            out.append(true);
        }
        let array: ArrayRef = Arc::new(out.finish());
        Ok(match arg {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(array),
        })
    }
}
