//! Quiver's own rewrite of Postgres catalog SQL, beside `datafusion-pg-catalog`'s: a
//! scalar subquery that selects one plain expression (`(SELECT c.relkind = 'c' FROM
//! pg_class c WHERE c.oid = t.typrelid)`, pgjdbc's `getTypeInfo`) is a subquery
//! DataFusion refuses when it is correlated ("must be aggregated to return at most one
//! row"). Postgres requires it to return at most one row anyway, and over at most one
//! row `max(x)` is `x` (and `NULL` over none, as the subquery is), so the rule selects
//! `max(x)` instead. Applied to catalog statements only, like the crate's rules.
//!
//! And one that must run before the crate's: `'pg_catalog.array_in'::regproc` is
//! compared with a `regproc` column of `pg_type` (pgjdbc's `getTypeInfo`), which the
//! crate's tables hold as function names (`boolin`), while its rewrite turns the literal
//! into an OID: [`regproc_literals_to_names`] makes it the name instead.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, DataType as SqlType, Expr, GroupByExpr, SelectItem, SetExpr, Statement,
    Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion_pg_catalog::sql::rules::SqlStatementRewriteRule;

/// Selects `max(x)` in scalar subqueries selecting one unaggregated `x`.
#[derive(Debug)]
pub(crate) struct AggregateScalarSubquery;

impl SqlStatementRewriteRule for AggregateScalarSubquery {
    fn rewrite(&self, mut statement: Statement) -> Statement {
        let _ = visit_expressions_mut(&mut statement, |expr| {
            if let Expr::Subquery(query) = expr {
                let plain = query.limit_clause.is_none() && query.fetch.is_none();
                if let (true, SetExpr::Select(select)) = (plain, query.body.as_mut()) {
                    let ungrouped = matches!(&select.group_by,
                        GroupByExpr::Expressions(by, _) if by.is_empty())
                        && select.having.is_none()
                        && select.distinct.is_none();
                    if let ([item], true) = (select.projection.as_mut_slice(), ungrouped) {
                        wrap_in_max(item);
                    }
                }
            }
            ControlFlow::<()>::Continue(())
        });
        statement
    }
}

/// `'schema.name'::regproc` becomes `'name'`, the form `pg_type`'s `regproc` columns
/// hold; `sql` as it is when it has no such cast or does not parse here.
pub(crate) fn regproc_literals_to_names(sql: &str) -> Option<String> {
    if !sql.to_ascii_lowercase().contains("::regproc") {
        return None;
    }
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).ok()?;
    let [statement] = statements.as_mut_slice() else {
        return None;
    };
    let _ = visit_expressions_mut(statement, |expr| {
        if let Expr::Cast {
            expr: inner,
            data_type: SqlType::Custom(type_name, _),
            ..
        } = expr
        {
            let is_regproc = type_name
                .0
                .last()
                .and_then(|part| part.as_ident())
                .is_some_and(|i| i.value.eq_ignore_ascii_case("regproc"));
            if let (true, Expr::Value(literal)) = (is_regproc, inner.as_ref()) {
                if let Value::SingleQuotedString(name) = &literal.value {
                    let bare = name.rsplit('.').next().unwrap_or(name).to_string();
                    let mut literal = literal.clone();
                    literal.value = Value::SingleQuotedString(bare);
                    *expr = Expr::Value(literal);
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
    Some(statement.to_string())
}

/// `x` becomes `max(x)`, unless `x` is already a function call (an aggregate,
/// perhaps) or cannot be written back as SQL.
fn wrap_in_max(item: &mut SelectItem) {
    let expr = match item {
        SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => expr,
        _ => return,
    };
    if matches!(expr, Expr::Function(_)) {
        return;
    }
    let Ok(wrapped) = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&format!("max({expr})"))
        .and_then(|mut parser| parser.parse_expr())
    else {
        return;
    };
    *expr = wrapped;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_correlated_one_value_subquery_selects_its_max() {
        let sql = "SELECT t.typname FROM pg_catalog.pg_type t WHERE t.typrelid = 0 OR \
                   (SELECT c.relkind = 'c' FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid)";
        let statement = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(sql)
            .and_then(|mut p| p.parse_statement())
            .unwrap();
        let out = AggregateScalarSubquery.rewrite(statement).to_string();
        assert!(out.contains("SELECT max(c.relkind = 'c') FROM"), "{out}");
        let limited = "SELECT (SELECT a FROM t LIMIT 1), (SELECT count(*) FROM t)";
        let statement = Parser::new(&PostgreSqlDialect {})
            .try_with_sql(limited)
            .and_then(|mut p| p.parse_statement())
            .unwrap();
        assert_eq!(
            AggregateScalarSubquery.rewrite(statement).to_string(),
            limited
        );
    }
}
