//! Postgres functions tools send before any query of theirs: `current_setting(name)`
//! (Grafana's Postgres data source reads `server_version_num` to pick its SQL dialect),
//! `quote_ident(text)` (its query builder lists tables and columns through it) and
//! `version()` (drivers and BI tools read the server kind from its first word, so it
//! starts `PostgreSQL 16.6`, then says what answers: Quiver on DataFusion).
//!
//! The settings are the ones the Postgres door reports at startup and answers `SHOW`
//! with ([`setting`]), so every way of asking gives the same answer.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::DataType;
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The Postgres version Quiver's Postgres door reports: the protocol and catalog shapes
/// it follows.
pub const SERVER_VERSION: &str = "16.6";
/// `server_version_num` of [`SERVER_VERSION`].
pub const SERVER_VERSION_NUM: &str = "160006";

/// The value of a Postgres setting clients ask about (`SHOW`, `current_setting`), by
/// its lower-case name; `None` for one Quiver does not know.
pub fn setting(name: &str) -> Option<&'static str> {
    Some(match name {
        "server_version" => SERVER_VERSION,
        "server_version_num" => SERVER_VERSION_NUM,
        "server_encoding" | "client_encoding" => "UTF8",
        "standard_conforming_strings" | "integer_datetimes" => "on",
        "datestyle" => "ISO, YMD",
        "intervalstyle" => "postgres",
        "timezone" => "UTC",
        "transaction_isolation" | "transaction isolation level" => "read committed",
        "transaction_read_only" | "default_transaction_read_only" => "on",
        "max_identifier_length" => "63",
        "is_superuser" => "off",
        "search_path" => "public",
        _ => return None,
    })
}

/// `current_setting`, `quote_ident`, `version` and the session's place
/// ([`crate::pg_session_functions`]), ready to register.
pub(crate) fn functions() -> Vec<Arc<ScalarUDF>> {
    let mut functions = vec![
        Arc::new(ScalarUDF::new_from_impl(TextFunction::new(
            Text::CurrentSetting,
        ))),
        Arc::new(ScalarUDF::new_from_impl(TextFunction::new(
            Text::QuoteIdent,
        ))),
        Arc::new(ScalarUDF::new_from_impl(Version {
            signature: Signature::nullary(Volatility::Immutable),
        })),
    ];
    functions.extend(crate::pg_session_functions::functions());
    functions.extend(crate::pg_visible::functions());
    functions
}

/// What `version()` answers.
fn version() -> String {
    format!(
        "PostgreSQL {SERVER_VERSION} (Quiver {}, Apache DataFusion {}) on {}-{}",
        env!("CARGO_PKG_VERSION"),
        datafusion::DATAFUSION_VERSION,
        std::env::consts::ARCH,
        std::env::consts::OS,
    )
}

/// `version()`, in Postgres's form; replaces DataFusion's own.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Version {
    signature: Signature,
}

impl ScalarUDFImpl for Version {
    fn name(&self) -> &str {
        "version"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(version()))))
    }
}

/// `current_setting('name')`: an unknown name is an error, as in Postgres. The search
/// path is the query's `database` (the schema unqualified names resolve in).
fn current_setting(name: &str, database: &str) -> Result<String> {
    let name = name.to_ascii_lowercase();
    if name == "search_path" {
        return Ok(database.to_string());
    }
    match setting(&name) {
        Some(value) => Ok(value.to_string()),
        None => exec_err!("unrecognized configuration parameter \"{name}\""),
    }
}

/// `quote_ident('name')`: the name as an SQL identifier, in double quotes when it needs
/// them (anything but lower-case letters, digits and `_`, or a leading digit).
fn quote_ident(name: &str) -> Result<String> {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    Ok(if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    })
}

/// Which text function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Text {
    CurrentSetting,
    QuoteIdent,
}

/// A function of one text argument returning text, null in, null out.
#[derive(Debug, PartialEq, Eq, Hash)]
struct TextFunction {
    name: &'static str,
    which: Text,
    signature: Signature,
}

impl TextFunction {
    fn new(which: Text) -> Self {
        TextFunction {
            name: match which {
                Text::CurrentSetting => "current_setting",
                Text::QuoteIdent => "quote_ident",
            },
            which,
            signature: Signature::string(1, Volatility::Stable),
        }
    }

    fn apply(&self, text: &str, database: &str) -> Result<String> {
        match self.which {
            Text::CurrentSetting => current_setting(text, database),
            Text::QuoteIdent => quote_ident(text),
        }
    }
}

impl ScalarUDFImpl for TextFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("{} takes one argument", self.name);
        };
        let database = args.config_options.catalog.default_schema.as_str();
        match arg {
            ColumnarValue::Scalar(scalar) => {
                let text = match scalar {
                    ScalarValue::Utf8(v) | ScalarValue::LargeUtf8(v) | ScalarValue::Utf8View(v) => {
                        v.as_deref()
                    }
                    other if other.is_null() => None,
                    other => return exec_err!("{} takes text, not {other:?}", self.name),
                };
                let out = text.map(|t| self.apply(t, database)).transpose()?;
                Ok(ColumnarValue::Scalar(ScalarValue::Utf8(out)))
            }
            ColumnarValue::Array(array) => {
                let array: ArrayRef = arrow::compute::cast(array, &DataType::Utf8)?;
                let strings = array.as_string::<i32>();
                let mut out = StringBuilder::with_capacity(strings.len(), strings.len() * 8);
                for value in strings.iter() {
                    match value {
                        Some(v) => out.append_value(self.apply(v, database)?),
                        None => out.append_null(),
                    }
                }
                Ok(ColumnarValue::Array(Arc::new(out.finish())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_only_when_they_need_it() {
        assert_eq!(quote_ident("cpu").unwrap(), "cpu");
        assert_eq!(quote_ident("cpu_1h").unwrap(), "cpu_1h");
        assert_eq!(quote_ident("CPU").unwrap(), "\"CPU\"");
        assert_eq!(quote_ident("1h").unwrap(), "\"1h\"");
        assert_eq!(quote_ident("a\"b").unwrap(), "\"a\"\"b\"");
        assert_eq!(quote_ident("").unwrap(), "\"\"");
    }

    #[test]
    fn settings_answer_by_name_and_unknown_ones_fail() {
        assert_eq!(
            current_setting("server_version_num", "db").unwrap(),
            "160006"
        );
        assert_eq!(current_setting("TimeZone", "db").unwrap(), "UTC");
        assert_eq!(current_setting("search_path", "db").unwrap(), "db");
        let e = current_setting("shared_buffers", "db")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unrecognized configuration parameter"), "{e}");
    }
}
