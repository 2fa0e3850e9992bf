//! What the door answers itself instead of the engine: transaction and session
//! statements (Quiver is read-only, so `BEGIN`, `COMMIT` and `SET` change nothing) and
//! the `SHOW` settings clients ask for. Everything else, `pg_catalog` queries included,
//! runs on the engine ([`quiver_query::PgStatement`]).

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
}

/// The statement, if the door answers it.
pub fn classify(sql: &str) -> Option<Local> {
    let text = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let lower = text.trim_end_matches(';').trim_end().to_ascii_lowercase();
    let first = lower.split(' ').next().unwrap_or("");
    Some(match first {
        "begin" | "start" => Local::Begin,
        "commit" | "end" => Local::End("COMMIT"),
        // A savepoint's rollback leaves the transaction open.
        "rollback" if lower.starts_with("rollback to") => Local::Command("ROLLBACK"),
        "rollback" | "abort" => Local::End("ROLLBACK"),
        // psycopg wraps its type lookups in savepoints inside a transaction.
        "savepoint" => Local::Command("SAVEPOINT"),
        "release" => Local::Command("RELEASE"),
        "set" => Local::Command("SET"),
        "reset" => Local::Command("RESET"),
        "discard" => Local::Command("DISCARD ALL"),
        "deallocate" => Local::Command("DEALLOCATE"),
        "show" => {
            let name = lower["show".len()..].trim().trim_matches('"').to_string();
            let value = setting(&name)?;
            Local::Show(name, value.to_string())
        }
        _ => return None,
    })
}

/// The value `SHOW name` answers, for the settings clients ask about (the same table
/// `current_setting()` reads).
pub fn setting(name: &str) -> Option<&'static str> {
    quiver_query::pg_setting(name)
}

impl Local {
    /// The `SHOW` answer's one row: the setting's value. The search path is the
    /// connection's `database` (as reported at startup).
    pub fn show_value(&self, database: &str) -> Option<String> {
        match self {
            Local::Show(name, _) if name == "search_path" => Some(database.to_string()),
            Local::Show(_, value) => Some(value.clone()),
            Local::Begin | Local::End(_) | Local::Command(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_statements_are_answered_here_and_queries_are_not() {
        assert_eq!(classify("begin"), Some(Local::Begin));
        assert_eq!(classify(" COMMIT ;"), Some(Local::End("COMMIT")));
        assert_eq!(
            classify("SET extra_float_digits = 3"),
            Some(Local::Command("SET"))
        );
        assert_eq!(
            classify("SHOW standard_conforming_strings"),
            Some(Local::Show(
                "standard_conforming_strings".into(),
                "on".into()
            ))
        );
        assert_eq!(
            classify("show search_path").and_then(|l| l.show_value("demo")),
            Some("demo".into())
        );
        assert_eq!(classify("SHOW no_such_setting"), None);
        assert_eq!(
            classify("SAVEPOINT _pg3_1"),
            Some(Local::Command("SAVEPOINT"))
        );
        assert_eq!(
            classify("RELEASE SAVEPOINT _pg3_1"),
            Some(Local::Command("RELEASE"))
        );
        assert_eq!(
            classify("ROLLBACK TO SAVEPOINT _pg3_1"),
            Some(Local::Command("ROLLBACK"))
        );
        assert_eq!(classify("SELECT 1"), None);
        assert_eq!(classify("SELECT * FROM pg_catalog.pg_class"), None);
    }
}
