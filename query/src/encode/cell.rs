//! Reading one cell of any Arrow column as a small, format-neutral [`Value`].
//!
//! Each text encoder walks batches row by row; a [`ColumnReader`] is built once per
//! column per batch (downcasts done there), then asked for each row's value.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow::error::ArrowError;
use arrow::util::display::{ArrayFormatter, FormatOptions};

use super::time::split_ticks;

/// One cell, ready to be written in any text format.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'a> {
    /// SQL NULL, and also NaN and infinities (JSON has no numbers for them).
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    /// Always finite.
    Float(f64),
    Str(&'a str),
    /// An instant as seconds and nanoseconds since the Unix epoch, UTC.
    Timestamp {
        secs: i64,
        nanos: u32,
    },
    /// Days since 1970-01-01.
    Date(i64),
    /// A decimal, already rendered as a plain number.
    Number(String),
    /// Anything else, rendered by Arrow's display formatter.
    Text(String),
}

/// Reads the cells of one column.
pub(crate) struct ColumnReader<'a> {
    array: &'a dyn Array,
    kind: Kind<'a>,
}

enum Kind<'a> {
    Null,
    Bool(&'a arrow::array::BooleanArray),
    I8(&'a [i8]),
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    U8(&'a [u8]),
    U16(&'a [u16]),
    U32(&'a [u32]),
    U64(&'a [u64]),
    F16(&'a arrow::array::PrimitiveArray<Float16Type>),
    F32(&'a [f32]),
    F64(&'a [f64]),
    Utf8(&'a arrow::array::StringArray),
    LargeUtf8(&'a arrow::array::LargeStringArray),
    Utf8View(&'a arrow::array::StringViewArray),
    /// Raw ticks and how many make a second.
    Timestamp(&'a [i64], i64),
    Date32(&'a [i32]),
    Date64(&'a [i64]),
    Dictionary {
        keys: Vec<usize>,
        values: Box<ColumnReader<'a>>,
    },
    Number(ArrayFormatter<'a>),
    Other(ArrayFormatter<'a>),
}

impl<'a> ColumnReader<'a> {
    /// Prepares to read `array`; fails only for types Arrow itself cannot display.
    pub(crate) fn new(array: &'a dyn Array) -> Result<Self, ArrowError> {
        let kind = match array.data_type() {
            DataType::Null => Kind::Null,
            DataType::Boolean => Kind::Bool(array.as_boolean()),
            DataType::Int8 => Kind::I8(array.as_primitive::<Int8Type>().values()),
            DataType::Int16 => Kind::I16(array.as_primitive::<Int16Type>().values()),
            DataType::Int32 => Kind::I32(array.as_primitive::<Int32Type>().values()),
            DataType::Int64 => Kind::I64(array.as_primitive::<Int64Type>().values()),
            DataType::UInt8 => Kind::U8(array.as_primitive::<UInt8Type>().values()),
            DataType::UInt16 => Kind::U16(array.as_primitive::<UInt16Type>().values()),
            DataType::UInt32 => Kind::U32(array.as_primitive::<UInt32Type>().values()),
            DataType::UInt64 => Kind::U64(array.as_primitive::<UInt64Type>().values()),
            DataType::Float16 => Kind::F16(array.as_primitive::<Float16Type>()),
            DataType::Float32 => Kind::F32(array.as_primitive::<Float32Type>().values()),
            DataType::Float64 => Kind::F64(array.as_primitive::<Float64Type>().values()),
            DataType::Utf8 => Kind::Utf8(array.as_string::<i32>()),
            DataType::LargeUtf8 => Kind::LargeUtf8(array.as_string::<i64>()),
            DataType::Utf8View => Kind::Utf8View(array.as_string_view()),
            DataType::Timestamp(unit, _) => match unit {
                TimeUnit::Second => {
                    Kind::Timestamp(array.as_primitive::<TimestampSecondType>().values(), 1)
                }
                TimeUnit::Millisecond => Kind::Timestamp(
                    array.as_primitive::<TimestampMillisecondType>().values(),
                    1_000,
                ),
                TimeUnit::Microsecond => Kind::Timestamp(
                    array.as_primitive::<TimestampMicrosecondType>().values(),
                    1_000_000,
                ),
                TimeUnit::Nanosecond => Kind::Timestamp(
                    array.as_primitive::<TimestampNanosecondType>().values(),
                    1_000_000_000,
                ),
            },
            DataType::Date32 => Kind::Date32(array.as_primitive::<Date32Type>().values()),
            DataType::Date64 => Kind::Date64(array.as_primitive::<Date64Type>().values()),
            DataType::Dictionary(_, _) => match array.as_any_dictionary_opt() {
                Some(dictionary) => Kind::Dictionary {
                    keys: dictionary.normalized_keys(),
                    values: Box::new(ColumnReader::new(dictionary.values().as_ref())?),
                },
                None => Kind::Other(formatter(array)?),
            },
            DataType::Decimal32(..)
            | DataType::Decimal64(..)
            | DataType::Decimal128(..)
            | DataType::Decimal256(..) => Kind::Number(formatter(array)?),
            _ => Kind::Other(formatter(array)?),
        };
        Ok(ColumnReader { array, kind })
    }

    /// The cell at `row`.
    pub(crate) fn value(&self, row: usize) -> Value<'_> {
        if self.array.is_null(row) {
            return Value::Null;
        }
        match &self.kind {
            Kind::Null => Value::Null,
            Kind::Bool(a) => Value::Bool(a.value(row)),
            Kind::I8(v) => Value::Int(i64::from(v[row])),
            Kind::I16(v) => Value::Int(i64::from(v[row])),
            Kind::I32(v) => Value::Int(i64::from(v[row])),
            Kind::I64(v) => Value::Int(v[row]),
            Kind::U8(v) => Value::UInt(u64::from(v[row])),
            Kind::U16(v) => Value::UInt(u64::from(v[row])),
            Kind::U32(v) => Value::UInt(u64::from(v[row])),
            Kind::U64(v) => Value::UInt(v[row]),
            Kind::F16(a) => float(a.value(row).to_f64()),
            Kind::F32(v) => float(f64::from(v[row])),
            Kind::F64(v) => float(v[row]),
            Kind::Utf8(a) => Value::Str(a.value(row)),
            Kind::LargeUtf8(a) => Value::Str(a.value(row)),
            Kind::Utf8View(a) => Value::Str(a.value(row)),
            Kind::Timestamp(v, ticks_per_second) => {
                let (secs, nanos) = split_ticks(v[row], *ticks_per_second);
                Value::Timestamp { secs, nanos }
            }
            Kind::Date32(v) => Value::Date(i64::from(v[row])),
            Kind::Date64(v) => Value::Date(v[row].div_euclid(86_400_000)),
            Kind::Dictionary { keys, values } => values.value(keys[row]),
            Kind::Number(f) => Value::Number(f.value(row).to_string()),
            Kind::Other(f) => Value::Text(f.value(row).to_string()),
        }
    }
}

fn float(v: f64) -> Value<'static> {
    if v.is_finite() {
        Value::Float(v)
    } else {
        Value::Null
    }
}

fn formatter(array: &dyn Array) -> Result<ArrayFormatter<'_>, ArrowError> {
    const OPTIONS: FormatOptions<'static> = FormatOptions::new();
    ArrayFormatter::try_new(array, &OPTIONS)
}
