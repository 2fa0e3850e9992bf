//! Arrow IPC encoding of single batches: how decoded rows travel in log entries and
//! snapshots, so followers and replays never parse text again.

use std::io::Cursor;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};

/// Encodes one batch as an Arrow IPC stream (schema, dictionaries, batch).
pub fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(batch.get_array_memory_size() + 1024);
    {
        let mut writer = StreamWriter::try_new(&mut out, batch.schema().as_ref())?;
        writer.write(batch)?;
        writer.finish()?;
    }
    Ok(out)
}

/// Decodes a stream written by [`encode_batch`]; anything else is an error.
pub fn decode_batch(bytes: &[u8]) -> Result<RecordBatch> {
    let mut reader = StreamReader::try_new(Cursor::new(bytes), None)?;
    let batch = reader
        .next()
        .ok_or_else(|| Error::InvalidPayload("IPC stream holds no batch".into()))??;
    if reader.next().is_some() {
        return Err(Error::InvalidPayload(
            "IPC stream holds more than one batch".into(),
        ));
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode_msgpack;

    #[test]
    fn round_trips_a_batch_with_dictionaries() {
        let payload = rmp_serde::to_vec(&serde_json::json!({"m": "cpu", "columns": {
            "time": [1, 2, 3], "host": ["a", "b", "a"], "v": [1.0, null, 3.0]}}))
        .unwrap();
        let (_, batch) = decode_msgpack(&payload, 0, &crate::WriteLimits::default(), &|_| None)
            .unwrap()
            .remove(0);
        let bytes = encode_batch(&batch).unwrap();
        assert_eq!(decode_batch(&bytes).unwrap(), batch);
        assert!(decode_batch(&bytes[..bytes.len() / 2]).is_err());
        assert!(decode_batch(b"nonsense").is_err());
    }
}
