//! Opening an existing log: scan every segment, verify every checksum, cut a torn
//! tail, refuse corruption. The rule is documented in [`crate::format`].

use std::{
    io::{self, BufReader, Read},
    path::{Path, PathBuf},
    sync::Arc,
};

use crate::{
    error::{Error, Result},
    format::{self, FrameHeader, FRAME_HEADER_BYTES, PAYLOAD_BYTES_MAX, SEGMENT_HEADER_BYTES},
    fs::{sync_dir, WalFile, WalFs},
    marker,
    segment::{Segment, SegmentView},
};

/// Read-ahead buffer for scanning a segment.
const SCAN_BUFFER_BYTES: usize = 1 << 20;
/// Chunk size for searching a suspected torn tail for a later intact record.
const SEARCH_CHUNK_BYTES: usize = 1 << 20;
/// Chunk size for checking that a tail is all zeros.
const ZERO_CHECK_CHUNK_BYTES: usize = 64 << 10;

/// What [`crate::Wal::open`] found on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segment files kept.
    pub segments: usize,
    /// Records found in them, each with a verified checksum.
    pub records: u64,
    /// Highest purged index from the purge marker, if anything was ever purged.
    pub purged_index: Option<u64>,
    /// Segment files deleted unread because the purge marker covers every record they
    /// can hold: the leftovers of a purge a crash interrupted.
    pub segments_purged: usize,
    /// The torn tail that was cut off, if there was one.
    pub torn_tail: Option<TornTail>,
}

/// A torn tail removed during recovery: the remains of a write a crash interrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment file.
    pub path: PathBuf,
    /// Where the file was cut (the start of the first incomplete frame); 0 when the whole
    /// file was removed.
    pub offset: u64,
    /// Bytes removed.
    pub bytes: u64,
    /// What was wrong with them.
    pub reason: String,
    /// The file held no usable header and was deleted.
    pub segment_deleted: bool,
}

/// The segments recovery kept, ready for the writer.
pub(crate) struct Recovered {
    pub segments: Vec<SegmentView>,
    pub purged_index: Option<u64>,
    pub report: RecoveryReport,
}

/// Scans `dir`. `sync` says whether repairs are fsynced (every mode but `none`).
///
/// Segments the purge marker wholly covers are deleted first, unread: a purge writes the
/// marker, may then start a segment at `purged_index + 1` (purging past the last
/// record), and only then deletes the old segments, so a crash can leave old segments
/// that end below the new one's start. They hold nothing the log still has, and checking
/// them for contiguity would refuse a log that is whole.
pub(crate) fn recover(fs: &dyn WalFs, dir: &Path, sync: bool) -> Result<Recovered> {
    let purged_index = marker::read(fs, dir)?;
    let mut files = list_segment_files(fs, dir)?;
    let segments_purged = wholly_purged(&files, purged_index);
    for (_, path) in files.drain(..segments_purged) {
        tracing::info!(
            path = %path.display(), purged_index,
            "WAL recovery: deleting a segment the purge marker covers (interrupted purge)"
        );
        fs.remove_file(&path).map_err(|e| Error::io(&path, e))?;
    }
    if segments_purged > 0 && sync {
        sync_dir(fs, dir)?;
    }
    let mut segments: Vec<SegmentView> = Vec::with_capacity(files.len());
    let mut torn_tail = None;
    let count = files.len();
    for (k, (first_index, path)) in files.into_iter().enumerate() {
        let is_last = k + 1 == count;
        if let Some(prev) = segments.last() {
            if prev.next_index() != first_index {
                return Err(Error::corrupt(
                    &path,
                    0,
                    format!(
                        "segment starts at index {first_index} but {} ends before index {}",
                        prev.segment.path.display(),
                        prev.next_index()
                    ),
                ));
            }
        }
        match scan_segment(fs, &path, first_index, is_last)? {
            Scanned::Kept { view, torn } => {
                if let Some(torn) = torn {
                    cut_tail(&view.segment, &torn, sync)?;
                    torn_tail = Some(torn);
                }
                segments.push(view);
            }
            Scanned::Discard(torn) => {
                tracing::warn!(
                    path = %torn.path.display(), bytes = torn.bytes, reason = %torn.reason,
                    "WAL recovery: deleting torn last segment"
                );
                fs.remove_file(&path).map_err(|e| Error::io(&path, e))?;
                if sync {
                    sync_dir(fs, dir)?;
                }
                torn_tail = Some(torn);
            }
        }
    }
    if let (Some(purged_index), Some(first)) = (purged_index, segments.first()) {
        if first.first_index() > purged_index.saturating_add(1) {
            return Err(Error::corrupt(
                &first.segment.path,
                0,
                format!(
                    "log starts at index {} but the purge marker says only records up to \
                     {purged_index} were purged",
                    first.first_index()
                ),
            ));
        }
    }
    let report = RecoveryReport {
        segments: segments.len(),
        records: segments.iter().map(|s| s.offsets.len() as u64).sum(),
        purged_index,
        segments_purged,
        torn_tail,
    };
    Ok(Recovered {
        segments,
        purged_index,
        report,
    })
}

/// How many of the oldest `files` hold only records `<= purged_index`: each segment
/// whose successor starts at or below `purged_index + 1` (its records all come before
/// the successor's first). Decided from names alone; the last segment is never counted,
/// since only a scan tells where it ends.
fn wholly_purged(files: &[(u64, PathBuf)], purged_index: Option<u64>) -> usize {
    let Some(purged_index) = purged_index else {
        return 0;
    };
    let start_index = purged_index.saturating_add(1);
    files
        .windows(2)
        .take_while(|pair| pair[1].0 <= start_index)
        .count()
}

/// Segment files in `dir` sorted by first index. Removes a leftover temporary marker.
fn list_segment_files(fs: &dyn WalFs, dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    for name in fs.list_dir(dir).map_err(|e| Error::io(dir, e))? {
        let Some(name) = name.to_str() else { continue };
        let path = dir.join(name);
        if name == marker::MARKER_TMP_FILE {
            // A marker write interrupted before its rename; the old marker still holds.
            fs.remove_file(&path).map_err(|e| Error::io(&path, e))?;
        } else if let Some(first_index) = format::parse_segment_file_name(name) {
            files.push((first_index, path));
        } else if name != marker::MARKER_FILE {
            tracing::debug!(file = name, "WAL recovery: ignoring unknown file");
        }
    }
    files.sort_unstable();
    Ok(files)
}

enum Scanned {
    /// A usable segment, perhaps with a torn tail still to cut at `torn.offset`.
    Kept {
        view: SegmentView,
        torn: Option<TornTail>,
    },
    /// The last segment without a usable header: delete it.
    Discard(TornTail),
}

/// Verifies one segment, returning its record offsets.
fn scan_segment(fs: &dyn WalFs, path: &Path, first_index: u64, is_last: bool) -> Result<Scanned> {
    let file = fs.open(path).map_err(|e| Error::io(path, e))?;
    let len = file.len_bytes().map_err(|e| Error::io(path, e))?;
    let header_bytes = SEGMENT_HEADER_BYTES as u64;

    let header_torn = if len < header_bytes {
        Some("file ends inside the segment header")
    } else if is_last && is_zero_from(&*file, path, 0, len)? {
        Some("segment is all zero bytes")
    } else {
        None
    };
    if let Some(reason) = header_torn {
        if !is_last {
            return Err(Error::corrupt(
                path,
                0,
                format!("{reason}, and it is not the last segment"),
            ));
        }
        return Ok(Scanned::Discard(TornTail {
            path: path.to_path_buf(),
            offset: 0,
            bytes: len,
            reason: reason.to_string(),
            segment_deleted: true,
        }));
    }

    let mut header = [0u8; SEGMENT_HEADER_BYTES];
    file.read_exact_at(&mut header, 0)
        .map_err(|e| Error::io(path, e))?;
    let header_index = format::decode_segment_header(&header)
        .map_err(|e| Error::corrupt(path, 0, format!("segment header: {e}")))?;
    if header_index != first_index {
        return Err(Error::corrupt(
            path,
            0,
            format!("header says first index {header_index} but the file name says {first_index}"),
        ));
    }

    let mut reader = BufReader::with_capacity(
        SCAN_BUFFER_BYTES,
        ReadAt {
            file: &*file,
            pos: header_bytes,
            len,
        },
    );
    let mut offsets = Vec::new();
    let mut payload = Vec::new();
    let mut pos = header_bytes;
    let mut torn = None;
    while pos < len {
        let index_expected = first_index + offsets.len() as u64;
        let bad = check_frame(&mut reader, path, pos, len, index_expected, &mut payload)?;
        let Some(bad) = bad else {
            offsets.push(pos);
            pos += FRAME_HEADER_BYTES as u64 + payload.len() as u64;
            continue;
        };
        if !is_last {
            let reason = format!("{}, in a segment that is not the last", bad.reason);
            return Err(Error::corrupt(path, pos, reason));
        }
        let reason = if bad.torn_shape {
            // A damaged length field can also push a frame past the end of the file; an
            // intact later record proves this is corruption, not a crash artefact.
            let index_next = index_expected.saturating_add(1);
            let from = pos + FRAME_HEADER_BYTES as u64;
            if let Some(at) = find_frame(&*file, path, from, len, index_next)? {
                let reason = format!(
                    "{}, yet record {index_next} follows at offset {at}",
                    bad.reason
                );
                return Err(Error::corrupt(path, pos, reason));
            }
            bad.reason
        } else if is_zero_from(&*file, path, pos, len)? {
            "zero-filled tail".to_string()
        } else {
            let reason = format!("{}, followed by more data", bad.reason);
            return Err(Error::corrupt(path, pos, reason));
        };
        torn = Some(TornTail {
            path: path.to_path_buf(),
            offset: pos,
            bytes: len - pos,
            reason,
            segment_deleted: false,
        });
        break;
    }
    debug_assert!(offsets.windows(2).all(|w| w[0] < w[1]));
    let view = SegmentView {
        segment: Arc::new(Segment::from_file(first_index, path.to_path_buf(), file)),
        offsets,
        len_bytes: pos,
    };
    Ok(Scanned::Kept { view, torn })
}

/// A cursor over a [`WalFile`] up to a fixed length, for buffered sequential scans.
struct ReadAt<'a> {
    file: &'a dyn WalFile,
    pos: u64,
    len: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = usize::try_from(self.len.saturating_sub(self.pos))
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = self.file.read_at(&mut buf[..n], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Why the frame at some offset is not a valid record.
struct BadFrame {
    reason: String,
    /// The damage has a shape a crash mid-write leaves at the end of the file (the file
    /// ends inside the frame, or the frame ends exactly at end of file).
    torn_shape: bool,
}

/// Reads and verifies the frame at `pos` (the reader is positioned there). On success
/// `payload` holds its payload and the reader is at the next frame.
fn check_frame(
    reader: &mut BufReader<ReadAt<'_>>,
    path: &Path,
    pos: u64,
    len: u64,
    index_expected: u64,
    payload: &mut Vec<u8>,
) -> Result<Option<BadFrame>> {
    let bad = |reason: String, torn_shape: bool| Ok(Some(BadFrame { reason, torn_shape }));
    if len - pos < FRAME_HEADER_BYTES as u64 {
        return bad("file ends inside a record header".to_string(), true);
    }
    let mut head = [0u8; FRAME_HEADER_BYTES];
    reader
        .read_exact(&mut head)
        .map_err(|e| Error::io(path, e))?;
    let header = FrameHeader::decode(&head);
    let frame_end = pos + header.frame_bytes();
    if frame_end > len {
        return bad(
            format!(
                "file ends inside the payload of a {}-byte record",
                header.len
            ),
            true,
        );
    }
    if header.len > PAYLOAD_BYTES_MAX {
        return bad(
            format!(
                "record length {} exceeds the {PAYLOAD_BYTES_MAX}-byte limit",
                header.len
            ),
            false,
        );
    }
    payload.resize(header.len as usize, 0);
    reader.read_exact(payload).map_err(|e| Error::io(path, e))?;
    if format::record_crc(header.index, payload) != header.crc {
        return bad(
            format!("record checksum mismatch (expected index {index_expected})"),
            frame_end == len,
        );
    }
    if header.index != index_expected {
        return bad(
            format!(
                "record has index {}, expected {index_expected}",
                header.index
            ),
            false,
        );
    }
    Ok(None)
}

/// Looks for a valid frame of record `index` starting anywhere in `from..len`, reading
/// in bounded chunks. Only runs on a suspected torn tail.
fn find_frame(
    file: &dyn WalFile,
    path: &Path,
    from: u64,
    len: u64,
    index: u64,
) -> Result<Option<u64>> {
    let needle = index.to_le_bytes();
    let mut chunk = vec![0u8; SEARCH_CHUNK_BYTES];
    let mut base = from;
    while base + FRAME_HEADER_BYTES as u64 <= len {
        let n = ((len - base) as usize).min(chunk.len());
        file.read_exact_at(&mut chunk[..n], base)
            .map_err(|e| Error::io(path, e))?;
        // Candidate frame starts: every q whose whole frame header is in this chunk.
        for q in 0..=n - FRAME_HEADER_BYTES {
            if chunk[q + 8..q + FRAME_HEADER_BYTES] != needle {
                continue;
            }
            let Some(head) = chunk[q..].first_chunk::<FRAME_HEADER_BYTES>() else {
                continue;
            };
            let header = FrameHeader::decode(head);
            let start = base + q as u64;
            if header.len > PAYLOAD_BYTES_MAX || start + header.frame_bytes() > len {
                continue;
            }
            let mut frame = vec![0u8; header.frame_bytes() as usize];
            file.read_exact_at(&mut frame, start)
                .map_err(|e| Error::io(path, e))?;
            if format::verify_frame(&frame, index).is_ok() {
                return Ok(Some(start));
            }
        }
        // The next chunk starts right after the last candidate examined.
        base += (n - FRAME_HEADER_BYTES + 1) as u64;
    }
    Ok(None)
}

/// Whether bytes `from..len` of the file are all zero.
fn is_zero_from(file: &dyn WalFile, path: &Path, from: u64, len: u64) -> Result<bool> {
    let mut chunk = vec![0u8; ZERO_CHECK_CHUNK_BYTES];
    let mut pos = from;
    while pos < len {
        let n = ((len - pos) as usize).min(chunk.len());
        file.read_exact_at(&mut chunk[..n], pos)
            .map_err(|e| Error::io(path, e))?;
        if chunk[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        pos += n as u64;
    }
    Ok(true)
}

/// Cuts a torn tail off a segment, durably when `sync`.
fn cut_tail(segment: &Segment, torn: &TornTail, sync: bool) -> Result<()> {
    tracing::warn!(
        path = %torn.path.display(), offset = torn.offset, bytes = torn.bytes,
        reason = %torn.reason, "WAL recovery: truncating torn tail"
    );
    segment.set_len(torn.offset)?;
    if sync {
        segment.sync_data()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::OsFs;

    #[test]
    fn find_frame_sees_frames_across_chunk_boundaries() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", e))?;
        let path = dir.path().join("search");
        let chunk = SEARCH_CHUNK_BYTES as u64;
        for start in (chunk - 20)..(chunk + 4) {
            let mut bytes = vec![0xeeu8; start as usize];
            format::encode_frame(&mut bytes, 7, b"payload");
            bytes.extend_from_slice(&[0xee; 3]);
            std::fs::write(&path, &bytes).map_err(|e| Error::io(&path, e))?;
            let file = OsFs.open(&path).map_err(|e| Error::io(&path, e))?;
            let len = bytes.len() as u64;
            assert_eq!(
                find_frame(&*file, &path, 0, len, 7)?,
                Some(start),
                "start {start}"
            );
            assert_eq!(find_frame(&*file, &path, 0, len, 8)?, None);
            assert_eq!(find_frame(&*file, &path, start + 1, len, 7)?, None);
        }
        Ok(())
    }
}
