//! Formats for people and for files: an ASCII table (`format=pretty`) and a Parquet file
//! (`format=parquet`). Neither can write its first byte before the last row is known, so
//! both hold the result until `finish`.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::util::pretty::pretty_format_batches_with_schema;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;

use super::{encode_all, BatchEncoder};
use crate::engine::QueryOutput;
use crate::error::Error;

/// The result as an ASCII table with a header, one line per row.
pub fn pretty(output: &QueryOutput) -> Result<Vec<u8>, Error> {
    encode_all(PrettyEncoder::default(), output)
}

/// The result as one zstd-compressed Parquet file.
pub fn parquet(output: &QueryOutput) -> Result<Vec<u8>, Error> {
    encode_all(ParquetEncoder::default(), output)
}

/// The ASCII table as a [`BatchEncoder`]; everything is written by `finish`.
#[derive(Debug, Default)]
pub struct PrettyEncoder {
    schema: Option<SchemaRef>,
    batches: Vec<RecordBatch>,
}

impl BatchEncoder for PrettyEncoder {
    fn begin(&mut self, schema: &SchemaRef, _out: &mut Vec<u8>) -> Result<(), Error> {
        self.schema = Some(SchemaRef::clone(schema));
        Ok(())
    }

    fn write_batch(&mut self, batch: &RecordBatch, _out: &mut Vec<u8>) -> Result<(), Error> {
        self.batches.push(batch.clone());
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let schema = self
            .schema
            .take()
            .ok_or_else(|| Error::Internal("table encoder used before begin".into()))?;
        let table = pretty_format_batches_with_schema(schema, &self.batches)?;
        self.batches.clear();
        out.extend_from_slice(table.to_string().as_bytes());
        out.push(b'\n');
        Ok(())
    }

    fn holds_result(&self) -> bool {
        true
    }
}

/// One Parquet file as a [`BatchEncoder`]; the file is handed out by `finish`.
#[derive(Default)]
pub struct ParquetEncoder {
    writer: Option<ArrowWriter<Vec<u8>>>,
}

fn parquet_error(e: ParquetError) -> Error {
    Error::Internal(e.to_string())
}

impl ParquetEncoder {
    fn writer(&mut self) -> Result<&mut ArrowWriter<Vec<u8>>, Error> {
        self.writer
            .as_mut()
            .ok_or_else(|| Error::Internal("Parquet encoder used before begin".into()))
    }
}

impl BatchEncoder for ParquetEncoder {
    fn begin(&mut self, schema: &SchemaRef, _out: &mut Vec<u8>) -> Result<(), Error> {
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        let writer = ArrowWriter::try_new(Vec::new(), SchemaRef::clone(schema), Some(properties))
            .map_err(parquet_error)?;
        self.writer = Some(writer);
        Ok(())
    }

    fn write_batch(&mut self, batch: &RecordBatch, _out: &mut Vec<u8>) -> Result<(), Error> {
        self.writer()?.write(batch).map_err(parquet_error)
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let writer = self
            .writer
            .take()
            .ok_or_else(|| Error::Internal("Parquet encoder finished twice".into()))?;
        let mut file = writer.into_inner().map_err(parquet_error)?;
        out.append(&mut file);
        Ok(())
    }

    fn holds_result(&self) -> bool {
        true
    }
}
