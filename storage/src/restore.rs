//! Adopting the Parquet files a node finds under its directory or bucket prefix when
//! its own record of them was lost (`quiver restore`): a lost disk beside a bucket, a
//! lost WAL volume beside a data directory.
//!
//! The files describe themselves (database, measurement, log range, compaction marks in
//! their footers), so the set a node should hold can be rebuilt from them: every
//! readable file its snapshot (if it kept one) does not already account for, minus the
//! files a compaction output among them replaced. Unlike the footer rebuild at open,
//! the files of a segment some of whose hours are missing are kept: with the log gone
//! they are the only copy of what they hold. Unreadable files are moved to quarantine,
//! not left for a sweep to delete. Nothing else is deleted here.

use std::collections::BTreeMap;

use crate::catalog::{quarantine_dir, read_footer};
use crate::compaction::split_superseded;
use crate::error::Result;
use crate::file_store::FileStore;
use crate::ids::LogIndex;
use crate::meta::FileMeta;
use crate::paths::log_end_of;
use crate::store::{staging_dir, StorageConfig, OBJECT_CACHE_DIR};

/// What [`adopt_files`] found.
#[derive(Debug, Clone, Default)]
pub struct Adoption {
    /// The files the node holds from now on: its snapshot's manifest and every file
    /// beyond it, less those a compaction output replaced.
    pub files: Vec<FileMeta>,
    /// Files beyond the snapshot that were adopted (also in `files`).
    pub adopted: usize,
    /// Files a compaction output among them replaced (left in place; the start's sweep
    /// deletes them, as they end within what the node then holds).
    pub superseded: usize,
    /// Unreadable files, moved to quarantine (their paths there).
    pub quarantined: Vec<String>,
    /// The highest log index any kept file holds (0 with none): the node's log must go
    /// on after it, or new files would be written under the names of old ones.
    pub log_end: LogIndex,
    /// Where the files are.
    pub location: String,
}

/// Claims the node's bucket prefix for this data directory, taking over the files of a
/// writer that stopped (never one that still runs): what `quiver restore` does for a
/// node whose peers will send it the rest. Nothing to do on local disk.
pub async fn claim_files(config: &StorageConfig) -> Result<String> {
    let store = open_store(config)?;
    store.claim(&config.dir).await?;
    Ok(store.describe())
}

/// Reads the footers of every file under the node's prefix and decides which it holds
/// (module documentation). `snapshot`: the newest snapshot's manifest and last log
/// index, if one survived: files it does not list ending at or below that index are
/// ones it knows to be garbage.
pub async fn adopt_files(
    config: &StorageConfig,
    snapshot: Option<(&[FileMeta], LogIndex)>,
) -> Result<Adoption> {
    let store = open_store(config)?;
    store.claim(&config.dir).await?;
    let (listed, _temps_removed) = store.list().await?;
    let (manifest, snapshot_index) = snapshot.unwrap_or((&[], LogIndex(0)));
    let by_path: BTreeMap<&str, &FileMeta> =
        manifest.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut adoption = Adoption {
        location: store.describe(),
        ..Adoption::default()
    };
    let mut candidates: Vec<FileMeta> = manifest.to_vec();
    let reader = store.reader();
    for (path, size) in &listed {
        if by_path.contains_key(path.as_str()) {
            continue;
        }
        if log_end_of(path).is_some_and(|end| end <= snapshot_index) {
            continue;
        }
        match read_footer(&reader, path, *size).await {
            Ok(meta) => {
                adoption.adopted += 1;
                candidates.push(meta);
            }
            Err(e) => {
                let reason = format!("unreadable while restoring: {e}");
                let moved = store
                    .quarantine(&quarantine_dir(&config.dir), path, &reason)
                    .await?;
                adoption.quarantined.push(moved);
            }
        }
    }
    let (live, superseded) = split_superseded(candidates);
    adoption.superseded = superseded.len();
    adoption.adopted -= superseded
        .iter()
        .filter(|f| !by_path.contains_key(f.path.as_str()))
        .count();
    adoption.log_end = live
        .iter()
        .map(|f| f.compaction.map_or(f.log_last, |c| c.index.max(f.log_last)))
        .max()
        .unwrap_or(LogIndex(0));
    adoption.files = live;
    Ok(adoption)
}

/// The file store `config` names, for adoption: as storage opens it, with takeover of
/// a stopped writer's prefix allowed.
fn open_store(config: &StorageConfig) -> Result<FileStore> {
    let parquet_dir = config.dir.join("parquet");
    crate::durable::create_dir_all_durably(&parquet_dir)?;
    let staging = staging_dir(&config.dir);
    match &config.object_store {
        None => FileStore::local(&parquet_dir, staging),
        Some(bucket) => {
            let settings = crate::BucketSettings {
                adopt: true,
                ..bucket.clone()
            };
            FileStore::bucket(&settings, &config.dir.join(OBJECT_CACHE_DIR), staging)
        }
    }
}
