//! Arrow results as Postgres rows: each column's Postgres type, and its values in the
//! text or the binary format the client asked for.
//!
//! | Arrow | Postgres | note |
//! |---|---|---|
//! | Boolean | bool | |
//! | Int8, Int16, UInt8 | int2 | |
//! | Int32, UInt16 | int4 | |
//! | Int64, UInt32 | int8 | |
//! | UInt64 | numeric | Postgres has no unsigned 64-bit integer |
//! | Float16, Float32 | float4 | |
//! | Float64 | float8 | |
//! | Utf8, LargeUtf8, Utf8View | text | |
//! | Binary, LargeBinary, BinaryView | bytea | |
//! | Timestamp (with or without a zone) | timestamptz | UTC instants (Quiver's `time` is UTC by convention); microseconds: Postgres's precision, nanoseconds are cut |
//! | Date32, Date64 | date | |
//! | anything else (decimals, intervals, lists, ...) | text | Arrow's display of the value |
//!
//! Dictionaries are sent as their values.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Date32Array, Float32Array, Float64Array,
    Int16Array, Int32Array, Int64Array, StringArray, TimestampMicrosecondArray, UInt64Array,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use bytes::{BufMut, BytesMut};
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::api::Type;
use pgwire::messages::data::DataRow;

/// Microseconds from the Unix epoch to Postgres's (2000-01-01).
pub const PG_EPOCH_US: i64 = 946_684_800_000_000;
/// Days from the Unix epoch to Postgres's.
pub const PG_EPOCH_DAYS: i32 = 10_957;

/// The Postgres type a column of `data_type` is sent as.
pub fn pg_type(data_type: &DataType) -> Type {
    match data_type {
        DataType::Boolean => Type::BOOL,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Type::INT2,
        DataType::Int32 | DataType::UInt16 => Type::INT4,
        DataType::Int64 | DataType::UInt32 => Type::INT8,
        DataType::UInt64 => Type::NUMERIC,
        DataType::Float16 | DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Type::BYTEA,
        // Quiver's timestamps are UTC instants with no zone attached: clients get
        // them as `timestamptz`, so psycopg, asyncpg and pgjdbc hand out zone-aware
        // values instead of wall-clock times they would read in their local zone.
        DataType::Timestamp(_, _) => Type::TIMESTAMPTZ,
        DataType::Date32 | DataType::Date64 => Type::DATE,
        DataType::Dictionary(_, values) => pg_type(values),
        _ => Type::TEXT,
    }
}

/// The Arrow type values of `pg` are brought to before encoding; `None`: Arrow's
/// display of the value, as text.
fn wire_type(pg: &Type, data_type: &DataType) -> Option<DataType> {
    Some(match *pg {
        Type::BOOL => DataType::Boolean,
        Type::INT2 => DataType::Int16,
        Type::INT4 => DataType::Int32,
        Type::INT8 => DataType::Int64,
        Type::NUMERIC => DataType::UInt64,
        Type::FLOAT4 => DataType::Float32,
        Type::FLOAT8 => DataType::Float64,
        Type::BYTEA => DataType::Binary,
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let zone = match data_type {
                DataType::Timestamp(_, zone) => zone.clone(),
                DataType::Dictionary(_, values) => return wire_type(pg, values),
                _ => None,
            };
            DataType::Timestamp(TimeUnit::Microsecond, zone)
        }
        Type::DATE => DataType::Date32,
        _ => match data_type {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
            DataType::Dictionary(_, values) => return wire_type(pg, values),
            _ => return None,
        },
    })
}

/// The row description of `schema`, each column in the format `format` gives it.
pub fn fields(schema: &Schema, format: &Format) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| {
            FieldInfo::new(
                field.name().clone(),
                None,
                None,
                pg_type(field.data_type()),
                format.format_for(i),
            )
        })
        .collect()
}

/// One column ready to encode: its values in the wire type and the format to use.
struct Column {
    pg: Type,
    values: ArrayRef,
    /// Arrow's display, for the types sent as text.
    display: bool,
    binary: bool,
}

/// Encodes every row of `batch` as the `fields` say.
pub fn rows(batch: &RecordBatch, fields: &[FieldInfo]) -> Result<Vec<DataRow>, String> {
    let mut columns = Vec::with_capacity(fields.len());
    for (field, array) in fields.iter().zip(batch.columns()) {
        let pg = field.datatype().clone();
        let (values, display) = match wire_type(&pg, array.data_type()) {
            Some(target) if &target == array.data_type() => (Arc::clone(array), false),
            Some(target) => (
                cast(array, &target).map_err(|e| format!("column {}: {e}", field.name()))?,
                false,
            ),
            None => (Arc::clone(array), true),
        };
        columns.push(Column {
            pg,
            values,
            display,
            binary: field.format() == FieldFormat::Binary,
        });
    }
    let options = FormatOptions::default().with_null("");
    let formatters = columns
        .iter()
        .map(|c| {
            c.display
                .then(|| ArrayFormatter::try_new(c.values.as_ref(), &options))
                .transpose()
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    // Logical nulls: a `NullArray` (SQL's untyped `NULL`, a scalar subquery over no
    // rows) has no validity buffer, so `is_null` would call its values present.
    let nulls: Vec<_> = columns.iter().map(|c| c.values.logical_nulls()).collect();
    let mut out = Vec::with_capacity(batch.num_rows());
    let mut buf = BytesMut::new();
    for row in 0..batch.num_rows() {
        for ((column, formatter), nulls) in columns.iter().zip(&formatters).zip(&nulls) {
            if nulls.as_ref().is_some_and(|n| n.is_null(row)) {
                buf.put_i32(-1);
                continue;
            }
            let start = buf.len();
            buf.put_i32(0);
            match formatter {
                Some(formatter) => {
                    use std::fmt::Write as _;
                    let mut text = String::new();
                    let _ = write!(text, "{}", formatter.value(row));
                    buf.put_slice(text.as_bytes());
                }
                None => value(column, row, &mut buf)?,
            }
            let len = (buf.len() - start - 4) as i32;
            buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
        }
        out.push(DataRow::new(buf.split(), columns.len() as i16));
    }
    Ok(out)
}

/// Writes the non-null value at `row` of `column`.
fn value(column: &Column, row: usize, buf: &mut BytesMut) -> Result<(), String> {
    let values = column.values.as_ref();
    let binary = column.binary;
    match column.pg {
        Type::BOOL => {
            let v = as_type::<BooleanArray>(values)?.value(row);
            if binary {
                buf.put_u8(v as u8);
            } else {
                buf.put_slice(if v { b"t" } else { b"f" });
            }
        }
        Type::INT2 => int(as_type::<Int16Array>(values)?.value(row), binary, buf),
        Type::INT4 => int(as_type::<Int32Array>(values)?.value(row), binary, buf),
        Type::INT8 => int(as_type::<Int64Array>(values)?.value(row), binary, buf),
        Type::NUMERIC => numeric_u64(as_type::<UInt64Array>(values)?.value(row), binary, buf),
        Type::FLOAT4 => {
            let v = as_type::<Float32Array>(values)?.value(row);
            if binary {
                buf.put_f32(v);
            } else {
                float_text(v as f64, &v.to_string(), buf);
            }
        }
        Type::FLOAT8 => {
            let v = as_type::<Float64Array>(values)?.value(row);
            if binary {
                buf.put_f64(v);
            } else {
                float_text(v, &v.to_string(), buf);
            }
        }
        Type::BYTEA => {
            let v = as_type::<BinaryArray>(values)?.value(row);
            if binary {
                buf.put_slice(v);
            } else {
                buf.put_slice(b"\\x");
                for byte in v {
                    buf.put_slice(format!("{byte:02x}").as_bytes());
                }
            }
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let us = as_type::<TimestampMicrosecondArray>(values)?.value(row);
            if binary {
                buf.put_i64(us - PG_EPOCH_US);
            } else {
                timestamp_text(us, column.pg == Type::TIMESTAMPTZ, buf);
            }
        }
        Type::DATE => {
            let days = as_type::<Date32Array>(values)?.value(row);
            if binary {
                buf.put_i32(days - PG_EPOCH_DAYS);
            } else if let Some(date) = chrono::DateTime::from_timestamp(days as i64 * 86_400, 0) {
                buf.put_slice(date.format("%Y-%m-%d").to_string().as_bytes());
            }
        }
        _ => buf.put_slice(as_type::<StringArray>(values)?.value(row).as_bytes()),
    }
    Ok(())
}

/// The column as the array type its wire type was cast to; a mismatch is a bug in
/// [`wire_type`], answered as an error rather than a panic.
fn as_type<T: 'static>(array: &dyn Array) -> Result<&T, String> {
    array.as_any().downcast_ref::<T>().ok_or_else(|| {
        format!(
            "internal: a {} column was not cast to its wire type",
            array.data_type()
        )
    })
}

fn int<T: Into<i64> + Copy>(v: T, binary: bool, buf: &mut BytesMut) {
    if !binary {
        buf.put_slice(v.into().to_string().as_bytes());
        return;
    }
    match std::mem::size_of::<T>() {
        2 => buf.put_i16(v.into() as i16),
        4 => buf.put_i32(v.into() as i32),
        _ => buf.put_i64(v.into()),
    }
}

/// Postgres spells the special floats its own way.
fn float_text(v: f64, shortest: &str, buf: &mut BytesMut) {
    let text = if v.is_nan() {
        "NaN"
    } else if v == f64::INFINITY {
        "Infinity"
    } else if v == f64::NEG_INFINITY {
        "-Infinity"
    } else {
        shortest
    };
    buf.put_slice(text.as_bytes());
}

/// `numeric` in the binary format: base-10000 digits, most significant first.
fn numeric_u64(v: u64, binary: bool, buf: &mut BytesMut) {
    if !binary {
        buf.put_slice(v.to_string().as_bytes());
        return;
    }
    let mut digits = Vec::new();
    let mut rest = v;
    while rest > 0 {
        digits.push((rest % 10_000) as i16);
        rest /= 10_000;
    }
    digits.reverse();
    // Trailing zero digits are implied by the weight.
    while digits.last() == Some(&0) {
        digits.pop();
    }
    let weight = if v == 0 { 0 } else { (v.ilog10() / 4) as i16 };
    buf.put_i16(digits.len() as i16);
    buf.put_i16(weight);
    buf.put_u16(0x0000); // positive
    buf.put_i16(0); // display scale
    for digit in digits {
        buf.put_i16(digit);
    }
}

/// `YYYY-MM-DD HH:MM:SS[.ffffff]`, with `+00` for `timestamptz` (the session's time
/// zone is UTC).
fn timestamp_text(us: i64, with_zone: bool, buf: &mut BytesMut) {
    let Some(t) = chrono::DateTime::from_timestamp_micros(us) else {
        buf.put_slice(us.to_string().as_bytes());
        return;
    };
    let mut text = t.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
    while text.ends_with('0') {
        text.pop();
    }
    if text.ends_with('.') {
        text.pop();
    }
    if with_zone {
        text.push_str("+00");
    }
    buf.put_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_binary_matches_postgres() {
        let mut buf = BytesMut::new();
        numeric_u64(18_446_744_073_709_551_615, true, &mut buf);
        // 1844 6744 0737 0955 1615: five digits, weight 4.
        assert_eq!(&buf[..8], &[0, 5, 0, 4, 0, 0, 0, 0]);
        assert_eq!(&buf[8..10], &1844i16.to_be_bytes());
        let mut buf = BytesMut::new();
        numeric_u64(20_000, true, &mut buf);
        // 2 0000: one digit (the zero is implied), weight 1.
        assert_eq!(&buf[..], &[0, 1, 0, 1, 0, 0, 0, 0, 0, 2]);
        let mut buf = BytesMut::new();
        numeric_u64(0, true, &mut buf);
        assert_eq!(&buf[..], &[0, 0, 0, 0, 0, 0, 0, 0]);
    }

    /// `SELECT NULL` (and SQLAlchemy's identity and default subqueries over empty
    /// catalog tables) came out as an empty string instead of SQL NULL.
    #[test]
    fn an_untyped_null_column_is_sent_as_null_not_as_an_empty_string() {
        use arrow::array::NullArray;
        use arrow::datatypes::Field;
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Null, true)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(NullArray::new(2))]).unwrap();
        let fields = fields(&schema, &Format::UnifiedText);
        let rows = rows(&batch, &fields).unwrap();
        assert_eq!(rows.len(), 2);
        for row in rows {
            // One field, length -1: NULL.
            assert_eq!(&row.data[..], &(-1i32).to_be_bytes());
        }
    }

    #[test]
    fn timestamps_print_like_postgres() {
        let mut buf = BytesMut::new();
        timestamp_text(1_700_000_000_500_000, false, &mut buf);
        assert_eq!(&buf[..], b"2023-11-14 22:13:20.5");
        let mut buf = BytesMut::new();
        timestamp_text(1_700_000_000_000_000, true, &mut buf);
        assert_eq!(&buf[..], b"2023-11-14 22:13:20+00");
    }
}
