//! Small files that must survive a crash whole or not at all: the vote, the purge point.
//!
//! Replaced through quiver-storage's [`replace_file_durably`] (temporary file, fsync,
//! rename, directory fsync), so a reader sees either the old or the new content. The
//! content is framed (`magic | version | len | crc32c | json`) so a torn or foreign file
//! is detected. Both sides hold the JSON to [`JSON_BYTES_MAX`].

use std::fs;
use std::io::{Read, Write};
use std::path::Path;

use quiver_storage::{replace_file_atomically, replace_file_durably};

const MAGIC: &[u8; 4] = b"QVRF";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 16;
/// Largest JSON content, in bytes; the writer refuses more, the reader reads no more.
/// The vote and log ids are tens of bytes.
pub(crate) const JSON_BYTES_MAX: usize = 1 << 20;

/// Why a durable file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DurableFileError {
    /// The OS refused a read or write.
    #[error("{path}: {source}")]
    Io {
        /// File involved.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// Replacing the file failed (temporary file, fsync, rename).
    #[error(transparent)]
    Replace(#[from] quiver_storage::Error),
    /// The value could not be encoded.
    #[error("{path}: cannot encode: {source}")]
    Encode {
        /// File involved.
        path: String,
        /// The encoder's error.
        source: serde_json::Error,
    },
    /// The content is larger than the reader accepts.
    #[error("{path}: {bytes} bytes of content, at most {JSON_BYTES_MAX} allowed")]
    TooLarge {
        /// File involved.
        path: String,
        /// Size of the content.
        bytes: usize,
    },
    /// The file exists but is not a valid durable file.
    #[error("{path}: {reason}")]
    Corrupt {
        /// File involved.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

fn io(path: &Path, source: std::io::Error) -> DurableFileError {
    DurableFileError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Replaces `path` with `value`: durably (temp file, fsync, rename, fsync directory)
/// when `fsync`, else atomically only (survives a process crash, not a power loss).
pub fn write_durable<T: serde::Serialize>(
    path: &Path,
    value: &T,
    fsync: bool,
) -> Result<(), DurableFileError> {
    let json = serde_json::to_vec(value).map_err(|source| DurableFileError::Encode {
        path: path.display().to_string(),
        source,
    })?;
    if json.len() > JSON_BYTES_MAX {
        return Err(DurableFileError::TooLarge {
            path: path.display().to_string(),
            bytes: json.len(),
        });
    }
    let mut bytes = Vec::with_capacity(HEADER_BYTES + json.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&(json.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(&json).to_le_bytes());
    bytes.extend_from_slice(&json);
    let write = |w: &mut std::io::BufWriter<fs::File>| -> Result<(), DurableFileError> {
        w.write_all(&bytes).map_err(|e| io(path, e))
    };
    if fsync {
        replace_file_durably(path, write)
    } else {
        replace_file_atomically(path, write)
    }
}

/// Reads a file written by [`write_durable`]; `None` if it does not exist.
pub fn read_durable<T: serde::de::DeserializeOwned>(
    path: &Path,
) -> Result<Option<T>, DurableFileError> {
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, e)),
    };
    let mut bytes = Vec::new();
    // One byte past the largest valid file, to tell "too large" from "exactly the max".
    file.take((HEADER_BYTES + JSON_BYTES_MAX + 1) as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| io(path, e))?;
    let corrupt = |reason: &str| DurableFileError::Corrupt {
        path: path.display().to_string(),
        reason: reason.to_string(),
    };
    if bytes.len() < HEADER_BYTES || &bytes[..4] != MAGIC {
        return Err(corrupt("not a Quiver durable file"));
    }
    let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if version != VERSION {
        return Err(corrupt(&format!(
            "version {version}, this build reads {VERSION}"
        )));
    }
    let len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    if len > JSON_BYTES_MAX {
        return Err(corrupt(&format!("{len} bytes of content")));
    }
    let crc = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    let json = bytes
        .get(HEADER_BYTES..HEADER_BYTES + len)
        .ok_or_else(|| corrupt("truncated"))?;
    if crc32c::crc32c(json) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    serde_json::from_slice(json)
        .map(Some)
        .map_err(|e| corrupt(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_detect_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vote");
        assert_eq!(read_durable::<u64>(&path).unwrap(), None);
        write_durable(&path, &42u64, true).unwrap();
        assert_eq!(read_durable::<u64>(&path).unwrap(), Some(42));
        write_durable(&path, &43u64, true).unwrap();
        assert_eq!(read_durable::<u64>(&path).unwrap(), Some(43));
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(read_durable::<u64>(&path).is_err());
    }

    #[test]
    fn writes_leave_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vote");
        write_durable(&path, &1u64, true).unwrap();
        write_durable(&path, &2u64, false).unwrap();
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["vote"]);
    }

    #[test]
    fn writer_refuses_what_the_reader_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vote");
        // A JSON string of exactly the largest content: 2 quotes + the characters.
        let largest = "x".repeat(JSON_BYTES_MAX - 2);
        write_durable(&path, &largest, true).unwrap();
        assert_eq!(read_durable::<String>(&path).unwrap(), Some(largest));
        let too_large = "x".repeat(JSON_BYTES_MAX - 1);
        assert!(matches!(
            write_durable(&path, &too_large, true),
            Err(DurableFileError::TooLarge { .. })
        ));
    }
}
