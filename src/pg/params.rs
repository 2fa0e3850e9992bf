//! Bind parameters: the values a client sends for `$1`, `$2`, ... in the text or the
//! binary format, as the values the engine binds to the statement's placeholders.
//!
//! A parameter's Postgres type is the one the client named in `Parse`, else the one
//! the engine inferred for its placeholder (`value > $1`: float8). The decoded value is
//! then cast to the placeholder's Arrow type, so `time > $1` takes a timestamp whether
//! it came as `timestamp`, as `text` or as an untyped literal.

use arrow::datatypes::DataType;
use bytes::Bytes;
use pgwire::api::portal::Format;
use pgwire::api::Type;
use quiver_query::ScalarValue;

use super::encode::{PG_EPOCH_DAYS, PG_EPOCH_US};

/// The engine's values for `values`; `types[i]` is the Postgres type of `$i+1` and
/// `targets[i]` the Arrow type its placeholder expects, if known.
pub fn decode(
    values: &[Option<Bytes>],
    format: &Format,
    types: &[Type],
    targets: &[Option<DataType>],
) -> Result<Vec<ScalarValue>, String> {
    values
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let pg = types.get(i).cloned().unwrap_or(Type::UNKNOWN);
            let target = targets.get(i).cloned().flatten();
            let decoded = match value {
                None => Ok(ScalarValue::Null),
                Some(bytes) if format.is_binary(i) => binary(&pg, bytes),
                Some(bytes) => text(&pg, bytes),
            }
            .map_err(|e| format!("parameter ${}: {e}", i + 1))?;
            match target {
                Some(target) if decoded.data_type() != target => decoded
                    .cast_to(&target)
                    .map_err(|e| format!("parameter ${}: not a {target}: {e}", i + 1)),
                _ => Ok(decoded),
            }
        })
        .collect()
}

fn utf8(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())
}

/// A value in the text format.
fn text(pg: &Type, bytes: &[u8]) -> Result<ScalarValue, String> {
    let s = utf8(bytes)?;
    let parse_err = |e: &dyn std::fmt::Display| format!("{s:?} is not a {}: {e}", pg.name());
    Ok(match *pg {
        Type::BOOL => ScalarValue::Boolean(Some(match s.trim().to_ascii_lowercase().as_str() {
            "t" | "true" | "yes" | "on" | "1" => true,
            "f" | "false" | "no" | "off" | "0" => false,
            _ => return Err(format!("{s:?} is not a bool")),
        })),
        Type::INT2 | Type::INT4 | Type::INT8 | Type::OID => {
            ScalarValue::Int64(Some(s.trim().parse().map_err(|e| parse_err(&e))?))
        }
        Type::FLOAT4 | Type::FLOAT8 | Type::NUMERIC => {
            ScalarValue::Float64(Some(s.trim().parse().map_err(|e| parse_err(&e))?))
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            ScalarValue::TimestampNanosecond(Some(timestamp_ns(s)?), None)
        }
        Type::DATE => {
            let date = chrono::NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d")
                .map_err(|e| parse_err(&e))?;
            let days = date
                .signed_duration_since(chrono::NaiveDate::default())
                .num_days();
            ScalarValue::Date32(Some(days as i32))
        }
        _ => ScalarValue::Utf8(Some(s.to_string())),
    })
}

/// A timestamp as Postgres prints it (`2024-01-02 03:04:05.123456`, optionally with
/// `T`, and an offset such as `+00`, `+02:00` or `Z`), in nanoseconds since the epoch.
fn timestamp_ns(s: &str) -> Result<i64, String> {
    let s = s.trim();
    let with_offset = |s: &str| {
        let s = s.replace('T', " ");
        let s = if let Some(stripped) = s.strip_suffix('Z') {
            format!("{stripped}+00:00")
        } else {
            s
        };
        // `+00` → `+00:00`
        let s = match s.rfind(['+', '-']) {
            Some(at) if at > 10 && s.len() - at == 3 => format!("{s}:00"),
            _ => s,
        };
        chrono::DateTime::parse_from_str(&s, "%Y-%m-%d %H:%M:%S%.f%:z").ok()
    };
    if let Some(t) = with_offset(s) {
        return t
            .timestamp_nanos_opt()
            .ok_or_else(|| format!("{s:?} is out of range"));
    }
    let naive = chrono::NaiveDateTime::parse_from_str(&s.replace('T', " "), "%Y-%m-%d %H:%M:%S%.f")
        .or_else(|_| {
            chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .map(|d| d.and_hms_opt(0, 0, 0).unwrap_or_default())
        })
        .map_err(|e| format!("{s:?} is not a timestamp: {e}"))?;
    naive
        .and_utc()
        .timestamp_nanos_opt()
        .ok_or_else(|| format!("{s:?} is out of range"))
}

fn fixed<const N: usize>(bytes: &[u8], pg: &Type) -> Result<[u8; N], String> {
    bytes
        .try_into()
        .map_err(|_| format!("a binary {} has {N} bytes, got {}", pg.name(), bytes.len()))
}

/// A value in the binary format.
fn binary(pg: &Type, bytes: &[u8]) -> Result<ScalarValue, String> {
    Ok(match *pg {
        Type::BOOL => ScalarValue::Boolean(Some(fixed::<1>(bytes, pg)?[0] != 0)),
        Type::INT2 => ScalarValue::Int64(Some(i16::from_be_bytes(fixed(bytes, pg)?) as i64)),
        Type::INT4 => ScalarValue::Int64(Some(i32::from_be_bytes(fixed(bytes, pg)?) as i64)),
        Type::OID => ScalarValue::Int64(Some(u32::from_be_bytes(fixed(bytes, pg)?) as i64)),
        Type::INT8 => ScalarValue::Int64(Some(i64::from_be_bytes(fixed(bytes, pg)?))),
        Type::FLOAT4 => ScalarValue::Float64(Some(f32::from_be_bytes(fixed(bytes, pg)?) as f64)),
        Type::FLOAT8 => ScalarValue::Float64(Some(f64::from_be_bytes(fixed(bytes, pg)?))),
        Type::NUMERIC => ScalarValue::Float64(Some(numeric(bytes)?)),
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let us = i64::from_be_bytes(fixed(bytes, pg)?) + PG_EPOCH_US;
            let ns = us
                .checked_mul(1_000)
                .ok_or_else(|| "timestamp out of range".to_string())?;
            ScalarValue::TimestampNanosecond(Some(ns), None)
        }
        Type::DATE => {
            ScalarValue::Date32(Some(i32::from_be_bytes(fixed(bytes, pg)?) + PG_EPOCH_DAYS))
        }
        Type::BYTEA => ScalarValue::Binary(Some(bytes.to_vec())),
        _ => ScalarValue::Utf8(Some(utf8(bytes)?.to_string())),
    })
}

/// A binary `numeric` as a float (the engine has no decimal placeholders to bind).
fn numeric(bytes: &[u8]) -> Result<f64, String> {
    let word = |i: usize| -> Result<i16, String> {
        bytes
            .get(i * 2..i * 2 + 2)
            .map(|b| i16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| "truncated numeric".to_string())
    };
    let digits = word(0)?;
    let weight = word(1)? as i32;
    let sign = word(2)? as u16;
    if sign == 0xC000 {
        return Ok(f64::NAN);
    }
    let mut value = 0.0;
    for i in 0..digits.max(0) as usize {
        let digit = word(4 + i)? as f64;
        value += digit * 10_000f64.powi(weight - i as i32);
    }
    Ok(if sign == 0x4000 { -value } else { value })
}

/// The Postgres type a placeholder of `data_type` is described as.
pub fn described_type(data_type: Option<&DataType>) -> Type {
    match data_type {
        None => Type::TEXT,
        Some(data_type) => super::encode::pg_type(data_type),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_timestamps_in_postgres_spellings() {
        let expected = 1_700_000_000_500_000_000;
        for s in [
            "2023-11-14 22:13:20.5",
            "2023-11-14T22:13:20.500Z",
            "2023-11-14 22:13:20.5+00",
            "2023-11-15 00:13:20.5+02:00",
        ] {
            assert_eq!(timestamp_ns(s).unwrap(), expected, "{s}");
        }
    }

    #[test]
    fn binary_numeric_reads_digits_and_sign() {
        // -12345.6789 = - (1 2345 . 6789): digits 3, weight 1, sign negative, scale 4.
        let mut bytes = Vec::new();
        for w in [3i16, 1, 0x4000u16 as i16, 4, 1, 2345, 6789] {
            bytes.extend_from_slice(&w.to_be_bytes());
        }
        assert!((numeric(&bytes).unwrap() + 12_345.678_9).abs() < 1e-9);
    }
}
