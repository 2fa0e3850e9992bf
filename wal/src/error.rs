//! The crate's one error type.

use std::{io, path::PathBuf, sync::Arc};

/// Shorthand for results of WAL operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a WAL operation can fail with.
///
/// `Clone` because one failed group commit reports the same error to every append in
/// the group; that is why the I/O source sits behind an `Arc`.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call on `path` failed. The WAL is poisoned afterwards.
    #[error("WAL I/O error on {}: {source}", path.display())]
    Io {
        /// File or directory the call was about.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: Arc<io::Error>,
    },
    /// Bytes on disk fail their checks (checksum, magic, version, index order) somewhere a
    /// crash cannot explain: a disk fault or outside interference. Never skipped.
    #[error("WAL corrupt: {} at offset {offset}: {reason}", path.display())]
    Corrupt {
        /// Segment (or marker) file holding the bad bytes.
        path: PathBuf,
        /// Byte offset of the bad header or record frame in that file.
        offset: u64,
        /// What check failed.
        reason: String,
    },
    /// An append did not start at the log's next index, or its records were not
    /// consecutive.
    #[error("non-contiguous append: expected index {expected}, got {got}")]
    NonContiguous {
        /// The index the record had to have.
        expected: u64,
        /// The index it had.
        got: u64,
    },
    /// A record payload is larger than the format allows.
    #[error("record {index} is {bytes} bytes; the limit is {bytes_max}")]
    RecordTooLarge {
        /// Index of the offending record.
        index: u64,
        /// Its payload size.
        bytes: usize,
        /// [`crate::format::PAYLOAD_BYTES_MAX`].
        bytes_max: u32,
    },
    /// An append would need an index past `u64::MAX`.
    #[error("index overflow: cannot append after index {0}")]
    IndexOverflow(u64),
    /// The configuration cannot work (for example a zero-length queue).
    #[error("invalid WAL configuration: {0}")]
    Config(String),
    /// An earlier I/O error poisoned the WAL; reopen it to find out what is on disk.
    #[error("WAL poisoned by an earlier error (reopen to recover): {0}")]
    Poisoned(String),
    /// An internal invariant failed: a bug in quiver-wal (debug builds panic instead).
    #[error("WAL internal error (a bug): {0}")]
    Internal(String),
    /// The writer thread is gone (it only stops when the last handle drops, or on a bug).
    #[error("WAL writer thread has stopped")]
    Closed,
}

impl Error {
    /// Wraps an [`io::Error`] with the path it concerns.
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source: Arc::new(source),
        }
    }

    /// Builds a [`Error::Corrupt`].
    pub(crate) fn corrupt(
        path: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Error {
        Error::Corrupt {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }
}
