//! Result encoders for the HTTP API: Arc's JSON envelope, JSON objects, JSON Lines, CSV,
//! an ASCII table, Parquet and the Arrow IPC stream.
//!
//! Every format is a [`BatchEncoder`]: bytes before the first row, bytes per batch, and
//! bytes after the last, so a response can stream while the query runs. The text formats
//! share one cell reader and write bytes directly. Two formats need the whole result
//! before they can write anything (the ASCII table measures every cell; Parquet writes
//! its footer last); they say so with [`BatchEncoder::holds_result`], and the engine
//! counts what they hold against the query's memory limit.

mod cell;
mod csv;
mod ipc;
mod json;
mod rows;
mod table;
mod time;

use std::time::Instant;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

pub use self::csv::{csv, CsvEncoder};
pub use ipc::{arrow_ipc_stream, IpcEncoder};
pub use json::{arc_json, arc_json_at, ArcJsonEncoder, ArcJsonWriter};
pub use rows::{json_objects, jsonl, JsonObjectsEncoder, JsonlEncoder};
pub use table::{parquet, pretty, ParquetEncoder, PrettyEncoder};

use crate::engine::QueryOutput;
use crate::error::Error;

/// A wire format written incrementally: [`begin`](Self::begin) once,
/// [`write_batch`](Self::write_batch) per batch, [`finish`](Self::finish) once. Each call
/// appends to `out`, which the caller may send and clear between calls.
pub trait BatchEncoder: Send {
    /// Appends what comes before the first row.
    fn begin(&mut self, schema: &SchemaRef, out: &mut Vec<u8>) -> Result<(), Error>;
    /// Appends the rows of `batch`.
    fn write_batch(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), Error>;
    /// Appends what comes after the last row.
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), Error>;
    /// True when the encoder keeps (a form of) every batch until [`finish`](Self::finish).
    fn holds_result(&self) -> bool {
        false
    }
}

/// Every result format the API offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Arc's envelope (`/api/v1/query`).
    ArcJson,
    /// Arrow IPC stream (`/api/v1/query/arrow`).
    ArrowIpc,
    /// A JSON array of row objects (`format=json`).
    Json,
    /// One JSON object per line (`format=jsonl`).
    Jsonl,
    /// CSV with a header line (`format=csv`).
    Csv,
    /// An ASCII table (`format=pretty`).
    Pretty,
    /// One Parquet file (`format=parquet`).
    Parquet,
}

impl Format {
    /// The format named by InfluxDB 3's `format` parameter.
    pub fn from_name(name: &str) -> Option<Format> {
        match name.to_ascii_lowercase().as_str() {
            "json" => Some(Format::Json),
            "jsonl" => Some(Format::Jsonl),
            "csv" => Some(Format::Csv),
            "pretty" => Some(Format::Pretty),
            "parquet" => Some(Format::Parquet),
            _ => None,
        }
    }

    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::ArcJson | Format::Json => "application/json",
            Format::ArrowIpc => "application/vnd.apache.arrow.stream",
            Format::Jsonl => "application/jsonl",
            Format::Csv => "text/csv; charset=utf-8",
            Format::Pretty => "text/plain; charset=utf-8",
            Format::Parquet => "application/vnd.apache.parquet",
        }
    }

    /// A fresh encoder; `started` is when the request arrived (Arc's
    /// `execution_time_ms` is measured from it).
    pub fn encoder(self, started: Instant) -> Box<dyn BatchEncoder> {
        match self {
            Format::ArcJson => Box::new(ArcJsonEncoder::new(started)),
            Format::ArrowIpc => Box::new(IpcEncoder::default()),
            Format::Json => Box::new(JsonObjectsEncoder::default()),
            Format::Jsonl => Box::new(JsonlEncoder::default()),
            Format::Csv => Box::new(CsvEncoder),
            Format::Pretty => Box::new(PrettyEncoder::default()),
            Format::Parquet => Box::new(ParquetEncoder::default()),
        }
    }
}

/// Runs `encoder` over a whole result.
pub(crate) fn encode_all(
    mut encoder: impl BatchEncoder,
    output: &QueryOutput,
) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    encoder.begin(&output.schema, &mut out)?;
    for batch in &output.batches {
        encoder.write_batch(batch, &mut out)?;
    }
    encoder.finish(&mut out)?;
    Ok(out)
}
