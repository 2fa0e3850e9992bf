//! Arc's row MessagePack object: `{"m": name, "t": ts, "tags": {..}, "fields": {..}, "h": host}`.

use std::collections::HashMap;

use super::cursor::{Cursor, Token};
use super::time::{float_to_ns, int_to_ns};
use crate::error::{Error, Result};
use crate::ids::validate_measurement_name;
use crate::limits::ByteBudget;
use crate::rows::{FieldValue, RowBatchBuilder};

/// One row object, borrowed from the payload.
#[derive(Default)]
pub(crate) struct Row<'a> {
    pub(crate) time: Option<i64>,
    pub(crate) tags: Vec<(&'a str, &'a str)>,
    pub(crate) fields: Vec<(&'a str, FieldValue<'a>)>,
    pub(crate) has_fields: bool,
}

/// Reads a `"t"` value.
pub(crate) fn read_time(cur: &mut Cursor<'_>) -> Result<i64> {
    match cur.token()? {
        Token::Int(v) => int_to_ns(v),
        Token::Float(v) => float_to_ns(v),
        other => Err(cur.error(format!(
            "\"t\" must be an integer timestamp, got {}",
            other.type_name()
        ))),
    }
}

/// Reads a `"tags"` map of a row; the cursor is past the map header.
pub(crate) fn read_tags<'a>(cur: &mut Cursor<'a>, n: usize, row: &mut Row<'a>) -> Result<()> {
    for _ in 0..n {
        let key = cur.string("tag key")?;
        match cur.token()? {
            Token::Str(v) => row.tags.push((key, v)),
            Token::Nil => {}
            other => {
                return Err(cur.error(format!(
                    "tag {key:?} must be a string, got {}",
                    other.type_name()
                )))
            }
        }
    }
    Ok(())
}

/// Reads a `"fields"` map of a row.
pub(crate) fn read_fields<'a>(cur: &mut Cursor<'a>, row: &mut Row<'a>) -> Result<()> {
    let n = match cur.token()? {
        Token::Map(n) => n,
        other => {
            return Err(cur.error(format!(
                "\"fields\" must be a map, got {}",
                other.type_name()
            )))
        }
    };
    row.has_fields = true;
    for _ in 0..n {
        let key = cur.string("field key")?;
        let value = match cur.token()? {
            Token::Float(v) => FieldValue::Float(v),
            Token::Int(v) => FieldValue::Integer(v),
            Token::UInt(v) => FieldValue::UInteger(v),
            Token::Bool(v) => FieldValue::Boolean(v),
            Token::Str(v) => FieldValue::String(v),
            Token::Nil => continue,
            other => {
                return Err(cur.error(format!(
                    "field {key:?} has unsupported type {}",
                    other.type_name()
                )))
            }
        };
        row.fields.push((key, value));
    }
    Ok(())
}

/// Where row objects go: one builder per measurement, in first-seen order, and the
/// write's byte budget their padded size is charged to.
pub(crate) struct Target<'t> {
    pub(crate) builders: &'t mut HashMap<String, RowBatchBuilder>,
    pub(crate) order: &'t mut Vec<String>,
    pub(crate) budget: &'t mut ByteBudget,
    pub(crate) columns_max: usize,
}

/// Appends a finished row to its measurement's builder.
pub(crate) fn push_row(
    target: Target<'_>,
    measurement: String,
    row: Row<'_>,
    now_ns: i64,
    row_number: usize,
) -> Result<()> {
    validate_measurement_name(&measurement)?;
    let builder = match target.builders.get_mut(&measurement) {
        Some(b) => b,
        None => {
            target.order.push(measurement.clone());
            target
                .builders
                .entry(measurement.clone())
                .or_insert_with(|| {
                    RowBatchBuilder::new(measurement.clone(), true)
                        .with_columns_max(target.columns_max)
                })
        }
    };
    let before = builder.bytes_when_finished();
    builder
        .push_row(row.time.unwrap_or(now_ns), &row.tags, &row.fields)
        .map_err(|e| Error::InvalidPayload(format!("row {row_number} ({measurement}): {e}")))?;
    target
        .budget
        .recharge(before, builder.bytes_when_finished())
}
