//! Snapshot files: `snapshots/{last_index:020}-{term:020}.snap` in the data directory.
//!
//! Layout: `magic "QVSNAP01" | meta_len u32 LE | SnapshotMeta JSON | memory image`
//! (quiver-storage's format: Parquet manifest plus unwritten rows, streamed). Written
//! through quiver-storage's [`replace_file_durably`] (temporary file, fsync, rename,
//! directory fsync); only the newest is kept. The metadata is held to
//! [`META_BYTES_MAX`] on both sides.

use std::fs;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use quiver_storage::{
    read_image, remove_stale_temp_files, replace_file_durably, write_image, MemoryImage,
};

use crate::types::SnapshotMeta;

const MAGIC: &[u8; 8] = b"QVSNAP01";
/// Largest metadata block (the `SnapshotMeta` JSON), in bytes; the writer refuses more,
/// the reader reads no more. Membership of a few voters is a few hundred bytes.
pub(crate) const META_BYTES_MAX: u32 = 16 * 1024 * 1024;

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
    /// The memory image inside could not be written or read.
    #[error("{path}: {source}")]
    Image {
        /// File.
        path: PathBuf,
        /// Cause.
        source: quiver_storage::Error,
    },
    /// Replacing the file failed (temporary file, fsync, rename).
    #[error(transparent)]
    Replace(#[from] quiver_storage::Error),
    /// The metadata could not be encoded or decoded.
    #[error("{path}: snapshot metadata: {source}")]
    Meta {
        /// File.
        path: PathBuf,
        /// Cause.
        source: serde_json::Error,
    },
    /// The metadata is larger than a reader accepts.
    #[error("{path}: snapshot metadata of {bytes} bytes, at most {META_BYTES_MAX} allowed")]
    MetaTooLarge {
        /// File.
        path: PathBuf,
        /// Size of the metadata.
        bytes: usize,
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
    let path = dir.join(file_name(meta));
    let meta_json = serde_json::to_vec(meta).map_err(|source| SnapshotFileError::Meta {
        path: path.clone(),
        source,
    })?;
    if meta_json.len() > META_BYTES_MAX as usize {
        return Err(SnapshotFileError::MetaTooLarge {
            path,
            bytes: meta_json.len(),
        });
    }
    replace_file_durably(&path, |w| -> Result<(), SnapshotFileError> {
        w.write_all(MAGIC).map_err(io(&path))?;
        w.write_all(&(meta_json.len() as u32).to_le_bytes())
            .map_err(io(&path))?;
        w.write_all(&meta_json).map_err(io(&path))?;
        write_image(image, w).map_err(|source| SnapshotFileError::Image {
            path: path.clone(),
            source,
        })
    })?;
    remove_others(dir, &path)?;
    Ok(path)
}

/// Removes every snapshot but `keep`, and temporary files crashes left behind (not
/// those of snapshots being written right now).
fn remove_others(dir: &Path, keep: &Path) -> Result<(), SnapshotFileError> {
    for removed in remove_stale_temp_files(dir)? {
        tracing::info!(path = %removed.display(), "removed the temporary file of an interrupted snapshot");
    }
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let p = entry.path();
        if p != keep && p.extension().is_some_and(|e| e == "snap") {
            if let Err(e) = fs::remove_file(&p) {
                tracing::warn!(path = %p.display(), error = %e, "could not delete an old snapshot");
            }
        }
    }
    Ok(())
}

impl SnapshotFileError {
    /// Whether the file was gone: a newer snapshot replaced it between listing the
    /// directory and opening it.
    pub fn is_not_found(&self) -> bool {
        matches!(self, SnapshotFileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Opens a snapshot to send it: its metadata, and the file positioned at its start.
/// Once open, the file stays readable even if a newer snapshot deletes it.
pub fn open_snapshot(path: &Path) -> Result<(SnapshotMeta, fs::File), SnapshotFileError> {
    use std::io::{Seek, SeekFrom};
    let mut file = fs::File::open(path).map_err(io(path))?;
    let meta = read_meta_from(path, &mut BufReader::new(&file))?;
    file.seek(SeekFrom::Start(0)).map_err(io(path))?;
    Ok((meta, file))
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
    serde_json::from_slice(&meta).map_err(|source| SnapshotFileError::Meta {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a snapshot from an open file positioned at its start.
pub fn read_snapshot_from(
    file: fs::File,
) -> Result<(SnapshotMeta, MemoryImage), SnapshotFileError> {
    let path = PathBuf::from("<received snapshot>");
    let mut r = BufReader::with_capacity(1 << 20, file);
    let meta = read_meta_from(&path, &mut r)?;
    let image = read_image(&mut r).map_err(|source| SnapshotFileError::Image {
        path: path.clone(),
        source,
    })?;
    Ok((meta, image))
}

/// Reads a whole snapshot file: metadata and memory image.
pub fn read_snapshot(path: &Path) -> Result<(SnapshotMeta, MemoryImage), SnapshotFileError> {
    let mut r = BufReader::with_capacity(1 << 20, fs::File::open(path).map_err(io(path))?);
    let meta = read_meta_from(path, &mut r)?;
    let image = read_image(&mut r).map_err(|source| SnapshotFileError::Image {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((meta, image))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::Instant;

    use openraft::{BasicNode, CommittedLeaderId, LogId, Membership, StoredMembership};
    use quiver_storage::{
        parquet_path, ColumnKind, ColumnMeta, FieldType, FileMeta, LogIndex, TimestampNs,
    };

    use super::*;

    fn meta_at(index: u64) -> SnapshotMeta {
        let log_id = LogId::new(CommittedLeaderId::new(3, 1), index);
        let nodes: BTreeMap<u64, BasicNode> = (1..=3)
            .map(|id| (id, BasicNode::new(format!("10.0.0.{id}:8080"))))
            .collect();
        let voters: BTreeSet<u64> = nodes.keys().copied().collect();
        SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: StoredMembership::new(
                Some(log_id),
                Membership::new(vec![voters], nodes),
            ),
            snapshot_id: format!("3-{index}-1"),
        }
    }

    /// A file description the size of a real one.
    fn file_meta(i: u64) -> FileMeta {
        let hour =
            TimestampNs(1_700_000_000_000_000_000 + (i as i64 % 5_000) * TimestampNs::HOUR_NS);
        let (log_first, log_last) = (LogIndex(i * 10 + 1), LogIndex(i * 10 + 10));
        FileMeta {
            version: 1,
            path: parquet_path("telemetry", "cpu", hour, log_first, log_last),
            database: "telemetry".into(),
            measurement: "cpu".into(),
            rows: 10_000 + i,
            time_min: hour,
            time_max: TimestampNs(hour.0 + TimestampNs::HOUR_NS - 1),
            log_first,
            log_last,
            segment_files: 1,
            columns: vec![
                ColumnMeta::new("time", ColumnKind::Time),
                ColumnMeta::new("host", ColumnKind::Tag),
                ColumnMeta::new("region", ColumnKind::Tag),
                ColumnMeta::new("usage_idle", ColumnKind::Field(FieldType::Float)),
                ColumnMeta::new("usage_user", ColumnKind::Field(FieldType::Float)),
                ColumnMeta::new("usage_system", ColumnKind::Field(FieldType::Float)),
            ]
            .into(),
            size_bytes: 1_000_000 + i,
            compaction: None,
            tag_distinct: Vec::new(),
            sort_lead: None,
        }
    }

    /// The node of the bug had ~2,400 files; its snapshot's manifest was one 1 MiB+
    /// frame header the reader refused, so it could not start once its log was purged.
    #[test]
    fn manifest_of_100k_files_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<FileMeta> = (0..100_000).map(file_meta).collect();
        let image = MemoryImage {
            tables: Vec::new(),
            files: files.clone(),
            policies: Default::default(),
            compactions: Vec::new(),
            sort_leads: None,
            generation: 0,
        };
        let meta = meta_at(1_000_000);
        let started = Instant::now();
        let path = write_snapshot(dir.path(), &meta, &image).unwrap();
        let written = started.elapsed();
        let bytes = fs::metadata(&path).unwrap().len();
        let started = Instant::now();
        let (meta_back, image_back) = read_snapshot(&path).unwrap();
        let read = started.elapsed();
        eprintln!(
            "snapshot of {} files: {bytes} bytes, written (with fsync) in {written:?}, read in {read:?}",
            files.len()
        );
        assert_eq!(meta_back, meta);
        assert_eq!(image_back.files, files);
        assert_eq!(latest_snapshot(dir.path()).unwrap(), Some(path));
    }

    #[test]
    fn a_new_snapshot_replaces_the_old_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // A crash left a temporary file behind.
        fs::write(
            dir.path()
                .join("00000000000000000001-00000000000000000001.snap.tmp"),
            b"x",
        )
        .unwrap();
        let image = MemoryImage::default();
        let first = write_snapshot(dir.path(), &meta_at(5), &image).unwrap();
        let second = write_snapshot(dir.path(), &meta_at(9), &image).unwrap();
        assert_ne!(first, second);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(names, std::slice::from_ref(&second));
        assert_eq!(read_meta(&second).unwrap(), meta_at(9));
    }

    #[test]
    fn a_snapshot_opened_to_send_stays_whole_after_a_newer_one_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let image = MemoryImage::default();
        let first = write_snapshot(dir.path(), &meta_at(5), &image).unwrap();
        let bytes = fs::read(&first).unwrap();
        let (meta, mut file) = open_snapshot(&first).unwrap();
        assert_eq!(meta, meta_at(5));
        // The builder writes the next one and deletes this one meanwhile.
        let second = write_snapshot(dir.path(), &meta_at(9), &image).unwrap();
        assert!(!first.exists());
        let mut sent = Vec::new();
        file.read_to_end(&mut sent).unwrap();
        assert_eq!(
            sent, bytes,
            "the open file is sent whole, from its first byte"
        );
        // Listed before the replacement, opened after: gone, and said so.
        let gone = open_snapshot(&first).unwrap_err();
        assert!(gone.is_not_found(), "{gone}");
        assert_eq!(open_snapshot(&second).unwrap().0, meta_at(9));
    }

    #[test]
    fn oversized_metadata_is_refused_by_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let mut meta = meta_at(5);
        meta.snapshot_id = "x".repeat(META_BYTES_MAX as usize);
        assert!(matches!(
            write_snapshot(dir.path(), &meta, &MemoryImage::default()),
            Err(SnapshotFileError::MetaTooLarge { .. })
        ));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
