//! Appends, truncations and purges take effect in the order issued, and survive reopen.

use std::fs;

use quiver_wal::{format, Error, SyncMode};

use crate::common::{
    all_records, append_all, append_durable, assert_holds, block_writer, callback, open,
    open_small, payload, segment_files,
};

const LEN: usize = 64;

#[tokio::test]
async fn truncate_then_append_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let wal = open(dir.path(), SyncMode::Fsync);
        // No waiting between operations: the queue alone must keep them in order.
        let (first, first_durable) = callback();
        let old: Vec<_> = (1..=10).map(|i| (i, payload(i, LEN))).collect();
        wal.append(old, first).await.expect("append");
        wal.truncate_from(6).await.expect("truncate");
        assert_eq!(wal.next_index(), 6);
        let new: Vec<_> = (6..=8).map(|i| (i, payload(i + 100, LEN))).collect();
        let (second, second_durable) = callback();
        wal.append(new, second).await.expect("append");
        first_durable.await.expect("callback").expect("durable");
        second_durable.await.expect("callback").expect("durable");
    }
    let wal = open(dir.path(), SyncMode::Fsync);
    let records = all_records(&wal);
    let expected: Vec<_> = (1..=5)
        .map(|i| (i, payload(i, LEN)))
        .chain((6..=8).map(|i| (i, payload(i + 100, LEN))))
        .collect();
    assert!(records == expected);
    assert_eq!(wal.next_index(), 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_hides_unwritten_records_at_once_and_reappends_win() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path(), SyncMode::Fsync);
    let release = block_writer(&wal, 1).await;
    let (old, old_durable) = callback();
    wal.append((2..=10).map(|i| (i, payload(i, LEN))).collect(), old)
        .await
        .expect("append");
    let truncated = tokio::spawn({
        let wal = wal.clone();
        async move { wal.truncate_from(6).await }
    });
    // The truncation is queued behind the blocked writer, yet already visible.
    while wal.next_index() != 6 {
        tokio::task::yield_now().await;
    }
    assert_eq!(wal.read(7).expect("read"), None);
    assert_eq!(wal.read(5).expect("read"), Some(payload(5, LEN)));
    let (new, new_durable) = callback();
    wal.append(vec![(6, payload(106, LEN)), (7, payload(107, LEN))], new)
        .await
        .expect("append");
    assert_eq!(wal.read(7).expect("read"), Some(payload(107, LEN)));
    drop(release);
    old_durable.await.expect("callback").expect("durable");
    truncated.await.expect("task").expect("truncate");
    new_durable.await.expect("callback").expect("durable");
    assert_eq!(wal.read(7).expect("read"), Some(payload(107, LEN)));
    assert_eq!(wal.read(8).expect("read"), None);
    assert_eq!(wal.last_index(), Some(7));
}

#[tokio::test]
async fn truncate_across_segments_deletes_newer_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open_small(dir.path(), 512);
    append_all(&wal, 1..=60, LEN).await;
    let before = segment_files(dir.path()).len();
    assert!(before >= 6, "{before} segments");
    wal.truncate_from(3).await.expect("truncate");
    assert_eq!(segment_files(dir.path()).len(), 1);
    assert_holds(&wal, 1..=2, LEN);
    append_all(&wal, 3..=4, LEN).await;
    drop(wal);
    let wal = open_small(dir.path(), 512);
    assert_holds(&wal, 1..=4, LEN);
}

#[tokio::test]
async fn truncate_outside_the_log_is_documented_behaviour() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path(), SyncMode::Fsync);
    // On a log that never held anything: a no-op.
    wal.truncate_from(3).await.expect("truncate empty");
    assert_eq!(wal.first_index(), None);

    append_all(&wal, 5..=10, LEN).await;
    // At or past the end: a no-op.
    wal.truncate_from(11).await.expect("truncate past end");
    wal.truncate_from(u64::MAX)
        .await
        .expect("truncate far past end");
    assert_holds(&wal, 5..=10, LEN);
    // Below the first index: every record goes, the start stays.
    wal.truncate_from(2).await.expect("truncate below start");
    assert_eq!(
        (wal.first_index(), wal.last_index(), wal.next_index()),
        (None, None, 5)
    );
    drop(wal);

    let wal = open(dir.path(), SyncMode::Fsync);
    assert_eq!((wal.first_index(), wal.next_index()), (None, 5));
    let err = append_durable(&wal, vec![(4, payload(4, LEN))]).await;
    assert!(matches!(
        err,
        Err(Error::NonContiguous {
            expected: 5,
            got: 4
        })
    ));
    append_all(&wal, 5..=5, LEN).await;
}

#[tokio::test]
async fn purge_deletes_whole_old_segments_and_start_survives_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open_small(dir.path(), 512);
    append_all(&wal, 1..=60, LEN).await;
    let before = segment_files(dir.path()).len();
    wal.purge_to(30).await.expect("purge");
    let after = segment_files(dir.path());
    assert!(after.len() < before, "{} -> {}", before, after.len());
    // Only whole segments go: the oldest survivor may still hold purged records.
    assert!(crate::common::file_first_index(&after[0]) <= 31);
    assert_eq!(wal.first_index(), Some(31));
    assert_eq!(wal.read(30).expect("read"), None);
    assert_holds(&wal, 31..=60, LEN);
    drop(wal);

    let wal = open_small(dir.path(), 512);
    assert_eq!(wal.recovery_report().purged_index, Some(30));
    assert_eq!((wal.first_index(), wal.last_index()), (Some(31), Some(60)));
    assert_holds(&wal, 31..=60, LEN);
    // Purging below the start changes nothing.
    wal.purge_to(10).await.expect("purge below start");
    assert_eq!(wal.first_index(), Some(31));
}

#[tokio::test]
async fn purge_everything_then_append_at_purge_plus_one_across_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let wal = open_small(dir.path(), 512);
        append_all(&wal, 1..=20, LEN).await;
        wal.purge_to(20).await.expect("purge");
        assert_eq!((wal.first_index(), wal.next_index()), (None, 21));
        // Past the last record too (a snapshot ahead of the log).
        wal.purge_to(25).await.expect("purge past end");
        assert_eq!(wal.next_index(), 26);
        assert_eq!(segment_files(dir.path()).len(), 1);
    }
    {
        let wal = open_small(dir.path(), 512);
        assert_eq!((wal.first_index(), wal.next_index()), (None, 26));
        let err = append_durable(&wal, vec![(21, payload(21, LEN))]).await;
        assert!(matches!(
            err,
            Err(Error::NonContiguous {
                expected: 26,
                got: 21
            })
        ));
        append_all(&wal, 26..=30, LEN).await;
    }
    let wal = open_small(dir.path(), 512);
    assert_holds(&wal, 26..=30, LEN);
}

#[tokio::test]
async fn purge_on_a_fresh_log_fixes_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let wal = open(dir.path(), SyncMode::Fsync);
        wal.purge_to(99).await.expect("purge");
        assert_eq!(wal.next_index(), 100);
    }
    let wal = open(dir.path(), SyncMode::Fsync);
    assert_eq!(wal.next_index(), 100);
    append_all(&wal, 100..=101, LEN).await;
}

#[tokio::test]
async fn interrupted_purge_is_finished_on_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let wal = open_small(dir.path(), 512);
        append_all(&wal, 1..=60, LEN).await;
    }
    let before = segment_files(dir.path()).len();
    // A crash after the marker was installed, before any segment was deleted.
    fs::write(dir.path().join("purged.meta"), format::encode_marker(40)).expect("marker");
    let wal = open_small(dir.path(), 512);
    assert!(segment_files(dir.path()).len() < before);
    assert_eq!(wal.first_index(), Some(41));
    assert_holds(&wal, 41..=60, LEN);
}

#[tokio::test]
async fn first_append_may_start_anywhere_then_must_be_contiguous() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path(), SyncMode::Fsync);
    append_all(&wal, 1000..=1001, LEN).await;
    let (cb, _) = callback();
    let err = wal.append(vec![(1003, payload(1003, LEN))], cb).await;
    assert!(matches!(
        err,
        Err(Error::NonContiguous {
            expected: 1002,
            got: 1003
        })
    ));
    let (cb, _) = callback();
    let gap_inside = vec![(1002, payload(1002, LEN)), (1004, payload(1004, LEN))];
    let err = wal.append(gap_inside, cb).await;
    assert!(matches!(
        err,
        Err(Error::NonContiguous {
            expected: 1003,
            got: 1004
        })
    ));
    // A rejected append changed nothing.
    assert_eq!(wal.next_index(), 1002);
    assert_holds(&wal, 1000..=1001, LEN);
}
