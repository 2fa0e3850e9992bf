//! Injected disk errors (ENOSPC, EIO) fail the operation that met them with
//! `Error::Io`, poison the log without retrying, and leave a disk that reopens with
//! everything acknowledged before.

use std::io;

use quiver_wal::{
    testing::{FsCall, PowerLoss, SimFs},
    Error, SyncMode, Wal, WalConfig,
};

use crate::{
    common::append_durable,
    sim::{contents, open_sim, record, sim_config},
};

const ENOSPC: i32 = 28;
const EIO: i32 = 5;

fn config() -> WalConfig {
    sim_config(SyncMode::Fsync, 512)
}

/// A WAL on a fresh simulated disk holding records `1..=records`.
async fn wal_with(records: u64) -> (SimFs, Wal) {
    let fs = SimFs::new(11);
    let wal = open_sim(&fs, &config()).expect("open");
    for index in 1..=records {
        append_durable(&wal, vec![(index, record(index))])
            .await
            .expect("append");
    }
    (fs, wal)
}

fn os_error(result: &Result<(), Error>) -> Option<i32> {
    match result {
        Err(Error::Io { source, .. }) => source.raw_os_error(),
        _ => None,
    }
}

#[tokio::test]
async fn enospc_on_write_fails_the_append_and_poisons_the_log() {
    let (fs, wal) = wal_with(5).await;
    fs.fail_next(FsCall::Write, io::Error::from_raw_os_error(ENOSPC));
    let result = append_durable(&wal, vec![(6, record(6))]).await;
    assert_eq!(os_error(&result), Some(ENOSPC), "{result:?}");
    let calls = fs.mutating_calls();
    let result = append_durable(&wal, vec![(7, record(7))]).await;
    assert!(matches!(result, Err(Error::Poisoned(_))), "{result:?}");
    assert!(matches!(wal.sync().await, Err(Error::Poisoned(_))));
    assert_eq!(
        fs.mutating_calls(),
        calls,
        "a poisoned log leaves the disk alone"
    );
    drop(wal);

    fs.restart();
    let wal = open_sim(&fs, &config()).expect("reopen");
    assert_eq!(contents(&wal, "after ENOSPC"), (1..=5).collect::<Vec<_>>());
    append_durable(&wal, vec![(6, record(6))])
        .await
        .expect("append once there is space");
}

#[tokio::test]
async fn eio_on_fdatasync_is_reported_and_never_retried() {
    let (fs, wal) = wal_with(5).await;
    fs.fail_next(FsCall::SyncData, io::Error::from_raw_os_error(EIO));
    let result = append_durable(&wal, vec![(6, record(6))]).await;
    assert_eq!(os_error(&result), Some(EIO), "{result:?}");
    // Not even the clean shutdown syncs again: the failed fsync may have dropped pages.
    let calls = fs.mutating_calls();
    drop(wal);
    assert_eq!(fs.mutating_calls(), calls);

    fs.power_loss(PowerLoss::Strict);
    let wal = open_sim(&fs, &config()).expect("reopen");
    assert_eq!(contents(&wal, "after EIO"), (1..=5).collect::<Vec<_>>());
}

#[tokio::test]
async fn failed_segment_creation_fails_the_append_and_reopens() {
    let (fs, wal) = wal_with(5).await;
    let segments = wal.stats().segments;
    fs.fail_next(FsCall::CreateNew, io::Error::from_raw_os_error(ENOSPC));
    // Enough bytes to fill the active segment and need a new one.
    let records: Vec<_> = (6..=12).map(|i| (i, record(i))).collect();
    let result = append_durable(&wal, records).await;
    assert_eq!(os_error(&result), Some(ENOSPC), "{result:?}");
    drop(wal);
    for mode in [PowerLoss::Strict, PowerLoss::Torn] {
        let fs = fs.fork();
        fs.power_loss(mode);
        let wal = open_sim(&fs, &config()).expect("reopen");
        let held = contents(&wal, "after a failed rotation");
        assert_eq!(held[..5], [1, 2, 3, 4, 5], "{mode:?}");
        assert_eq!(wal.stats().segments, segments, "{mode:?}");
    }
}

#[tokio::test]
async fn read_error_is_reported_and_does_not_poison() {
    let (fs, wal) = wal_with(5).await;
    fs.fail_next(FsCall::Read, io::Error::from_raw_os_error(EIO));
    assert!(matches!(wal.read(3), Err(Error::Io { .. })));
    assert_eq!(wal.read(3).expect("read again"), Some(record(3)));
    append_durable(&wal, vec![(6, record(6))])
        .await
        .expect("append after a read error");
}

#[tokio::test]
async fn open_fails_cleanly_on_a_listing_error_and_succeeds_after() {
    let (fs, wal) = wal_with(5).await;
    drop(wal);
    fs.fail_next(FsCall::ListDir, io::Error::from_raw_os_error(EIO));
    assert!(matches!(open_sim(&fs, &config()), Err(Error::Io { .. })));
    let wal = open_sim(&fs, &config()).expect("reopen");
    assert_eq!(contents(&wal, "after a listing error").len(), 5);
}

/// The bug: `Wal::open` built its writer's tokio runtime, then finished an interrupted
/// purge; when that failed, the runtime was dropped inside the caller's async context
/// (quiver-raft opens the WAL from `RaftNode::start`), and tokio panicked instead of the
/// error being returned.
#[tokio::test]
async fn open_failing_inside_an_async_context_returns_the_error() {
    let (fs, wal) = wal_with(30).await;
    // Purge past the end, cut right after the marker is durable (create, write,
    // fdatasync, rename, directory fsync), before the segment at 41 exists.
    fs.crash_after(5);
    assert!(wal.purge_to(40).await.is_err());
    drop(wal);
    fs.restart();
    // Opening must now create that segment; make it fail.
    fs.fail_next(FsCall::CreateNew, io::Error::from_raw_os_error(ENOSPC));
    let result = open_sim(&fs, &config()).map(drop);
    assert_eq!(os_error(&result), Some(ENOSPC), "{result:?}");

    let wal = open_sim(&fs, &config()).expect("reopen");
    assert_eq!((wal.first_index(), wal.next_index()), (None, 41));
}
