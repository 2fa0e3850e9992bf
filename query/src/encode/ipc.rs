//! Arrow IPC stream format (`application/vnd.apache.arrow.stream`).

use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;

use super::{encode_all, BatchEncoder};
use crate::engine::QueryOutput;
use crate::error::Error;

/// The whole result as an Arrow IPC stream: schema, then every batch.
pub fn arrow_ipc_stream(output: &QueryOutput) -> Result<Vec<u8>, Error> {
    encode_all(IpcEncoder::default(), output)
}

/// Arrow IPC stream, one message per batch as it comes.
#[derive(Default)]
pub struct IpcEncoder {
    writer: Option<StreamWriter<Vec<u8>>>,
}

impl IpcEncoder {
    fn writer(&mut self) -> Result<&mut StreamWriter<Vec<u8>>, Error> {
        self.writer
            .as_mut()
            .ok_or_else(|| Error::Internal("IPC encoder used before begin".into()))
    }
}

/// Moves what the writer produced so far into `out`.
fn drain(writer: &mut StreamWriter<Vec<u8>>, out: &mut Vec<u8>) {
    out.append(writer.get_mut());
}

impl BatchEncoder for IpcEncoder {
    fn begin(&mut self, schema: &SchemaRef, out: &mut Vec<u8>) -> Result<(), Error> {
        let mut writer = StreamWriter::try_new(Vec::new(), schema)?;
        drain(&mut writer, out);
        self.writer = Some(writer);
        Ok(())
    }

    fn write_batch(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), Error> {
        let writer = self.writer()?;
        writer.write(batch)?;
        drain(writer, out);
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let writer = self.writer()?;
        writer.finish()?;
        drain(writer, out);
        Ok(())
    }
}
