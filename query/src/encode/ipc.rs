//! Arrow IPC stream format (`application/vnd.apache.arrow.stream`).

use arrow::ipc::writer::StreamWriter;

use crate::engine::QueryOutput;
use crate::error::Error;

/// The whole result as an Arrow IPC stream: schema, then every batch.
pub fn arrow_ipc_stream(output: &QueryOutput) -> Result<Vec<u8>, Error> {
    let mut writer = StreamWriter::try_new(Vec::new(), &output.schema)?;
    for batch in &output.batches {
        writer.write(batch)?;
    }
    writer.finish()?;
    Ok(writer.into_inner()?)
}
