//! Arc's columnar MessagePack object: `{"m": name, "columns": {col: [values]}, "tags": [..]}`.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, RecordBatch, StringDictionaryBuilder,
    TimestampNanosecondArray, UInt64Builder,
};
use arrow::compute::cast;
use arrow::datatypes::DataType;

use super::cursor::{Cursor, Token};
use super::time::{float_to_ns, int_to_ns};
use crate::error::{Error, Result};
use crate::ids::validate_measurement_name;
use crate::limits::{ByteBudget, FileBuckets, COLUMN_BYTES_FIXED};
use crate::schema::{canonical_schema, ColumnKind, FieldType, TagKey, TIME_COLUMN};

/// Bytes charged per value decoded, whatever its type: the widest Arrow slot (a number
/// or a timestamp), so the charge bounds what the builders allocate. Strings add their
/// length.
const VALUE_BYTES_MAX: usize = 8;

/// The write's limits as a columnar object sees them.
pub(crate) struct Limits<'l> {
    /// Most columns a measurement may have, `time` included.
    pub(crate) columns_max: usize,
    /// The files the write's rows make at flush so far.
    pub(crate) files: &'l mut FileBuckets,
    /// The write's decoded bytes so far.
    pub(crate) budget: &'l mut ByteBudget,
}

/// Values of one column as decoded, before it is known whether strings are tags.
enum Values {
    AllNull(usize),
    Float(Float64Builder),
    Integer(Int64Builder),
    UInteger(UInt64Builder),
    Boolean(BooleanBuilder),
    Strings(StringDictionaryBuilder<TagKey>),
}

struct DecodedColumn {
    name: String,
    values: Values,
}

/// The `"columns"` map of a columnar object, decoded.
#[derive(Default)]
pub(crate) struct Columns {
    columns: Vec<DecodedColumn>,
    time: Option<Vec<i64>>,
    rows: Option<(usize, String)>,
}

impl Columns {
    /// Whether a `time` column was given.
    pub(crate) fn has_time(&self) -> bool {
        self.time.is_some()
    }

    /// Rows of the object (0 before any column).
    pub(crate) fn rows(&self) -> usize {
        self.rows.as_ref().map_or(0, |(n, _)| *n)
    }
}

/// Reads a `"columns"` map; the cursor is at the map's header. Every value is charged to
/// the write's byte budget as it is decoded, every timestamp's hour is counted, and a
/// column past `columns_max` refuses the write before it is read.
pub(crate) fn read_columns(
    cur: &mut Cursor<'_>,
    out: &mut Columns,
    limits: Limits<'_>,
) -> Result<()> {
    let n = match cur.token()? {
        Token::Map(n) => n,
        other => {
            return Err(cur.error(format!(
                "\"columns\" must be a map, got {}",
                other.type_name()
            )))
        }
    };
    for _ in 0..n {
        let name = cur.string("column name")?.to_string();
        if out.columns.iter().any(|c| c.name == name) || (name == TIME_COLUMN && out.time.is_some())
        {
            return Err(cur.error(format!("column {name:?} appears twice")));
        }
        // `time` is always a column, given or not.
        let columns = 1 + out.columns.len() + usize::from(name != TIME_COLUMN);
        if columns > limits.columns_max {
            return Err(Error::LimitExceeded {
                limit: "columns_per_table_max",
                value: columns as u64,
                max: limits.columns_max as u64,
                detail: format!(
                    "column {name:?} makes a columnar object {columns} columns wide (time, \
                     tags and fields); write fewer distinct fields"
                ),
            });
        }
        let len = match cur.token()? {
            Token::Array(len) => len,
            other => {
                return Err(cur.error(format!(
                    "column {name:?} must be an array, got {}",
                    other.type_name()
                )))
            }
        };
        match &out.rows {
            Some((expected, first)) if *expected != len => {
                return Err(cur.error(format!(
                    "column {name:?} has {len} values but column {first:?} has {expected}; all columns must have equal length"
                )))
            }
            Some(_) => {}
            None => out.rows = Some((len, name.clone())),
        }
        limits.budget.charge(COLUMN_BYTES_FIXED + name.len())?;
        if name == TIME_COLUMN {
            out.time = Some(decode_time(cur, len, limits.files, limits.budget)?);
        } else {
            let values = decode_values(cur, &name, len, limits.budget)?;
            out.columns.push(DecodedColumn { name, values });
        }
    }
    Ok(())
}

/// Reads a `"tags"` array of column names; the cursor is past the array header.
pub(crate) fn read_tag_names(cur: &mut Cursor<'_>, n: usize) -> Result<Vec<String>> {
    let mut names = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        names.push(cur.string("tag name")?.to_string());
    }
    Ok(names)
}

/// Turns decoded columns into the measurement's batch.
pub(crate) fn finish_columnar(
    measurement: String,
    parts: Columns,
    tag_names: Option<&[String]>,
    now_ns: i64,
) -> Result<(String, RecordBatch)> {
    validate_measurement_name(&measurement)?;
    let (rows, _) = parts
        .rows
        .ok_or_else(|| Error::InvalidPayload(format!("{measurement}: \"columns\" is empty")))?;
    if rows == 0 {
        return Err(Error::InvalidPayload(format!(
            "{measurement}: columns hold no rows"
        )));
    }
    let time = parts.time.unwrap_or_else(|| vec![now_ns; rows]);
    if let Some(tags) = tag_names {
        if let Some(missing) = tags
            .iter()
            .find(|t| !parts.columns.iter().any(|c| &c.name == *t))
        {
            return Err(Error::InvalidPayload(format!(
                "{measurement}: tag {missing:?} is not a column"
            )));
        }
    }
    build_batch(measurement, time, parts.columns, tag_names)
}

fn build_batch(
    measurement: String,
    time: Vec<i64>,
    columns: Vec<DecodedColumn>,
    tag_names: Option<&[String]>,
) -> Result<(String, RecordBatch)> {
    let rows = time.len();
    let mut kinds: Vec<(String, ColumnKind, ArrayRef)> = Vec::with_capacity(columns.len());
    for DecodedColumn { name, values } in columns {
        let listed_tag = tag_names.map(|t| t.contains(&name));
        let (kind, array): (ColumnKind, ArrayRef) = match values {
            Values::Strings(mut b) => {
                let dict = Arc::new(b.finish()) as ArrayRef;
                if listed_tag.unwrap_or(true) {
                    (ColumnKind::Tag, dict)
                } else {
                    (
                        ColumnKind::Field(FieldType::String),
                        cast(&dict, &DataType::Utf8)?,
                    )
                }
            }
            Values::AllNull(n) => {
                // A column of nils carries no type; it is left out (null is the default).
                debug_assert_eq!(n, rows);
                continue;
            }
            other if listed_tag == Some(true) => {
                let got = match other {
                    Values::Float(_) => "float",
                    Values::Integer(_) | Values::UInteger(_) => "integer",
                    _ => "boolean",
                };
                return Err(Error::InvalidPayload(format!(
                    "{measurement}: tag column {name:?} must hold strings, got {got}"
                )));
            }
            Values::Float(mut b) => (ColumnKind::Field(FieldType::Float), Arc::new(b.finish())),
            Values::Integer(mut b) => (ColumnKind::Field(FieldType::Integer), Arc::new(b.finish())),
            Values::UInteger(mut b) => {
                (ColumnKind::Field(FieldType::UInteger), Arc::new(b.finish()))
            }
            Values::Boolean(mut b) => (ColumnKind::Field(FieldType::Boolean), Arc::new(b.finish())),
        };
        debug_assert_eq!(array.len(), rows);
        kinds.push((name, kind, array));
    }
    if !kinds
        .iter()
        .any(|(_, k, _)| matches!(k, ColumnKind::Field(_)))
    {
        return Err(Error::InvalidPayload(format!(
            "{measurement}: a row needs at least one field"
        )));
    }
    let schema = canonical_schema(kinds.iter().map(|(n, k, _)| (n.as_str(), *k)));
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    arrays.push(Arc::new(TimestampNanosecondArray::from(time)));
    for field in schema.fields().iter().skip(1) {
        let position = kinds
            .iter()
            .position(|(n, _, _)| n == field.name())
            .ok_or_else(|| Error::InvalidPayload(format!("column {:?} lost", field.name())))?;
        arrays.push(kinds.swap_remove(position).2);
    }
    Ok((measurement, RecordBatch::try_new(schema, arrays)?))
}

/// How many values to reserve room for: the declared length cannot be trusted beyond
/// the bytes left (each value takes at least one) nor beyond the byte budget.
fn capacity(cur: &Cursor<'_>, len: usize, budget: &ByteBudget) -> usize {
    len.min(cur.remaining())
        .min(budget.remaining() / VALUE_BYTES_MAX)
}

fn decode_time(
    cur: &mut Cursor<'_>,
    len: usize,
    files: &mut FileBuckets,
    budget: &mut ByteBudget,
) -> Result<Vec<i64>> {
    let mut out = Vec::with_capacity(capacity(cur, len, budget));
    for row in 0..len {
        budget.charge(VALUE_BYTES_MAX)?;
        let ns = match cur.token()? {
            Token::Int(v) => int_to_ns(v)?,
            Token::Float(v) => float_to_ns(v)?,
            other => {
                return Err(cur.error(format!(
                    "column \"time\" row {row}: expected an integer timestamp, got {}",
                    other.type_name()
                )))
            }
        };
        files.insert(ns)?;
        out.push(ns);
    }
    Ok(out)
}

fn decode_values(
    cur: &mut Cursor<'_>,
    name: &str,
    len: usize,
    budget: &mut ByteBudget,
) -> Result<Values> {
    let mut values = Values::AllNull(0);
    let capacity = capacity(cur, len, budget);
    for row in 0..len {
        let token = cur.token()?;
        let string_bytes = match token {
            Token::Str(s) => s.len(),
            _ => 0,
        };
        budget.charge(VALUE_BYTES_MAX + string_bytes)?;
        push(&mut values, token, capacity).map_err(|expected| {
            cur.error(format!(
                "column {name:?} row {row}: {} mixed with {expected}; a column holds one type",
                token.type_name()
            ))
        })?;
    }
    Ok(values)
}

/// Appends one token in place (the builders are large: moving one per value was a
/// twentieth of a node's CPU during ingest); on a type mix returns the type the column
/// already has.
fn push(
    values: &mut Values,
    token: Token<'_>,
    capacity: usize,
) -> std::result::Result<(), &'static str> {
    match (&mut *values, token) {
        (Values::Float(b), Token::Float(x)) => b.append_value(x),
        (Values::Float(b), Token::Int(x)) => b.append_value(x as f64),
        (Values::Float(b), Token::UInt(x)) => b.append_value(x as f64),
        (Values::Integer(b), Token::Int(x)) => b.append_value(x),
        (Values::UInteger(b), Token::Int(x)) if x >= 0 => b.append_value(x as u64),
        (Values::UInteger(b), Token::UInt(x)) => b.append_value(x),
        (Values::Boolean(b), Token::Bool(x)) => b.append_value(x),
        (Values::Strings(b), Token::Str(s)) => {
            if b.append(s).is_err() {
                return Err("too many distinct strings");
            }
        }
        (Values::AllNull(n), Token::Nil) => *n += 1,
        (v, Token::Nil) => append_nulls(v, 1),
        (Values::AllNull(n), first) => {
            let nulls = *n;
            let mut typed = match first {
                Token::Float(_) => Values::Float(Float64Builder::with_capacity(capacity)),
                Token::Int(_) => Values::Integer(Int64Builder::with_capacity(capacity)),
                Token::UInt(_) => Values::UInteger(UInt64Builder::with_capacity(capacity)),
                Token::Bool(_) => Values::Boolean(BooleanBuilder::with_capacity(capacity)),
                // Not `new()`: it reserves 1,024 keys and values whatever the length.
                Token::Str(_) => {
                    Values::Strings(StringDictionaryBuilder::with_capacity(capacity, 0, 0))
                }
                _ => return Err("no supported type"),
            };
            append_nulls(&mut typed, nulls);
            *values = typed;
            return push(values, first, capacity);
        }
        (Values::Integer(b), Token::Float(x)) => {
            // Writers that do not distinguish 1 from 1.0: the column becomes float.
            let ints = b.finish();
            let mut f = Float64Builder::with_capacity(capacity);
            f.extend(ints.iter().map(|v| v.map(|v| v as f64)));
            f.append_value(x);
            *values = Values::Float(f);
        }
        (Values::Integer(b), Token::UInt(x)) => {
            let ints = b.finish();
            if ints.iter().flatten().any(|v| v < 0) {
                return Err("negative integers (values span more than 64 bits)");
            }
            let mut u = UInt64Builder::with_capacity(capacity);
            u.extend(ints.iter().map(|v| v.map(|v| v as u64)));
            u.append_value(x);
            *values = Values::UInteger(u);
        }
        (Values::Float(_), _) => return Err("float"),
        (Values::Integer(_), _) | (Values::UInteger(_), _) => return Err("integer"),
        (Values::Boolean(_), _) => return Err("boolean"),
        (Values::Strings(_), _) => return Err("string"),
    }
    Ok(())
}

fn append_nulls(values: &mut Values, n: usize) {
    match values {
        Values::AllNull(count) => *count += n,
        Values::Float(b) => b.append_nulls(n),
        Values::Integer(b) => b.append_nulls(n),
        Values::UInteger(b) => b.append_nulls(n),
        Values::Boolean(b) => b.append_nulls(n),
        Values::Strings(b) => b.append_nulls(n),
    }
}
