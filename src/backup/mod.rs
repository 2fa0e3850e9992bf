//! `quiver backup` and `quiver restore --from`: online, consistent, incremental backups
//! of a node into a directory or a bucket (the same layout under an `s3://` prefix, see
//! [`bucket`]), and a new single node made from one.
//!
//! A backup directory holds, for each group the node runs, snapshots (the Raft
//! snapshot: Parquet manifest plus the rows not yet in Parquet) and the Parquet files
//! they list, and one manifest per backup naming every file with its size and SHA-256:
//!
//! ```text
//! DIR/manifests/20260102T030405.678Z.json     the commit point of one backup
//! DIR/manifests/20260102T030405.678Z.sha256   the same checksums for `sha256sum -c`
//! DIR/groups/{g}/snapshots/{index}-{term}-{sha256 prefix}.snap
//! DIR/groups/{g}/parquet/data/{db}/{measurement}/.../{first}-{last}.parquet
//! ```
//!
//! Parquet files are immutable and named by the log range they hold, so a later backup
//! into the same directory copies only the files it does not already hold with the
//! checksum an earlier manifest recorded. A backup without its manifest (interrupted)
//! is ignored by restore; its copied files are reused by the next one.

pub mod bucket;
mod files;
pub mod restore;
pub mod take;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use quiver_raft::GroupId;
use serde::{Deserialize, Serialize};

pub use files::{hex, install, sha256_of_file, write_durably};

/// Version of the manifest format; a restore refuses a newer one.
pub const MANIFEST_FORMAT: u32 = 1;
/// Directory of the manifests inside a backup directory.
pub const MANIFESTS_DIR: &str = "manifests";

/// One backup: what restore reads and checks before writing anything.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: u32,
    /// When the backup finished (RFC 3339, UTC).
    pub created_at: String,
    /// The node it was taken from.
    pub source_url: String,
    /// That node's id.
    pub node_id: u64,
    /// Its `cluster.data_groups`: a restore must serve with the same number.
    pub data_groups: usize,
    /// The version of the node.
    pub quiver_version: String,
    /// One entry per group the node runs, the first group first.
    pub groups: Vec<GroupBackup>,
    /// What this run copied and what it found already there.
    pub run: RunStats,
}

/// One group's part of a backup.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupBackup {
    /// The group's number (0: the first group).
    pub id: GroupId,
    /// The log index the snapshot holds everything up to.
    pub snapshot_index: u64,
    /// The term of that entry.
    pub snapshot_term: u64,
    /// The snapshot file.
    pub snapshot: FileEntry,
    /// Every Parquet file the snapshot lists.
    pub files: Vec<FileEntry>,
}

/// One file of a backup, relative to the backup directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Path under the backup directory, `/`-separated.
    pub path: String,
    /// Its length.
    pub size_bytes: u64,
    /// SHA-256 of its bytes, lower-case hex.
    pub sha256: String,
}

/// What one backup run did (operators and tests read it).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunStats {
    /// Files copied from the node (snapshots included).
    pub files_copied: usize,
    /// Bytes copied from the node.
    pub bytes_copied: u64,
    /// Parquet files already in the directory with the right checksum.
    pub files_reused: usize,
    /// Wall time of the run.
    pub elapsed_ms: u64,
}

impl Manifest {
    /// Every file the manifest names: snapshots and Parquet files.
    pub fn entries(&self) -> impl Iterator<Item = &FileEntry> {
        self.groups
            .iter()
            .flat_map(|g| std::iter::once(&g.snapshot).chain(g.files.iter()))
    }

    /// The manifest's file name for a backup finished at `created_at_ms`.
    pub fn file_name(created_at_ms: i64) -> String {
        let at = chrono::DateTime::from_timestamp_millis(created_at_ms).unwrap_or_default();
        format!("{}.json", at.format("%Y%m%dT%H%M%S%.3fZ"))
    }
}

/// Where `rel` (a manifest path) lives under `dir`.
pub fn local_path(dir: &Path, rel: &str) -> PathBuf {
    rel.split('/').fold(dir.to_path_buf(), |p, c| p.join(c))
}

/// The manifests in `dir`, oldest first (their names sort by time).
pub fn manifest_paths(dir: &Path) -> Result<Vec<PathBuf>> {
    let manifests = dir.join(MANIFESTS_DIR);
    let entries = match std::fs::read_dir(&manifests) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", manifests.display())),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading {}", manifests.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "json") {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// Reads and checks one manifest.
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    parse_manifest(&text, &path.display().to_string())
}

/// Parses and checks the manifest `bytes` read from `source` (named in errors).
pub fn parse_manifest(bytes: &[u8], source: &str) -> Result<Manifest> {
    let manifest: Manifest = serde_json::from_slice(bytes)
        .with_context(|| format!("{source}: not a Quiver backup manifest"))?;
    if manifest.format > MANIFEST_FORMAT {
        bail!(
            "{source}: manifest format {} is newer than this quiver reads ({MANIFEST_FORMAT})",
            manifest.format
        );
    }
    Ok(manifest)
}

/// The checksums earlier manifests in `dir` recorded, by path: what an incremental
/// backup may find already copied. An unreadable manifest is skipped with a warning
/// (its files are then copied again, never trusted).
pub fn known_checksums(dir: &Path) -> Result<BTreeMap<String, FileEntry>> {
    let mut known = BTreeMap::new();
    for path in manifest_paths(dir)? {
        match read_manifest(&path) {
            Ok(manifest) => {
                for entry in manifest.entries() {
                    known.insert(entry.path.clone(), entry.clone());
                }
            }
            Err(e) => eprintln!("backup: ignoring {e:#}"),
        }
    }
    Ok(known)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_names_sort_by_time() {
        let early = Manifest::file_name(1_700_000_000_000);
        let late = Manifest::file_name(1_700_000_000_001);
        assert!(early < late, "{early} < {late}");
        assert_eq!(early, "20231114T221320.000Z.json");
    }

    #[test]
    fn manifest_paths_map_below_the_directory() {
        let p = local_path(Path::new("/b"), "groups/0/parquet/data/x.parquet");
        assert_eq!(p, PathBuf::from("/b/groups/0/parquet/data/x.parquet"));
    }
}
