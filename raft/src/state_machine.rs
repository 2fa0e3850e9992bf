//! The Raft state machine: applies committed commands to quiver-storage, and builds and
//! installs snapshots (Parquet manifest plus the rows not yet in Parquet).
//!
//! The state machine is persistent through its snapshot: on open it restores the newest
//! snapshot's unwritten rows, reports the snapshot's last log id as applied, and openraft
//! replays the log from there. Rows the Parquet files already hold are skipped by
//! storage, so a replay never duplicates a row.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder};
use parking_lot::Mutex;
use quiver_storage::{Error as StorageErr, FileMeta, LogIndex, MemoryImage, Storage};
use tokio::io::AsyncSeekExt;

use crate::command::{Command, CommandResult};
use crate::file_transfer::fetch_file;
use crate::peer_client::PeerClient;
use crate::snapshot_file::{
    latest_snapshot, open_snapshot, read_snapshot, read_snapshot_from, snapshot_dir, write_snapshot,
};
use crate::types::{
    Entry, LogId, NodeId, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};

fn sm_err(verb: ErrorVerb, e: impl std::fmt::Display) -> StorageError {
    StorageError::from_io_error(
        ErrorSubject::StateMachine,
        verb,
        io::Error::other(e.to_string()),
    )
}

fn snapshot_err(verb: ErrorVerb, e: impl std::fmt::Display) -> StorageError {
    StorageError::from_io_error(
        ErrorSubject::Snapshot(None),
        verb,
        io::Error::other(e.to_string()),
    )
}

#[derive(Debug, Clone, Default)]
struct Applied {
    last_applied: Option<LogId>,
    membership: StoredMembership,
}

/// See the module documentation. Clones share state.
#[derive(Clone)]
pub struct StateMachine {
    storage: Arc<Storage>,
    dir: PathBuf,
    applied: Arc<Mutex<Applied>>,
    /// Reaches peers for the Parquet files an installed snapshot names.
    peers: PeerClient,
    node_id: NodeId,
    /// How long the last snapshot took to build, in ms: snapshots are paced by it.
    last_build_ms: Arc<AtomicU64>,
}

impl StateMachine {
    /// Opens the state machine over `storage`, restoring the newest snapshot in
    /// `data_dir/snapshots`. Storage should have been opened with that snapshot's
    /// [`Recovered::file_set`]; [`StateMachine::open_recovered`] takes it already read.
    pub async fn open(
        storage: Arc<Storage>,
        data_dir: &Path,
        node_id: NodeId,
        peers: PeerClient,
    ) -> Result<StateMachine, StorageError> {
        let dir = snapshot_dir(data_dir);
        let snapshot = match latest_snapshot(&dir).map_err(|e| snapshot_err(ErrorVerb::Read, e))? {
            Some(path) => Some(
                tokio::task::spawn_blocking(move || read_snapshot(&path))
                    .await
                    .map_err(|e| snapshot_err(ErrorVerb::Read, e))?
                    .map_err(|e| snapshot_err(ErrorVerb::Read, e))?,
            ),
            None => None,
        };
        Self::open_recovered(storage, data_dir, node_id, peers, snapshot).await
    }

    /// Opens the state machine from `snapshot` (the newest one on disk, read by
    /// [`Recovered::load`] before storage opened).
    pub async fn open_recovered(
        storage: Arc<Storage>,
        data_dir: &Path,
        node_id: NodeId,
        peers: PeerClient,
        snapshot: Option<(SnapshotMeta, MemoryImage)>,
    ) -> Result<StateMachine, StorageError> {
        let dir = snapshot_dir(data_dir);
        std::fs::create_dir_all(&dir).map_err(|e| snapshot_err(ErrorVerb::Write, e))?;
        let mut applied = Applied::default();
        let mut missing: Option<(SnapshotMeta, Vec<FileMeta>)> = None;
        if let Some((meta, image)) = snapshot {
            let lacking: Vec<FileMeta> = image
                .files
                .iter()
                .filter(|f| !storage.has_file_or_successor(f))
                .cloned()
                .collect();
            storage
                .restore_memory(image)
                .map_err(|e| snapshot_err(ErrorVerb::Read, e))?;
            tracing::info!(last_applied = ?meta.last_log_id, "restored snapshot");
            if !lacking.is_empty() {
                missing = Some((meta.clone(), lacking));
            }
            applied = Applied {
                last_applied: meta.last_log_id,
                membership: meta.last_membership,
            };
        }
        let sm = StateMachine {
            storage,
            dir,
            applied: Arc::new(Mutex::new(applied)),
            peers,
            node_id,
            last_build_ms: Arc::new(AtomicU64::new(0)),
        };
        if let Some((meta, lacking)) = missing {
            sm.recover_lacking_files(&meta.last_membership, &lacking)
                .await;
        }
        Ok(sm)
    }

    /// Files the snapshot lists but this node no longer holds (quarantined as
    /// unreadable, or lost) are fetched again from the other members: their rows are
    /// below the purged log, so a replay cannot bring them back. Without a member that
    /// has them the node starts anyway, says so loudly, and `quiver verify` shows the
    /// difference.
    async fn recover_lacking_files(&self, members: &StoredMembership, lacking: &[FileMeta]) {
        tracing::warn!(
            files = lacking.len(),
            "the snapshot lists Parquet files this node lacks; fetching them from peers"
        );
        match self.fetch_missing_files(members, lacking).await {
            Ok(()) => metrics::gauge!("quiver_parquet_files_missing").set(0.0),
            Err(e) => {
                let still = lacking
                    .iter()
                    .filter(|f| !self.storage.has_file_or_successor(f))
                    .count();
                metrics::gauge!("quiver_parquet_files_missing").set(still as f64);
                tracing::error!(error = %e, files_missing = still,
                    "Parquet files listed by the snapshot are missing and no peer could supply them: their rows are absent on this node");
            }
        }
    }

    /// Runs storage's start sweep (see `Storage::sweep`) and fetches from the members
    /// any file it found missing, as a start used to before serving. `covered_through`:
    /// the highest log index the snapshot and log held at start.
    pub async fn sweep_files(&self, covered_through: quiver_storage::LogIndex) {
        match self.storage.sweep(covered_through).await {
            Ok(report) if !report.lacking.is_empty() => {
                let members = self.applied.lock().membership.clone();
                self.recover_lacking_files(&members, &report.lacking).await;
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e,
                "the sweep of the Parquet files failed; files left by an earlier life stay on \
                 disk until the next start"),
        }
    }

    /// How long the last snapshot took to build (zero before the first).
    pub fn last_snapshot_build(&self) -> Duration {
        Duration::from_millis(self.last_build_ms.load(Ordering::Relaxed))
    }

    /// The storage the state machine applies to.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// The last applied log id.
    pub fn last_applied(&self) -> Option<LogId> {
        self.applied.lock().last_applied
    }

    /// Streams every file of the snapshot's manifest this node lacks from a peer (the
    /// snapshot's sender first is not known here, so members are tried in id order) and
    /// adopts it. Fails, and the install is retried by the leader, if a file cannot be
    /// had from any member.
    async fn fetch_missing_files(
        &self,
        members: &StoredMembership,
        files: &[FileMeta],
    ) -> Result<(), StorageError> {
        let members: Vec<(NodeId, String)> = members
            .membership()
            .nodes()
            .filter(|(id, _)| **id != self.node_id)
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect();
        let mut fetched = 0u64;
        let mut bytes = 0u64;
        for file in files
            .iter()
            .filter(|f| !self.storage.has_file_or_successor(f))
        {
            let staged = self.storage.incoming_path(file);
            let mut last_error = String::from("no peer to fetch from");
            let mut adopted = false;
            for (id, addr) in &members {
                match fetch_file(&self.peers, addr, file, &staged).await {
                    Ok(()) => match self.storage.adopt_file(file, &staged).await {
                        Ok(()) => {
                            adopted = true;
                            break;
                        }
                        Err(e) => last_error = format!("node {id}: {e}"),
                    },
                    Err(e) => last_error = format!("node {id}: {e}"),
                }
            }
            let _ = tokio::fs::remove_file(&staged).await;
            if !adopted {
                return Err(snapshot_err(
                    ErrorVerb::Read,
                    format!("cannot fetch {} for the snapshot: {last_error}", file.path),
                ));
            }
            fetched += 1;
            bytes += file.size_bytes;
        }
        if fetched > 0 {
            tracing::info!(
                files = fetched,
                bytes,
                "fetched Parquet files for a snapshot"
            );
            metrics::counter!("quiver_snapshot_files_fetched_total").increment(fetched);
        }
        Ok(())
    }

    fn apply_one(&self, entry: &Entry) -> Result<CommandResult, StorageError> {
        let index = LogIndex(entry.log_id.index);
        Ok(match &entry.payload {
            EntryPayload::Blank => CommandResult::Noop,
            EntryPayload::Membership(m) => {
                self.applied.lock().membership =
                    StoredMembership::new(Some(entry.log_id), m.clone());
                CommandResult::Noop
            }
            EntryPayload::Normal(Command::Policy(change)) => {
                CommandResult::Policy(self.storage.apply_policy(index, change.clone()))
            }
            EntryPayload::Normal(Command::Compact(request)) => {
                CommandResult::Compaction(self.storage.apply_compact(index, request.clone()))
            }
            EntryPayload::Normal(Command::Delete(delete)) => CommandResult::Deleted(
                self.storage
                    .apply_delete(index, &delete.table, delete.predicate.clone()),
            ),
            EntryPayload::Normal(Command::CqWindow(window)) => {
                let tables = window
                    .rows
                    .decode()
                    .map_err(|e| sm_err(ErrorVerb::Read, format!("entry {index}: {e}")))?;
                let outcome = self
                    .storage
                    .apply_cq_window(
                        index,
                        &window.rows.database,
                        &window.name,
                        (window.window_start, window.window_end),
                        &tables,
                    )
                    .map_err(|e| sm_err(ErrorVerb::Write, format!("entry {index}: {e}")))?;
                CommandResult::CqWindow(outcome)
            }
            EntryPayload::Normal(Command::Flush(flush)) => {
                self.storage.apply_flush(index, &flush.tables);
                CommandResult::Flushed
            }
            EntryPayload::Normal(Command::Write(write)) => {
                // A batch that does not decode was written by this code and checked by a
                // CRC: that is corruption or a bug, never a client error, so it stops the
                // node rather than diverging from the other replicas.
                let tables = write
                    .decode()
                    .map_err(|e| sm_err(ErrorVerb::Read, format!("entry {index}: {e}")))?;
                if let Some(ns) = write.new_database_retention_ns {
                    self.storage
                        .adopt_default_retention(index, &write.database, ns);
                }
                let seen = write
                    .write_id
                    .as_deref()
                    .is_some_and(|id| self.storage.write_applied(id));
                if seen {
                    // The rows are in already: a retry of a write whose answer was lost.
                    metrics::counter!("quiver_writes_deduplicated_total").increment(1);
                    return Ok(CommandResult::Written { rows: 0 });
                }
                match self.storage.apply_write(index, &write.database, &tables) {
                    Ok(rows) => {
                        // Only a write that was applied counts: a refused one may be sent
                        // again once the client fixed it.
                        if let Some(id) = &write.write_id {
                            self.storage.remember_write(id);
                        }
                        CommandResult::Written { rows: rows as u64 }
                    }
                    Err(
                        e @ (StorageErr::SchemaConflict { .. }
                        | StorageErr::InvalidName(_)
                        | StorageErr::InvalidPayload(_)),
                    ) => CommandResult::Rejected {
                        message: e.to_string(),
                    },
                    Err(e) => return Err(sm_err(ErrorVerb::Write, format!("entry {index}: {e}"))),
                }
            }
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let applied = self.applied.lock();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut out = Vec::new();
        for entry in entries {
            let result = self.apply_one(&entry)?;
            self.applied.lock().last_applied = Some(entry.log_id);
            out.push(result);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        // Captured here, between two applies, so image and applied id agree.
        let applied = self.applied.lock().clone();
        SnapshotBuilder {
            image: self.storage.memory_image(),
            applied,
            dir: self.dir.clone(),
            storage: self.storage.clone(),
            last_build_ms: self.last_build_ms.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, StorageError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = self.dir.join(format!("incoming-{nanos}.part"));
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .await
            .map_err(|e| snapshot_err(ErrorVerb::Write, e))?;
        // The name is only needed while receiving; the content is re-read from the handle.
        let _ = tokio::fs::remove_file(&path).await;
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError> {
        let mut file = *snapshot;
        file.seek(std::io::SeekFrom::Start(0))
            .await
            .map_err(|e| snapshot_err(ErrorVerb::Read, e))?;
        let std_file = file.into_std().await;
        let (received_meta, image) =
            tokio::task::spawn_blocking(move || read_snapshot_from(std_file))
                .await
                .map_err(|e| snapshot_err(ErrorVerb::Read, e))?
                .map_err(|e| snapshot_err(ErrorVerb::Read, e))?;
        if received_meta.last_log_id != meta.last_log_id {
            return Err(snapshot_err(
                ErrorVerb::Read,
                "snapshot content does not match its metadata",
            ));
        }
        self.storage.reset_memory();
        self.storage
            .retain_for_snapshot(&image)
            .map_err(|e| snapshot_err(ErrorVerb::Write, e))?;
        self.fetch_missing_files(&meta.last_membership, &image.files)
            .await?;
        self.storage
            .restore_memory(image.clone())
            .map_err(|e| snapshot_err(ErrorVerb::Write, e))?;
        let dir = self.dir.clone();
        let meta_owned = meta.clone();
        // Files removed above are deleted only after this node's next own snapshot: this
        // one may still list files the node removed before it (it replaced them sooner).
        let guard = self.storage.background_io();
        tokio::task::spawn_blocking(move || {
            let _guard = guard;
            write_snapshot(&dir, &meta_owned, &image)
        })
        .await
        .map_err(|e| snapshot_err(ErrorVerb::Write, e))?
        .map_err(|e| snapshot_err(ErrorVerb::Write, e))?;
        *self.applied.lock() = Applied {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
        };
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        // The builder runs beside this and deletes the snapshot it supersedes: one listed
        // here may be gone when opened (a learner being sent a snapshot while the next
        // was built stopped the whole node once). Then the newer one is the current.
        let mut attempts = 0;
        loop {
            let Some(path) =
                latest_snapshot(&self.dir).map_err(|e| snapshot_err(ErrorVerb::Read, e))?
            else {
                return Ok(None);
            };
            match open_snapshot(&path) {
                Ok((meta, file)) => {
                    // openraft asks for the current snapshot to send it to a follower.
                    self.storage.snapshot_handed_out();
                    return Ok(Some(Snapshot {
                        meta,
                        snapshot: Box::new(tokio::fs::File::from_std(file)),
                    }));
                }
                Err(e) if e.is_not_found() && attempts < SNAPSHOT_OPEN_ATTEMPTS => {
                    attempts += 1;
                    metrics::counter!("quiver_snapshot_opens_retried_total").increment(1);
                }
                Err(e) => return Err(snapshot_err(ErrorVerb::Read, e)),
            }
        }
    }
}

/// How often the current snapshot is looked up again when the one listed was replaced
/// before it could be opened (each retry means a newer snapshot was just written).
const SNAPSHOT_OPEN_ATTEMPTS: u32 = 16;

/// Builds a snapshot from a state captured between two applies.
pub struct SnapshotBuilder {
    image: MemoryImage,
    applied: Applied,
    dir: PathBuf,
    /// Told when the snapshot is durable, so files it no longer lists may go.
    storage: Arc<Storage>,
    /// Where the build time is recorded (see [`StateMachine::last_snapshot_build`]).
    last_build_ms: Arc<AtomicU64>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let snapshot_id = match self.applied.last_applied {
            Some(l) => format!("{}-{}-{nanos}", l.leader_id.term, l.index),
            None => format!("0-0-{nanos}"),
        };
        let meta = SnapshotMeta {
            last_log_id: self.applied.last_applied,
            last_membership: self.applied.membership.clone(),
            snapshot_id,
        };
        let image = std::mem::take(&mut self.image);
        let generation = image.generation;
        let dir = self.dir.clone();
        let meta_owned = meta.clone();
        let started = std::time::Instant::now();
        let guard = self.storage.background_io();
        let path = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            write_snapshot(&dir, &meta_owned, &image)
        })
        .await
        .map_err(|e| snapshot_err(ErrorVerb::Write, e))?
        .map_err(|e| snapshot_err(ErrorVerb::Write, e))?;
        self.storage.snapshot_durable(generation);
        let ms = started.elapsed().as_millis() as u64;
        self.last_build_ms.store(ms, Ordering::Relaxed);
        tracing::info!(path = %path.display(), last = ?meta.last_log_id, ms, "snapshot built");
        metrics::counter!("quiver_snapshots_built_total").increment(1);
        let file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| snapshot_err(ErrorVerb::Read, e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(file),
        })
    }
}
