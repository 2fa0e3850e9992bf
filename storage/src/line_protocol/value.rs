//! Field values: the five line-protocol types, told apart by their spelling.
//!
//! `"..."` is a string, `1i` an integer, `1u` an unsigned integer, the ten boolean
//! spellings a boolean, and anything else must be a finite float. The type is decided by
//! the token alone, never by earlier lines: `1` and `1i` are different types.

use std::borrow::Cow;

use crate::rows::FieldValue;

/// One parsed field value; a string borrows from the body unless it held escapes.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value<'a> {
    Float(f64),
    Integer(i64),
    UInteger(u64),
    Boolean(bool),
    String(Cow<'a, str>),
}

impl Value<'_> {
    /// The borrowed form `RowBatchBuilder` takes.
    pub(super) fn as_field(&self) -> FieldValue<'_> {
        match self {
            Value::Float(v) => FieldValue::Float(*v),
            Value::Integer(v) => FieldValue::Integer(*v),
            Value::UInteger(v) => FieldValue::UInteger(*v),
            Value::Boolean(v) => FieldValue::Boolean(*v),
            Value::String(v) => FieldValue::String(v),
        }
    }
}

/// Parses an unquoted field value token. The error names the problem and the token.
pub(super) fn scalar(token: &str) -> Result<Value<'static>, String> {
    let b = token.as_bytes();
    match b {
        [] => Err("missing value".into()),
        [b't' | b'T' | b'f' | b'F', ..] => boolean(token),
        [.., b'i'] => integer(&b[..b.len() - 1])
            .map(Value::Integer)
            .ok_or_else(|| number_error("integer", token, b.len() - 1)),
        [.., b'u'] => unsigned(&b[..b.len() - 1])
            .map(Value::UInteger)
            .ok_or_else(|| number_error("unsigned integer", token, b.len() - 1)),
        _ => float(token),
    }
}

fn boolean(token: &str) -> Result<Value<'static>, String> {
    match token {
        "t" | "T" | "true" | "True" | "TRUE" => Ok(Value::Boolean(true)),
        "f" | "F" | "false" | "False" | "FALSE" => Ok(Value::Boolean(false)),
        _ => Err(format!("invalid boolean {token:?}")),
    }
}

/// "invalid" when the digits are malformed, "out of range" when they are just too many.
fn number_error(what: &str, token: &str, digits_end: usize) -> String {
    let digits = &token.as_bytes()[..digits_end];
    let digits = digits.strip_prefix(b"-").unwrap_or(digits);
    if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        if what == "unsigned integer" && token.starts_with('-') {
            return format!("invalid {what} {token:?} (negative)");
        }
        format!("{what} {token:?} out of range")
    } else {
        format!("invalid {what} {token:?}")
    }
}

/// `-?[0-9]+` as an i64, or `None` if malformed or out of range.
pub(super) fn integer(b: &[u8]) -> Option<i64> {
    let (negative, digits) = match b {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, b),
    };
    let magnitude = unsigned(digits)?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// `[0-9]+` as a u64, or `None` if malformed or out of range.
fn unsigned(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// A float in line-protocol spelling: `-?(d+(.d*)?|.d+)([eE][+-]?d+)?`. Checking the
/// spelling first keeps out what Rust's parser would also take (`inf`, `NaN`, `+1`).
fn float(token: &str) -> Result<Value<'static>, String> {
    if !float_spelling(token.as_bytes()) {
        return Err(format!("invalid float {token:?}"));
    }
    match token.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(Value::Float(v)),
        Ok(_) => Err(format!("float {token:?} out of range")),
        Err(_) => Err(format!("invalid float {token:?}")),
    }
}

fn float_spelling(b: &[u8]) -> bool {
    let mut i = usize::from(b.first() == Some(&b'-'));
    let int_digits = count_digits(b, i);
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = count_digits(b, i);
        i += frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_digits = count_digits(b, i);
        if exp_digits == 0 {
            return false;
        }
        i += exp_digits;
    }
    i == b.len()
}

fn count_digits(b: &[u8], from: usize) -> usize {
    b.get(from..).map_or(0, |rest| {
        rest.iter().take_while(|c| c.is_ascii_digit()).count()
    })
}

/// A quoted string that was read to its closing quote.
pub(super) struct Quoted<'a> {
    pub(super) value: Cow<'a, str>,
    /// Byte index just past the closing quote.
    pub(super) end: usize,
    /// Newlines inside the string.
    pub(super) newlines: usize,
}

/// Reads the string whose opening quote is at `open`. `\"` and `\\` are escapes; any
/// other backslash is literal; newlines are part of the string.
pub(super) fn quoted(text: &str, open: usize) -> Result<Quoted<'_>, String> {
    let b = text.as_bytes();
    debug_assert_eq!(b.get(open), Some(&b'"'));
    let start = open + 1;
    let mut i = start;
    let mut escaped = false;
    let mut newlines = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'"' => {
                let raw = text.get(start..i).unwrap_or_default();
                let value = if escaped {
                    Cow::Owned(unescape_string(raw))
                } else {
                    Cow::Borrowed(raw)
                };
                return Ok(Quoted {
                    value,
                    end: i + 1,
                    newlines,
                });
            }
            b'\\' if matches!(b.get(i + 1), Some(b'"' | b'\\')) => {
                escaped = true;
                i += 2;
            }
            b'\n' => {
                newlines += 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    Err("unterminated string".into())
}

fn unescape_string(raw: &str) -> String {
    let b = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && matches!(b.get(i + 1), Some(b'"' | b'\\')) {
            out.push_str(raw.get(copied..i).unwrap_or_default());
            copied = i + 1;
            i += 2;
        } else {
            i += 1;
        }
    }
    out.push_str(raw.get(copied..).unwrap_or_default());
    out
}
