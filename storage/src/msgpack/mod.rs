//! Arc's MessagePack write format, decoded straight into Arrow.
//!
//! Accepted shapes (API.md): a columnar object `{"m", "columns", "tags"?}`, a row object
//! `{"m", "t", "tags", "fields", "h"}`, `{"batch": [objects]}`, or a top-level array of
//! objects. Any error rejects the whole payload with a message naming the column or row,
//! or the [`WriteLimits`] limit it crosses.

mod columnar;
mod cursor;
mod row;
mod time;

use std::collections::{HashMap, HashSet};

use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::limits::{ByteBudget, FileBuckets, WriteLimits};
use crate::rows::RowBatchBuilder;
use crate::schema::{MeasurementSchema, TIME_COLUMN};
use cursor::{Cursor, Token};

/// Most objects one payload may hold (columnar objects or rows).
const OBJECTS_MAX: usize = 10_000_000;

/// Decodes a MessagePack payload into one batch per measurement part, in payload order.
/// `now_ns` stamps rows that carry no time. `stored` gives a measurement's current
/// schema, whose columns count towards [`WriteLimits::columns_per_table_max`]; every
/// limit crossed refuses the whole payload ([`Error::LimitExceeded`], or
/// [`Error::InvalidPayload`] naming the limit for a row that would widen its table).
pub fn decode_msgpack(
    payload: &[u8],
    now_ns: i64,
    limits: &WriteLimits,
    stored: &dyn Fn(&str) -> Option<MeasurementSchema>,
) -> Result<Vec<(String, RecordBatch)>> {
    let mut decoder = Decoder {
        now_ns,
        limits: *limits,
        files: FileBuckets::new(limits),
        budget: ByteBudget::new(limits),
        measurements: HashSet::new(),
        out: Vec::new(),
        builders: HashMap::new(),
        order: Vec::new(),
        rows: 0,
    };
    let mut cur = Cursor::new(payload);
    let token = cur.token()?;
    decoder.item(&mut cur, token, 0)?;
    if !cur.at_end() {
        return Err(cur.error("trailing bytes after the payload"));
    }
    for name in decoder.order {
        if let Some(builder) = decoder.builders.remove(&name) {
            if let Some(batch) = builder.finish()? {
                decoder.out.push((name, batch));
            }
        }
    }
    if decoder.out.is_empty() {
        return Err(Error::InvalidPayload(
            "msgpack: payload holds no rows".into(),
        ));
    }
    decoder.files.finish()?;
    check_widths(&decoder.out, limits, stored)?;
    Ok(decoder.out)
}

/// Checks every measurement's width with all its parts of the payload (row objects and
/// each columnar object) and its stored columns together.
fn check_widths(
    out: &[(String, RecordBatch)],
    limits: &WriteLimits,
    stored: &dyn Fn(&str) -> Option<MeasurementSchema>,
) -> Result<()> {
    let max = limits.columns_per_table_max;
    let mut tables: HashMap<&str, (Option<MeasurementSchema>, HashSet<String>)> = HashMap::new();
    for (measurement, batch) in out {
        let (schema, new) = tables
            .entry(measurement.as_str())
            .or_insert_with(|| (stored(measurement), HashSet::new()));
        for field in batch.schema().fields() {
            let name = field.name();
            let known =
                name == TIME_COLUMN || schema.as_ref().is_some_and(|s| s.kind(name).is_some());
            if !known && !new.contains(name) {
                new.insert(name.clone());
            }
        }
        let total = schema.as_ref().map_or(1, |s| s.columns_len()) + new.len();
        if total > max && !new.is_empty() {
            return Err(Error::LimitExceeded {
                limit: "columns_per_table_max",
                value: total as u64,
                max: max as u64,
                detail: format!(
                    "measurement {measurement:?} would have {total} columns (time, tags and \
                     fields, those already stored included); write fewer distinct fields"
                ),
            });
        }
    }
    Ok(())
}

struct Decoder {
    now_ns: i64,
    limits: WriteLimits,
    /// The files the rows so far make at flush, against `write_files_max`.
    files: FileBuckets,
    /// Bytes decoded so far, against `write_decoded_bytes_max`.
    budget: ByteBudget,
    /// The distinct measurements named so far, against `measurements_per_write_max`.
    measurements: HashSet<String>,
    out: Vec<(String, RecordBatch)>,
    builders: HashMap<String, RowBatchBuilder>,
    order: Vec<String>,
    rows: usize,
}

impl Decoder {
    fn item<'a>(&mut self, cur: &mut Cursor<'a>, token: Token<'a>, depth: usize) -> Result<()> {
        match token {
            Token::Map(n) => self.object(cur, n, depth),
            Token::Array(n) if depth == 0 => self.list(cur, n, depth),
            other => Err(cur.error(format!("expected an object, got {}", other.type_name()))),
        }
    }

    fn list(&mut self, cur: &mut Cursor<'_>, n: usize, depth: usize) -> Result<()> {
        if n > OBJECTS_MAX {
            return Err(cur.error(format!("more than {OBJECTS_MAX} objects")));
        }
        for _ in 0..n {
            let t = cur.token()?;
            self.item(cur, t, depth + 1)?;
        }
        Ok(())
    }

    fn object<'a>(&mut self, cur: &mut Cursor<'a>, entries: usize, depth: usize) -> Result<()> {
        let mut measurement: Option<String> = None;
        let mut columns: Option<columnar::Columns> = None;
        let mut tag_names: Option<Vec<String>> = None;
        let mut row = row::Row::default();
        let mut host: Option<&'a str> = None;
        let mut batch_seen = false;
        for _ in 0..entries {
            let key = cur.string("object key")?;
            match key {
                "m" => measurement = Some(cur.string("\"m\"")?.to_string()),
                "columns" => {
                    let parts = columns.get_or_insert_with(Default::default);
                    let limits = columnar::Limits {
                        columns_max: self.limits.columns_per_table_max,
                        files: &mut self.files,
                        budget: &mut self.budget,
                    };
                    columnar::read_columns(cur, parts, limits)?;
                }
                "tags" => match cur.token()? {
                    Token::Array(n) => tag_names = Some(columnar::read_tag_names(cur, n)?),
                    Token::Map(n) => row::read_tags(cur, n, &mut row)?,
                    Token::Nil => {}
                    other => {
                        return Err(cur.error(format!(
                            "\"tags\" must be an array or a map, got {}",
                            other.type_name()
                        )))
                    }
                },
                "fields" => row::read_fields(cur, &mut row)?,
                "t" => row.time = Some(row::read_time(cur)?),
                "h" => host = Some(cur.string("\"h\"")?),
                "batch" if depth == 0 => {
                    batch_seen = true;
                    match cur.token()? {
                        Token::Array(n) => self.list(cur, n, depth)?,
                        other => {
                            return Err(cur.error(format!(
                                "\"batch\" must be an array, got {}",
                                other.type_name()
                            )))
                        }
                    }
                }
                _ => {
                    let t = cur.token()?;
                    cur.skip(t)?;
                }
            }
        }
        if let Some(parts) = columns {
            let measurement =
                measurement.ok_or_else(|| cur.error("columnar object lacks \"m\""))?;
            self.count_measurement(&measurement)?;
            if !parts.has_time() {
                // Rows without time are stamped with `now_ns`, in one hour.
                self.files.insert(self.now_ns)?;
                self.budget.charge(parts.rows().saturating_mul(8))?;
            }
            let batch =
                columnar::finish_columnar(measurement, parts, tag_names.as_deref(), self.now_ns)?;
            self.out.push(batch);
            return Ok(());
        }
        if row.has_fields {
            let measurement = measurement.ok_or_else(|| cur.error("row object lacks \"m\""))?;
            self.count_measurement(&measurement)?;
            self.files.insert(row.time.unwrap_or(self.now_ns))?;
            if let Some(h) = host {
                if !row.tags.iter().any(|(k, _)| *k == "host") {
                    row.tags.push(("host", h));
                }
            }
            self.rows += 1;
            if self.rows > OBJECTS_MAX {
                return Err(cur.error(format!("more than {OBJECTS_MAX} rows")));
            }
            return row::push_row(
                row::Target {
                    builders: &mut self.builders,
                    order: &mut self.order,
                    budget: &mut self.budget,
                    columns_max: self.limits.columns_per_table_max,
                },
                measurement,
                row,
                self.now_ns,
                self.rows,
            );
        }
        if batch_seen {
            return Ok(());
        }
        Err(cur.error("object has neither \"columns\", \"fields\" nor \"batch\""))
    }

    /// Counts a measurement against `measurements_per_write_max`.
    fn count_measurement(&mut self, measurement: &str) -> Result<()> {
        if self.measurements.contains(measurement) {
            return Ok(());
        }
        if self.measurements.len() >= self.limits.measurements_per_write_max {
            return Err(self.limits.too_many_measurements(measurement));
        }
        self.measurements.insert(measurement.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests;
