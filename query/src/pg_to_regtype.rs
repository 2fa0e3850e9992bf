//! `to_regtype(name)`: a type's OID by its name, or `NULL` when there is no such type.
//! psycopg's `TypeInfo.fetch` (which SQLAlchemy's psycopg dialect runs at connect time
//! to look for `hstore`) selects from `pg_type` by it; `datafusion-pg-catalog` does not
//! provide it. The names are those of the crate's `pg_type` (Postgres's built-in
//! types), plus the SQL spellings Postgres also accepts (`integer`, `double
//! precision`, ...).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray, Int32Builder};
use arrow::datatypes::{DataType, Int32Type};
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion_pg_catalog::pg_catalog::ArrowTable;

/// SQL's names for types whose `pg_type` name differs.
const SQL_NAMES: [(&str, &str); 12] = [
    ("integer", "int4"),
    ("int", "int4"),
    ("bigint", "int8"),
    ("smallint", "int2"),
    ("real", "float4"),
    ("double precision", "float8"),
    ("boolean", "bool"),
    ("decimal", "numeric"),
    ("character varying", "varchar"),
    ("character", "bpchar"),
    ("timestamp without time zone", "timestamp"),
    ("timestamp with time zone", "timestamptz"),
];

/// `to_regtype` over the type names of `pg_type` (the crate's static table).
pub(crate) fn function(pg_type: &ArrowTable) -> Result<Arc<ScalarUDF>> {
    let schema = pg_type.schema();
    let (oid_at, name_at) = (schema.index_of("oid")?, schema.index_of("typname")?);
    let mut oids = HashMap::new();
    for batch in pg_type.data() {
        let Some(oid) = batch.column(oid_at).as_primitive_opt::<Int32Type>() else {
            return exec_err!("pg_type.oid is not int4");
        };
        let Some(name) = batch.column(name_at).as_string_opt::<i32>() else {
            return exec_err!("pg_type.typname is not text");
        };
        for row in 0..batch.num_rows() {
            if oid.is_valid(row) && name.is_valid(row) {
                oids.insert(name.value(row).to_string(), oid.value(row));
            }
        }
    }
    for (sql, pg) in SQL_NAMES {
        if let Some(oid) = oids.get(pg).copied() {
            oids.insert(sql.to_string(), oid);
        }
    }
    Ok(Arc::new(ScalarUDF::new_from_impl(ToRegtype {
        oids: Arc::new(oids),
        signature: Signature::string(1, Volatility::Stable),
    })))
}

#[derive(Debug)]
struct ToRegtype {
    oids: Arc<HashMap<String, i32>>,
    signature: Signature,
}

impl PartialEq for ToRegtype {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.oids, &other.oids)
    }
}

impl Eq for ToRegtype {}

impl std::hash::Hash for ToRegtype {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "to_regtype".hash(state);
    }
}

impl ToRegtype {
    /// The OID of the type `name` (case-insensitive unless quoted, as a type name is
    /// in SQL; a `pg_catalog.` prefix is allowed).
    fn lookup(&self, name: &str) -> Option<i32> {
        let name = name.trim();
        let name = name.strip_prefix("pg_catalog.").unwrap_or(name);
        match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
            Some(quoted) => self.oids.get(quoted).copied(),
            None => self.oids.get(&name.to_ascii_lowercase()).copied(),
        }
    }
}

impl ScalarUDFImpl for ToRegtype {
    fn name(&self) -> &str {
        "to_regtype"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("to_regtype takes one argument");
        };
        match arg {
            ColumnarValue::Scalar(scalar) => {
                let name = match scalar {
                    ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => {
                        v.as_deref()
                    }
                    other if other.is_null() => None,
                    other => return exec_err!("to_regtype takes text, not {other:?}"),
                };
                Ok(ColumnarValue::Scalar(ScalarValue::Int32(
                    name.and_then(|n| self.lookup(n)),
                )))
            }
            ColumnarValue::Array(array) => {
                let names = arrow::compute::cast(array, &DataType::Utf8)?;
                let names = names.as_string::<i32>();
                let mut out = Int32Builder::with_capacity(names.len());
                for name in names.iter() {
                    out.append_option(name.and_then(|n| self.lookup(n)));
                }
                Ok(ColumnarValue::Array(Arc::new(out.finish())))
            }
        }
    }
}
