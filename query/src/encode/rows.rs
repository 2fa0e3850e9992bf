//! Row objects: JSON Lines (`{"col":v,...}` per line) and a JSON array of the same
//! objects (InfluxDB 3's `format=json`). NULL cells are written as explicit `null`.

use arrow::datatypes::Schema;
use arrow::record_batch::RecordBatch;

use super::json::{readers, write_string, write_value};
use crate::engine::QueryOutput;
use crate::error::Error;

/// One JSON object per row, each followed by a newline.
pub fn jsonl(output: &QueryOutput) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    let keys = object_keys(&output.schema);
    for batch in &output.batches {
        write_objects(batch, &keys, b"\n", &mut out)?;
    }
    Ok(out)
}

/// A JSON array holding one object per row.
pub fn json_objects(output: &QueryOutput) -> Result<Vec<u8>, Error> {
    let mut out = vec![b'['];
    let keys = object_keys(&output.schema);
    for batch in &output.batches {
        write_objects(batch, &keys, b",", &mut out)?;
    }
    // Every object was followed by a comma; the last one becomes the closing bracket.
    match out.last_mut() {
        Some(last) if *last == b',' => *last = b']',
        _ => out.push(b']'),
    }
    Ok(out)
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

fn write_objects(
    batch: &RecordBatch,
    keys: &[Vec<u8>],
    separator: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let readers = readers(batch)?;
    for row in 0..batch.num_rows() {
        out.push(b'{');
        for (i, (key, reader)) in keys.iter().zip(&readers).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(key);
            write_value(out, &reader.value(row));
        }
        out.push(b'}');
        out.extend_from_slice(separator);
    }
    Ok(())
}
