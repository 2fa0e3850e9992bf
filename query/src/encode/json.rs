//! Arc's JSON envelope, written directly (no intermediate JSON tree), batch by batch:
//!
//! `{"success":true,"columns":[...],"data":[[...],...],"row_count":n,"execution_time_ms":f,"timestamp":"..."}`
//!
//! Timestamps are RFC 3339 strings in UTC with Go's RFC3339Nano fraction, dictionary
//! strings are plain strings, NULL, NaN and infinities are `null`, integers are JSON
//! numbers at full 64-bit precision.

use std::fmt::Display;
use std::time::Instant;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use super::cell::{ColumnReader, Value};
use super::time::{write_date, write_rfc3339_nano};
use super::BatchEncoder;
use crate::engine::QueryOutput;
use crate::error::Error;

/// Encodes a whole result in Arc's envelope, stamped with the current time.
pub fn arc_json(output: &QueryOutput, execution_time_ms: f64) -> Result<Vec<u8>, Error> {
    let now = chrono::Utc::now();
    arc_json_at(
        output,
        execution_time_ms,
        now.timestamp(),
        now.timestamp_subsec_nanos(),
    )
}

/// [`arc_json`] with the envelope's `timestamp` given (seconds and nanoseconds since the
/// Unix epoch), for reproducible output.
pub fn arc_json_at(
    output: &QueryOutput,
    execution_time_ms: f64,
    now_secs: i64,
    now_nanos: u32,
) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(256);
    let mut writer = ArcJsonWriter::begin(&output.schema, &mut out);
    for batch in &output.batches {
        writer.write_batch(batch, &mut out)?;
    }
    writer.finish(execution_time_ms, now_secs, now_nanos, &mut out);
    Ok(out)
}

/// Writes Arc's envelope incrementally: [`begin`](Self::begin) once, then
/// [`write_batch`](Self::write_batch) per batch (flush `out` between calls to stream),
/// then [`finish`](Self::finish).
#[derive(Debug)]
pub struct ArcJsonWriter {
    row_count: usize,
}

impl ArcJsonWriter {
    /// Writes everything before the first row.
    pub fn begin(schema: &Schema, out: &mut Vec<u8>) -> Self {
        out.extend_from_slice(b"{\"success\":true,\"columns\":[");
        for (i, field) in schema.fields().iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_string(out, field.name());
        }
        out.extend_from_slice(b"],\"data\":[");
        ArcJsonWriter { row_count: 0 }
    }

    /// Writes the rows of `batch`, one JSON array each.
    pub fn write_batch(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), Error> {
        let readers = readers(batch)?;
        for row in 0..batch.num_rows() {
            if self.row_count > 0 {
                out.push(b',');
            }
            out.push(b'[');
            for (i, reader) in readers.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, &reader.value(row));
            }
            out.push(b']');
            self.row_count += 1;
        }
        Ok(())
    }

    /// Writes the closing fields; `now_secs`/`now_nanos` become `timestamp`.
    pub fn finish(self, execution_time_ms: f64, now_secs: i64, now_nanos: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(b"],\"row_count\":");
        write_display(out, self.row_count);
        out.extend_from_slice(b",\"execution_time_ms\":");
        write_float(out, execution_time_ms);
        out.extend_from_slice(b",\"timestamp\":\"");
        write_rfc3339_nano(out, now_secs, now_nanos);
        out.extend_from_slice(b"\"}");
    }
}

/// Arc's envelope as a [`BatchEncoder`]: `execution_time_ms` runs from `started` to
/// the last row, and `timestamp` is the time the last row was written.
#[derive(Debug)]
pub struct ArcJsonEncoder {
    started: Instant,
    writer: Option<ArcJsonWriter>,
}

impl ArcJsonEncoder {
    /// An encoder for a request that arrived at `started`.
    pub fn new(started: Instant) -> Self {
        ArcJsonEncoder {
            started,
            writer: None,
        }
    }
}

impl BatchEncoder for ArcJsonEncoder {
    fn begin(&mut self, schema: &SchemaRef, out: &mut Vec<u8>) -> Result<(), Error> {
        self.writer = Some(ArcJsonWriter::begin(schema, out));
        Ok(())
    }

    fn write_batch(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), Error> {
        match &mut self.writer {
            Some(writer) => writer.write_batch(batch, out),
            None => Err(Error::Internal("JSON encoder used before begin".into())),
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let writer = self
            .writer
            .take()
            .ok_or_else(|| Error::Internal("JSON encoder finished twice".into()))?;
        let now = chrono::Utc::now();
        writer.finish(
            self.started.elapsed().as_secs_f64() * 1000.0,
            now.timestamp(),
            now.timestamp_subsec_nanos(),
            out,
        );
        Ok(())
    }
}

/// A reader per column of `batch`.
pub(crate) fn readers(batch: &RecordBatch) -> Result<Vec<ColumnReader<'_>>, Error> {
    batch
        .columns()
        .iter()
        .map(|c| ColumnReader::new(c.as_ref()).map_err(Error::from))
        .collect()
}

/// Appends one cell as a JSON value.
pub(crate) fn write_value(out: &mut Vec<u8>, value: &Value<'_>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Int(v) => write_display(out, v),
        Value::UInt(v) => write_display(out, v),
        Value::Float(v) => write_float(out, *v),
        Value::Str(s) => write_string(out, s),
        Value::Timestamp { secs, nanos } => {
            out.push(b'"');
            write_rfc3339_nano(out, *secs, *nanos);
            out.push(b'"');
        }
        Value::Date(days) => {
            out.push(b'"');
            write_date(out, *days);
            out.push(b'"');
        }
        Value::Number(text) => out.extend_from_slice(text.as_bytes()),
        Value::Text(text) => write_string(out, text),
    }
}

/// Appends a finite float in its shortest round-trip form (`1.0`, `0.1`, `1e-7`);
/// anything else as `null`.
pub(crate) fn write_float(out: &mut Vec<u8>, value: f64) {
    if value.is_finite() {
        write_display(out, format_args!("{value:?}"));
    } else {
        out.extend_from_slice(b"null");
    }
}

/// Appends `s` as a JSON string: quotes, backslashes and control characters escaped,
/// everything else (valid UTF-8 already) copied as is.
pub(crate) fn write_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut copied = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[copied..i]);
        out.extend_from_slice(escape);
        copied = i + 1;
    }
    out.extend_from_slice(&bytes[copied..]);
    out.push(b'"');
}

/// Appends a value's `Display` form.
pub(crate) fn write_display(out: &mut Vec<u8>, value: impl Display) {
    use std::io::Write;
    // Writing into a Vec cannot fail.
    let _infallible = write!(out, "{value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &str) -> String {
        let mut out = Vec::new();
        write_string(&mut out, s);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn strings_escape_what_json_requires() {
        assert_eq!(string("plain ünïcode"), "\"plain ünïcode\"");
        assert_eq!(string("a\"b\\c\nd\te"), r#""a\"b\\c\nd\te""#);
        assert_eq!(string("\u{1}\u{1f}"), r#""\u0001\u001f""#);
    }

    #[test]
    fn floats_round_trip_and_non_finite_is_null() {
        for (v, text) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5e-7, "-2.5e-7"),
            (1e300, "1e300"),
        ] {
            let mut out = Vec::new();
            write_float(&mut out, v);
            assert_eq!(String::from_utf8_lossy(&out), text);
            assert_eq!(text.parse::<f64>().ok(), Some(v));
        }
        let mut out = Vec::new();
        write_float(&mut out, f64::NAN);
        assert_eq!(out, b"null");
    }
}
