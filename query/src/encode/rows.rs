//! Row objects: JSON Lines (`{"col":v,...}` per line) and a JSON array of the same
//! objects (InfluxDB 3's `format=json`). NULL cells are written as explicit `null`.

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;

use super::json::{readers, write_string, write_value};
use super::{encode_all, BatchEncoder};
use crate::engine::QueryOutput;
use crate::error::Error;

/// One JSON object per row, each followed by a newline.
pub fn jsonl(output: &QueryOutput) -> Result<Vec<u8>, Error> {
    encode_all(JsonlEncoder::default(), output)
}

/// A JSON array holding one object per row.
pub fn json_objects(output: &QueryOutput) -> Result<Vec<u8>, Error> {
    encode_all(JsonObjectsEncoder::default(), output)
}

/// JSON Lines as a [`BatchEncoder`].
#[derive(Debug, Default)]
pub struct JsonlEncoder {
    keys: Vec<Vec<u8>>,
}

impl BatchEncoder for JsonlEncoder {
    fn begin(&mut self, schema: &SchemaRef, _out: &mut Vec<u8>) -> Result<(), Error> {
        self.keys = object_keys(schema);
        Ok(())
    }

    fn write_batch(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), Error> {
        write_objects(batch, &self.keys, None, out)
    }

    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<(), Error> {
        Ok(())
    }
}

/// A JSON array of row objects as a [`BatchEncoder`].
#[derive(Debug, Default)]
pub struct JsonObjectsEncoder {
    keys: Vec<Vec<u8>>,
    rows: usize,
}

impl BatchEncoder for JsonObjectsEncoder {
    fn begin(&mut self, schema: &SchemaRef, out: &mut Vec<u8>) -> Result<(), Error> {
        self.keys = object_keys(schema);
        out.push(b'[');
        Ok(())
    }

    fn write_batch(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), Error> {
        write_objects(batch, &self.keys, Some(self.rows), out)?;
        self.rows += batch.num_rows();
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        out.push(b']');
        Ok(())
    }
}

/// `"name":` for every column, escaped once.
fn object_keys(schema: &Schema) -> Vec<Vec<u8>> {
    schema
        .fields()
        .iter()
        .map(|f| {
            let mut key = Vec::with_capacity(f.name().len() + 3);
            write_string(&mut key, f.name());
            key.push(b':');
            key
        })
        .collect()
}

/// Writes one object per row: comma-separated when `rows_before` is given (the rows
/// already written, for a JSON array), newline-terminated otherwise (JSON Lines).
fn write_objects(
    batch: &RecordBatch,
    keys: &[Vec<u8>],
    rows_before: Option<usize>,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let readers = readers(batch)?;
    for row in 0..batch.num_rows() {
        if let Some(before) = rows_before {
            if before + row > 0 {
                out.push(b',');
            }
        }
        out.push(b'{');
        for (i, (key, reader)) in keys.iter().zip(&readers).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(key);
            write_value(out, &reader.value(row));
        }
        out.push(b'}');
        if rows_before.is_none() {
            out.push(b'\n');
        }
    }
    Ok(())
}
