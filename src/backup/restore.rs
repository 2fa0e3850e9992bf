//! `quiver restore --from DIR|s3://... --data-dir D --wal-dir W`: a new single node
//! from a backup (a bucket's is downloaded beside the data directory first). Every checksum is checked before anything is written (a corrupt or missing
//! file is an error naming it); then, per group, the Parquet files are copied into the
//! group's directory and the snapshot is laid down with this node as the only voter
//! (`quiver_raft::lay_down_backup`). `quiver serve` with the same settings then starts
//! with exactly the backed-up state: the rows, tokens, retention rules and continuous
//! queries of the snapshot's log index.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use quiver_raft::RestoreSettings;
use quiver_wal::WalConfig;

use super::bucket::{is_bucket_url, BucketBackup};
use super::{
    install, local_path, manifest_paths, read_manifest, sha256_of_file, FileEntry, Manifest,
    MANIFESTS_DIR,
};
use crate::config::Config;
use crate::groups::{check_layout, group_dirs};

/// Most problems listed when a backup fails its check.
const PROBLEMS_LISTED_MAX: usize = 20;

/// Where a bucket backup is downloaded, inside the (otherwise empty) data directory.
const RESTORE_STAGING_DIR: &str = ".restore-staging";

/// Files of a bucket backup downloaded at once.
const DOWNLOADS_PARALLEL: usize = 4;

/// Restores the backup in `from`, a directory or a bucket (its newest manifest, or
/// `manifest`), into the directories `config` names, which must hold no data yet.
pub async fn run(config: Config, from: String, manifest: Option<String>) -> Result<()> {
    if !is_bucket_url(&from) {
        return restore_dir(config, PathBuf::from(from), manifest, Placing::Copy).await;
    }
    let bucket = BucketBackup::open(&from, "--from")?;
    check_settings_early(&config)?;
    // Downloaded into the data directory (the volume the node may write, so each file
    // is then renamed into place, not copied), checked there like a directory backup,
    // and removed afterwards whatever happens (a restore killed midway leaves it for
    // the next restore to clear).
    let staging = Staging(config.storage.dir.join(RESTORE_STAGING_DIR));
    if staging.0.exists() {
        std::fs::remove_dir_all(&staging.0)
            .with_context(|| format!("clearing {}", staging.0.display()))?;
    }
    std::fs::create_dir_all(&staging.0)
        .with_context(|| format!("creating {}", staging.0.display()))?;
    let name = bucket
        .download_backup(manifest, &staging.0, DOWNLOADS_PARALLEL)
        .await?;
    restore_dir(config, staging.0.clone(), Some(name), Placing::Move).await
}

/// A download directory removed when dropped.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How Parquet files get from the backup into the node's directory.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placing {
    /// Copied: the backup directory stays whole.
    Copy,
    /// Moved (renamed; copied across volumes): the backup is a download of our own.
    Move,
}

/// The settings a restore refuses, checked before a bucket backup is downloaded.
fn check_settings_early(config: &Config) -> Result<()> {
    let data_dir = config.storage.dir.clone();
    let wal_dir = config.wal_dir();
    ensure_empty(&data_dir, "storage.dir (--data-dir)", &wal_dir)?;
    ensure_empty(&wal_dir, "wal.dir (--wal-dir)", &wal_dir)?;
    if config.peers()?.len() > 1 || config.bucket().is_some() {
        bail!(
            "restore --from makes a new single node on local disk: no cluster.peers, no \
             storage.object_store"
        );
    }
    Ok(())
}

async fn restore_dir(
    config: Config,
    from: PathBuf,
    manifest: Option<String>,
    placing: Placing,
) -> Result<()> {
    let started = std::time::Instant::now();
    let manifest_path = match manifest {
        Some(name) => from.join(MANIFESTS_DIR).join(name),
        None => manifest_paths(&from)?.pop().with_context(|| {
            format!(
                "{}: no backup manifest (manifests/*.json); is it a `quiver backup --to` \
                 directory, and did that backup finish?",
                from.display()
            )
        })?,
    };
    let manifest = read_manifest(&manifest_path)?;
    check_settings(&config, &manifest)?;
    let data_dir = config.storage.dir.clone();
    let wal_dir = config.wal_dir();
    ensure_empty(&data_dir, "storage.dir (--data-dir)", &wal_dir)?;
    ensure_empty(&wal_dir, "wal.dir (--wal-dir)", &wal_dir)?;
    println!(
        "restore: checking {} files of {}",
        manifest.entries().count(),
        manifest_path.display()
    );
    check_files(&from, &manifest).await?;
    let _locks = crate::dir_lock::lock_dirs(&data_dir, &wal_dir)?;
    let sync = config.wal_sync()?;
    let advertise_addr = config
        .cluster
        .advertise_addr
        .clone()
        .unwrap_or_else(|| config.http.addr.clone());
    let mut rows_files = 0usize;
    for group in &manifest.groups {
        let dirs = group_dirs(&data_dir, &wal_dir, group.id);
        let parquet_dir = dirs.data.join("parquet");
        let prefix = format!("groups/{}/parquet/", group.id);
        for file in &group.files {
            let Some(path) = file.path.strip_prefix(&prefix) else {
                bail!("{}: not under {prefix}", file.path);
            };
            copy_into(
                &local_path(&from, &file.path),
                &local_path(&parquet_dir, path),
                placing,
            )?;
        }
        rows_files += group.files.len();
        let snapshot = local_path(&from, &group.snapshot.path);
        let (meta, image) =
            tokio::task::spawn_blocking(move || quiver_raft::read_snapshot(&snapshot))
                .await?
                .with_context(|| group.snapshot.path.clone())?;
        let held: BTreeSet<&str> = group
            .files
            .iter()
            .filter_map(|f| f.path.strip_prefix(&prefix))
            .collect();
        if let Some(missing) = image.files.iter().find(|f| !held.contains(f.path.as_str())) {
            bail!(
                "{}: the snapshot lists {} but the manifest does not",
                group.snapshot.path,
                missing.path
            );
        }
        let settings = RestoreSettings {
            node_id: config.cluster.node_id,
            advertise_addr: advertise_addr.clone(),
            clustered: false,
            data_dir: dirs.data.clone(),
            wal: WalConfig {
                dir: dirs.wal.clone(),
                sync,
                ..WalConfig::default()
            },
        };
        let index = quiver_raft::lay_down_backup(&settings, &meta, &image)
            .with_context(|| format!("group {}", group.id))?;
        println!(
            "restore: group {}: {} Parquet files, snapshot at log index {index}",
            group.id,
            group.files.len()
        );
    }
    // Records the number of data groups, so a start with another number is refused.
    check_layout(&data_dir, manifest.data_groups, false)?;
    println!(
        "restore: {} groups, {rows_files} Parquet files restored from {} (taken {} from {}) in \
         {} ms; start the node with the same settings (quiver serve ...)",
        manifest.groups.len(),
        manifest_path.display(),
        manifest.created_at,
        manifest.source_url,
        started.elapsed().as_millis()
    );
    Ok(())
}

/// The node restored into must be able to serve the backup as it was taken.
fn check_settings(config: &Config, manifest: &Manifest) -> Result<()> {
    if config.peers()?.len() > 1 {
        bail!(
            "restore --from makes a new single node: start it without cluster.peers, then \
             grow it with `quiver cluster add-learner`"
        );
    }
    if config.bucket().is_some() {
        bail!(
            "restore --from writes Parquet files to local disk; unset storage.object_store \
             (the restored node can move to a bucket with `quiver restore` later)"
        );
    }
    if config.cluster.data_groups != manifest.data_groups {
        bail!(
            "the backup holds {} data group(s); restore and serve with cluster.data_groups = {} \
             (QUIVER_CLUSTER_DATA_GROUPS), not {}",
            manifest.data_groups,
            manifest.data_groups,
            config.cluster.data_groups
        );
    }
    Ok(())
}

/// Refuses a directory that holds anything but `except` (the WAL directory inside the
/// data directory, the default) and an empty lock file.
fn ensure_empty(dir: &Path, setting: &str, except: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    for entry in entries {
        let path = entry?.path();
        let is_lock = path
            .file_name()
            .is_some_and(|n| n == crate::dir_lock::LOCK_FILE);
        let is_empty_wal = path == except && std::fs::read_dir(&path)?.next().is_none();
        let is_staging = path.file_name().is_some_and(|n| n == RESTORE_STAGING_DIR);
        if !is_lock && !is_empty_wal && !is_staging {
            bail!(
                "{setting} {} is not empty ({} is there): restore --from makes a new node, \
                 into empty directories only",
                dir.display(),
                path.display()
            );
        }
    }
    Ok(())
}

/// Checks every file of the manifest (size, then SHA-256); lists the problems.
async fn check_files(from: &Path, manifest: &Manifest) -> Result<()> {
    let entries: Vec<FileEntry> = manifest.entries().cloned().collect();
    let from = from.to_path_buf();
    let problems = tokio::task::spawn_blocking(move || {
        entries
            .iter()
            .filter_map(|e| check_file(&from, e).err())
            .collect::<Vec<String>>()
    })
    .await?;
    if problems.is_empty() {
        return Ok(());
    }
    let listed: Vec<&str> = problems
        .iter()
        .take(PROBLEMS_LISTED_MAX)
        .map(String::as_str)
        .collect();
    bail!(
        "the backup is damaged, nothing was written: {} file(s) fail their check:\n  {}",
        problems.len(),
        listed.join("\n  ")
    )
}

fn check_file(from: &Path, entry: &FileEntry) -> Result<(), String> {
    let path = local_path(from, &entry.path);
    let (sum, len) = sha256_of_file(&path)
        .map_err(|e| format!("{}: missing or unreadable ({e:#})", entry.path))?;
    if len != entry.size_bytes {
        return Err(format!(
            "{}: corrupt: {len} bytes, the manifest says {}",
            entry.path, entry.size_bytes
        ));
    }
    if sum != entry.sha256 {
        return Err(format!(
            "{}: corrupt: sha256 {sum}, the manifest says {}",
            entry.path, entry.sha256
        ));
    }
    Ok(())
}

/// Puts `from` at `to` durably (staged beside it, fsynced, renamed): a copy, or with
/// [`Placing::Move`] a rename when both are on one volume.
fn copy_into(from: &Path, to: &Path, placing: Placing) -> Result<()> {
    if let Some(parent) = to.parent() {
        quiver_storage::create_dir_all_durably(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let staged = to.with_extension("parquet.part");
    let moved = placing == Placing::Move && std::fs::rename(from, &staged).is_ok();
    if !moved {
        std::fs::copy(from, &staged)
            .with_context(|| format!("copying {} to {}", from.display(), staged.display()))?;
    }
    install(&staged, to)
}
