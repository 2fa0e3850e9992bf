//! Result encoders for the HTTP API: Arc's JSON envelope, JSON objects, JSON Lines, CSV,
//! an ASCII table, Parquet and the Arrow IPC stream.
//!
//! The text formats share one cell reader and write bytes directly. [`ArcJsonWriter`]
//! works batch by batch so a response can stream; the others take a whole result.

mod cell;
mod csv;
mod ipc;
mod json;
mod rows;
mod table;
mod time;

pub use self::csv::csv;
pub use ipc::arrow_ipc_stream;
pub use json::{arc_json, arc_json_at, ArcJsonWriter};
pub use rows::{json_objects, jsonl};
pub use table::{parquet, pretty};
