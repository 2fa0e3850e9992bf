//! Which measurements a statement reads, for callers that must know before running it
//! (a continuous query skips windows in which none of them holds a row).

use datafusion::sql::parser::DFParser;
use datafusion::sql::resolve::resolve_table_references;

use crate::error::Error;

/// The `(database, measurement)` pairs `sql` reads, `database` being the default for
/// unqualified names. Names keep the case they are written in, unquoted ones
/// lower-cased as DataFusion resolves them.
pub fn tables_read(database: &str, sql: &str) -> Result<Vec<(String, String)>, Error> {
    let mut statements = DFParser::parse_sql(sql).map_err(|e| Error::Sql(e.to_string()))?;
    let Some(statement) = statements.pop_front() else {
        return Ok(Vec::new());
    };
    let (tables, _ctes) =
        resolve_table_references(&statement, true).map_err(|e| Error::Sql(e.to_string()))?;
    Ok(tables
        .into_iter()
        .map(|t| {
            (
                t.schema().unwrap_or(database).to_string(),
                t.table().to_string(),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_of_a_rollup_are_found() {
        let t = tables_read(
            "db",
            "SELECT time_bucket(INTERVAL '1 hour', time) AS time, host, avg(value) AS value FROM cpu JOIN other.mem USING (host) GROUP BY 1, 2",
        )
        .unwrap();
        assert_eq!(
            t,
            vec![
                ("db".to_string(), "cpu".to_string()),
                ("other".to_string(), "mem".to_string())
            ]
        );
    }
}
