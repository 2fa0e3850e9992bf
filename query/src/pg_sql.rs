//! SQL from a Postgres client, made ready for the engine, and the names Postgres gives
//! its result columns.
//!
//! - A statement that reads `pg_catalog` goes through `datafusion-pg-catalog`'s
//!   `PostgresCompatibilityParser`: its rewrites turn the Postgres-only syntax of
//!   drivers' and psql's catalog queries (`OPERATOR(pg_catalog.~)`, `COLLATE`,
//!   `'name'::regclass`, `x = ANY(array)`, ...) into SQL DataFusion plans, and it
//!   answers a few whole queries DataFusion cannot plan (psql's `\d` footers) with
//!   empty results. Other statements run exactly as sent: one of its rewrites turns a
//!   correlated subquery in a select list into `NULL`, harmless for a catalog query
//!   and wrong for a query over data.
//! - Postgres names a result column that has no alias after what it computes: a
//!   column keeps its name, a function call is named after the function (`count`,
//!   `avg`), a cast after its operand or else its type (`int4`), `CASE` is `case`, and
//!   anything else `?column?`. DataFusion names it after the whole expression
//!   (`Int64(1)`, `avg(cpu.usage)`), which tools show as the column's title.
//!   [`PgStatement::names`] says, per select-list item, the name to show.

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::sync::{Arc, LazyLock};

use arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::sql::sqlparser::ast::{
    visit_relations, DataType as SqlType, Expr, ObjectName, Query, SelectItem, SetExpr, Statement,
};
use datafusion_pg_catalog::pg_catalog::PG_CATALOG_TABLES;
use datafusion_pg_catalog::sql::rules::SqlStatementRewriteRule;
use datafusion_pg_catalog::sql::PostgresCompatibilityParser;

use crate::pg_catalog::PG_CATALOG_SCHEMA;
use crate::pg_sql_rules::{regproc_literals_to_names, AggregateScalarSubquery};

/// What Postgres names a result column without an alias that is not a column.
pub const UNNAMED_COLUMN: &str = "?column?";

/// The parser and its rewrite rules, built once (it tokenizes its replacement table).
static PARSER: LazyLock<PostgresCompatibilityParser> =
    LazyLock::new(PostgresCompatibilityParser::new);

/// A select-list item's result column name, as Postgres gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnName {
    /// The engine's name is Postgres's (a column, an alias).
    Engine,
    /// A wildcard: any number of columns, named by the engine.
    Wildcard,
    /// This name.
    Named(String),
}

/// One statement of a Postgres client, ready for the engine.
#[derive(Debug, Clone)]
pub struct PgStatement {
    /// The SQL to run: as sent, or rewritten when it reads `pg_catalog`.
    pub sql: String,
    /// The names of its select list's items, in order; empty when not a `SELECT`.
    pub names: Arc<[ColumnName]>,
}

impl PgStatement {
    /// Prepares `sql`. SQL that does not parse here is passed on as sent, for the
    /// engine to report.
    pub fn prepare(sql: &str) -> PgStatement {
        let as_sent = || PgStatement {
            sql: sql.to_string(),
            names: Arc::from(Vec::new()),
        };
        // Index and key lookups: Quiver has none, so their queries answer no rows.
        if let Some(empty) = crate::pg_no_indexes::index_keys_answer(sql) {
            return PgStatement {
                sql: empty,
                names: Arc::from(Vec::new()),
            };
        }
        let regproc_named = regproc_literals_to_names(sql);
        let Ok(mut statements) = PARSER.parse(regproc_named.as_deref().unwrap_or(sql)) else {
            return as_sent();
        };
        let (Some(statement), true) = (statements.pop(), statements.is_empty()) else {
            return as_sent();
        };
        let names = match &statement {
            Statement::Query(query) => query_names(query),
            _ => Vec::new(),
        };
        // Decided on the text as sent too: the crate may have replaced the whole
        // statement by one that names no catalog table (psql's `\d` footers).
        let sent = sql.to_ascii_lowercase();
        let catalog = sent.contains("pg_catalog") || sent.contains("::reg");
        let sql = if catalog || reads_pg_catalog(&statement) {
            AggregateScalarSubquery.rewrite(statement).to_string()
        } else {
            sql.to_string()
        };
        PgStatement {
            sql,
            names: Arc::from(names),
        }
    }

    /// `schema` with its columns named as Postgres names them. Left as it is when the
    /// select list cannot be matched to the columns (several wildcards, say).
    pub fn rename<'a>(&self, schema: &'a SchemaRef) -> Cow<'a, SchemaRef> {
        let Some(names) = result_names(&self.names, schema.fields().len()) else {
            return Cow::Borrowed(schema);
        };
        if names.iter().all(Option::is_none) {
            return Cow::Borrowed(schema);
        }
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .zip(names)
            .map(|(field, name)| match name {
                Some(name) => field.as_ref().clone().with_name(name),
                None => field.as_ref().clone(),
            })
            .collect();
        Cow::Owned(Arc::new(Schema::new_with_metadata(
            fields,
            schema.metadata().clone(),
        )))
    }
}

/// Per result column, the name to give it (`None`: the engine's), or `None` when
/// the select list does not match `columns` columns.
fn result_names(items: &[ColumnName], columns: usize) -> Option<Vec<Option<String>>> {
    if items.is_empty() {
        return None;
    }
    let named = |item: &ColumnName| match item {
        ColumnName::Named(name) => Some(name.clone()),
        ColumnName::Engine | ColumnName::Wildcard => None,
    };
    let wildcards = items.iter().filter(|i| **i == ColumnName::Wildcard).count();
    match wildcards {
        0 if items.len() == columns => Some(items.iter().map(named).collect()),
        1 if items.len() - 1 <= columns => {
            let at = items.iter().position(|i| *i == ColumnName::Wildcard)?;
            let after = items.len() - at - 1;
            let mut out: Vec<Option<String>> = items[..at].iter().map(named).collect();
            out.resize(columns - after, None);
            out.extend(items[at + 1..].iter().map(named));
            Some(out)
        }
        _ => None,
    }
}

/// Whether `statement` reads a table of `pg_catalog` (qualified, or by a name only
/// `pg_catalog` has). The caller also takes any statement naming `pg_catalog`
/// (`pg_catalog.version()`) or casting to an OID alias type (`'t'::regclass` reads
/// `pg_class`).
fn reads_pg_catalog(statement: &Statement) -> bool {
    let tables = visit_relations(statement, |name: &ObjectName| {
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|part| part.as_ident().map(|i| i.value.to_ascii_lowercase()))
            .collect();
        let in_catalog = match parts.as_slice() {
            [schema, _] => schema == PG_CATALOG_SCHEMA,
            [table] => PG_CATALOG_TABLES.contains(&table.as_str()),
            _ => false,
        };
        if in_catalog {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    tables.is_break()
}

/// The names of a query's result columns: those of its leftmost `SELECT`.
fn query_names(query: &Query) -> Vec<ColumnName> {
    let mut body = query.body.as_ref();
    loop {
        match body {
            SetExpr::Select(select) => {
                return select.projection.iter().map(item_name).collect();
            }
            SetExpr::SetOperation { left, .. } => body = left.as_ref(),
            SetExpr::Query(inner) => body = inner.body.as_ref(),
            _ => return Vec::new(),
        }
    }
}

fn item_name(item: &SelectItem) -> ColumnName {
    match item {
        SelectItem::UnnamedExpr(expr) => expr_name(expr),
        SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => ColumnName::Wildcard,
        _ => ColumnName::Engine,
    }
}

/// Postgres's name for an unaliased expression (its `FigureColname`, for the
/// expressions clients send).
fn expr_name(expr: &Expr) -> ColumnName {
    let named = |name: &str| ColumnName::Named(name.to_string());
    match expr {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => ColumnName::Engine,
        Expr::Nested(inner) => expr_name(inner),
        Expr::Function(function) => match last_name(&function.name) {
            Some(name) => ColumnName::Named(name),
            None => named(UNNAMED_COLUMN),
        },
        Expr::Cast {
            expr, data_type, ..
        } => match expr_name(expr) {
            ColumnName::Named(name) if name == UNNAMED_COLUMN => {
                ColumnName::Named(type_name(data_type))
            }
            other => other,
        },
        Expr::TypedString(typed) => ColumnName::Named(type_name(&typed.data_type)),
        Expr::Case { .. } => named("case"),
        Expr::Exists { .. } => named("exists"),
        Expr::Array(_) => named("array"),
        Expr::Interval(_) => named("interval"),
        Expr::Extract { .. } => named("extract"),
        Expr::Substring { .. } => named("substring"),
        Expr::Position { .. } => named("position"),
        Expr::Trim { .. } => named("btrim"),
        Expr::Ceil { .. } => named("ceil"),
        Expr::Floor { .. } => named("floor"),
        Expr::Subquery(query) => match query_names(query).first() {
            Some(ColumnName::Named(name)) => ColumnName::Named(name.clone()),
            Some(ColumnName::Engine) => ColumnName::Engine,
            _ => named(UNNAMED_COLUMN),
        },
        _ => named(UNNAMED_COLUMN),
    }
}

/// The last part of a function's name, folded to lower case unless quoted.
fn last_name(name: &ObjectName) -> Option<String> {
    let ident = name.0.last()?.as_ident()?;
    Some(if ident.quote_style.is_some() {
        ident.value.clone()
    } else {
        ident.value.to_ascii_lowercase()
    })
}

/// Postgres's own name of a type written in SQL (`integer` is `int4`).
fn type_name(data_type: &SqlType) -> String {
    let written = data_type.to_string().to_ascii_lowercase();
    let base = written.split('(').next().unwrap_or(&written).trim();
    let base = base.rsplit('.').next().unwrap_or(base);
    match base {
        "int" | "integer" | "int4" => "int4",
        "bigint" | "int8" => "int8",
        "smallint" | "int2" => "int2",
        "real" | "float4" => "float4",
        "double precision" | "double" | "float" | "float8" => "float8",
        "boolean" | "bool" => "bool",
        "decimal" | "numeric" => "numeric",
        "character varying" | "varchar" => "varchar",
        "character" | "char" => "bpchar",
        "timestamp" | "timestamp without time zone" => "timestamp",
        "timestamptz" | "timestamp with time zone" => "timestamptz",
        other => return other.to_string(),
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::DataType;

    fn names(sql: &str) -> Vec<ColumnName> {
        PgStatement::prepare(sql).names.to_vec()
    }

    fn named(name: &str) -> ColumnName {
        ColumnName::Named(name.to_string())
    }

    #[test]
    fn unaliased_expressions_are_named_as_postgres_names_them() {
        assert_eq!(
            names("SELECT 1, host, cpu.usage, avg(usage), COUNT(*), 1 + 2, x AS y FROM cpu"),
            vec![
                named("?column?"),
                ColumnName::Engine,
                ColumnName::Engine,
                named("avg"),
                named("count"),
                named("?column?"),
                ColumnName::Engine,
            ]
        );
        assert_eq!(
            names("SELECT 1::int, usage::text, CASE WHEN 1 = 1 THEN 1 END, (avg(usage))"),
            vec![
                named("int4"),
                ColumnName::Engine,
                named("case"),
                named("avg")
            ]
        );
        assert_eq!(
            names("SELECT 1 UNION ALL SELECT 2 AS two"),
            vec![named("?column?")]
        );
    }

    #[test]
    fn names_go_around_a_wildcard_and_give_up_on_a_mismatch() {
        let field = |n: &str| Field::new(n, DataType::Int64, true);
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            field("Int64(1)"),
            field("a"),
            field("b"),
            field("count(*)"),
        ]));
        let statement = PgStatement::prepare("SELECT 1, *, count(*) FROM t");
        let renamed = statement.rename(&schema);
        let out: Vec<&str> = renamed.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(out, vec!["?column?", "a", "b", "count"]);
        let two_wildcards = PgStatement::prepare("SELECT *, 1, * FROM t");
        assert!(matches!(two_wildcards.rename(&schema), Cow::Borrowed(_)));
        let shorter = PgStatement::prepare("SELECT 1, 2");
        assert!(matches!(shorter.rename(&schema), Cow::Borrowed(_)));
    }

    #[test]
    fn only_catalog_queries_are_rewritten() {
        let data = "SELECT host, (SELECT max(v) FROM t2 WHERE t2.h = cpu.host) FROM cpu";
        assert_eq!(PgStatement::prepare(data).sql, data);
        let psql = "SELECT c.relname FROM pg_catalog.pg_class c \
                    WHERE c.relname OPERATOR(pg_catalog.~) '^(cpu)$' COLLATE pg_catalog.default";
        let prepared = PgStatement::prepare(psql).sql;
        assert!(!prepared.contains("OPERATOR"), "{prepared}");
        assert!(!prepared.contains("COLLATE"), "{prepared}");
    }

    /// psql 15's `\d` footer for row policies: the crate answers it with no rows.
    #[test]
    fn psqls_policy_footer_is_answered_empty() {
        let psql = "SELECT pol.polname, pol.polpermissive,\n  CASE WHEN pol.polroles = '{0}' THEN NULL ELSE pg_catalog.array_to_string(array(select rolname from pg_catalog.pg_roles where oid = any (pol.polroles) order by 1),',') END,\n  pg_catalog.pg_get_expr(pol.polqual, pol.polrelid),\n  pg_catalog.pg_get_expr(pol.polwithcheck, pol.polrelid),\n  CASE pol.polcmd\n    WHEN 'r' THEN 'SELECT'\n    WHEN 'a' THEN 'INSERT'\n    WHEN 'w' THEN 'UPDATE'\n    WHEN 'd' THEN 'DELETE'\n    END AS cmd\nFROM pg_catalog.pg_policy pol\nWHERE pol.polrelid = '16387' ORDER BY 1;";
        let prepared = PgStatement::prepare(psql).sql;
        assert!(prepared.ends_with("WHERE false"), "{prepared}");
        assert!(!prepared.contains("pg_catalog"), "{prepared}");
    }
}
