//! One segment file: creating it, positional reads and writes, and its index table.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::{
    error::{Error, Result},
    format,
    fs::{WalFile, WalFs},
};

/// An open segment file, shared by the writer thread and readers.
///
/// Readers use `pread` and the writer `pwrite`, so neither moves a file cursor and both
/// can use the same descriptor.
pub(crate) struct Segment {
    /// Index of the first record this segment holds (or would hold).
    pub first_index: u64,
    /// Path of the file, for errors and deletion.
    pub path: PathBuf,
    file: Box<dyn WalFile>,
    /// Held for reading while a reader `pread`s records, and for writing while the writer
    /// shortens the file, so a reader never sees bytes that a truncation freed and a
    /// later append reused.
    reshape: RwLock<()>,
}

impl Segment {
    /// Creates a new segment file holding only its header. The caller fsyncs the file and
    /// the directory (and counts those fsyncs).
    pub fn create(fs: &dyn WalFs, dir: &Path, first_index: u64) -> Result<Segment> {
        let path = dir.join(format::segment_file_name(first_index));
        let file = fs.create_new(&path).map_err(|e| Error::io(&path, e))?;
        let header = format::encode_segment_header(first_index);
        file.write_all_at(&header, 0)
            .map_err(|e| Error::io(&path, e))?;
        Ok(Segment::from_file(first_index, path, file))
    }

    /// Wraps a file recovery has opened and checked.
    pub fn from_file(first_index: u64, path: PathBuf, file: Box<dyn WalFile>) -> Segment {
        Segment {
            first_index,
            path,
            file,
            reshape: RwLock::new(()),
        }
    }

    /// Writes `bytes` at `offset`.
    pub fn write_at(&self, bytes: &[u8], offset: u64) -> Result<()> {
        self.file
            .write_all_at(bytes, offset)
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Reads exactly `len` bytes at `offset`.
    pub fn read_at(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let len = usize::try_from(len).map_err(|_| {
            Error::corrupt(
                &self.path,
                offset,
                format!("span of {len} bytes is too large"),
            )
        })?;
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|e| Error::io(&self.path, e))?;
        Ok(buf)
    }

    /// `fdatasync`s the file.
    pub fn sync_data(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io(&self.path, e))
    }

    /// Shortens the file to `len_bytes`. Hold [`Segment::reshape_write`] around it.
    pub fn set_len(&self, len_bytes: u64) -> Result<()> {
        self.file
            .set_len(len_bytes)
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Taken by readers around a `pread`; recursive so several spans of one segment can
    /// be held at once without deadlocking against a waiting writer.
    pub fn reshape_read(&self) -> RwLockReadGuard<'_, ()> {
        self.reshape.read_recursive()
    }

    /// Taken by the writer around [`Segment::set_len`].
    pub fn reshape_write(&self) -> RwLockWriteGuard<'_, ()> {
        self.reshape.write()
    }
}

/// A segment plus what is known about its contents: where each record starts.
pub(crate) struct SegmentView {
    /// The segment.
    pub segment: Arc<Segment>,
    /// Byte offset of each record's frame; record `first_index + k` is at `offsets[k]`.
    /// Strictly increasing.
    pub offsets: Vec<u64>,
    /// Bytes of the file that hold valid header and frames (= the file length when the
    /// writer is idle).
    pub len_bytes: u64,
}

impl SegmentView {
    /// A view of a segment that holds only its header.
    pub fn empty(segment: Arc<Segment>) -> SegmentView {
        SegmentView {
            segment,
            offsets: Vec::new(),
            len_bytes: format::SEGMENT_HEADER_BYTES as u64,
        }
    }

    /// First index of the segment.
    pub fn first_index(&self) -> u64 {
        self.segment.first_index
    }

    /// Index after the last record (= `first_index` if the segment is empty).
    pub fn next_index(&self) -> u64 {
        self.segment.first_index + self.offsets.len() as u64
    }

    /// Byte range `[start, end)` of record `index`'s frame, if this segment holds it.
    pub fn frame_span(&self, index: u64) -> Option<(u64, u64)> {
        let k = usize::try_from(index.checked_sub(self.first_index())?).ok()?;
        let start = *self.offsets.get(k)?;
        let end = self.offsets.get(k + 1).copied().unwrap_or(self.len_bytes);
        debug_assert!(start < end, "record offsets must increase");
        Some((start, end))
    }

    /// Appends offsets of newly written frames and the new valid length.
    pub fn extend(&mut self, offsets: &[u64], len_bytes: u64) {
        debug_assert!(
            offsets.first().is_none_or(|&o| o >= self.len_bytes),
            "new frames must start past the old end"
        );
        debug_assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        debug_assert!(offsets.last().is_none_or(|&o| o < len_bytes));
        self.offsets.extend_from_slice(offsets);
        self.len_bytes = len_bytes;
    }
}
