//! Small files that must survive a crash whole or not at all: the vote, the purge point.
//!
//! Written to a temporary file, fsynced, renamed over the old one, and the directory
//! fsynced, so a reader sees either the old or the new content. The content is framed
//! (`magic | version | len | crc32c | json`) so a torn or foreign file is detected.

use std::fs;
use std::io::Write;
use std::path::Path;

const MAGIC: &[u8; 4] = b"QVRF";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 16;

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

/// Replaces `path` with `value`, durably (temp file, fsync, rename, fsync directory).
pub fn write_durable<T: serde::Serialize>(
    path: &Path,
    value: &T,
    fsync: bool,
) -> Result<(), DurableFileError> {
    let json = serde_json::to_vec(value).map_err(|e| DurableFileError::Corrupt {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut bytes = Vec::with_capacity(HEADER_BYTES + json.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&(json.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(&json).to_le_bytes());
    bytes.extend_from_slice(&json);
    let tmp = path.with_extension("tmp");
    {
        let mut file = fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
        file.write_all(&bytes).map_err(|e| io(&tmp, e))?;
        if fsync {
            file.sync_all().map_err(|e| io(&tmp, e))?;
        }
    }
    fs::rename(&tmp, path).map_err(|e| io(path, e))?;
    if fsync {
        if let Some(dir) = path.parent() {
            fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io(dir, e))?;
        }
    }
    Ok(())
}

/// Reads a file written by [`write_durable`]; `None` if it does not exist.
pub fn read_durable<T: serde::de::DeserializeOwned>(
    path: &Path,
) -> Result<Option<T>, DurableFileError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, e)),
    };
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
}
