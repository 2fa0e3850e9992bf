//! `quiver restore`: run on a stopped node with the settings it serves with, after a
//! lost disk or WAL volume (see `quiver_raft::restore` and docs/operations.md).

use anyhow::{Context, Result};
use quiver_raft::{RestoreReport, RestoreSettings};
use quiver_wal::WalConfig;

use crate::config::Config;

/// Runs the restore and prints what it did.
pub async fn run(config: Config) -> Result<()> {
    let data_dir = config.storage.dir.clone();
    let _locks = crate::dir_lock::lock_dirs(&data_dir, &config.wal_dir())?;
    let peers = config.peers()?;
    let settings = RestoreSettings {
        node_id: config.cluster.node_id,
        advertise_addr: config
            .cluster
            .advertise_addr
            .clone()
            .unwrap_or_else(|| config.http.addr.clone()),
        clustered: peers.len() > 1,
        data_dir: data_dir.clone(),
        wal: WalConfig {
            dir: config.wal_dir(),
            sync: config.wal_sync()?,
            ..WalConfig::default()
        },
    };
    let storage = crate::node::storage_config(&config);
    if let Some(bucket) = &storage.object_store {
        println!(
            "restore: reading {}; if another data directory wrote it, waiting up to {} ms to \
             see whether that writer still runs",
            bucket.url,
            bucket.owner_beat_ms * 5 / 2
        );
    }
    let report = quiver_raft::restore(&settings, &storage)
        .await
        .context("restore")?;
    match report {
        RestoreReport::Claimed { location, because } => {
            println!("restore: {location} now belongs to this data directory; {because}.");
            println!("restore: start the node as usual (quiver serve ...).");
        }
        RestoreReport::Rebuilt {
            location,
            files,
            adopted,
            rows,
            superseded,
            quarantined,
            snapshot_index,
            previous_snapshot_index,
        } => {
            println!(
                "restore: {location}: {files} files held from now on, {adopted} of them \
                 adopted ({rows} rows){}; {superseded} replaced by a compaction left for the \
                 start's sweep",
                previous_snapshot_index
                    .map(|i| format!(" beyond the surviving snapshot at {i}"))
                    .unwrap_or_default()
            );
            for path in &quarantined {
                println!("restore: unreadable, moved aside: {path}");
            }
            println!(
                "restore: snapshot written at log index {snapshot_index}; the log goes on after \
                 it. Rows that were never flushed are lost{}.",
                if previous_snapshot_index.is_none() {
                    ", and so are tokens, retention rules and continuous queries (no snapshot \
                     survived): recreate them"
                } else {
                    ""
                }
            );
            println!("restore: start the node as usual (quiver serve ...).");
        }
    }
    Ok(())
}
