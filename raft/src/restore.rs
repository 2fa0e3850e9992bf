//! `quiver restore`: bringing a node whose local state was lost back to the files it
//! wrote, offline.
//!
//! What a node can lose and what is left:
//!
//! * a member of a cluster: its peers hold every committed entry and send it what it
//!   lacks, so a restore only claims the bucket prefix for this data directory (files
//!   under it that the node cannot account for are kept until a later start proves them
//!   garbage, and snapshot installs adopt the ones the leader lists);
//! * a single node whose log still holds entries after its snapshot (or after its
//!   purge point): the start itself rebuilds from the snapshot or the footers and
//!   replays the log, so again only the prefix is claimed;
//! * a single node whose log is gone (a lost disk beside a bucket, a lost WAL volume):
//!   the files are the only copy of what was flushed. The restore reads their footers
//!   ([`quiver_storage::adopt_files`]), keeps the snapshot's unwritten rows if a snapshot
//!   survived, and writes a new snapshot at the highest log index any file holds, with
//!   the purge point there: the log goes on after it, so no new file is ever written
//!   under an old file's name. What is lost is what was never flushed (and, without a
//!   snapshot, the replicated settings: tokens, retention, continuous queries).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use openraft::{BasicNode, CommittedLeaderId, Membership};
use quiver_storage::{LogIndex, MemoryImage, StorageConfig};
use quiver_wal::{Wal, WalConfig};

use crate::durable_file::read_durable;
use crate::error::Error;
use crate::log_store::{last_log_id_on_disk, reset_points, write_vote_at_least, VOTE_FILE};
use crate::recovery::Recovered;
use crate::snapshot_file::{snapshot_dir, write_snapshot};
use crate::types::{LogId, NodeId, SnapshotMeta, StoredMembership, Vote};
use crate::vote_barrier::VoteBarrier;

/// What a restore needs to know of the node.
#[derive(Debug, Clone)]
pub struct RestoreSettings {
    /// The node's id.
    pub node_id: NodeId,
    /// Its address, for the membership of a single node restored without a snapshot.
    pub advertise_addr: String,
    /// It belongs to a cluster (`cluster.peers` names others).
    pub clustered: bool,
    /// The data directory (snapshots).
    pub data_dir: PathBuf,
    /// The WAL.
    pub wal: WalConfig,
}

/// What a restore did.
#[derive(Debug, Clone)]
pub enum RestoreReport {
    /// Only the prefix was claimed: the node rebuilds at start, from its log or its
    /// peers.
    Claimed {
        /// Where the files are.
        location: String,
        /// Why nothing more was needed.
        because: String,
    },
    /// A snapshot was written over the adopted files.
    Rebuilt {
        /// Where the files are.
        location: String,
        /// Files the node holds now.
        files: usize,
        /// Of them, files beyond the old snapshot (all of them without one).
        adopted: usize,
        /// Rows in those files.
        rows: u64,
        /// Files a compaction output replaced.
        superseded: usize,
        /// Unreadable files moved to quarantine.
        quarantined: Vec<String>,
        /// The snapshot's index: the log goes on after it.
        snapshot_index: u64,
        /// The snapshot that survived, if one did.
        previous_snapshot_index: Option<u64>,
    },
}

/// Runs the restore (module documentation). The node must not be running: the caller
/// holds its directory locks.
pub async fn restore(
    settings: &RestoreSettings,
    storage: &StorageConfig,
) -> Result<RestoreReport, Error> {
    if settings.clustered {
        // Whatever was put back (an old copy of the disks, a partial one), the node may
        // lack entries it acknowledged and may have voted in terms the copy does not
        // remember; nothing in the copy can tell. So it starts as a node that lost its
        // data does: no vote, and no entries from a leader older than its peers' votes,
        // until a leader has brought it up to date. Without this, a copy restored after
        // the leader that saw it acknowledge had changed voted at once (the simulation
        // found it: a stale candidate elected, committed entries overwritten).
        std::fs::create_dir_all(&settings.wal.dir).map_err(|source| {
            crate::durable_file::DurableFileError::Io {
                path: settings.wal.dir.display().to_string(),
                source,
            }
        })?;
        VoteBarrier::load(&settings.wal.dir)?.close_lost_vote()?;
        let location = quiver_storage::claim_files(storage).await?;
        return Ok(RestoreReport::Claimed {
            location,
            because: "this node belongs to a cluster: its peers send it what it lacks, and                       it votes again once it has caught up"
                .to_string(),
        });
    }
    let recovered = Recovered::load(&settings.data_dir, &settings.wal.dir)?;
    let snapshot_index = recovered.snapshot_last_log_id().map(|l| l.index);
    let purged = recovered.purged();
    let start = snapshot_index.max(purged.map(|p| p.index));
    let wal = Wal::open(settings.wal.clone())?;
    let log_last = last_log_id_on_disk(&wal, purged)?.map(|l| l.index);
    drop(wal);
    if log_last.is_some_and(|last| Some(last) > start) {
        let location = quiver_storage::claim_files(storage).await?;
        let because = format!(
            "the log still holds entries up to {}: the start rebuilds from it",
            log_last.unwrap_or(0)
        );
        return Ok(RestoreReport::Claimed { location, because });
    }
    let manifest = recovered.snapshot.as_ref().map(|(meta, image)| {
        (
            image.files.as_slice(),
            LogIndex(meta.last_log_id.map_or(0, |l| l.index)),
        )
    });
    let adoption = quiver_storage::adopt_files(storage, manifest).await?;
    let index = adoption.log_end.0.max(start.unwrap_or(0));
    let previous_vote: Option<Vote> = read_durable(&settings.wal.dir.join(VOTE_FILE))?;
    let term = recovered
        .snapshot_last_log_id()
        .map(|l| l.leader_id.term)
        .max(purged.map(|p| p.leader_id.term))
        .max(previous_vote.map(|v| v.leader_id().term))
        .unwrap_or(0)
        .max(1);
    let last = LogId::new(CommittedLeaderId::new(term, settings.node_id), index);
    let (membership, image) = match recovered.snapshot {
        Some((meta, image)) => (meta.last_membership.clone(), image),
        None => (single_voter(settings, last), MemoryImage::default()),
    };
    let rows: u64 = adoption
        .files
        .iter()
        .filter(|f| !image.files.iter().any(|m| m.path == f.path))
        .map(|f| f.rows)
        .sum();
    let live: BTreeSet<&str> = adoption.files.iter().map(|f| f.path.as_str()).collect();
    let image = MemoryImage {
        files: adoption.files.clone(),
        // A queued merge whose output is already adopted is done.
        compactions: image
            .compactions
            .into_iter()
            .filter(|job| !live.contains(job.output.as_str()))
            .collect(),
        ..image
    };
    let meta = SnapshotMeta {
        last_log_id: Some(last),
        last_membership: membership,
        snapshot_id: format!("restore-{index}"),
    };
    write_snapshot(&snapshot_dir(&settings.data_dir), &meta, &image)?;
    // The log restarts right after the snapshot: entries the WAL still holds at or
    // below it are purged at the next open.
    reset_points(&settings.wal.dir, Some(last))?;
    write_vote_at_least(&settings.wal.dir, Vote::new(term, settings.node_id))?;
    VoteBarrier::mark_directory(&settings.wal.dir, settings.node_id)?;
    VoteBarrier::mark_directory(&settings.data_dir, settings.node_id)?;
    Ok(RestoreReport::Rebuilt {
        location: adoption.location,
        files: adoption.files.len(),
        adopted: adoption.adopted,
        rows,
        superseded: adoption.superseded,
        quarantined: adoption.quarantined,
        snapshot_index: index,
        previous_snapshot_index: snapshot_index,
    })
}

/// The membership of a single node with no snapshot left: itself, the only voter.
pub(crate) fn single_voter(settings: &RestoreSettings, at: LogId) -> StoredMembership {
    let voters = BTreeSet::from([settings.node_id]);
    let nodes = BTreeMap::from([(
        settings.node_id,
        BasicNode::new(settings.advertise_addr.clone()),
    )]);
    StoredMembership::new(Some(at), Membership::new(vec![voters], nodes))
}
