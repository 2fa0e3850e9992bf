//! Formats for people and for files: an ASCII table (`format=pretty`) and a Parquet file
//! (`format=parquet`).

use arrow::util::pretty::pretty_format_batches_with_schema;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::engine::QueryOutput;
use crate::error::Error;

/// The result as an ASCII table with a header, one line per row.
pub fn pretty(output: &QueryOutput) -> Result<Vec<u8>, Error> {
    let table = pretty_format_batches_with_schema(output.schema.clone(), &output.batches)?;
    let mut text = table.to_string();
    text.push('\n');
    Ok(text.into_bytes())
}

/// The result as one zstd-compressed Parquet file.
pub fn parquet(output: &QueryOutput) -> Result<Vec<u8>, Error> {
    let parquet_error = |e: parquet::errors::ParquetError| Error::Internal(e.to_string());
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut writer = ArrowWriter::try_new(Vec::new(), output.schema.clone(), Some(properties))
        .map_err(parquet_error)?;
    for batch in &output.batches {
        writer.write(batch).map_err(parquet_error)?;
    }
    writer.into_inner().map_err(parquet_error)
}
