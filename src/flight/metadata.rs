//! The catalog as Flight SQL describes it: one catalog (`quiver`), a schema per
//! database, a table (type `TABLE`) per measurement, and the server's `SqlInfo`.
//!
//! Listings are read through the engine's `information_schema`, as the caller's
//! token sees it, so a token limited to some databases lists only those. A table's
//! schema, when asked for, is the one a `SELECT *` on it returns (planned, not run).
//! The filters and patterns of each command are applied by arrow-flight's builders.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow_flight::error::FlightError;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetTableTypes, CommandGetTables, SqlInfo,
};
use futures::StreamExt;
use quiver_query::{QueryAccess, QueryEngine, CATALOG_NAME};
use tonic::Status;

use super::status::{internal, query_status};

/// The one table type.
pub const TABLE_TYPE: &str = "TABLE";

/// Tables whose schema one `GetTables` may describe (each is planned); a larger
/// listing with schemas must narrow its patterns.
pub const TABLE_SCHEMAS_MAX: usize = 1_000;

/// The database listings run against (they name `information_schema` explicitly).
const LISTING_DATABASE: &str = "default";

/// Words Quiver's SQL reserves beyond SQL:2003 (JDBC `getSQLKeywords`).
const KEYWORDS: &[&str] = &["ANALYZE", "EXPLAIN", "ILIKE", "LIMIT", "OFFSET", "QUALIFY"];
/// Numeric functions (JDBC `getNumericFunctions`).
const NUMERIC_FUNCTIONS: &[&str] = &[
    "abs", "acos", "asin", "atan", "atan2", "cbrt", "ceil", "cos", "degrees", "exp", "floor", "ln",
    "log", "log10", "log2", "pi", "power", "radians", "random", "round", "signum", "sin", "sqrt",
    "tan", "trunc",
];
/// String functions (JDBC `getStringFunctions`).
const STRING_FUNCTIONS: &[&str] = &[
    "ascii",
    "btrim",
    "char_length",
    "concat",
    "left",
    "length",
    "lower",
    "lpad",
    "ltrim",
    "regexp_replace",
    "repeat",
    "replace",
    "reverse",
    "right",
    "rpad",
    "rtrim",
    "split_part",
    "starts_with",
    "strpos",
    "substr",
    "trim",
    "upper",
];
/// System functions (JDBC `getSystemFunctions`).
const SYSTEM_FUNCTIONS: &[&str] = &["arrow_typeof", "coalesce", "nullif"];
/// Date and time functions (JDBC `getTimeDateFunctions`).
const DATETIME_FUNCTIONS: &[&str] = &[
    "current_date",
    "current_time",
    "date_bin",
    "date_part",
    "date_trunc",
    "from_unixtime",
    "now",
    "time_bucket",
    "to_timestamp",
];

/// What `GetSqlInfo` answers: who the server is and what its SQL can do.
pub fn sql_info(statement_timeout_ms: u64) -> Result<SqlInfoData, FlightError> {
    let mut info = SqlInfoDataBuilder::new();
    info.append(SqlInfo::FlightSqlServerName, "Quiver");
    info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    // The Arrow format version of the schemas and batches sent (Schema.fbs, V5).
    info.append(SqlInfo::FlightSqlServerArrowVersion, "1.5");
    info.append(SqlInfo::FlightSqlServerReadOnly, true);
    info.append(SqlInfo::FlightSqlServerSql, true);
    info.append(SqlInfo::FlightSqlServerSubstrait, false);
    // SqlSupportedTransaction::None.
    info.append(SqlInfo::FlightSqlServerTransaction, 0i32);
    info.append(SqlInfo::FlightSqlServerCancel, false);
    info.append(
        SqlInfo::FlightSqlServerStatementTimeout,
        i32::try_from(statement_timeout_ms).unwrap_or(i32::MAX),
    );
    info.append(SqlInfo::SqlDdlCatalog, false);
    info.append(SqlInfo::SqlDdlSchema, false);
    info.append(SqlInfo::SqlDdlTable, false);
    info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    info.append(SqlInfo::SqlAllTablesAreSelectable, true);
    info.append(SqlInfo::SqlTransactionsSupported, false);
    // What JDBC's `DatabaseMetaData` reads through the Flight SQL driver: unquoted
    // names fold to lower case (SqlSupportedCaseSensitivity::Lowercase), NULLs sort
    // as the largest values (SqlNullOrdering::SortedHigh: last ascending, first
    // descending), and the functions a query builder may offer.
    info.append(SqlInfo::SqlIdentifierCase, 3i32);
    info.append(SqlInfo::SqlNullOrdering, 0i32);
    info.append(SqlInfo::SqlKeywords, KEYWORDS);
    info.append(SqlInfo::SqlNumericFunctions, NUMERIC_FUNCTIONS);
    info.append(SqlInfo::SqlStringFunctions, STRING_FUNCTIONS);
    info.append(SqlInfo::SqlSystemFunctions, SYSTEM_FUNCTIONS);
    info.append(SqlInfo::SqlDatetimeFunctions, DATETIME_FUNCTIONS);
    info.append(SqlInfo::SqlSearchStringEscape, "\\");
    info.append(SqlInfo::SqlExtraNameCharacters, "");
    info.append(SqlInfo::SqlSupportsColumnAliasing, true);
    info.append(SqlInfo::SqlNullPlusNullIsNull, true);
    info.append(SqlInfo::SqlSupportsTableCorrelationNames, true);
    info.append(SqlInfo::SqlSupportsDifferentTableCorrelationNames, false);
    info.append(SqlInfo::SqlSupportsExpressionsInOrderBy, true);
    info.append(SqlInfo::SqlSupportsOrderByUnrelated, true);
    info.build()
}

/// `GetCatalogs`: the one catalog.
pub fn catalogs(command: CommandGetCatalogs) -> Result<RecordBatch, Status> {
    let mut builder = command.into_builder();
    builder.append(CATALOG_NAME);
    builder.build().map_err(|e| internal("listing catalogs", e))
}

/// `GetTableTypes`: `TABLE`.
pub fn table_types(command: CommandGetTableTypes) -> Result<RecordBatch, Status> {
    let mut builder = command.into_builder();
    builder.append(TABLE_TYPE);
    builder
        .build()
        .map_err(|e| internal("listing table types", e))
}

/// `GetDbSchemas`: the databases `access` may read that hold a measurement.
pub async fn db_schemas(
    command: CommandGetDbSchemas,
    engine: &QueryEngine,
    access: &QueryAccess,
) -> Result<RecordBatch, Status> {
    let mut builder = command.into_builder();
    let mut last: Option<String> = None;
    for (database, _) in measurements(engine, access).await? {
        if last.as_ref() != Some(&database) {
            builder.append(CATALOG_NAME, &database);
            last = Some(database);
        }
    }
    builder.build().map_err(|e| internal("listing schemas", e))
}

/// `GetTables`: the measurements `access` may read, with their schemas if asked.
pub async fn tables(
    command: CommandGetTables,
    engine: &QueryEngine,
    access: &QueryAccess,
) -> Result<RecordBatch, Status> {
    let all = measurements(engine, access).await?;
    let include_schema = command.include_schema;
    // First without schemas: the builder's filters pick the tables to describe.
    let mut names = CommandGetTables {
        include_schema: false,
        ..command.clone()
    }
    .into_builder();
    let empty = arrow::datatypes::Schema::empty();
    for (database, table) in &all {
        names
            .append(CATALOG_NAME, database, table, TABLE_TYPE, &empty)
            .map_err(|e| internal("listing tables", e))?;
    }
    let names = names.build().map_err(|e| internal("listing tables", e))?;
    if !include_schema {
        return Ok(names);
    }
    if names.num_rows() > TABLE_SCHEMAS_MAX {
        return Err(Status::resource_exhausted(format!(
            "{} tables match; GetTables describes at most {TABLE_SCHEMAS_MAX} at once: \
             narrow the schema or table name pattern",
            names.num_rows()
        )));
    }
    let databases = text_column(&names, 1)?;
    let tables = text_column(&names, 2)?;
    let mut builder = command.into_builder();
    for (database, table) in databases.into_iter().zip(tables) {
        let schema = table_schema(engine, access, &database, &table).await?;
        builder
            .append(CATALOG_NAME, &database, &table, TABLE_TYPE, &schema)
            .map_err(|e| internal("listing tables", e))?;
    }
    builder.build().map_err(|e| internal("listing tables", e))
}

/// The columns `SELECT *` on `database.table` returns.
async fn table_schema(
    engine: &QueryEngine,
    access: &QueryAccess,
    database: &str,
    table: &str,
) -> Result<SchemaRef, Status> {
    let sql = format!("SELECT * FROM {}.{} LIMIT 0", quote(database), quote(table));
    let described = engine
        .describe_as(database, &sql, None, access)
        .await
        .map_err(|e| query_status(&e))?;
    Ok(described.schema)
}

/// `name` as a quoted SQL identifier.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// (database, measurement) pairs `access` may read, sorted.
async fn measurements(
    engine: &QueryEngine,
    access: &QueryAccess,
) -> Result<Vec<(String, String)>, Status> {
    let sql = "SELECT table_schema, table_name FROM information_schema.tables \
               WHERE table_type = 'BASE TABLE' AND table_schema <> 'information_schema' \
               ORDER BY 1, 2";
    let mut stream = engine
        .execute_stream_as(LISTING_DATABASE, sql, None, access)
        .await
        .map_err(|e| query_status(&e))?;
    let mut out = Vec::new();
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| query_status(&e))?;
        let databases = text_column(&batch, 0)?;
        let tables = text_column(&batch, 1)?;
        out.extend(databases.into_iter().zip(tables));
    }
    Ok(out)
}

/// Column `i` of `batch` as strings (nulls skipped: listings have none).
fn text_column(batch: &RecordBatch, i: usize) -> Result<Vec<String>, Status> {
    let column = arrow::compute::cast(batch.column(i), &DataType::Utf8)
        .map_err(|e| internal("reading a listing", e))?;
    let column = column.as_string::<i32>();
    Ok((0..column.len())
        .filter(|&row| column.is_valid(row))
        .map(|row| column.value(row).to_string())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_info_builds_and_says_read_only() {
        let info = sql_info(30_000).unwrap();
        let batch = info
            .record_batch([SqlInfo::FlightSqlServerReadOnly as u32])
            .unwrap();
        assert_eq!(batch.num_rows(), 1);
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote("cpu"), "\"cpu\"");
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
    }
}
