//! `parse_ident(text)`: Postgres's split of a qualified name into its parts, which
//! Grafana's Postgres data source uses to find a table's columns
//! (`(parse_ident('db.cpu'))[2]`). Unquoted parts are folded to lower case, quoted
//! ones kept as written with `""` meaning `"`, as Postgres does.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, ListBuilder, StringBuilder};
use arrow::datatypes::{DataType, Field};
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// `parse_ident`, ready to register.
pub(crate) fn function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(ParseIdent {
        signature: Signature::string(1, Volatility::Immutable),
    }))
}

/// The parts of a qualified identifier such as `schema.table` or `"My Schema".cpu`;
/// an error names what is wrong, as Postgres's does.
fn parse_ident(text: &str) -> Result<Vec<String>> {
    let invalid = |why: &str| exec_err!("string is not a valid identifier: \"{text}\" ({why})");
    let mut parts = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut part = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next() {
                    Some('"') if chars.next_if_eq(&'"').is_some() => part.push('"'),
                    Some('"') => break,
                    Some(c) => part.push(c),
                    None => return invalid("unclosed double quote"),
                }
            }
            if part.is_empty() {
                return invalid("zero-length quoted identifier");
            }
        } else {
            while let Some(c) =
                chars.next_if(|c| c.is_alphanumeric() || *c == '_' || *c == '$' || !c.is_ascii())
            {
                part.extend(c.to_lowercase());
            }
            if part.is_empty() {
                return invalid("no identifier where one was expected");
            }
        }
        parts.push(part);
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.next() {
            None => return Ok(parts),
            Some('.') => {}
            Some(_) => return invalid("characters after the last identifier"),
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ParseIdent {
    signature: Signature,
}

fn item() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::Utf8, true))
}

impl ScalarUDFImpl for ParseIdent {
    fn name(&self) -> &str {
        "parse_ident"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::List(item()))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("parse_ident takes one argument");
        };
        let array: ArrayRef = match arg {
            ColumnarValue::Scalar(scalar) => scalar.to_array_of_size(1)?,
            ColumnarValue::Array(array) => Arc::clone(array),
        };
        let strings = arrow::compute::cast(&array, &DataType::Utf8)?;
        let mut out = ListBuilder::new(StringBuilder::new()).with_field(item());
        for value in strings.as_string::<i32>().iter() {
            match value {
                Some(text) => {
                    for part in parse_ident(text)? {
                        out.values().append_value(part);
                    }
                    out.append(true);
                }
                None => out.append_null(),
            }
        }
        let list: ArrayRef = Arc::new(out.finish());
        Ok(match arg {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&list, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(list),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_on_dots_with_postgres_case_rules() {
        assert_eq!(parse_ident("cpu").unwrap(), ["cpu"]);
        assert_eq!(parse_ident("Demo.CPU").unwrap(), ["demo", "cpu"]);
        assert_eq!(parse_ident(" \"My DB\" . cpu").unwrap(), ["My DB", "cpu"]);
        assert_eq!(parse_ident("\"a\"\"b\".c").unwrap(), ["a\"b", "c"]);
    }

    #[test]
    fn malformed_names_are_errors_not_guesses() {
        for bad in ["", "a.", ".a", "a b", "\"open", "\"\"", "a-b"] {
            let e = parse_ident(bad).unwrap_err().to_string();
            assert!(e.contains("not a valid identifier"), "{bad:?}: {e}");
        }
    }
}
