//! The byte format of a [`MemoryImage`]: how unwritten rows travel inside a snapshot.
//!
//! `magic "QVMEMIMG" | version u32 LE | frame* | end frame`, where a frame is
//! `kind u8 | header_len u32 | header JSON | body_len u64 | body | crc32c u32` (CRC over
//! header and body). Version 2 (written since a node with ~2,400 files could no longer
//! read its own snapshot):
//!
//! * `M` (header `{"files": n}`) opens the manifest of Parquet files, and `n` `P` frames
//!   follow, each one file's [`FileMeta`] as its JSON body: the manifest is streamed one
//!   file at a time, never held as one buffer on either side;
//! * `K` (body: JSON) carries the replicated settings ([`Policies`]: tokens, lifecycle
//!   rules); an image without it has none;
//! * `C` (body: JSON) lists the compactions committed but not yet carried out (their
//!   inputs are in the manifest); an image without it has none;
//! * `O` (body: JSON) lists every table's sort lead decision (`sort_lead`); an image
//!   without it predates leads, and its tables keep name order;
//! * `F` starts a frozen segment (its batches follow as `B` frames), `A` is one
//!   live-buffer batch, `E` ends the image. Bodies of `B` and `A` are Arrow IPC.
//!
//! Version 1 is still read: its `M` frame carries the whole manifest as a JSON array in
//! its header, which may exceed the header bound of version 2 (the original bug).
//!
//! Every bound below is checked by the writer too: [`write_image`] refuses (with
//! [`Error::TooLarge`]) to write what [`read_image`] would refuse to read.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::LogIndex;
use crate::int_width::widen_integer_fields;
use crate::ipc::{decode_batch, encode_batch};
use crate::meta::{ColumnMeta, FileMeta};
use crate::policies::Policies;
use crate::schema::{canonical_schema, ColumnKind};
use crate::store::{MemoryImage, TableImage, TableKey};
use crate::table_state::{Buffered, Frozen};

const MAGIC: &[u8; 8] = b"QVMEMIMG";
/// The version written.
const VERSION: u32 = 2;
/// The version with the manifest in one frame header, still read.
const VERSION_1: u32 = 1;

/// Largest frame header, in bytes (a frozen segment's table key and columns).
const HEADER_BYTES_MAX: u64 = 1 << 20;
/// Largest manifest header of a version 1 image, in bytes: anything its `u32` length
/// can say (read as it arrives, never allocated up front).
const V1_MANIFEST_HEADER_BYTES_MAX: u64 = u32::MAX as u64;
/// Largest frame body, in bytes (one Arrow IPC batch).
const BODY_BYTES_MAX: u64 = 1 << 34;
/// Largest description of one Parquet file (a `P` frame's body), in bytes; ~500 bytes
/// is typical, so this only stops a damaged length.
const FILE_META_BYTES_MAX: u64 = 16 << 20;
/// Most files one manifest lists. At ~500 bytes each that is ~8 GiB of manifest: a node
/// with more files needs fewer files (compaction), not a bigger snapshot.
const MANIFEST_FILES_MAX: u64 = 1 << 24;

const KIND_MANIFEST: u8 = b'M';
const KIND_FILE: u8 = b'P';
const KIND_FROZEN: u8 = b'F';
const KIND_BATCH: u8 = b'B';
const KIND_ACTIVE: u8 = b'A';
const KIND_END: u8 = b'E';
const KIND_POLICIES: u8 = b'K';
const KIND_COMPACTIONS: u8 = b'C';
const KIND_SORT_LEADS: u8 = b'O';

/// Largest body a frame of `kind` may have, in bytes; shared by writer and reader.
fn body_bytes_max(kind: u8) -> u64 {
    match kind {
        KIND_FILE => FILE_META_BYTES_MAX,
        _ => BODY_BYTES_MAX,
    }
}

#[derive(Serialize, Deserialize)]
struct ManifestHeader {
    files: u64,
}

#[derive(Serialize, Deserialize)]
struct FrozenHeader {
    key: TableKey,
    log_first: LogIndex,
    log_last: LogIndex,
    rows: usize,
    bytes: usize,
    columns: Vec<ColumnMeta>,
    batches: usize,
    /// Absent in images written before sort leads: name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sort_lead: Option<String>,
}

/// One decided table in frame `O`.
#[derive(Serialize, Deserialize)]
struct SortLeadRecord {
    key: TableKey,
    lead: Option<String>,
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
    let frame_kind = kind as char;
    check_size(
        || format!("memory image frame {frame_kind} header, in bytes"),
        header.len() as u64,
        HEADER_BYTES_MAX,
    )?;
    check_size(
        || format!("memory image frame {frame_kind} body, in bytes"),
        body.len() as u64,
        body_bytes_max(kind),
    )?;
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

fn check_size(what: impl FnOnce() -> String, size: u64, size_max: u64) -> Result<()> {
    if size > size_max {
        return Err(Error::TooLarge {
            what: what(),
            size,
            size_max,
        });
    }
    Ok(())
}

fn json<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::InvalidPayload(e.to_string()))
}

/// Writes an image (the current version), streaming the manifest one file at a time.
/// Refuses what [`read_image`] would refuse: a manifest of more than 2^24 files, a
/// frame header above 1 MiB, a file description above 16 MiB, a batch above 16 GiB.
pub fn write_image(image: &MemoryImage, w: &mut impl Write) -> Result<()> {
    let files = image.files.len() as u64;
    check_size(
        || "memory image manifest, in files".to_string(),
        files,
        MANIFEST_FILES_MAX,
    )?;
    w.write_all(MAGIC).map_err(io)?;
    w.write_all(&VERSION.to_le_bytes()).map_err(io)?;
    write_frame(w, KIND_MANIFEST, &json(&ManifestHeader { files })?, &[])?;
    let mut body = Vec::new();
    for meta in &image.files {
        body.clear();
        serde_json::to_writer(&mut body, meta).map_err(|e| Error::InvalidPayload(e.to_string()))?;
        write_frame(w, KIND_FILE, &[], &body)?;
    }
    write_frame(w, KIND_POLICIES, &[], &json(&image.policies)?)?;
    if !image.compactions.is_empty() {
        write_frame(w, KIND_COMPACTIONS, &[], &json(&image.compactions)?)?;
    }
    if let Some(decided) = &image.sort_leads {
        let records: Vec<SortLeadRecord> = decided
            .iter()
            .map(|(key, lead)| SortLeadRecord {
                key: key.clone(),
                lead: lead.clone(),
            })
            .collect();
        write_frame(w, KIND_SORT_LEADS, &[], &json(&records)?)?;
    }
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
                sort_lead: segment.sort_lead.clone(),
            };
            write_frame(w, KIND_FROZEN, &json(&header)?, &[])?;
            for batch in &segment.batches {
                let batch = widen_integer_fields(batch)?;
                write_frame(w, KIND_BATCH, &[], &encode_batch(&batch)?)?;
            }
        }
        for buffered in &table.active {
            let header = ActiveHeader {
                key: table.key.clone(),
                index: buffered.index,
            };
            write_frame(
                w,
                KIND_ACTIVE,
                &json(&header)?,
                &encode_batch(&widen_integer_fields(&buffered.batch)?)?,
            )?;
        }
    }
    write_frame(w, KIND_END, &[], &[])
}

/// One frame; its buffers are reused from frame to frame.
#[derive(Default)]
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

/// Reads `len` bytes into `out` as they arrive: a damaged length fails at the end of
/// the input instead of allocating what it claims.
fn read_bounded(r: &mut impl Read, len: u64, out: &mut Vec<u8>) -> Result<()> {
    out.clear();
    r.take(len).read_to_end(out).map_err(io)?;
    if out.len() as u64 != len {
        return Err(corrupt("truncated frame".to_string()));
    }
    Ok(())
}

/// Reads the next frame into `frame`, refusing a header above `header_bytes_max`.
fn read_frame(r: &mut impl Read, header_bytes_max: u64, frame: &mut Frame) -> Result<()> {
    frame.kind = read_exact::<1>(r)?[0];
    let header_len = u64::from(u32::from_le_bytes(read_exact(r)?));
    if header_len > header_bytes_max {
        return Err(corrupt(format!("frame header of {header_len} bytes")));
    }
    read_bounded(r, header_len, &mut frame.header)?;
    let body_len = u64::from_le_bytes(read_exact(r)?);
    if body_len > body_bytes_max(frame.kind) {
        return Err(corrupt(format!("frame body of {body_len} bytes")));
    }
    read_bounded(r, body_len, &mut frame.body)?;
    let crc = u32::from_le_bytes(read_exact(r)?);
    let expected = crc32c::crc32c_append(crc32c::crc32c(&frame.header), &frame.body);
    if crc != expected {
        return Err(corrupt("frame checksum mismatch".to_string()));
    }
    Ok(())
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

/// Reads the `P` frames of a version 2 manifest.
fn read_manifest(
    r: &mut impl Read,
    header: &ManifestHeader,
    frame: &mut Frame,
) -> Result<Vec<FileMeta>> {
    if header.files > MANIFEST_FILES_MAX {
        return Err(corrupt(format!("manifest of {} files", header.files)));
    }
    let mut files = Vec::with_capacity(header.files.min(1 << 16) as usize);
    for _ in 0..header.files {
        read_frame(r, HEADER_BYTES_MAX, frame)?;
        if frame.kind != KIND_FILE {
            return Err(corrupt(format!(
                "manifest announces {} files, found {}",
                header.files,
                files.len()
            )));
        }
        let meta: FileMeta = serde_json::from_slice(&frame.body)
            .map_err(|e| corrupt(format!("bad file description: {e}")))?;
        files.push(meta);
    }
    Ok(files)
}

/// Reads an image written by [`write_image`], of this version or version 1.
pub fn read_image(r: &mut impl Read) -> Result<MemoryImage> {
    let magic = read_exact::<8>(r)?;
    if &magic != MAGIC {
        return Err(corrupt("not a memory image (bad magic)".into()));
    }
    let version = u32::from_le_bytes(read_exact(r)?);
    if version != VERSION && version != VERSION_1 {
        return Err(corrupt(format!(
            "memory image version {version}, this build reads {VERSION_1} and {VERSION}"
        )));
    }
    let mut frame = Frame::default();
    let manifest_header_bytes_max = if version == VERSION_1 {
        V1_MANIFEST_HEADER_BYTES_MAX
    } else {
        HEADER_BYTES_MAX
    };
    read_frame(r, manifest_header_bytes_max, &mut frame)?;
    if frame.kind != KIND_MANIFEST {
        return Err(corrupt("memory image lacks its file manifest".into()));
    }
    let files: Vec<FileMeta> = if version == VERSION_1 {
        let files: Vec<FileMeta> = parse(&frame.header)?;
        if files.len() as u64 > MANIFEST_FILES_MAX {
            return Err(corrupt(format!("manifest of {} files", files.len())));
        }
        files
    } else {
        let header: ManifestHeader = parse(&frame.header)?;
        read_manifest(r, &header, &mut frame)?
    };
    let mut tables: Vec<TableImage> = Vec::new();
    let mut policies = Policies::default();
    let mut compactions = Vec::new();
    let mut sort_leads = None;
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
        read_frame(r, HEADER_BYTES_MAX, &mut frame)?;
        match frame.kind {
            KIND_END => break,
            KIND_POLICIES => policies = parse(&frame.body)?,
            KIND_COMPACTIONS => compactions = parse(&frame.body)?,
            KIND_SORT_LEADS => {
                let records: Vec<SortLeadRecord> = parse(&frame.body)?;
                sort_leads = Some(records.into_iter().map(|r| (r.key, r.lead)).collect());
            }
            KIND_FROZEN => {
                let header: FrozenHeader = parse(&frame.header)?;
                let schema = canonical_schema(
                    header
                        .columns
                        .iter()
                        .filter_map(|c| c.kind().map(|k| (c.name.as_str(), k))),
                );
                let mut batches = Vec::with_capacity(header.batches.min(1 << 16));
                for _ in 0..header.batches {
                    read_frame(r, HEADER_BYTES_MAX, &mut frame)?;
                    if frame.kind != KIND_BATCH {
                        return Err(corrupt("frozen segment is missing batches".into()));
                    }
                    batches.push(decode_batch(&frame.body)?);
                }
                table_of(&mut tables, &header.key).frozen.push(Frozen {
                    log_first: header.log_first,
                    log_last: header.log_last,
                    schema,
                    batches,
                    rows: header.rows,
                    bytes: header.bytes,
                    sort_lead: header.sort_lead,
                });
            }
            KIND_ACTIVE => {
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
    Ok(MemoryImage {
        tables,
        files,
        policies,
        compactions,
        sort_leads,
        generation: 0,
    })
}

#[cfg(test)]
mod tests;
