//! The purge marker: the highest purged index, kept so the log's start survives a
//! restart even when old records linger in a segment that also holds newer ones.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use crate::{
    error::{Error, Result},
    format,
};

/// File name of the marker inside the WAL directory.
pub(crate) const MARKER_FILE: &str = "purged.meta";
/// Temporary name the marker is written under before being renamed into place.
pub(crate) const MARKER_TMP_FILE: &str = "purged.meta.tmp";

/// Reads the marker: `Some(purged_index)`, or `None` if nothing was ever purged.
pub(crate) fn read(dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(MARKER_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    // Replaced by rename, so a short or damaged marker is a disk fault, not a torn write.
    let fixed: &[u8; format::MARKER_BYTES] = bytes.as_slice().try_into().map_err(|_| {
        Error::corrupt(
            &path,
            0,
            format!(
                "purge marker is {} bytes, expected {}",
                bytes.len(),
                format::MARKER_BYTES
            ),
        )
    })?;
    format::decode_marker(fixed)
        .map(Some)
        .map_err(|e| Error::corrupt(&path, 0, format!("purge marker: {e}")))
}

/// Step 1 of replacing the marker: writes the new one under a temporary name. The
/// caller fsyncs the returned file (unless in `none` mode), then calls [`install`].
pub(crate) fn write_tmp(dir: &Path, purged_index: u64) -> Result<(fs::File, PathBuf)> {
    let tmp = dir.join(MARKER_TMP_FILE);
    let file = fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    io::Write::write_all(&mut &file, &format::encode_marker(purged_index))
        .map_err(|e| Error::io(&tmp, e))?;
    Ok((file, tmp))
}

/// Step 2: renames the temporary marker into place. The caller then fsyncs the directory
/// (unless in `none` mode) to make the replacement durable.
pub(crate) fn install(dir: &Path) -> Result<()> {
    let path = dir.join(MARKER_FILE);
    fs::rename(dir.join(MARKER_TMP_FILE), &path).map_err(|e| Error::io(&path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_round_trips_and_damage_is_corrupt() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", e))?;
        assert_eq!(read(dir.path())?, None);
        for purged_index in [41, 42] {
            let (file, tmp) = write_tmp(dir.path(), purged_index)?;
            file.sync_data().map_err(|e| Error::io(&tmp, e))?;
            install(dir.path())?;
        }
        assert_eq!(read(dir.path())?, Some(42));
        assert!(!dir.path().join(MARKER_TMP_FILE).exists());

        let path = dir.path().join(MARKER_FILE);
        let mut bytes = fs::read(&path).map_err(|e| Error::io(&path, e))?;
        bytes[14] ^= 1;
        fs::write(&path, &bytes).map_err(|e| Error::io(&path, e))?;
        assert!(matches!(
            read(dir.path()),
            Err(Error::Corrupt { offset: 0, .. })
        ));
        Ok(())
    }
}
