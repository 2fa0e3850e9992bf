//! Who writes under a bucket prefix: one data directory at a time, and never a new one
//! over files it cannot account for.
//!
//! Local disk needs none of this: the data directory is locked while a node runs, and
//! the files are lost with it. A bucket outlives the disk beside it, and nothing stops
//! two processes from being given the same `storage.object_store` and node id. Both
//! dangers end in deleted or overwritten files, so the prefix carries an owner marker
//! (`owner.json` beside `data/`) naming the data directory that writes there (a random
//! *instance* id kept in `{storage.dir}/instance`), rewritten every
//! `owner_beat_ms` while the node runs. At open:
//!
//! * the marker names this directory: it is ours;
//! * it names another one that still beats (watched for [`WATCH_BEATS`] beats): another
//!   process uses the prefix now, and this start is refused;
//! * it names one that stopped beating, or there is none and this directory is new,
//!   while the prefix holds files: either the disk of the node that wrote them was lost,
//!   or this node was given another's prefix. A node of a cluster takes the prefix over
//!   (its peers hold every row, and the files stay until a later start proves them
//!   garbage, see `store::sweep`); a single node refuses to start, since a new log
//!   would write new files under the old names and it has no one to catch up from:
//!   `quiver restore` adopts the files (docs/operations.md);
//! * otherwise (an empty prefix, or a directory from before markers) it claims it.
//!
//! A running node whose beat finds another instance in the marker stops writing files
//! to the prefix ([`Error::PrefixTakenOver`]): its flushes fail and are retried, its
//! rows stay in memory and in the log, and writes are refused once memory is full.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};

use crate::durable::replace_file_durably;
use crate::error::{Error, Result};
use crate::paths::DATA_PREFIX;

/// The marker's object, beside `data/` under the node's prefix.
pub(crate) const OWNER_OBJECT: &str = "owner.json";
/// The data directory's instance id, inside `storage.dir`.
pub const INSTANCE_FILE: &str = "instance";
/// Beats a starting node watches a marker of another instance for, before it decides
/// that instance stopped: two and a half, so one late beat does not pass for a dead
/// owner.
pub(crate) const WATCH_BEATS: f64 = 2.5;

/// What the owner marker says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OwnerMarker {
    /// The writing data directory's instance id.
    pub instance: String,
    /// Its node id.
    pub node_id: u64,
    /// Its host, for the operator.
    pub host: String,
    /// Its process.
    pub pid: u32,
    /// Counts beats: a marker whose count moves has a live owner.
    pub beat: u64,
    /// Wall-clock time of the beat (milliseconds since the epoch), for the operator only:
    /// liveness is judged by `beat` moving, never by comparing clocks.
    pub beat_unix_ms: u64,
}

/// How a node may claim a prefix.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimRules {
    /// This node's id.
    pub node_id: u64,
    /// It has peers to catch up from.
    pub clustered: bool,
    /// How often the owner rewrites the marker.
    pub beat_ms: u64,
    /// Take over the files of a stopped owner even as a single node (`quiver restore`).
    pub adopt: bool,
}

/// This process's claim on the prefix, kept alive by [`Owner::beat`].
#[derive(Debug)]
pub(crate) struct Owner {
    marker: tokio::sync::Mutex<OwnerMarker>,
}

impl Owner {
    /// The instance id this process writes as.
    pub(crate) async fn instance(&self) -> String {
        self.marker.lock().await.instance.clone()
    }

    /// Rewrites the marker, after checking that it is still ours.
    pub(crate) async fn beat(&self, store: &dyn ObjectStore, url: &str) -> Result<()> {
        let mut mine = self.marker.lock().await;
        match read_marker(store).await? {
            Some(found) if found.instance != mine.instance => {
                return Err(Error::PrefixTakenOver {
                    url: url.to_string(),
                    by: describe(&found),
                })
            }
            _ => {}
        }
        mine.beat += 1;
        mine.beat_unix_ms = unix_ms();
        write_marker(store, &mine).await
    }
}

/// Claims the prefix for the data directory `dir` as the module documentation says.
pub(crate) async fn claim(
    store: &dyn ObjectStore,
    url: &str,
    dir: &Path,
    rules: ClaimRules,
) -> Result<Owner> {
    let local = read_instance(dir)?;
    // A directory that held a catalog or snapshots has a past even without an instance
    // file (one from before markers): it is not new.
    let new_directory = local.is_none() && !has_past(dir);
    let found = read_marker(store).await?;
    match (&found, &local) {
        (Some(marker), Some(ours)) if &marker.instance == ours => {
            return finish_claim(store, dir, rules, Some(ours.clone())).await;
        }
        (Some(marker), _) => {
            let watch = Duration::from_millis((rules.beat_ms as f64 * WATCH_BEATS) as u64);
            tracing::warn!(owner = %describe(marker), watch_ms = watch.as_millis() as u64,
                "the bucket prefix names another data directory as its writer; watching whether it still runs");
            tokio::time::sleep(watch).await;
            if let Some(now) = read_marker(store).await? {
                if now.instance != marker.instance || now.beat != marker.beat {
                    return Err(Error::PrefixInUse {
                        url: url.to_string(),
                        by: describe(&now),
                    });
                }
            }
        }
        (None, _) if !new_directory => {
            return finish_claim(store, dir, rules, local).await;
        }
        (None, _) => {}
    }
    // No live owner, and this directory never wrote here (or another did since).
    if rules.clustered || rules.adopt || !holds_files(store).await? {
        if let Some(marker) = &found {
            tracing::warn!(previous = %describe(marker), clustered = rules.clustered,
                "taking over the bucket prefix of a stopped writer; its files are kept until proven garbage");
        }
        return finish_claim(store, dir, rules, local).await;
    }
    Err(Error::ForeignFiles {
        url: url.to_string(),
        written_by: found.as_ref().map(describe),
    })
}

/// Records this directory as the prefix's writer.
async fn finish_claim(
    store: &dyn ObjectStore,
    dir: &Path,
    rules: ClaimRules,
    local: Option<String>,
) -> Result<Owner> {
    let instance = match local {
        Some(instance) => instance,
        None => {
            let instance = new_instance_id();
            write_instance(dir, &instance)?;
            instance
        }
    };
    let marker = OwnerMarker {
        instance,
        node_id: rules.node_id,
        host: hostname(),
        pid: std::process::id(),
        beat: read_marker(store).await?.map_or(0, |m| m.beat + 1),
        beat_unix_ms: unix_ms(),
    };
    write_marker(store, &marker).await?;
    Ok(Owner {
        marker: tokio::sync::Mutex::new(marker),
    })
}

fn describe(marker: &OwnerMarker) -> String {
    format!(
        "instance {} (node {}, host {}, pid {}, last beat at {} ms since the epoch)",
        marker.instance, marker.node_id, marker.host, marker.pid, marker.beat_unix_ms
    )
}

/// Whether `dir` was a storage directory before: it holds a catalog or snapshots.
fn has_past(dir: &Path) -> bool {
    ["catalog", "snapshots"]
        .iter()
        .any(|d| dir.join(d).exists())
}

/// Whether any Parquet file is under the prefix's `data/`.
async fn holds_files(store: &dyn ObjectStore) -> Result<bool> {
    let prefix = ObjectPath::from(DATA_PREFIX);
    let mut listing = store.list(Some(&prefix));
    while let Some(object) = listing.next().await {
        if object?.location.as_ref().ends_with(".parquet") {
            return Ok(true);
        }
    }
    Ok(false)
}

async fn read_marker(store: &dyn ObjectStore) -> Result<Option<OwnerMarker>> {
    match store.get(&ObjectPath::from(OWNER_OBJECT)).await {
        Ok(got) => {
            let bytes = got.bytes().await?;
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| Error::Corrupt {
                    path: OWNER_OBJECT.to_string(),
                    reason: format!("the owner marker is not readable: {e}"),
                })
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn write_marker(store: &dyn ObjectStore, marker: &OwnerMarker) -> Result<()> {
    let bytes = serde_json::to_vec(marker).map_err(|e| Error::Catalog(e.to_string()))?;
    store
        .put(&ObjectPath::from(OWNER_OBJECT), bytes.into())
        .await?;
    Ok(())
}

fn instance_path(dir: &Path) -> PathBuf {
    dir.join(INSTANCE_FILE)
}

/// The data directory's instance id, if it has one.
pub(crate) fn read_instance(dir: &Path) -> Result<Option<String>> {
    let path = instance_path(dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io { path, source }),
    }
}

fn write_instance(dir: &Path, instance: &str) -> Result<()> {
    let path = instance_path(dir);
    replace_file_durably(&path, |w| {
        std::io::Write::write_all(w, instance.as_bytes()).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })
    })
}

fn new_instance_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn rules(clustered: bool) -> ClaimRules {
        ClaimRules {
            node_id: 1,
            clustered,
            beat_ms: 20,
            adopt: false,
        }
    }

    async fn put_file(store: &InMemory) {
        store
            .put(
                &ObjectPath::from("data/db/m/2026-01-01/00/1-2.parquet"),
                vec![1u8].into(),
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_new_directory_claims_an_empty_prefix_and_keeps_it() {
        let (store, dir) = (InMemory::new(), tempfile::tempdir().unwrap());
        let owner = claim(&store, "s3://b/p", dir.path(), rules(false))
            .await
            .unwrap();
        let instance = owner.instance().await;
        assert_eq!(read_instance(dir.path()).unwrap(), Some(instance.clone()));
        owner.beat(&store, "s3://b/p").await.unwrap();
        put_file(&store).await;
        // The same directory again: ours, at once.
        let again = claim(&store, "s3://b/p", dir.path(), rules(false))
            .await
            .unwrap();
        assert_eq!(again.instance().await, instance);
    }

    #[tokio::test]
    async fn a_lost_disk_is_refused_for_a_single_node_and_taken_over_in_a_cluster() {
        let store = InMemory::new();
        let first = tempfile::tempdir().unwrap();
        claim(&store, "s3://b/p", first.path(), rules(false))
            .await
            .unwrap();
        put_file(&store).await;
        // The disk is lost: a new directory, the old owner beats no more.
        let second = tempfile::tempdir().unwrap();
        let refused = claim(&store, "s3://b/p", second.path(), rules(false))
            .await
            .unwrap_err();
        assert!(matches!(refused, Error::ForeignFiles { .. }), "{refused}");
        assert!(refused.to_string().contains("quiver restore"), "{refused}");
        assert_eq!(read_instance(second.path()).unwrap(), None);
        let taken = claim(&store, "s3://b/p", second.path(), rules(true))
            .await
            .unwrap();
        assert_eq!(
            read_instance(second.path()).unwrap(),
            Some(taken.instance().await)
        );
    }

    #[tokio::test]
    async fn a_prefix_whose_owner_beats_is_refused_and_the_owner_learns_of_a_takeover() {
        let store = std::sync::Arc::new(InMemory::new());
        let first = tempfile::tempdir().unwrap();
        let owner = claim(&*store, "s3://b/p", first.path(), rules(false))
            .await
            .unwrap();
        let beating = {
            let store = store.clone();
            tokio::spawn(async move {
                loop {
                    owner.beat(&*store, "s3://b/p").await.unwrap();
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        let second = tempfile::tempdir().unwrap();
        let refused = claim(&*store, "s3://b/p", second.path(), rules(true))
            .await
            .unwrap_err();
        assert!(matches!(refused, Error::PrefixInUse { .. }), "{refused}");
        beating.abort();
        // Once it stops, a cluster node takes over; the old owner's next beat says so.
        let old = OwnerMarker {
            ..read_marker(&*store).await.unwrap().unwrap()
        };
        claim(&*store, "s3://b/p", second.path(), rules(true))
            .await
            .unwrap();
        let stale = Owner {
            marker: tokio::sync::Mutex::new(old),
        };
        let e = stale.beat(&*store, "s3://b/p").await.unwrap_err();
        assert!(matches!(e, Error::PrefixTakenOver { .. }), "{e}");
    }

    #[tokio::test]
    async fn a_directory_from_before_markers_claims_its_own_files() {
        let (store, dir) = (InMemory::new(), tempfile::tempdir().unwrap());
        std::fs::create_dir_all(dir.path().join("catalog")).unwrap();
        put_file(&store).await;
        claim(&store, "s3://b/p", dir.path(), rules(false))
            .await
            .unwrap();
        assert!(read_instance(dir.path()).unwrap().is_some());
    }
}
