//! Quiver has no indexes, primary keys or unique constraints, so `pg_index` (and the
//! constraints built on it) is empty. Clients ask anyway: pgjdbc's `getPrimaryKeys`,
//! `getIndexInfo` and `getBestRowIdentifier`, SQLAlchemy's `get_pk_constraint`,
//! `get_indexes` and `get_unique_constraints` (which `pandas.read_sql_table` calls).
//! Their queries expand `pg_index.indkey`, an `int2vector`, into rows
//! (`information_schema._pg_expandarray(i.indkey)` and its composite fields `(keys).x`,
//! `unnest(indkey)`, `generate_subscripts(indkey, 1)`), which DataFusion cannot plan.
//!
//! Such a query reads `pg_index` rows to expand and has none, so it returns no rows:
//! [`index_keys_answer`] replaces it by a statement with the same result column
//! names and no rows. A query that expands the keys of an outer-joined `pg_index`
//! would return rows in Postgres; no client known to us sends one.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions, Expr, FunctionArguments, Ident, Query, SelectItem, SetExpr, Statement,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::pg_sql::UNNAMED_COLUMN;

/// The functions that turn `indkey` into rows.
const EXPANDING_FUNCTIONS: [&str; 3] = ["_pg_expandarray", "unnest", "generate_subscripts"];

/// The statement that answers `sql` when it expands `pg_index.indkey`: the same
/// result column names (as text) and no rows; `None` for any other SQL.
pub(crate) fn index_keys_answer(sql: &str) -> Option<String> {
    if !sql.to_ascii_lowercase().contains("indkey") {
        return None;
    }
    let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()?;
    let [statement] = statements.as_slice() else {
        return None;
    };
    if !expands_index_keys(statement) {
        return None;
    }
    let Statement::Query(query) = statement else {
        return None;
    };
    let columns: Vec<String> = output_names(query)?
        .iter()
        .map(|name| format!("CAST(NULL AS TEXT) AS {}", Ident::with_quote('"', name)))
        .collect();
    Some(format!("SELECT {} WHERE false", columns.join(", ")))
}

/// Whether `statement` applies one of [`EXPANDING_FUNCTIONS`] to an `indkey` column.
fn expands_index_keys(statement: &Statement) -> bool {
    let found = visit_expressions(statement, |expr| {
        if let Expr::Function(function) = expr {
            let name = function
                .name
                .0
                .last()
                .and_then(|part| part.as_ident())
                .map(|ident| ident.value.to_ascii_lowercase());
            let expands = name.is_some_and(|n| EXPANDING_FUNCTIONS.contains(&n.as_str()));
            let over_indkey = match &function.args {
                FunctionArguments::List(list) => list
                    .args
                    .iter()
                    .any(|arg| arg.to_string().to_ascii_lowercase().ends_with("indkey")),
                _ => false,
            };
            if expands && over_indkey {
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    found.is_break()
}

/// The result column names of `query`'s select list, as Postgres gives them; `None`
/// with a wildcard (the columns are not known without planning).
fn output_names(query: &Query) -> Option<Vec<String>> {
    let mut body = query.body.as_ref();
    loop {
        match body {
            SetExpr::Select(select) => return select.projection.iter().map(item_name).collect(),
            SetExpr::Query(inner) => body = inner.body.as_ref(),
            SetExpr::SetOperation { left, .. } => body = left.as_ref(),
            _ => return None,
        }
    }
}

fn item_name(item: &SelectItem) -> Option<String> {
    match item {
        SelectItem::ExprWithAlias { alias, .. } => Some(folded(alias)),
        SelectItem::UnnamedExpr(expr) => Some(match expr {
            Expr::Identifier(ident) => folded(ident),
            Expr::CompoundIdentifier(parts) => parts.last().map(folded)?,
            Expr::Function(function) => function
                .name
                .0
                .last()
                .and_then(|part| part.as_ident())
                .map(folded)?,
            _ => UNNAMED_COLUMN.to_string(),
        }),
        _ => None,
    }
}

/// An identifier as Postgres resolves it: lower case unless quoted.
fn folded(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(sql: &str) -> String {
        index_keys_answer(sql).unwrap_or_else(|| sql.to_string())
    }

    #[test]
    fn pgjdbcs_primary_key_query_is_answered_empty_with_its_columns() {
        let sql = "SELECT result.TABLE_CAT, result.TABLE_SCHEM, result.TABLE_NAME, \
            result.COLUMN_NAME, result.KEY_SEQ, result.PK_NAME FROM (SELECT NULL AS TABLE_CAT, \
            n.nspname AS TABLE_SCHEM, ct.relname AS TABLE_NAME, a.attname AS COLUMN_NAME, \
            (information_schema._pg_expandarray(i.indkey)).n AS KEY_SEQ, ci.relname AS PK_NAME, \
            information_schema._pg_expandarray(i.indkey) AS KEYS, a.attnum AS A_ATTNUM \
            FROM pg_catalog.pg_class ct JOIN pg_catalog.pg_attribute a ON (ct.oid = a.attrelid) \
            JOIN pg_catalog.pg_index i ON (a.attrelid = i.indrelid) \
            JOIN pg_catalog.pg_class ci ON (ci.oid = i.indexrelid) WHERE true AND i.indisprimary \
            ) result where result.A_ATTNUM = (result.KEYS).x \
            ORDER BY result.table_name, result.pk_name, result.key_seq";
        assert_eq!(
            rewrite(sql),
            "SELECT CAST(NULL AS TEXT) AS \"table_cat\", CAST(NULL AS TEXT) AS \"table_schem\", \
             CAST(NULL AS TEXT) AS \"table_name\", CAST(NULL AS TEXT) AS \"column_name\", \
             CAST(NULL AS TEXT) AS \"key_seq\", CAST(NULL AS TEXT) AS \"pk_name\" WHERE false"
        );
    }

    #[test]
    fn sqlalchemys_unnest_of_indkey_is_answered_empty_and_other_unnests_are_not() {
        let sql = "SELECT con.conrelid, array_agg(att.attname) AS cols FROM (SELECT \
            pg_catalog.pg_constraint.conrelid AS conrelid, \
            unnest(pg_catalog.pg_index.indkey) AS attnum, \
            generate_subscripts(pg_catalog.pg_index.indkey, 1) AS ord \
            FROM pg_catalog.pg_constraint JOIN pg_catalog.pg_index \
            ON pg_catalog.pg_constraint.conindid = pg_catalog.pg_index.indexrelid) AS con \
            JOIN pg_catalog.pg_attribute AS att ON att.attnum = con.attnum GROUP BY con.conrelid";
        assert_eq!(
            rewrite(sql),
            "SELECT CAST(NULL AS TEXT) AS \"conrelid\", CAST(NULL AS TEXT) AS \"cols\" WHERE false"
        );
        let other = "SELECT unnest(tags) FROM t";
        assert_eq!(rewrite(other), other);
        let wildcard = "SELECT * FROM (SELECT unnest(i.indkey) FROM pg_catalog.pg_index i) k";
        assert_eq!(rewrite(wildcard), wildcard);
    }
}
