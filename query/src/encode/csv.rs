//! CSV (RFC 4180): a header of column names, then one line per row. NULL is an empty
//! field; timestamps are RFC 3339 in UTC like the JSON encoders.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::cell::Value;
use super::json::{readers, write_display, write_float};
use super::time::{write_date, write_rfc3339_nano};
use super::{encode_all, BatchEncoder};
use crate::engine::QueryOutput;
use crate::error::Error;

/// The whole result as CSV with a header line.
pub fn csv(output: &QueryOutput) -> Result<Vec<u8>, Error> {
    encode_all(CsvEncoder, output)
}

/// CSV as a [`BatchEncoder`]: the header in `begin`, lines per batch.
#[derive(Debug, Default)]
pub struct CsvEncoder;

impl BatchEncoder for CsvEncoder {
    fn begin(&mut self, schema: &SchemaRef, out: &mut Vec<u8>) -> Result<(), Error> {
        for (i, field) in schema.fields().iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_field(out, field.name());
        }
        out.push(b'\n');
        Ok(())
    }

    fn write_batch(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), Error> {
        let readers = readers(batch)?;
        for row in 0..batch.num_rows() {
            for (i, reader) in readers.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_cell(out, &reader.value(row));
            }
            out.push(b'\n');
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<(), Error> {
        Ok(())
    }
}

fn write_cell(out: &mut Vec<u8>, value: &Value<'_>) {
    match value {
        Value::Null => {}
        Value::Bool(v) => write_display(out, v),
        Value::Int(v) => write_display(out, v),
        Value::UInt(v) => write_display(out, v),
        Value::Float(v) => write_float(out, *v),
        Value::Str(s) => write_field(out, s),
        Value::Timestamp { secs, nanos } => write_rfc3339_nano(out, *secs, *nanos),
        Value::Date(days) => write_date(out, *days),
        Value::Number(text) => out.extend_from_slice(text.as_bytes()),
        Value::Text(text) => write_field(out, text),
    }
}

/// Quotes a field only when it holds a comma, quote or line break; quotes double.
fn write_field(out: &mut Vec<u8>, s: &str) {
    if !s.contains([',', '"', '\n', '\r']) {
        out.extend_from_slice(s.as_bytes());
        return;
    }
    out.push(b'"');
    for part in s.split_inclusive('"') {
        out.extend_from_slice(part.as_bytes());
        if part.ends_with('"') {
            out.push(b'"');
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_only_when_needed() {
        let mut out = Vec::new();
        write_field(&mut out, "plain");
        out.push(b'|');
        write_field(&mut out, "a,b");
        out.push(b'|');
        write_field(&mut out, "say \"hi\"");
        assert_eq!(String::from_utf8_lossy(&out), r#"plain|"a,b"|"say ""hi""""#);
    }
}
