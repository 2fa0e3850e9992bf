//! The purge marker: the highest purged index, kept so the log's start survives a
//! restart even when old records linger in a segment that also holds newer ones.

use std::{
    io,
    path::{Path, PathBuf},
};

use crate::{
    error::{Error, Result},
    format,
    fs::{WalFile, WalFs},
};

/// File name of the marker inside the WAL directory.
pub(crate) const MARKER_FILE: &str = "purged.meta";
/// Temporary name the marker is written under before being renamed into place.
pub(crate) const MARKER_TMP_FILE: &str = "purged.meta.tmp";

/// Reads the marker: `Some(purged_index)`, or `None` if nothing was ever purged.
pub(crate) fn read(fs: &dyn WalFs, dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(MARKER_FILE);
    let file = match fs.open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    // Replaced by rename, so a short or damaged marker is a disk fault, not a torn write.
    let len_bytes = file.len_bytes().map_err(|e| Error::io(&path, e))?;
    if len_bytes != format::MARKER_BYTES as u64 {
        return Err(Error::corrupt(
            &path,
            0,
            format!(
                "purge marker is {len_bytes} bytes, expected {}",
                format::MARKER_BYTES
            ),
        ));
    }
    let mut fixed = [0u8; format::MARKER_BYTES];
    file.read_exact_at(&mut fixed, 0)
        .map_err(|e| Error::io(&path, e))?;
    format::decode_marker(&fixed)
        .map(Some)
        .map_err(|e| Error::corrupt(&path, 0, format!("purge marker: {e}")))
}

/// Step 1 of replacing the marker: writes the new one under a temporary name (replacing
/// a leftover one). The caller fsyncs the returned file (unless in `none` mode), then
/// calls [`install`].
pub(crate) fn write_tmp(
    fs: &dyn WalFs,
    dir: &Path,
    purged_index: u64,
) -> Result<(Box<dyn WalFile>, PathBuf)> {
    let tmp = dir.join(MARKER_TMP_FILE);
    if fs.exists(&tmp).map_err(|e| Error::io(&tmp, e))? {
        fs.remove_file(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    let file = fs.create_new(&tmp).map_err(|e| Error::io(&tmp, e))?;
    file.write_all_at(&format::encode_marker(purged_index), 0)
        .map_err(|e| Error::io(&tmp, e))?;
    Ok((file, tmp))
}

/// Step 2: renames the temporary marker into place. The caller then fsyncs the directory
/// (unless in `none` mode) to make the replacement durable.
pub(crate) fn install(fs: &dyn WalFs, dir: &Path) -> Result<()> {
    let path = dir.join(MARKER_FILE);
    fs.rename(&dir.join(MARKER_TMP_FILE), &path)
        .map_err(|e| Error::io(&path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::OsFs;

    #[test]
    fn marker_round_trips_and_damage_is_corrupt() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", e))?;
        let fs = OsFs;
        assert_eq!(read(&fs, dir.path())?, None);
        for purged_index in [41, 42] {
            let (file, tmp) = write_tmp(&fs, dir.path(), purged_index)?;
            file.sync_data().map_err(|e| Error::io(&tmp, e))?;
            install(&fs, dir.path())?;
        }
        assert_eq!(read(&fs, dir.path())?, Some(42));
        assert!(!dir.path().join(MARKER_TMP_FILE).exists());

        let path = dir.path().join(MARKER_FILE);
        let mut bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
        bytes[14] ^= 1;
        std::fs::write(&path, &bytes).map_err(|e| Error::io(&path, e))?;
        assert!(matches!(
            read(&fs, dir.path()),
            Err(Error::Corrupt { offset: 0, .. })
        ));
        Ok(())
    }
}
