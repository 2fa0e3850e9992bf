//! Grafana's Postgres data source narrows its table and column lists to the schemas on
//! the `search_path`, and expands that setting with Postgres-only SQL (a set-returning
//! `generate_series` aliased as a column, `array_lower`, `s[i]`, `user`) that no other
//! engine plans. Quiver's search path is exactly one schema, the connection's database,
//! so the door replaces that `IN (subquery)` with `IN ('<database>')` before the engine
//! sees the query; everything else in it runs as sent. The pattern is Grafana's text
//! (`postgresMetaQuery.ts`, unchanged since Grafana 7), whitespace and case aside.
//! Any other `current_setting('search_path')` becomes the database too, so reading the
//! setting agrees with `SHOW search_path` and with what the door reported at startup.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

/// `string_to_array(current_setting('search_path'),',')`
const SEARCH_PATH_ARRAY: &str =
    r"string_to_array\s*\(\s*current_setting\s*\(\s*'search_path'\s*\)\s*,\s*','\s*\)";

static GRAFANA_SEARCH_PATH: LazyLock<Option<Regex>> = LazyLock::new(|| {
    let array = SEARCH_PATH_ARRAY;
    let element = r"trim\s*\(\s*s\s*\[\s*i\s*\]\s*\)";
    let pattern = format!(
        r#"(?is)\bIN\s*\(\s*SELECT\s+CASE\s+WHEN\s+{element}\s*=\s*'"\$user"'\s+THEN\s+user\s+ELSE\s+{element}\s+END\s+FROM\s+generate_series\s*\(\s*array_lower\s*\(\s*{array}\s*,\s*1\s*\)\s*,\s*array_upper\s*\(\s*{array}\s*,\s*1\s*\)\s*\)\s+(?:AS\s+)?(?:i|\w+\s*\(\s*i\s*\))\s*,\s*{array}\s+(?:AS\s+)?(?:s|\w+\s*\(\s*s\s*\))\s*\)"#
    );
    compile(&pattern)
});

static CURRENT_SETTING: LazyLock<Option<Regex>> =
    LazyLock::new(|| compile(r"(?i)\bcurrent_setting\s*\(\s*'search_path'\s*\)"));

fn compile(pattern: &str) -> Option<Regex> {
    match Regex::new(pattern) {
        Ok(regex) => Some(regex),
        Err(e) => {
            // A bug in a pattern above, caught by the tests; queries then run as sent.
            debug_assert!(false, "search_path pattern: {e}");
            tracing::error!(error = %e, "a search_path pattern does not compile");
            None
        }
    }
}

/// `sql` with Grafana's `search_path` expansions replaced by the one schema `database`.
pub fn expand<'a>(sql: &'a str, database: &str) -> Cow<'a, str> {
    if !sql.contains("search_path") {
        return Cow::Borrowed(sql);
    }
    let quoted = format!("'{}'", database.replace('\'', "''"));
    let mut sql = Cow::Borrowed(sql);
    if let Some(regex) = GRAFANA_SEARCH_PATH.as_ref() {
        let in_list = format!("IN ({quoted})");
        if let Cow::Owned(out) = regex.replace_all(&sql, regex::NoExpand(&in_list)) {
            sql = Cow::Owned(out);
        }
    }
    if let Some(regex) = CURRENT_SETTING.as_ref() {
        if let Cow::Owned(out) = regex.replace_all(&sql, regex::NoExpand(&quoted)) {
            sql = Cow::Owned(out);
        }
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Grafana's `buildSchemaConstraint()`, as its builder sends it.
    const GRAFANA: &str = "
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '\"$user\"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )";

    #[test]
    fn grafanas_expansion_becomes_the_database() {
        let sql = format!(
            "SELECT CASE WHEN {GRAFANA} THEN 0 ELSE 1 END FROM t WHERE {GRAFANA} AND x = 1"
        );
        let out = expand(&sql, "demo");
        assert_eq!(
            out.split_whitespace().collect::<Vec<_>>().join(" "),
            "SELECT CASE WHEN quote_ident(table_schema) IN ('demo') THEN 0 ELSE 1 END \
             FROM t WHERE quote_ident(table_schema) IN ('demo') AND x = 1"
        );
    }

    #[test]
    fn the_alias_forms_and_case_do_not_matter() {
        let sql = GRAFANA
            .replace("as i,", "AS xs(i),")
            .replace("',') s", "',') AS t(s)")
            .to_uppercase()
            .replace("'SEARCH_PATH'", "'search_path'")
            .replace("'\"$USER\"'", "'\"$user\"'");
        assert!(expand(&sql, "demo").contains("IN ('demo')"), "{sql}");
    }

    #[test]
    fn reading_the_setting_gives_the_database() {
        assert_eq!(
            expand("SELECT Current_Setting( 'search_path' ) AS p", "demo"),
            "SELECT 'demo' AS p"
        );
    }

    #[test]
    fn other_queries_are_untouched() {
        let sql = "SELECT current_setting('server_version_num')";
        assert!(matches!(expand(sql, "demo"), Cow::Borrowed(_)));
        let sql = "SELECT * FROM t WHERE a IN (SELECT b FROM u) AND search_path = 1";
        assert!(matches!(expand(sql, "demo"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_quote_in_the_database_name_stays_inside_the_literal() {
        assert!(expand(GRAFANA, "o'brien").contains("IN ('o''brien')"));
    }
}
