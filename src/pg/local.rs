//! What the door answers itself instead of the engine: transaction and session
//! statements (Quiver is read-only, so `BEGIN`, `COMMIT` and `SET` change nothing), the
//! `SHOW` settings clients ask for, and the `pg_catalog` queries of `psql`'s `\l`,
//! `\dt` and `\d table`.
//!
//! Quiver has no `pg_catalog`. `psql`'s describe commands are recognised by the shape
//! of the SQL it sends (psql 12 to 16 send the same for these) and answered from the
//! engine's own catalog, through the engine, so a token's database list still applies.
//! Each measurement gets an OID derived from its name, stable across connections. Other
//! `pg_catalog` queries of `\d`'s footer (policies, statistics, publications,
//! inheritance) get an empty result; any other query naming `pg_catalog` is refused
//! with a message saying so, rather than answered wrongly.

use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::DataType;
use futures::StreamExt;
use pgwire::api::Type;
use quiver_query::{QueryAccess, QueryEngine};

use super::encode::pg_type;

pub use quiver_query::SERVER_VERSION;

/// A statement the door answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Local {
    /// `BEGIN`, `START TRANSACTION`.
    Begin,
    /// `COMMIT`, `END`, `ROLLBACK`, `ABORT`.
    End(&'static str),
    /// A session statement accepted and ignored; the command tag.
    Command(&'static str),
    /// `SHOW name`: one row, one column.
    Show(String, String),
    /// `\l`.
    ListDatabases,
    /// `\dt [pattern]`: (regex on the name).
    ListTables(Option<String>),
    /// `\d pattern`, first step: which tables match.
    FindTables(String),
    /// `\d`, second step: the table's kind and flags.
    TableInfo(u32),
    /// `\d`, third step: the table's columns; `true` for `\d+`.
    TableColumns(u32, bool),
    /// A footer query of `\d` (policies, statistics, ...): nothing to show.
    Nothing,
    /// `pg_extension` (Grafana asks for TimescaleDB's version): no extensions.
    Extensions,
}

/// Whitespace collapsed, for matching the SQL clients send.
fn squeeze(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The statement, if the door answers it; `Err` for a `pg_catalog` query it cannot.
pub fn classify(sql: &str) -> Result<Option<Local>, String> {
    let text = squeeze(sql);
    let text = text.trim_end_matches(';').trim_end();
    let lower = text.to_ascii_lowercase();
    let first = lower.split(' ').next().unwrap_or("");
    match first {
        "begin" | "start" => return Ok(Some(Local::Begin)),
        "commit" | "end" => return Ok(Some(Local::End("COMMIT"))),
        "rollback" | "abort" => return Ok(Some(Local::End("ROLLBACK"))),
        "set" => return Ok(Some(Local::Command("SET"))),
        "reset" => return Ok(Some(Local::Command("RESET"))),
        "discard" => return Ok(Some(Local::Command("DISCARD ALL"))),
        "deallocate" => return Ok(Some(Local::Command("DEALLOCATE"))),
        "show" => {
            let name = lower["show".len()..].trim().trim_matches('"').to_string();
            if let Some(value) = setting(&name) {
                return Ok(Some(Local::Show(name, value.to_string())));
            }
            return Ok(None);
        }
        _ => {}
    }
    if lower.starts_with("select extversion from pg_extension")
        || lower.starts_with("select extversion from pg_catalog.pg_extension")
    {
        return Ok(Some(Local::Extensions));
    }
    if !lower.contains("pg_catalog.") {
        return Ok(None);
    }
    if lower.contains("from pg_catalog.pg_database d") {
        return Ok(Some(Local::ListDatabases));
    }
    if lower.contains("from pg_catalog.pg_class c")
        && lower.contains("as \"owner\"")
        && lower.contains("c.relkind in (")
    {
        return Ok(Some(Local::ListTables(name_pattern(text))));
    }
    if lower.starts_with("select c.oid, n.nspname, c.relname from pg_catalog.pg_class c") {
        return match name_pattern(text) {
            Some(pattern) => Ok(Some(Local::FindTables(pattern))),
            None => Ok(Some(Local::FindTables(".*".into()))),
        };
    }
    if lower.starts_with("select c.relchecks, c.relkind") {
        return Ok(Some(Local::TableInfo(oid_after(&lower, "where c.oid = '"))));
    }
    if lower.starts_with("select a.attname") && lower.contains("from pg_catalog.pg_attribute a") {
        return Ok(Some(Local::TableColumns(
            oid_after(&lower, "where a.attrelid = '"),
            lower.contains("a.attstorage"),
        )));
    }
    const FOOTERS: [&str; 8] = [
        "pg_catalog.pg_policy",
        "pg_catalog.pg_statistic_ext",
        "pg_catalog.pg_publication",
        "pg_catalog.pg_inherits",
        "pg_catalog.pg_trigger",
        "pg_catalog.pg_constraint",
        "pg_catalog.pg_index",
        "pg_catalog.pg_rewrite",
    ];
    if FOOTERS.iter().any(|t| lower.contains(t)) {
        return Ok(Some(Local::Nothing));
    }
    Err(
        "Quiver has no pg_catalog; it answers psql's \\l, \\dt and \\d and \
         information_schema.tables/columns (see docs/clients.md)"
            .to_string(),
    )
}

/// The value `SHOW name` answers, for the settings clients ask about (the same table
/// `current_setting()` reads).
pub fn setting(name: &str) -> Option<&'static str> {
    quiver_query::pg_setting(name)
}

/// The regex of psql's `c.relname OPERATOR(pg_catalog.~) '^(cpu)$'`.
fn name_pattern(text: &str) -> Option<String> {
    let at = text.find("OPERATOR(pg_catalog.~) '")? + "OPERATOR(pg_catalog.~) '".len();
    let rest = &text[at..];
    let mut pattern = String::new();
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            if chars.peek() == Some(&'\'') {
                chars.next();
                pattern.push('\'');
                continue;
            }
            return Some(pattern);
        }
        pattern.push(c);
    }
    None
}

fn oid_after(lower: &str, marker: &str) -> u32 {
    lower
        .find(marker)
        .map(|at| &lower[at + marker.len()..])
        .and_then(|rest| rest.split('\'').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A measurement's OID: a hash of its name above Postgres's reserved range.
pub fn table_oid(name: &str) -> u32 {
    // FNV-1a: stable across builds and nodes.
    let mut hash: u32 = 0x811c_9dc5;
    for byte in name.bytes() {
        hash ^= byte as u32;
        hash = hash.wrapping_mul(0x0100_0193);
    }
    16_384 + hash % (i32::MAX as u32 - 16_384)
}

/// Postgres's name of the type a column of `data_type` is sent as (`format_type`).
fn type_name(data_type: &DataType) -> &'static str {
    match pg_type(data_type) {
        Type::BOOL => "boolean",
        Type::INT2 => "smallint",
        Type::INT4 => "integer",
        Type::INT8 => "bigint",
        Type::NUMERIC => "numeric",
        Type::FLOAT4 => "real",
        Type::FLOAT8 => "double precision",
        Type::BYTEA => "bytea",
        Type::TIMESTAMP => "timestamp without time zone",
        Type::TIMESTAMPTZ => "timestamp with time zone",
        Type::DATE => "date",
        _ => "text",
    }
}

/// A row of text values (`None`: NULL).
pub type Row = Vec<Option<String>>;

/// Where a local answer reads from: the engine, as this connection's client.
pub struct Context<'a> {
    /// The engine.
    pub engine: &'a QueryEngine,
    /// The connection's database.
    pub database: &'a str,
    /// What its token may read.
    pub access: &'a QueryAccess,
}

impl Local {
    /// The result's columns (all text), or `None` for statements without rows.
    pub fn columns(&self) -> Option<Vec<&'static str>> {
        Some(match self {
            Local::Begin | Local::End(_) | Local::Command(_) => return None,
            Local::Show(..) => vec!["setting"],
            Local::ListDatabases => vec![
                "Name",
                "Owner",
                "Encoding",
                "Collate",
                "Ctype",
                "ICU Locale",
                "Locale Provider",
                "Access privileges",
            ],
            Local::ListTables(_) => vec!["Schema", "Name", "Type", "Owner"],
            Local::FindTables(_) => vec!["oid", "nspname", "relname"],
            Local::TableInfo(_) => vec![
                "relchecks",
                "relkind",
                "relhasindex",
                "relhasrules",
                "relhastriggers",
                "relrowsecurity",
                "relforcerowsecurity",
                "relhasoids",
                "relispartition",
                "reloptions",
                "reltablespace",
                "reloftype",
                "relpersistence",
                "relreplident",
                "amname",
            ],
            Local::TableColumns(_, verbose) => {
                let mut columns = vec![
                    "attname",
                    "format_type",
                    "default",
                    "attnotnull",
                    "attcollation",
                    "attidentity",
                    "attgenerated",
                ];
                if *verbose {
                    columns.extend([
                        "attstorage",
                        "attcompression",
                        "attstattarget",
                        "description",
                    ]);
                }
                columns
            }
            Local::Nothing => vec![],
            Local::Extensions => vec!["extversion"],
        })
    }

    /// The result's rows.
    pub async fn rows(&self, cx: &Context<'_>) -> Result<Vec<Row>, quiver_query::Error> {
        let text = |s: &str| Some(s.to_string());
        Ok(match self {
            Local::Begin
            | Local::End(_)
            | Local::Command(_)
            | Local::Nothing
            | Local::Extensions => vec![],
            // The door's search path is the connection's database (as reported at
            // startup); the engine-wide setting cannot know it.
            Local::Show(name, _) if name == "search_path" => vec![vec![text(cx.database)]],
            Local::Show(_, value) => vec![vec![text(value)]],
            Local::ListDatabases => databases(cx)
                .await?
                .into_iter()
                .map(|name| {
                    vec![
                        Some(name),
                        text("quiver"),
                        text("UTF8"),
                        text("C"),
                        text("C"),
                        None,
                        text("libc"),
                        None,
                    ]
                })
                .collect(),
            Local::ListTables(pattern) => matching(cx, pattern.as_deref())
                .await?
                .into_iter()
                .map(|name| vec![text(cx.database), Some(name), text("table"), text("quiver")])
                .collect(),
            Local::FindTables(pattern) => matching(cx, Some(pattern))
                .await?
                .into_iter()
                .map(|name| {
                    vec![
                        Some(table_oid(&name).to_string()),
                        text(cx.database),
                        Some(name),
                    ]
                })
                .collect(),
            Local::TableInfo(oid) => match by_oid(cx, *oid).await? {
                None => vec![],
                Some(_) => vec![[
                    "0", "r", "f", "f", "f", "f", "f", "f", "f", "", "0", "", "p", "d", "heap",
                ]
                .iter()
                .map(|v| text(v))
                .collect()],
            },
            Local::TableColumns(oid, verbose) => {
                let Some(name) = by_oid(cx, *oid).await? else {
                    return Ok(vec![]);
                };
                let sql = format!("SELECT * FROM \"{}\" LIMIT 0", name.replace('"', "\"\""));
                let described = cx
                    .engine
                    .describe_as(cx.database, &sql, None, cx.access)
                    .await?;
                described
                    .schema
                    .fields()
                    .iter()
                    .map(|field| {
                        let mut row = vec![
                            Some(field.name().clone()),
                            text(type_name(field.data_type())),
                            None,
                            text(if field.name() == "time" { "t" } else { "f" }),
                            None,
                            text(""),
                            text(""),
                        ];
                        if *verbose {
                            row.extend([text("p"), text(""), None, None]);
                        }
                        row
                    })
                    .collect()
            }
        })
    }
}

/// One text column of a query run as the connection's client.
async fn strings(cx: &Context<'_>, sql: &str) -> Result<Vec<String>, quiver_query::Error> {
    let mut stream = cx
        .engine
        .execute_stream_as(cx.database, sql, None, cx.access)
        .await?;
    let mut out = Vec::new();
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let column = arrow::compute::cast(batch.column(0), &DataType::Utf8)
            .map_err(|e| quiver_query::Error::Internal(e.to_string()))?;
        let column = column.as_string::<i32>();
        out.extend(
            (0..column.len())
                .filter(|&i| column.is_valid(i))
                .map(|i| column.value(i).to_string()),
        );
    }
    Ok(out)
}

async fn databases(cx: &Context<'_>) -> Result<Vec<String>, quiver_query::Error> {
    strings(
        cx,
        "SELECT DISTINCT table_schema FROM information_schema.tables \
         WHERE table_schema <> 'information_schema' ORDER BY 1",
    )
    .await
}

/// The measurements of the connection's database.
async fn tables(cx: &Context<'_>) -> Result<Vec<String>, quiver_query::Error> {
    // The database name is checked at startup: letters, digits, `_` and `-` only.
    strings(
        cx,
        &format!(
            "SELECT table_name FROM information_schema.tables \
             WHERE table_schema = '{}' AND table_type = 'BASE TABLE' ORDER BY 1",
            cx.database
        ),
    )
    .await
}

async fn matching(
    cx: &Context<'_>,
    pattern: Option<&str>,
) -> Result<Vec<String>, quiver_query::Error> {
    let regex = match pattern {
        None => None,
        Some(p) => {
            Some(Arc::new(regex::Regex::new(p).map_err(|e| {
                quiver_query::Error::Sql(format!("pattern {p:?}: {e}"))
            })?))
        }
    };
    Ok(tables(cx)
        .await?
        .into_iter()
        .filter(|name| regex.as_ref().is_none_or(|r| r.is_match(name)))
        .collect())
}

async fn by_oid(cx: &Context<'_>, oid: u32) -> Result<Option<String>, quiver_query::Error> {
    Ok(tables(cx)
        .await?
        .into_iter()
        .find(|name| table_oid(name) == oid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psql_describe_queries_are_recognised() {
        let lookup = "SELECT c.oid,\n  n.nspname,\n  c.relname\nFROM pg_catalog.pg_class c\n     LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace\nWHERE c.relname OPERATOR(pg_catalog.~) '^(cpu)$' COLLATE pg_catalog.default\n  AND pg_catalog.pg_table_is_visible(c.oid)\nORDER BY 2, 3;";
        assert_eq!(
            classify(lookup).unwrap(),
            Some(Local::FindTables("^(cpu)$".into()))
        );
        assert_eq!(
            classify("SELECT c.relchecks, c.relkind, c.relhasindex FROM pg_catalog.pg_class c WHERE c.oid = '16400';").unwrap(),
            Some(Local::TableInfo(16_400))
        );
        assert_eq!(classify("begin").unwrap(), Some(Local::Begin));
        assert_eq!(
            classify("SET extra_float_digits = 3").unwrap(),
            Some(Local::Command("SET"))
        );
        assert_eq!(classify("SELECT 1").unwrap(), None);
        assert!(classify("SELECT * FROM pg_catalog.pg_proc").is_err());
    }

    #[test]
    fn oids_are_stable_and_above_the_reserved_range() {
        assert_eq!(table_oid("cpu"), table_oid("cpu"));
        assert_ne!(table_oid("cpu"), table_oid("mem"));
        assert!(table_oid("") >= 16_384);
    }
}
