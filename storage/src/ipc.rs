//! Arrow IPC encoding of single batches: how decoded rows travel in log entries and
//! snapshots, so followers and replays never parse text again.
//!
//! A log entry's batch may be packed (a zstd frame around the IPC stream): the entry is
//! written to the WAL, fsynced and sent to every follower, so its size is paid three
//! times, while the packing runs on the request's own decoder thread. Readers accept
//! both forms, told apart by the first four bytes (an IPC stream starts with the
//! continuation marker `FF FF FF FF`, a zstd frame with its magic number), so logs
//! written before packing existed replay unchanged.

use std::cell::RefCell;
use std::io::Cursor;
use std::str::FromStr;

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

/// How a write's batches are packed into its log entry (`raft.entry_compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryCompression {
    /// The plain IPC stream: for a mixed cluster during an upgrade from a version that
    /// cannot read packed entries, or a machine whose CPU is scarcer than its disk.
    None,
    /// The IPC stream in one zstd frame at level [`ZSTD_LEVEL`]: the default.
    #[default]
    Zstd,
}

impl FromStr for EntryCompression {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(EntryCompression::None),
            "zstd" => Ok(EntryCompression::Zstd),
            other => Err(Error::InvalidPayload(format!(
                "entry compression {other:?} must be zstd or none"
            ))),
        }
    }
}

/// zstd's fastest regular level: on time-series batches it already takes most of the
/// gain (Arc-shape rows: 38.6 -> about 10 bytes per row), at several hundred MB/s.
pub const ZSTD_LEVEL: i32 = 1;

/// The first bytes of every zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// Largest batch a packed entry may unpack to. Writes are far smaller (they are held in
/// memory whole, under `http.write_bytes_in_flight_max`); the bound only stops a
/// damaged or hostile frame header from asking for an absurd allocation.
const UNPACKED_BYTES_MAX: u64 = 4 << 30;

thread_local! {
    // Contexts are reused per thread: creating one costs about as much as packing a
    // small batch.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Encodes one batch for a log entry, packed as `compression` says. The bytes are
/// returned in an allocation of their own size: an entry lives on (in the log's cache,
/// in flight to followers) long after it is encoded, and both encoders allocate for the
/// worst case (zstd its bound, about the unpacked size; IPC the batch's memory). Kept
/// at that size, a TSBS-shaped entry held six times its bytes: 400 MB of a node's
/// 600 MB peak during line-protocol ingest (found with heaptrack).
///
/// Packed entries also carry tag keys at the width their dictionaries need
/// (`tag_keys`): the entry's rows are what the node buffers until a flush, and a TSBS
/// row held 40 bytes of 32-bit keys for tags of a few dozen values. A build older than
/// narrow keys cannot flush such rows, which is one more reason a rolling upgrade from
/// one runs with `raft.entry_compression = "none"`.
pub fn encode_batch_packed(batch: &RecordBatch, compression: EntryCompression) -> Result<Vec<u8>> {
    let mut packed = match compression {
        EntryCompression::None => encode_batch(batch)?,
        EntryCompression::Zstd => COMPRESSOR.with(|cell| {
            let ipc = encode_batch(&crate::tag_keys::narrow_tag_keys(batch)?)?;
            let mut slot = cell.borrow_mut();
            let compressor = match slot.as_mut() {
                Some(c) => c,
                None => slot.insert(zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(Error::Pack)?),
            };
            let packed = compressor.compress(&ipc).map_err(Error::Pack)?;
            debug_assert!(packed.starts_with(&ZSTD_MAGIC));
            Ok::<_, Error>(packed)
        })?,
    };
    packed.shrink_to_fit();
    Ok(packed)
}

/// Decodes a batch written by [`encode_batch`] or [`encode_batch_packed`]; anything else
/// is an error.
pub fn decode_batch(bytes: &[u8]) -> Result<RecordBatch> {
    if bytes.starts_with(&ZSTD_MAGIC) {
        let ipc = unpack(bytes)?;
        return decode_ipc(&ipc);
    }
    decode_ipc(bytes)
}

fn unpack(frame: &[u8]) -> Result<Vec<u8>> {
    let size = zstd::zstd_safe::get_frame_content_size(frame)
        .map_err(|_| Error::InvalidPayload("packed batch: not a zstd frame".into()))?
        .ok_or_else(|| Error::InvalidPayload("packed batch: frame without its size".into()))?;
    if size > UNPACKED_BYTES_MAX {
        return Err(Error::InvalidPayload(format!(
            "packed batch claims {size} bytes, more than {UNPACKED_BYTES_MAX}"
        )));
    }
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let decompressor = match slot.as_mut() {
            Some(d) => d,
            None => slot.insert(
                zstd::bulk::Decompressor::new()
                    .map_err(|e| Error::InvalidPayload(format!("packed batch: {e}")))?,
            ),
        };
        let ipc = decompressor
            .decompress(frame, size as usize)
            .map_err(|e| Error::InvalidPayload(format!("packed batch: {e}")))?;
        if ipc.len() as u64 != size {
            return Err(Error::InvalidPayload(format!(
                "packed batch unpacked to {} bytes, its header says {size}",
                ipc.len()
            )));
        }
        Ok(ipc)
    })
}

fn decode_ipc(bytes: &[u8]) -> Result<RecordBatch> {
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

    fn arc_shape_batch(rows: usize) -> RecordBatch {
        let hosts: Vec<String> = (0..rows).map(|i| format!("host-{}", i % 100)).collect();
        let times: Vec<i64> = (0..rows as i64)
            .map(|i| 1_700_000_000_000_000_000 + (i / 100) * 1_000_000_000)
            .collect();
        let values: Vec<f64> = (0..rows)
            .map(|i| ((i * 7919) % 10_000) as f64 / 100.0)
            .collect();
        let payload = rmp_serde::to_vec(&serde_json::json!({"m": "cpu", "columns": {
            "time": times, "host": hosts, "usage": values}}))
        .unwrap();
        decode_msgpack(&payload, 0, &crate::WriteLimits::default(), &|_| None)
            .unwrap()
            .remove(0)
            .1
    }

    #[test]
    fn a_packed_entry_holds_no_more_memory_than_its_bytes() {
        // zstd allocates its output for the worst case (about the unpacked size) and
        // the IPC encoder for the batch's memory; an entry kept at that capacity held
        // several times its bytes for as long as it lived.
        let batch = arc_shape_batch(5_000);
        for compression in [EntryCompression::Zstd, EntryCompression::None] {
            let packed = encode_batch_packed(&batch, compression).unwrap();
            assert_eq!(
                packed.capacity(),
                packed.len(),
                "{compression:?}: {} bytes in an allocation of {}",
                packed.len(),
                packed.capacity()
            );
            let decoded = decode_batch(&packed).unwrap();
            assert_eq!(crate::conform(&decoded, &batch.schema()).unwrap(), batch);
        }
    }

    #[test]
    fn a_decoded_wide_batch_is_counted_at_about_its_size() {
        // Twenty columns: decoded, they all point into one IPC message body.
        let mut columns = serde_json::Map::new();
        let rows = 5_000usize;
        columns.insert("time".into(), (0..rows as i64).collect::<Vec<_>>().into());
        for tag in 0..10 {
            let values: Vec<String> = (0..rows).map(|i| format!("v{}", i % 50)).collect();
            columns.insert(format!("tag{tag}"), values.into());
        }
        for field in 0..10 {
            let values: Vec<i64> = (0..rows as i64).map(|i| i % 101 + field).collect();
            columns.insert(format!("field{field}"), values.into());
        }
        let tags: Vec<String> = (0..10).map(|t| format!("tag{t}")).collect();
        let payload =
            rmp_serde::to_vec(&serde_json::json!({"m": "cpu", "tags": tags, "columns": columns}))
                .unwrap();
        let (_, batch) = decode_msgpack(&payload, 0, &crate::WriteLimits::default(), &|_| None)
            .unwrap()
            .remove(0);
        for compression in [EntryCompression::None, EntryCompression::Zstd] {
            let entry = encode_batch_packed(&batch, compression).unwrap();
            let decoded = decode_batch(&entry).unwrap();
            let ipc_bytes = encode_batch(&decoded).unwrap().len();
            let held = crate::table_state::held_bytes(&decoded);
            assert!(
                held <= ipc_bytes * 2 && held * 2 >= ipc_bytes,
                "{compression:?}: counted {held} bytes for an IPC stream of {ipc_bytes}"
            );
        }
    }

    #[test]
    fn packed_batches_round_trip_and_are_smaller() {
        let batch = arc_shape_batch(5_000);
        let plain = encode_batch_packed(&batch, EntryCompression::None).unwrap();
        let packed = encode_batch_packed(&batch, EntryCompression::Zstd).unwrap();
        assert_eq!(plain, encode_batch(&batch).unwrap());
        assert_eq!(decode_batch(&plain).unwrap(), batch);
        // Packed, the tag's keys are one byte: the same rows once widened again.
        let unpacked = decode_batch(&packed).unwrap();
        assert_eq!(
            unpacked
                .schema()
                .field_with_name("host")
                .unwrap()
                .data_type(),
            &arrow::datatypes::DataType::Dictionary(
                Box::new(arrow::datatypes::DataType::UInt8),
                Box::new(arrow::datatypes::DataType::Utf8)
            )
        );
        assert_eq!(crate::conform(&unpacked, &batch.schema()).unwrap(), batch);
        assert!(
            packed.len() * 2 < plain.len(),
            "packed {} bytes vs plain {}",
            packed.len(),
            plain.len()
        );
    }

    #[test]
    fn damaged_packed_batches_are_errors_not_panics() {
        let packed = encode_batch_packed(&arc_shape_batch(500), EntryCompression::Zstd).unwrap();
        for cut in [4, 8, packed.len() / 2, packed.len() - 1] {
            assert!(decode_batch(&packed[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = packed.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x55;
        // A flipped byte either fails to unpack or to decode; it must never panic.
        let _ = decode_batch(&flipped);
        // A frame header claiming an absurd size is refused before allocating.
        let mut huge = ZSTD_MAGIC.to_vec();
        huge.extend_from_slice(&[0xE0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01]);
        assert!(decode_batch(&huge).is_err());
    }

    #[test]
    fn compression_settings_parse() {
        assert_eq!(
            "zstd".parse::<EntryCompression>().unwrap(),
            EntryCompression::Zstd
        );
        assert_eq!(
            "none".parse::<EntryCompression>().unwrap(),
            EntryCompression::None
        );
        assert!("lz4".parse::<EntryCompression>().is_err());
    }
}
