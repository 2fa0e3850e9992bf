//! The read-only sandbox: which statements a client may run.
//!
//! Two independent checks, so a gap in one is caught by the other:
//! 1. [`parse_read_only`] parses exactly one statement and, by its syntax, lets through
//!    only queries, `EXPLAIN` of a query, `DESCRIBE` and `SHOW`; it names what it
//!    refused.
//! 2. [`check_plan`] runs DataFusion's own [`SQLOptions`] verification over the logical
//!    plan (subqueries included) with DDL, DML and statements all disallowed.
//!
//! The rest of the sandbox is what the session does not have: no table factories (no
//! `CREATE EXTERNAL TABLE` target), no URL tables (`SELECT * FROM 'file.parquet'`), no
//! file-reading table functions, and an object store registry without `file://`.

use datafusion::common::config::SqlParserOptions;
use datafusion::execution::context::SQLOptions;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::{DFParserBuilder, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::Statement as SqlStatement;
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::config::{EXPRESSION_OPERATORS_MAX, SQL_BYTES_MAX};
use crate::error::Error;

/// Parses `sql` into exactly one statement and checks it is read-only.
pub(crate) fn parse_read_only(sql: &str, options: &SqlParserOptions) -> Result<DfStatement, Error> {
    if sql.len() > SQL_BYTES_MAX {
        return Err(Error::Refused(format!(
            "SQL text is {} bytes; the limit is {SQL_BYTES_MAX} bytes",
            sql.len()
        )));
    }
    let dialect = dialect_from_str(options.dialect)
        .ok_or_else(|| Error::Internal(format!("unknown SQL dialect {}", options.dialect)))?;
    // Counted on tokens, before any tree exists: even dropping a too-deep tree recurses.
    let tokens = Tokenizer::new(dialect.as_ref(), sql)
        .tokenize()
        .map_err(|e| Error::Sql(format!("SQL error: {e}")))?;
    let operators = tokens.iter().filter(|t| is_binary_operator(t)).count();
    if operators > EXPRESSION_OPERATORS_MAX {
        return Err(Error::Refused(format!(
            "statement has {operators} operators; the limit is {EXPRESSION_OPERATORS_MAX} \
             (write long OR chains of equalities as `column IN (...)`)"
        )));
    }
    let mut statements = DFParserBuilder::new(sql)
        .with_dialect(dialect.as_ref())
        // Bounds the parser's recursion, so deeply nested SQL cannot overflow the stack.
        .with_recursion_limit(options.recursion_limit.get())
        .build()
        .and_then(|mut parser| parser.parse_statements())?;
    let statement = match (statements.pop_front(), statements.len()) {
        (Some(statement), 0) => statement,
        (None, _) => return Err(Error::Sql("no SQL statement was given".to_string())),
        (Some(_), more) => {
            return Err(Error::Refused(format!(
                "one statement per query, got {}",
                more + 1
            )))
        }
    };
    check_statement(&statement)?;
    Ok(statement)
}

/// Lets through read-only statements only; the error names the refused kind.
fn check_statement(statement: &DfStatement) -> Result<(), Error> {
    match statement {
        DfStatement::Statement(inner) => check_sql_statement(inner),
        DfStatement::Explain(explain) => check_statement(&explain.statement),
        DfStatement::CreateExternalTable(_) => Err(refused("DDL (CREATE EXTERNAL TABLE)")),
        DfStatement::CopyTo(_) => Err(refused("COPY")),
        DfStatement::Reset(_) => Err(refused("RESET")),
    }
}

/// DataFusion's own plan verification, as a second line of defence.
pub(crate) fn check_plan(plan: &LogicalPlan) -> Result<(), Error> {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
        .verify_plan(plan)
        .map_err(|e| {
            Error::Refused(format!(
                "only read-only queries are allowed: {}",
                e.strip_backtrace()
            ))
        })
}

fn check_sql_statement(statement: &SqlStatement) -> Result<(), Error> {
    match statement {
        SqlStatement::Query(_)
        | SqlStatement::ExplainTable { .. }
        | SqlStatement::ShowTables { .. }
        | SqlStatement::ShowColumns { .. }
        | SqlStatement::ShowFunctions { .. }
        | SqlStatement::ShowVariable { .. }
        | SqlStatement::ShowCreate { .. } => Ok(()),
        SqlStatement::Explain { statement, .. } => check_sql_statement(statement),
        other => Err(refused(&describe(other))),
    }
}

/// Names a refused statement by its class and leading keywords, e.g. `DDL (DROP TABLE)`.
/// sqlparser prints keywords in upper case, so the leading upper-case words are they.
fn describe(statement: &SqlStatement) -> String {
    let text = statement.to_string();
    let keywords: Vec<&str> = text
        .split_whitespace()
        .take_while(|w| w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .take(2)
        .collect();
    let class = match keywords.first().copied() {
        Some("CREATE" | "DROP" | "ALTER" | "TRUNCATE" | "RENAME" | "COMMENT") => "DDL",
        Some("INSERT" | "UPDATE" | "DELETE" | "MERGE" | "REPLACE" | "UPSERT") => "DML",
        Some("COPY" | "UNLOAD" | "LOAD" | "ATTACH" | "DETACH" | "INSTALL") => "file access",
        Some("SET" | "RESET") => "session settings",
        _ => "statement",
    };
    format!("{class} ({})", keywords.join(" "))
}

/// Tokens that join two operands, so that repeating them deepens the parse tree.
fn is_binary_operator(token: &Token) -> bool {
    match token {
        Token::Word(word) => matches!(
            word.keyword,
            Keyword::AND
                | Keyword::OR
                | Keyword::XOR
                | Keyword::UNION
                | Keyword::INTERSECT
                | Keyword::EXCEPT
                | Keyword::JOIN
                | Keyword::LIKE
                | Keyword::ILIKE
        ),
        Token::DoubleEq
        | Token::Eq
        | Token::Neq
        | Token::Lt
        | Token::Gt
        | Token::LtEq
        | Token::GtEq
        | Token::Spaceship
        | Token::Plus
        | Token::Minus
        | Token::Mul
        | Token::Div
        | Token::DuckIntDiv
        | Token::Mod
        | Token::StringConcat
        | Token::Ampersand
        | Token::Pipe
        | Token::Caret
        | Token::ShiftLeft
        | Token::ShiftRight
        | Token::Tilde
        | Token::TildeAsterisk
        | Token::ExclamationMarkTilde
        | Token::ExclamationMarkTildeAsterisk
        | Token::DoubleTilde
        | Token::DoubleTildeAsterisk
        | Token::ExclamationMarkDoubleTilde
        | Token::ExclamationMarkDoubleTildeAsterisk
        | Token::Arrow
        | Token::LongArrow
        | Token::HashArrow
        | Token::AtArrow
        | Token::ArrowAt => true,
        _ => false,
    }
}

fn refused(what: &str) -> Error {
    Error::Refused(format!(
        "{what} is not allowed: queries are read-only (SELECT, EXPLAIN, DESCRIBE, SHOW)"
    ))
}
