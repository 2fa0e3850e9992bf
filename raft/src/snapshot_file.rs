//! Snapshot files: `snapshots/{last_index:020}-{term:020}.snap` in the data directory.
//!
//! Layout: `magic "QVSNAP01" | meta_len u32 LE | SnapshotMeta JSON | memory image`
//! (quiver-storage's format: Parquet manifest plus unwritten rows). Written to a
//! temporary name, fsynced, renamed, directory fsynced; only the newest is kept.

use std::fs;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use quiver_storage::{read_image, write_image, MemoryImage};

use crate::types::SnapshotMeta;

const MAGIC: &[u8; 8] = b"QVSNAP01";
/// Largest metadata block accepted, in bytes.
const META_BYTES_MAX: u32 = 16 * 1024 * 1024;

/// Why a snapshot file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotFileError {
    /// OS error.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not a valid snapshot.
    #[error("{path}: {reason}")]
    Corrupt {
        /// File.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> SnapshotFileError + '_ {
    move |source| SnapshotFileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The directory snapshots live in.
pub fn snapshot_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("snapshots")
}

fn file_name(meta: &SnapshotMeta) -> String {
    let (index, term) = meta
        .last_log_id
        .map(|l| (l.index, l.leader_id.term))
        .unwrap_or((0, 0));
    format!("{index:020}-{term:020}.snap")
}

/// Writes a snapshot durably and deletes older ones. Returns its path.
pub fn write_snapshot(
    dir: &Path,
    meta: &SnapshotMeta,
    image: &MemoryImage,
) -> Result<PathBuf, SnapshotFileError> {
    fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join(file_name(meta));
    let tmp = path.with_extension("tmp");
    {
        let file = fs::File::create(&tmp).map_err(io(&tmp))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let meta_json = serde_json::to_vec(meta).map_err(|e| SnapshotFileError::Corrupt {
            path: tmp.clone(),
            reason: e.to_string(),
        })?;
        w.write_all(MAGIC).map_err(io(&tmp))?;
        w.write_all(&(meta_json.len() as u32).to_le_bytes())
            .map_err(io(&tmp))?;
        w.write_all(&meta_json).map_err(io(&tmp))?;
        write_image(image, &mut w).map_err(|e| SnapshotFileError::Corrupt {
            path: tmp.clone(),
            reason: e.to_string(),
        })?;
        let file = w.into_inner().map_err(|e| SnapshotFileError::Io {
            path: tmp.clone(),
            source: e.into_error(),
        })?;
        file.sync_all().map_err(io(&tmp))?;
    }
    install_file(dir, &tmp, &path)?;
    Ok(path)
}

/// Moves a complete snapshot file into place and removes every other snapshot.
pub fn install_file(dir: &Path, from: &Path, to: &Path) -> Result<(), SnapshotFileError> {
    fs::rename(from, to).map_err(io(to))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let p = entry.path();
        if p != to && p.extension().is_some_and(|e| e == "snap") {
            if let Err(e) = fs::remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "could not delete an old snapshot");
            }
        }
    }
    Ok(())
}

/// The newest complete snapshot file, if any.
pub fn latest_snapshot(dir: &Path) -> Result<Option<PathBuf>, SnapshotFileError> {
    if !dir.exists() {
        return Ok(None);
    }
    let mut newest: Option<PathBuf> = None;
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let p = entry.map_err(io(dir))?.path();
        if p.extension().is_some_and(|e| e == "snap") && newest.as_ref().is_none_or(|n| p > *n) {
            newest = Some(p);
        }
    }
    Ok(newest)
}

/// Reads only the metadata of a snapshot file.
pub fn read_meta(path: &Path) -> Result<SnapshotMeta, SnapshotFileError> {
    let mut r = BufReader::new(fs::File::open(path).map_err(io(path))?);
    read_meta_from(path, &mut r)
}

fn read_meta_from(path: &Path, r: &mut impl Read) -> Result<SnapshotMeta, SnapshotFileError> {
    let corrupt = |reason: String| SnapshotFileError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).map_err(io(path))?;
    if &magic != MAGIC {
        return Err(corrupt("not a Quiver snapshot (bad magic)".into()));
    }
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(io(path))?;
    let len = u32::from_le_bytes(len);
    if len > META_BYTES_MAX {
        return Err(corrupt(format!("metadata of {len} bytes")));
    }
    let mut meta = vec![0u8; len as usize];
    r.read_exact(&mut meta).map_err(io(path))?;
    serde_json::from_slice(&meta).map_err(|e| corrupt(e.to_string()))
}

/// Reads a snapshot from an open file positioned at its start.
pub fn read_snapshot_from(
    file: fs::File,
) -> Result<(SnapshotMeta, MemoryImage), SnapshotFileError> {
    let path = PathBuf::from("<received snapshot>");
    let mut r = BufReader::with_capacity(1 << 20, file);
    let meta = read_meta_from(&path, &mut r)?;
    let image = read_image(&mut r).map_err(|e| SnapshotFileError::Corrupt {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    Ok((meta, image))
}

/// Reads a whole snapshot file: metadata and memory image.
pub fn read_snapshot(path: &Path) -> Result<(SnapshotMeta, MemoryImage), SnapshotFileError> {
    let mut r = BufReader::with_capacity(1 << 20, fs::File::open(path).map_err(io(path))?);
    let meta = read_meta_from(path, &mut r)?;
    let image = read_image(&mut r).map_err(|e| SnapshotFileError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok((meta, image))
}
