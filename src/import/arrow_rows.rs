//! CSV and Parquet files: read as Arrow record batches (arrow's CSV reader infers the
//! columns' types from the first rows), each batch written as line protocol with
//! nanosecond timestamps and sent like a line-protocol file's chunk. String columns
//! are tags, as in MessagePack columns without a `tags` list; numbers and booleans are
//! fields; `time` is the timestamp (a timestamp column, integers in `--precision`
//! units, or RFC 3339 text).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, Int64Type, TimeUnit, UInt64Type};

use super::check::Acked;
use super::resume::Resume;
use super::send::Sender;
use super::{ImportArgs, Outcome};

/// Line-protocol bytes a row takes, roughly: sizes batches to `--chunk-bytes`.
const ROW_BYTES_GUESS: usize = 100;
/// Rows read to infer a CSV file's column types.
const CSV_INFER_ROWS: usize = 10_000;

/// Reads `file` (CSV or Parquet) from its resume point (in batches) and sends it.
pub(super) async fn load(
    args: &ImportArgs,
    sender: &Sender,
    file: &Path,
    csv: bool,
    measurement: &str,
    acked: &mut Acked,
) -> Result<Outcome> {
    let mut resume = Resume::open(file, &sender.database, args.restart)?;
    let size = std::fs::metadata(file)?.len();
    let batch_rows = (args.chunk_bytes / ROW_BYTES_GUESS).max(1);
    let batches = read_batches(file, csv, batch_rows)?;
    let progress = super::check::bar(file, size, 0);
    let key = super::line_protocol::file_key(file, size);
    let unit_ns = super::unit_ns(&args.precision);
    let mut outcome = Outcome::default();
    for (index, batch) in batches.enumerate() {
        let index = index as u64;
        let batch = batch.with_context(|| format!("reading batch {index}"))?;
        if index < resume.done() {
            continue;
        }
        let (text, empty) = to_line_protocol(&batch, measurement, unit_ns)?;
        outcome.rejected += empty;
        if !text.is_empty() {
            outcome.rejected += super::line_protocol::send_chunk(
                sender,
                "ns",
                &key,
                index,
                text.into_bytes(),
                acked,
            )
            .await?;
        }
        resume.advance(index + 1)?;
        progress.set_position(size.min((index + 1) * batch_rows as u64 * ROW_BYTES_GUESS as u64));
    }
    progress.finish();
    resume.finish()?;
    Ok(outcome)
}

type Batches = Box<dyn Iterator<Item = std::result::Result<RecordBatch, arrow::error::ArrowError>>>;

fn read_batches(file: &Path, csv: bool, batch_rows: usize) -> Result<Batches> {
    let open = || std::fs::File::open(file).with_context(|| file.display().to_string());
    if csv {
        let format = arrow::csv::reader::Format::default().with_header(true);
        let (schema, _) = format
            .infer_schema(open()?, Some(CSV_INFER_ROWS))
            .context("reading the CSV header and column types")?;
        let reader = arrow::csv::ReaderBuilder::new(Arc::new(schema))
            .with_format(format)
            .with_batch_size(batch_rows)
            .build(open()?)?;
        Ok(Box::new(reader))
    } else {
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(open()?)?
                .with_batch_size(batch_rows)
                .build()?;
        Ok(Box::new(reader))
    }
}

/// A column as line protocol sees it.
enum Column {
    Tag(ArrayRef),
    Int(ArrayRef),
    UInt(ArrayRef),
    Float(ArrayRef),
    Bool(ArrayRef),
}

/// The batch as line protocol (timestamps in ns), and how many rows had no field value
/// (line protocol cannot carry such a row; each is reported).
fn to_line_protocol(batch: &RecordBatch, measurement: &str, unit_ns: i64) -> Result<(String, u64)> {
    let schema = batch.schema();
    let time_at = schema
        .index_of("time")
        .map_err(|_| anyhow::anyhow!("the file has no `time` column"))?;
    let time = time_ns(batch.column(time_at), unit_ns)?;
    let mut columns: Vec<(String, Column)> = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        if i == time_at {
            continue;
        }
        let key = escape(field.name(), &[',', '=', ' ']);
        columns.push((key, classify(batch.column(i), field.name())?));
    }
    let name = escape(measurement, &[',', ' ']);
    let mut out = String::with_capacity(batch.num_rows() * ROW_BYTES_GUESS);
    let mut empty = 0u64;
    let mut line = String::new();
    for (row, t) in time.iter().enumerate() {
        let Some(t) = t else {
            eprintln!("row {row} of a batch has no time: not sent");
            empty += 1;
            continue;
        };
        line.clear();
        line.push_str(&name);
        for (key, column) in &columns {
            if let Column::Tag(a) = column {
                if a.is_valid(row) {
                    let value = a.as_string::<i32>().value(row);
                    if !value.is_empty() {
                        let _ = write!(line, ",{key}={}", escape(value, &[',', '=', ' ']));
                    }
                }
            }
        }
        let mut separator = ' ';
        for (key, column) in &columns {
            let value = match column {
                Column::Tag(_) => continue,
                Column::Int(a) if a.is_valid(row) => {
                    format!("{}i", a.as_primitive::<Int64Type>().value(row))
                }
                Column::UInt(a) if a.is_valid(row) => {
                    format!("{}u", a.as_primitive::<UInt64Type>().value(row))
                }
                Column::Float(a) if a.is_valid(row) => {
                    let v = a.as_primitive::<Float64Type>().value(row);
                    if !v.is_finite() {
                        continue;
                    }
                    format!("{v:?}")
                }
                Column::Bool(a) if a.is_valid(row) => a.as_boolean().value(row).to_string(),
                _ => continue,
            };
            line.push(separator);
            separator = ',';
            let _ = write!(line, "{key}={value}");
        }
        if separator == ' ' {
            eprintln!("row {row} of a batch has no field value: not sent");
            empty += 1;
            continue;
        }
        let _ = writeln!(line, " {t}");
        out.push_str(&line);
    }
    Ok((out, empty))
}

fn classify(array: &ArrayRef, name: &str) -> Result<Column> {
    use arrow::compute::cast;
    let column = match array.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Dictionary(_, _) => {
            Column::Tag(cast(array, &DataType::Utf8)?)
        }
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            Column::Int(cast(array, &DataType::Int64)?)
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            Column::UInt(cast(array, &DataType::UInt64)?)
        }
        DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal128(_, _)
        | DataType::Decimal256(_, _) => Column::Float(cast(array, &DataType::Float64)?),
        DataType::Boolean => Column::Bool(array.clone()),
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => {
            let ns = cast(array, &DataType::Timestamp(TimeUnit::Nanosecond, None))?;
            Column::Int(cast(&ns, &DataType::Int64)?)
        }
        other => bail!("column {name:?} has type {other}, which line protocol cannot carry"),
    };
    Ok(column)
}

/// The `time` column in ns: a timestamp, integers in `unit_ns`, or RFC 3339 text.
fn time_ns(array: &ArrayRef, unit_ns: i64) -> Result<Vec<Option<i64>>> {
    use arrow::compute::cast;
    let ns = match array.data_type() {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::UInt32 => {
            let ints = cast(array, &DataType::Int64)?;
            return Ok(ints
                .as_primitive::<Int64Type>()
                .iter()
                .map(|v| v.and_then(|v| v.checked_mul(unit_ns)))
                .collect());
        }
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => {
            cast(array, &DataType::Timestamp(TimeUnit::Nanosecond, None))?
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let text = cast(array, &DataType::Utf8)?;
            let mut out = Vec::with_capacity(text.len());
            for (row, value) in text.as_string::<i32>().iter().enumerate() {
                out.push(match value {
                    Some(v) => Some(
                        chrono::DateTime::parse_from_rfc3339(v.trim())
                            .with_context(|| format!("row {row}: time {v:?} is not RFC 3339"))?
                            .timestamp_nanos_opt()
                            .with_context(|| format!("row {row}: time {v:?} is out of range"))?,
                    ),
                    None => None,
                });
            }
            return Ok(out);
        }
        other => bail!("column `time` has type {other}: a timestamp, integers or RFC 3339 text"),
    };
    Ok(ns
        .as_primitive::<arrow::datatypes::TimestampNanosecondType>()
        .iter()
        .collect())
}

/// `s` with `special` characters (and backslashes before them) escaped for line
/// protocol.
fn escape(s: &str, special: &[char]) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if special.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{BooleanArray, Float64Array, Int64Array, StringArray};

    #[test]
    fn rows_become_lines_with_tags_fields_and_nanoseconds() {
        let batch = RecordBatch::try_from_iter([
            (
                "time",
                Arc::new(Int64Array::from(vec![Some(1), Some(2), None])) as ArrayRef,
            ),
            (
                "host",
                Arc::new(StringArray::from(vec![Some("a b"), None, Some("c")])) as ArrayRef,
            ),
            (
                "v",
                Arc::new(Float64Array::from(vec![Some(1.5), None, Some(2.0)])) as ArrayRef,
            ),
            (
                "n",
                Arc::new(Int64Array::from(vec![Some(7), None, Some(8)])) as ArrayRef,
            ),
            (
                "ok",
                Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])) as ArrayRef,
            ),
        ])
        .unwrap();
        let (text, empty) = to_line_protocol(&batch, "my m", 1_000).unwrap();
        // Row 2 has no field value, row 3 no time: both reported, not sent.
        assert_eq!(text, "my\\ m,host=a\\ b v=1.5,n=7i,ok=true 1000\n");
        assert_eq!(empty, 2);
    }
}
