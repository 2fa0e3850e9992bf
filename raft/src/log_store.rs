//! openraft's log storage on quiver-wal.
//!
//! Entries are encoded once (MessagePack via serde) and appended to the WAL; openraft's
//! flush callback fires from the WAL's writer thread only after the fdatasync that
//! covers them, which is what lets many requests share one fsync. Recent entries stay
//! decoded in a bounded cache, so applying and replicating them does not read the disk.
//! The vote and the purge point live in small durable files beside the segments.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, RaftLogReader};
use parking_lot::Mutex;
use quiver_wal::Wal;

use crate::command::Command;
use crate::durable_file::{read_durable, write_durable};
use crate::error::Error;
use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};

/// Bytes of decoded entries kept in memory for apply and replication.
const CACHE_BYTES_MAX: usize = 256 * 1024 * 1024;
/// The vote's file in the WAL directory.
pub(crate) const VOTE_FILE: &str = "raft-vote";
/// The purge point's file in the WAL directory.
pub(crate) const PURGED_FILE: &str = "raft-purged";
const COMMITTED_FILE: &str = "raft-committed";

/// The log store; clones share state and serve as openraft's log readers.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Inner>,
}

struct Inner {
    wal: Wal,
    dir: PathBuf,
    committed_at_open: Option<u64>,
    /// The newest entry's index (or the purge point) when the log opened.
    last_at_open: Option<u64>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    last_purged: Option<LogId>,
    last_log_id: Option<LogId>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    /// The commit point recorded before the last stop, if the log still holds it.
    commit_hint: Option<LogId>,
    /// Known committed without the hint: the newest snapshot's last entry.
    commit_floor: Option<LogId>,
    cache: BTreeMap<u64, (Entry, usize)>,
    cache_bytes: usize,
    /// Proposals waiting for their outcome (see [`LogStore::track`]): whether each was
    /// appended here. Bounded by the proposals in flight; each leaves with its guard.
    tracked: std::collections::HashMap<u64, bool>,
}

/// A proposal [`LogStore::track`] watches; stops watching when dropped.
pub(crate) struct TrackedProposal {
    inner: Arc<Inner>,
    id: u64,
}

impl TrackedProposal {
    /// Whether this log appended the proposal's entry (it may since have been removed).
    pub(crate) fn appended(&self) -> bool {
        self.inner
            .state
            .lock()
            .tracked
            .get(&self.id)
            .copied()
            .unwrap_or(false)
    }
}

impl Drop for TrackedProposal {
    fn drop(&mut self) {
        self.inner.state.lock().tracked.remove(&self.id);
    }
}

fn read_err(e: impl std::error::Error + Send + Sync + 'static) -> StorageError {
    StorageError::from_io_error(
        ErrorSubject::Logs,
        ErrorVerb::Read,
        io::Error::other(e.to_string()),
    )
}

fn write_err(subject: ErrorSubject<u64>, e: impl std::fmt::Display) -> StorageError {
    StorageError::from_io_error(subject, ErrorVerb::Write, io::Error::other(e.to_string()))
}

fn encode(entry: &Entry) -> Result<Bytes, StorageError> {
    rmp_serde::to_vec(entry)
        .map(Bytes::from)
        .map_err(|e| write_err(ErrorSubject::Log(entry.log_id), e))
}

fn decode(index: u64, bytes: &[u8]) -> Result<Entry, StorageError> {
    let entry: Entry = rmp_serde::from_slice(bytes).map_err(read_err)?;
    if entry.log_id.index != index {
        return Err(read_err(io::Error::other(format!(
            "log record {index} holds entry {}",
            entry.log_id.index
        ))));
    }
    Ok(entry)
}

fn entry_bytes(entry: &Entry) -> usize {
    match &entry.payload {
        EntryPayload::Normal(Command::Write(w)) => w.bytes() + 128,
        EntryPayload::Normal(Command::CqWindow(w)) => w.rows.bytes() + 128,
        _ => 128,
    }
}

/// The id of the newest entry `wal` holds, or the purge point when it holds none: what
/// the log would answer openraft at open, read without opening a [`LogStore`] (a node
/// about to erase its log records it first, see `crate::vote_barrier`).
pub(crate) fn last_log_id_on_disk(
    wal: &Wal,
    last_purged: Option<LogId>,
) -> Result<Option<LogId>, StorageError> {
    let Some(index) = wal.last_index() else {
        return Ok(last_purged);
    };
    let records = wal.read_range(index..index + 1).map_err(read_err)?;
    let (i, bytes) = records
        .first()
        .ok_or_else(|| read_err(io::Error::other("last entry unreadable")))?;
    Ok(Some(decode(*i, bytes)?.log_id))
}

impl LogStore {
    /// Opens the log in `wal`'s directory: reads the vote and purge point, finds the
    /// last entry, and finishes a purge a crash interrupted.
    pub async fn open(wal: Wal, dir: &Path) -> Result<LogStore, StorageError> {
        let vote: Option<Vote> =
            read_durable(&dir.join(VOTE_FILE)).map_err(|e| write_err(ErrorSubject::Vote, e))?;
        let last_purged: Option<LogId> =
            read_durable(&dir.join(PURGED_FILE)).map_err(|e| write_err(ErrorSubject::Logs, e))?;
        // Finish a purge a crash (or a failed fsync of the WAL's own marker) interrupted
        // after it was recorded here. Also when the WAL holds no entry: an emptied WAL
        // still expects the index after its own, older purge point, and openraft appends
        // after this one. A purge the WAL already did is a no-op.
        if let Some(purged) = last_purged {
            wal.purge_to(purged.index)
                .await
                .map_err(|e| write_err(ErrorSubject::Logs, e))?;
        }
        let last_log_id = last_log_id_on_disk(&wal, last_purged)?;
        if let (Some(first), Some(purged)) = (wal.first_index(), last_purged) {
            if first != purged.index + 1 {
                return Err(read_err(io::Error::other(format!(
                    "the log starts at {first} but was purged only to {}: entries are missing",
                    purged.index
                ))));
            }
        }
        let commit_hint = read_committed_file(dir)
            .and_then(|hint| checked_commit_hint(&wal, hint, last_purged, last_log_id));
        let committed_at_open = commit_hint.map(|c| c.index);
        tracing::info!(dir = %dir.display(), ?last_purged, ?last_log_id, ?committed_at_open, "raft log opened");
        Ok(LogStore {
            inner: Arc::new(Inner {
                wal,
                dir: dir.to_path_buf(),
                committed_at_open,
                last_at_open: last_log_id.map(|l| l.index),
                state: Mutex::new(State {
                    last_purged,
                    last_log_id,
                    vote,
                    commit_hint,
                    ..Default::default()
                }),
            }),
        })
    }

    /// Tells the store that everything up to `snapshot_last` is committed (it is in the
    /// node's newest snapshot), whatever the commit hint says. Call before Raft starts.
    pub fn set_commit_floor(&self, snapshot_last: Option<LogId>) {
        self.inner.state.lock().commit_floor = snapshot_last;
    }

    /// Makes a node that led before it stopped start as a follower. openraft resumes
    /// leadership at start when the saved vote is its own and committed, in the same
    /// term; but a leader sends entries before its own fsync covers them, so a crash
    /// can lose entries followers already hold. Leading again in that term, it would
    /// write other entries under the same log ids, and a follower, its log matching
    /// by id, would keep the old ones: replicas that differ at one index (the cluster
    /// simulation found a follower holding a batch in place of an acknowledged one).
    /// With the vote uncommitted (the same term and candidate, so it still refuses
    /// other candidates of that term), the node must win a new term first, and a new
    /// term's entries overwrite what the crash orphaned. Call before Raft starts.
    pub fn forget_own_leadership(&self, node_id: u64) {
        let mut state = self.inner.state.lock();
        if let Some(vote) = state.vote {
            if vote.is_committed() && vote.leader_id().voted_for() == Some(node_id) {
                tracing::info!(%vote, "led before the stop: starts as a follower and leads again only in a new term");
                state.vote = Some(Vote::new(vote.leader_id().term, node_id));
            }
        }
    }

    /// The commit index recorded before the last stop: what must be applied again
    /// before the node is ready.
    pub fn committed_at_open(&self) -> Option<u64> {
        self.inner.committed_at_open
    }

    /// The index of the newest entry the log held when it opened (or its purge point):
    /// with the snapshot's, how far what the node held at start reaches (see
    /// `Storage::sweep`).
    pub fn last_index_at_open(&self) -> Option<u64> {
        self.inner.last_at_open
    }

    /// Watches whether the entry carrying proposal `id` is appended to this log. openraft
    /// answers a proposal "forward to leader" both when this node did not lead (nothing
    /// appended: the proposal may go to the leader) and when its entry was appended and
    /// then removed by a new leader (it may still be committed by another node: the
    /// outcome is unknown); only this tells the two apart.
    pub(crate) fn track(&self, id: u64) -> TrackedProposal {
        self.inner.state.lock().tracked.insert(id, false);
        TrackedProposal {
            inner: self.inner.clone(),
            id,
        }
    }

    /// Drops cached entries at or below `index`, which the caller knows are applied here
    /// and held by every follower: nothing reads them from the cache again (a read that
    /// does falls back to the WAL). Without this the cache kept up to its cap of packed
    /// entries until the next snapshot purged the log, whatever had been applied.
    pub fn release_cached_through(&self, index: u64) {
        let dropped = {
            let mut state = self.inner.state.lock();
            let keep = state.cache.split_off(&(index.saturating_add(1)));
            let dropped = std::mem::replace(&mut state.cache, keep);
            state.cache_bytes -= dropped.values().map(|(_, b)| *b).sum::<usize>();
            dropped
        };
        drop(dropped);
    }

    /// Bytes of entries held in the cache (the `quiver_raft_log_cache_bytes` gauge).
    pub fn cached_bytes(&self) -> usize {
        self.inner.state.lock().cache_bytes
    }

    /// The latest commit point openraft reported.
    pub fn committed(&self) -> Option<LogId> {
        self.inner.state.lock().committed
    }

    /// The underlying WAL (for stats).
    pub fn wal(&self) -> &Wal {
        &self.inner.wal
    }

    fn cache_insert(state: &mut State, entry: Entry) {
        let bytes = entry_bytes(&entry);
        state.cache_bytes += bytes;
        if let Some((_, old)) = state.cache.insert(entry.log_id.index, (entry, bytes)) {
            state.cache_bytes -= old;
        }
        while state.cache_bytes > CACHE_BYTES_MAX {
            match state.cache.pop_first() {
                Some((_, (_, b))) => state.cache_bytes -= b,
                None => break,
            }
        }
    }

    fn read_entries(&self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
        let mut out = Vec::with_capacity((end.saturating_sub(start)).min(4096) as usize);
        let mut next = start;
        {
            let state = self.inner.state.lock();
            while next < end {
                match state.cache.get(&next) {
                    Some((e, _)) => out.push(e.clone()),
                    None => break,
                }
                next += 1;
            }
        }
        if next < end {
            for (index, bytes) in self.inner.wal.read_range(next..end).map_err(read_err)? {
                out.push(decode(index, &bytes)?);
            }
        }
        debug_assert!(
            out.windows(2)
                .all(|w| w[0].log_id.index + 1 == w[1].log_id.index),
            "log has a hole"
        );
        Ok(out)
    }

    /// Waits until every append issued before this call is durable.
    async fn barrier(&self) -> Result<(), StorageError> {
        self.inner
            .wal
            .sync()
            .await
            .map_err(|e| write_err(ErrorSubject::Logs, e))
    }
}

/// After the log in `dir` was erased: the purge point becomes the snapshot's last
/// entry (the log restarts right after it), or goes when there is no snapshot (the log
/// restarts at 0), durably; the commit hint goes too.
pub(crate) fn reset_points(dir: &Path, snapshot: Option<LogId>) -> Result<(), Error> {
    match snapshot {
        Some(last) => {
            write_durable(&dir.join(PURGED_FILE), &last, true).map_err(Error::PurgePoint)?
        }
        None => remove_durably(&dir.join(PURGED_FILE))?,
    }
    remove_durably(&dir.join(COMMITTED_FILE))
}

/// Makes the vote in `dir` at least `vote` (a restored node must not go back to a term
/// below its snapshot's), durably.
pub(crate) fn write_vote_at_least(dir: &Path, vote: Vote) -> Result<(), Error> {
    let path = dir.join(VOTE_FILE);
    let current: Option<Vote> = read_durable(&path).map_err(Error::PurgePoint)?;
    if current.is_some_and(|c| c.leader_id().term >= vote.leader_id().term) {
        return Ok(());
    }
    write_durable(&path, &vote, true).map_err(Error::PurgePoint)
}

fn remove_durably(path: &Path) -> Result<(), Error> {
    let io = |source| {
        Error::PurgePoint(crate::durable_file::DurableFileError::Io {
            path: path.display().to_string(),
            source,
        })
    };
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e)),
    }
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

/// The recorded commit point `hint`, if this log still holds the entry it names.
/// openraft records a commit point as soon as the leader reports it, without waiting
/// for the append that brought the entry to be flushed, and the file is written without
/// fsync. After a crash the log can therefore end before the hint, or still hold an
/// older term's entry at its index (the truncation and re-append were lost). Handing
/// openraft that hint would make it apply, and treat as committed, an entry the leader
/// overwrote: the cluster simulation found a follower doing exactly that (openraft's
/// assertion `Some(log_id) <= self.committed()`). Without a hint the node applies up to
/// its snapshot and learns the rest from the leader.
fn checked_commit_hint(
    wal: &Wal,
    hint: LogId,
    last_purged: Option<LogId>,
    last_log_id: Option<LogId>,
) -> Option<LogId> {
    // Purged entries were applied, so committed: any hint at or before them is true.
    if last_purged.is_some_and(|p| hint.index <= p.index) {
        return Some(hint);
    }
    let held = if last_log_id.is_some_and(|l| hint.index <= l.index) {
        wal.read_range(hint.index..hint.index + 1)
            .ok()
            .and_then(|records| records.into_iter().next())
            .and_then(|(index, bytes)| decode(index, &bytes).ok())
            .map(|entry| entry.log_id)
    } else {
        None
    };
    if held == Some(hint) {
        return Some(hint);
    }
    tracing::warn!(
        ?hint,
        ?held,
        ?last_log_id,
        "the recorded commit point is not in the log (its append was lost in a crash); \
         applying up to the snapshot and catching up from the leader"
    );
    None
}

fn read_committed_file(dir: &Path) -> Option<LogId> {
    match read_durable::<Option<LogId>>(&dir.join(COMMITTED_FILE)) {
        Ok(c) => c.flatten(),
        Err(e) => {
            tracing::warn!(error = %e, "ignoring an unreadable committed-index file");
            None
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        use std::ops::Bound;
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e + 1,
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.inner.wal.next_index(),
        };
        if start >= end {
            return Ok(Vec::new());
        }
        self.read_entries(start, end)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let state = self.inner.state.lock();
        Ok(LogState {
            last_purged_log_id: state.last_purged,
            last_log_id: state.last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        // Write IO is ordered: appends issued before the vote are durable before it.
        self.barrier().await?;
        write_durable(&self.inner.dir.join(VOTE_FILE), vote, true)
            .map_err(|e| write_err(ErrorSubject::Vote, e))?;
        self.inner.state.lock().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.inner.state.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.inner.state.lock().committed = committed;
        // Not fsynced: a stale value only means replaying less before serving; it can
        // never be ahead of what was really committed.
        write_durable(&self.inner.dir.join(COMMITTED_FILE), &committed, false)
            .map_err(|e| write_err(ErrorSubject::Store, e))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let (committed, floor) = {
            let state = self.inner.state.lock();
            (state.commit_hint, state.commit_floor)
        };
        // Everything in the snapshot was committed, but the hint is written without fsync
        // and not at all when a snapshot is installed: a node that caught up by snapshot
        // and restarted before its next commit would hand openraft a commit point behind
        // its purge point, which openraft refuses by panicking at start
        // (`a_commit_hint_behind_the_snapshot_is_raised_to_it`).
        Ok(committed.max(floor))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut records = Vec::new();
        {
            let mut state = self.inner.state.lock();
            let purged = state.last_purged.map(|p| p.index);
            for entry in entries {
                // Entries at or below the purge point are already inside the snapshot:
                // the log never reopens below it, so they are acknowledged and dropped.
                if purged.is_some_and(|p| entry.log_id.index <= p) {
                    tracing::debug!(
                        index = entry.log_id.index,
                        "append below the purge point ignored"
                    );
                    continue;
                }
                records.push((entry.log_id.index, encode(&entry)?));
                if let EntryPayload::Normal(command) = &entry.payload {
                    if let Some(seen) = command.proposal().and_then(|id| state.tracked.get_mut(&id))
                    {
                        *seen = true;
                    }
                }
                state.last_log_id = Some(entry.log_id);
                Self::cache_insert(&mut state, entry);
            }
        }
        if records.is_empty() {
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        let bytes: usize = records.iter().map(|(_, b)| b.len()).sum();
        metrics::counter!("quiver_raft_log_bytes_appended_total").increment(bytes as u64);
        self.inner
            .wal
            .append(
                records,
                Box::new(move |result: Result<(), quiver_wal::Error>| {
                    callback.log_io_completed(result.map_err(|e| io::Error::other(e.to_string())));
                }),
            )
            .await
            .map_err(|e| write_err(ErrorSubject::Logs, e))
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.inner
            .wal
            .truncate_from(log_id.index)
            .await
            .map_err(|e| write_err(ErrorSubject::Log(log_id), e))?;
        let previous = if log_id.index == 0 {
            None
        } else {
            let prev = log_id.index - 1;
            let purged = self.inner.state.lock().last_purged;
            match purged {
                Some(p) if p.index >= prev => Some(p),
                _ => self.read_entries(prev, prev + 1)?.first().map(|e| e.log_id),
            }
        };
        let mut state = self.inner.state.lock();
        let dropped = state.cache.split_off(&log_id.index);
        state.cache_bytes -= dropped.values().map(|(_, b)| *b).sum::<usize>();
        state.last_log_id = previous;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Record the purge point first: a crash between the two leaves extra entries
        // (harmless, purged again on open), never a log that starts after its record.
        write_durable(&self.inner.dir.join(PURGED_FILE), &log_id, true)
            .map_err(|e| write_err(ErrorSubject::Log(log_id), e))?;
        self.inner
            .wal
            .purge_to(log_id.index)
            .await
            .map_err(|e| write_err(ErrorSubject::Log(log_id), e))?;
        let mut state = self.inner.state.lock();
        let keep = state.cache.split_off(&(log_id.index + 1));
        let dropped = std::mem::replace(&mut state.cache, keep);
        state.cache_bytes -= dropped.values().map(|(_, b)| *b).sum::<usize>();
        state.last_purged = Some(log_id);
        if state.last_log_id.is_none_or(|l| l.index < log_id.index) {
            state.last_log_id = Some(log_id);
        }
        Ok(())
    }
}
