//! The byte format of a [`MemoryImage`]: how unwritten rows travel inside a snapshot.
//!
//! `magic "QVMEMIMG" | version u32 LE | frame* | end frame`, where a frame is
//! `kind u8 | header_len u32 | header JSON | body_len u64 | body | crc32c u32` (CRC over
//! header and body). The first frame, `M`, is the manifest of Parquet files. Then `F` starts a frozen segment (its batches follow as `B`
//! frames), `A` is one live-buffer batch, `E` ends the image. Bodies are Arrow IPC.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::LogIndex;
use crate::ipc::{decode_batch, encode_batch};
use crate::meta::{ColumnMeta, FileMeta};
use crate::schema::{canonical_schema, ColumnKind};
use crate::store::{MemoryImage, TableImage, TableKey};
use crate::table_state::{Buffered, Frozen};

const MAGIC: &[u8; 8] = b"QVMEMIMG";
const VERSION: u32 = 1;
/// Largest frame header accepted, in bytes.
const HEADER_BYTES_MAX: u32 = 1 << 20;
/// Largest frame body accepted, in bytes.
const BODY_BYTES_MAX: u64 = 1 << 34;

#[derive(Serialize, Deserialize)]
struct FrozenHeader {
    key: TableKey,
    log_first: LogIndex,
    log_last: LogIndex,
    rows: usize,
    bytes: usize,
    columns: Vec<ColumnMeta>,
    batches: usize,
}

#[derive(Serialize, Deserialize)]
struct ActiveHeader {
    key: TableKey,
    index: LogIndex,
}

fn io(e: std::io::Error) -> Error {
    Error::Io {
        path: "memory image".into(),
        source: e,
    }
}

fn write_frame(w: &mut impl Write, kind: u8, header: &[u8], body: &[u8]) -> Result<()> {
    let mut crc = crc32c::crc32c(header);
    crc = crc32c::crc32c_append(crc, body);
    w.write_all(&[kind]).map_err(io)?;
    w.write_all(&(header.len() as u32).to_le_bytes())
        .map_err(io)?;
    w.write_all(header).map_err(io)?;
    w.write_all(&(body.len() as u64).to_le_bytes())
        .map_err(io)?;
    w.write_all(body).map_err(io)?;
    w.write_all(&crc.to_le_bytes()).map_err(io)?;
    Ok(())
}

fn json<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::InvalidPayload(e.to_string()))
}

/// Writes an image.
pub fn write_image(image: &MemoryImage, w: &mut impl Write) -> Result<()> {
    w.write_all(MAGIC).map_err(io)?;
    w.write_all(&VERSION.to_le_bytes()).map_err(io)?;
    write_frame(w, b'M', &json(&image.files)?, &[])?;
    for table in &image.tables {
        for segment in &table.frozen {
            let columns = segment
                .schema
                .fields()
                .iter()
                .filter_map(|f| {
                    ColumnKind::from_arrow(f.name(), f.data_type())
                        .map(|k| ColumnMeta::new(f.name(), k))
                })
                .collect();
            let header = FrozenHeader {
                key: table.key.clone(),
                log_first: segment.log_first,
                log_last: segment.log_last,
                rows: segment.rows,
                bytes: segment.bytes,
                columns,
                batches: segment.batches.len(),
            };
            write_frame(w, b'F', &json(&header)?, &[])?;
            for batch in &segment.batches {
                write_frame(w, b'B', &[], &encode_batch(batch)?)?;
            }
        }
        for buffered in &table.active {
            let header = ActiveHeader {
                key: table.key.clone(),
                index: buffered.index,
            };
            write_frame(w, b'A', &json(&header)?, &encode_batch(&buffered.batch)?)?;
        }
    }
    write_frame(w, b'E', &[], &[])
}

struct Frame {
    kind: u8,
    header: Vec<u8>,
    body: Vec<u8>,
}

fn read_exact<const N: usize>(r: &mut impl Read) -> Result<[u8; N]> {
    let mut out = [0u8; N];
    r.read_exact(&mut out).map_err(io)?;
    Ok(out)
}

fn read_frame(r: &mut impl Read) -> Result<Frame> {
    let kind = read_exact::<1>(r)?[0];
    let header_len = u32::from_le_bytes(read_exact(r)?);
    if header_len > HEADER_BYTES_MAX {
        return Err(corrupt(format!("frame header of {header_len} bytes")));
    }
    let mut header = vec![0u8; header_len as usize];
    r.read_exact(&mut header).map_err(io)?;
    let body_len = u64::from_le_bytes(read_exact(r)?);
    if body_len > BODY_BYTES_MAX {
        return Err(corrupt(format!("frame body of {body_len} bytes")));
    }
    let mut body = Vec::new();
    r.take(body_len).read_to_end(&mut body).map_err(io)?;
    if body.len() as u64 != body_len {
        return Err(corrupt("truncated frame".to_string()));
    }
    let crc = u32::from_le_bytes(read_exact(r)?);
    let expected = crc32c::crc32c_append(crc32c::crc32c(&header), &body);
    if crc != expected {
        return Err(corrupt("frame checksum mismatch".to_string()));
    }
    Ok(Frame { kind, header, body })
}

fn corrupt(reason: String) -> Error {
    Error::Corrupt {
        path: "memory image".into(),
        reason,
    }
}

fn parse<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| corrupt(format!("bad frame header: {e}")))
}

/// Reads an image written by [`write_image`].
pub fn read_image(r: &mut impl Read) -> Result<MemoryImage> {
    let magic = read_exact::<8>(r)?;
    if &magic != MAGIC {
        return Err(corrupt("not a memory image (bad magic)".into()));
    }
    let version = u32::from_le_bytes(read_exact(r)?);
    if version != VERSION {
        return Err(corrupt(format!(
            "memory image version {version}, this build reads {VERSION}"
        )));
    }
    let manifest = read_frame(r)?;
    if manifest.kind != b'M' {
        return Err(corrupt("memory image lacks its file manifest".into()));
    }
    let files: Vec<FileMeta> = parse(&manifest.header)?;
    let mut tables: Vec<TableImage> = Vec::new();
    fn table_of<'t>(tables: &'t mut Vec<TableImage>, key: &TableKey) -> &'t mut TableImage {
        let position = match tables.iter().position(|t| &t.key == key) {
            Some(p) => p,
            None => {
                tables.push(TableImage {
                    key: key.clone(),
                    frozen: Vec::new(),
                    active: Vec::new(),
                });
                tables.len() - 1
            }
        };
        &mut tables[position]
    }
    loop {
        let frame = read_frame(r)?;
        match frame.kind {
            b'E' => break,
            b'F' => {
                let header: FrozenHeader = parse(&frame.header)?;
                let schema = canonical_schema(
                    header
                        .columns
                        .iter()
                        .filter_map(|c| c.kind().map(|k| (c.name.as_str(), k))),
                );
                let mut batches = Vec::with_capacity(header.batches.min(1 << 16));
                for _ in 0..header.batches {
                    let b = read_frame(r)?;
                    if b.kind != b'B' {
                        return Err(corrupt("frozen segment is missing batches".into()));
                    }
                    batches.push(decode_batch(&b.body)?);
                }
                table_of(&mut tables, &header.key).frozen.push(Frozen {
                    log_first: header.log_first,
                    log_last: header.log_last,
                    schema,
                    batches,
                    rows: header.rows,
                    bytes: header.bytes,
                });
            }
            b'A' => {
                let header: ActiveHeader = parse(&frame.header)?;
                let batch = decode_batch(&frame.body)?;
                table_of(&mut tables, &header.key).active.push(Buffered {
                    index: header.index,
                    batch,
                });
            }
            other => return Err(corrupt(format!("unknown frame kind {other}"))),
        }
    }
    Ok(MemoryImage { tables, files })
}
