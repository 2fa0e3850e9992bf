//! The log store across restarts: entries, vote and purge point survive; a purge a
//! crash interrupted is finished on open.

use openraft::storage::{RaftLogReader, RaftLogStorage};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
use quiver_raft::{Command, FlushCommand, LogStore, TypeConfig};
use quiver_storage::TableKey;
use quiver_wal::{SyncMode, Wal, WalConfig};

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(Command::Flush(FlushCommand {
            tables: vec![TableKey::new("db", format!("m{index}"))],
        })),
    }
}

async fn open(dir: &std::path::Path) -> LogStore {
    let wal = Wal::open(WalConfig {
        dir: dir.to_path_buf(),
        sync: SyncMode::Fsync,
        ..WalConfig::default()
    })
    .unwrap();
    LogStore::open(wal, dir).await.unwrap()
}

async fn append(store: &mut LogStore, entries: Vec<Entry<TypeConfig>>) {
    // The flush callback is crate-private in openraft; drive appends the way openraft's
    // own helper does, through the blocking extension trait.
    use openraft::storage::RaftLogStorageExt;
    store.blocking_append(entries).await.unwrap();
}

#[tokio::test]
async fn entries_vote_and_purge_point_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = open(dir.path()).await;
        append(&mut store, (0..10).map(|i| entry(1, i)).collect()).await;
        store.save_vote(&Vote::new(3, 1)).await.unwrap();
        store
            .purge(LogId::new(CommittedLeaderId::new(1, 1), 4))
            .await
            .unwrap();
    }
    let mut store = open(dir.path()).await;
    assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(3, 1)));
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(4));
    assert_eq!(state.last_log_id.map(|l| l.index), Some(9));
    let entries = store.try_get_log_entries(5..10).await.unwrap();
    assert_eq!(
        entries.iter().map(|e| e.log_id.index).collect::<Vec<_>>(),
        vec![5, 6, 7, 8, 9]
    );
    assert_eq!(entries[0], entry(1, 5));
}

#[tokio::test]
async fn truncate_then_append_a_new_term_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = open(dir.path()).await;
        append(&mut store, (0..6).map(|i| entry(1, i)).collect()).await;
        store
            .truncate(LogId::new(CommittedLeaderId::new(1, 1), 3))
            .await
            .unwrap();
        assert_eq!(
            store
                .get_log_state()
                .await
                .unwrap()
                .last_log_id
                .map(|l| l.index),
            Some(2)
        );
        append(&mut store, (3..5).map(|i| entry(2, i)).collect()).await;
    }
    let mut store = open(dir.path()).await;
    let entries = store.try_get_log_entries(0..5).await.unwrap();
    let terms: Vec<u64> = entries.iter().map(|e| e.log_id.leader_id.term).collect();
    assert_eq!(terms, vec![1, 1, 1, 2, 2]);
}

/// A node that caught up by snapshot (its log purged past anything it ever committed)
/// and restarted before its next commit: openraft panics at start when the commit point
/// it reads is behind the purge point, so the store raises it to the newest snapshot.
#[tokio::test]
async fn a_commit_hint_behind_the_snapshot_is_raised_to_it() {
    let snapshot = LogId::new(CommittedLeaderId::new(1, 1), 7);
    for hint in [Some(LogId::new(CommittedLeaderId::new(1, 1), 2)), None] {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut store = open(dir.path()).await;
            append(&mut store, (0..10).map(|i| entry(1, i)).collect()).await;
            if hint.is_some() {
                store.save_committed(hint).await.unwrap();
            }
            store.purge(snapshot).await.unwrap();
        }
        let mut store = open(dir.path()).await;
        assert_eq!(
            store.read_committed().await.unwrap(),
            hint,
            "the hint alone"
        );
        store.set_commit_floor(Some(snapshot));
        assert_eq!(
            store.read_committed().await.unwrap(),
            Some(snapshot),
            "hint {hint:?}"
        );
    }
}

/// openraft records a commit point as soon as the leader reports it, before the append
/// that brought the entry is flushed. After a crash the log may end before it, or hold
/// an older term's entry at its index; that hint must not reach openraft (it would
/// apply an entry the leader overwrote). Found by the simulation: a follower stopped
/// at openraft's assertion `Some(log_id) <= self.committed()` at every restart.
#[tokio::test]
async fn a_commit_hint_the_log_does_not_hold_is_not_trusted() {
    let id = |term, index| LogId::new(CommittedLeaderId::new(term, 1), index);
    // (hint, what the node may take as committed at start)
    let cases = [
        (id(1, 3), Some(id(1, 3))),
        (id(2, 4), None), // the log holds (1, 4): the leader's (2, 4) was lost
        (id(2, 8), None), // the log ends at 5
    ];
    for (hint, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut store = open(dir.path()).await;
            append(&mut store, (0..6).map(|i| entry(1, i)).collect()).await;
            store.save_committed(Some(hint)).await.unwrap();
        }
        let mut store = open(dir.path()).await;
        assert_eq!(
            store.read_committed().await.unwrap(),
            expected,
            "hint {hint:?}"
        );
        assert_eq!(
            store.committed_at_open(),
            expected.map(|c| c.index),
            "hint {hint:?}"
        );
        let floor = id(1, 2);
        store.set_commit_floor(Some(floor));
        assert_eq!(
            store.read_committed().await.unwrap(),
            Some(expected.map_or(floor, |e| e.max(floor))),
            "hint {hint:?} with a snapshot"
        );
    }
}

/// A node that led before a crash may have lost entries its followers hold; leading
/// again in the same term it would write others under the same log ids. So a node
/// whose saved vote is its own, committed, starts with it uncommitted (same term, same
/// candidate) and must win a new term. Found by the cluster simulation (seed 193).
#[tokio::test]
async fn a_former_leader_starts_without_its_leadership() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = open(dir.path()).await;
        store.save_vote(&Vote::new_committed(7, 1)).await.unwrap();
    }
    let mut store = open(dir.path()).await;
    store.forget_own_leadership(2);
    assert_eq!(
        store.read_vote().await.unwrap(),
        Some(Vote::new_committed(7, 1)),
        "another node's leadership is kept"
    );
    store.forget_own_leadership(1);
    assert_eq!(store.read_vote().await.unwrap(), Some(Vote::new(7, 1)));
}

/// The purge point is recorded (`raft-purged`) before the WAL purges; a WAL that failed
/// its purge (an fsync error on its own marker, then a restart) is left behind that
/// point. When the WAL was already empty, open used to skip finishing the purge, so
/// openraft appended after the recorded point and the WAL refused it ("non-contiguous
/// append: expected 10, got 21") at every restart: found by the cluster simulation.
#[tokio::test]
async fn a_purge_past_an_empty_wal_that_a_crash_interrupted_is_finished_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let before = tempfile::tempdir().unwrap();
    let purge_to = |index| LogId::new(CommittedLeaderId::new(1, 1), index);
    {
        let mut store = open(dir.path()).await;
        append(&mut store, (0..10).map(|i| entry(1, i)).collect()).await;
        store.purge(purge_to(9)).await.unwrap();
    }
    copy_files(dir.path(), before.path());
    {
        // A snapshot up to 20 is installed; its purge is recorded and carried out...
        let mut store = open(dir.path()).await;
        store.purge(purge_to(20)).await.unwrap();
    }
    // ...but the WAL's part is undone: its files as they were, the record kept.
    let record = std::fs::read(dir.path().join("raft-purged")).unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    copy_files(before.path(), dir.path());
    std::fs::write(dir.path().join("raft-purged"), record).unwrap();

    let mut store = open(dir.path()).await;
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(20));
    assert_eq!(state.last_log_id.map(|l| l.index), Some(20));
    append(&mut store, vec![entry(2, 21), entry(2, 22)]).await;
    drop(store);
    let mut store = open(dir.path()).await;
    let entries = store.try_get_log_entries(21..23).await.unwrap();
    assert_eq!(entries, vec![entry(2, 21), entry(2, 22)]);
}

fn copy_files(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

#[tokio::test]
async fn released_entries_leave_the_cache_and_are_still_read_from_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path()).await;
    append(&mut store, (0..10).map(|i| entry(1, i)).collect()).await;
    let all = store.cached_bytes();
    assert!(all > 0);
    store.release_cached_through(6);
    let left = store.cached_bytes();
    assert!(left > 0 && left < all, "cache {all} -> {left}");
    store.release_cached_through(9);
    assert_eq!(store.cached_bytes(), 0);
    let entries = store.try_get_log_entries(0..10).await.unwrap();
    assert_eq!(entries, (0..10).map(|i| entry(1, i)).collect::<Vec<_>>());
}
