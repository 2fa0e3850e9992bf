//! Item 13 (WAL part): a purge, a rotation or a truncation cut after *any* of its
//! mutating file-system calls, followed by a process restart or a power loss, leaves a
//! log that opens, starts where it should, holds every record that was durable before,
//! and takes the next append. Recovery itself is cut the same way.

use std::io;

use quiver_wal::{
    testing::{FsCall, SimFs},
    Error, SyncMode, Wal, WalConfig,
};

use crate::{
    common::append_durable,
    sim::{contents, journal, open_sim, record, sim_config, Reboot},
};

/// Records written before the operation under test: several segments' worth.
const RECORDS: u64 = 30;
const SEGMENT_BYTES_MAX: u64 = 512;

fn config(sync: SyncMode) -> WalConfig {
    sim_config(sync, SEGMENT_BYTES_MAX)
}

/// The ways a run can end that `sync` makes promises about: `none` survives only a
/// process crash.
fn reboots(sync: SyncMode) -> &'static [Reboot] {
    match sync {
        SyncMode::None => &Reboot::ALL[..1],
        SyncMode::Fsync | SyncMode::Batch => &Reboot::ALL,
    }
}

/// An operation whose every crash point is tested.
#[derive(Debug, Clone, Copy)]
enum Op {
    Purge(u64),
    Truncate(u64),
    /// Appends this many records in one call (spanning a rotation at these sizes).
    Append(u64),
}

impl Op {
    async fn run(self, wal: &Wal) -> Result<(), Error> {
        match self {
            Op::Purge(index) => wal.purge_to(index).await,
            Op::Truncate(index) => wal.truncate_from(index).await,
            Op::Append(count) => {
                let first = wal.next_index().max(1);
                let records = (first..first + count).map(|i| (i, record(i))).collect();
                append_durable(wal, records).await
            }
        }
    }
}

/// A disk holding records `1..=records`, one append each, then `before`, all synced
/// (so no batch-mode timer fires later and every run makes the same calls).
async fn prepared(sync: SyncMode, records: u64, before: &[Op]) -> SimFs {
    let fs = SimFs::new(7);
    let wal = open_sim(&fs, &config(sync)).expect("open");
    for index in 1..=records {
        append_durable(&wal, vec![(index, record(index))])
            .await
            .expect("append");
    }
    for op in before {
        op.run(&wal).await.expect("preparing op");
    }
    wal.sync().await.expect("sync");
    fs
}

/// The log as the operation found it: records `start..=end`.
#[derive(Debug, Clone, Copy)]
struct Before {
    start: u64,
    end: u64,
}

/// Checks a reopened log against what `op` may have done, given whether it completed.
fn check(op: Op, before: Before, completed: bool, wal: &Wal, context: &str) {
    let held = contents(wal, context);
    let span = |start: u64, end: u64| (start..=end).collect::<Vec<u64>>();
    match op {
        Op::Purge(index) => {
            let marker = wal.recovery_report().purged_index == Some(index);
            assert!(
                marker || !completed,
                "{context}: a completed purge was undone"
            );
            // Either the purge took effect or it did not; nothing else changed.
            let start = if marker { index + 1 } else { before.start };
            assert_eq!(held, span(start, before.end), "{context}");
            // (A log that never held anything reports 0: any first index goes.)
            let next = wal.next_index().max(1);
            assert_eq!(next, before.end.max(start - 1) + 1, "{context}");
        }
        Op::Truncate(index) => {
            // A prefix of the old log that reaches at least the truncation point.
            let keep_end = index.max(before.start) - 1;
            let end = held.last().copied().unwrap_or(before.start - 1);
            assert_eq!(held, span(before.start, end), "{context}");
            assert!(keep_end <= end && end <= before.end, "{context}");
            assert!(
                !completed || end == keep_end,
                "{context}: truncation undone"
            );
        }
        Op::Append(count) => {
            let end = held.last().copied().unwrap_or(before.start - 1);
            assert_eq!(held, span(before.start, end), "{context}");
            assert!(before.end <= end && end <= before.end + count, "{context}");
            assert!(
                !completed || end == before.end + count,
                "{context}: acknowledged append lost"
            );
        }
    }
}

/// What one cut run is checked against.
#[derive(Debug, Clone, Copy)]
struct Expect {
    sync: SyncMode,
    op: Op,
    before: Before,
    /// The operation returned `Ok` before the crash.
    completed: bool,
}

/// Reopens, checks, then proves the log usable: the next append is durable and
/// survives one more reopen.
async fn reopen_and_check(fs: &SimFs, expect: Expect, context: &str) {
    let Expect {
        sync,
        op,
        before,
        completed,
    } = expect;
    let wal = match open_sim(fs, &config(sync)) {
        Ok(wal) => wal,
        Err(e) => panic!("{context}: reopen failed: {e}\n{}", journal(fs)),
    };
    check(op, before, completed, &wal, context);
    let next = wal.next_index();
    if let Err(e) = append_durable(&wal, vec![(next, record(next))]).await {
        panic!(
            "{context}: append {next} after reopen: {e}\n{}",
            journal(fs)
        );
    }
    wal.sync().await.expect("sync");
    drop(wal);
    let wal = open_sim(fs, &config(sync)).expect("second reopen");
    assert_eq!(wal.last_index(), Some(next), "{context}");
}

/// Runs `op` on a prepared disk, crashing after each of its mutating calls in turn
/// (and once not at all), with each kind of reboot; then does the same to the recovery
/// that follows.
async fn crash_at_every_call(sync: SyncMode, records: u64, before_ops: &[Op], op: Op) {
    let base = prepared(sync, records, before_ops).await;
    let before = {
        let wal = open_sim(&base.fork(), &config(sync)).expect("open");
        // A log that never held anything reports 0; its first append here uses 1.
        let next = wal.next_index().max(1);
        Before {
            start: wal.first_index().unwrap_or(next),
            end: next - 1,
        }
    };
    let calls = {
        let fs = base.fork();
        let wal = open_sim(&fs, &config(sync)).expect("open");
        let calls_before = fs.mutating_calls();
        op.run(&wal).await.expect("uncut op");
        drop(wal);
        fs.mutating_calls() - calls_before
    };
    assert!(calls > 0, "{op:?} made no calls");
    for cut in 0..=calls {
        for &reboot in reboots(sync) {
            let fs = base.fork();
            let wal = open_sim(&fs, &config(sync)).expect("open");
            fs.crash_after(cut);
            let completed = op.run(&wal).await.is_ok();
            assert_eq!(completed, cut == calls, "{op:?} cut after {cut} calls");
            drop(wal);
            reboot.apply(&fs);
            let context =
                format!("{sync} mode, {op:?} cut after {cut} of {calls} calls, then {reboot:?}");
            let expect = Expect {
                sync,
                op,
                before,
                completed,
            };
            crash_recovery_at_every_call(&fs, expect, &context).await;
            reopen_and_check(&fs, expect, &context).await;
        }
    }
}

/// Cuts the recovery of `fs` after each of its mutating calls (restart or power loss),
/// then checks a clean reopen.
async fn crash_recovery_at_every_call(fs: &SimFs, expect: Expect, context: &str) {
    let config = config(expect.sync);
    let calls = {
        let fs = fs.fork();
        let calls_before = fs.mutating_calls();
        drop(open_sim(&fs, &config));
        fs.mutating_calls() - calls_before
    };
    for cut in 0..calls {
        for &reboot in reboots(expect.sync) {
            let fs = fs.fork();
            fs.crash_after(cut);
            assert!(open_sim(&fs, &config).is_err(), "{context}: uncut recovery");
            reboot.apply(&fs);
            let context = format!("{context}; recovery cut after {cut} of {calls}, {reboot:?}");
            reopen_and_check(&fs, expect, &context).await;
        }
    }
}

/// [`crash_at_every_call`] in every sync mode.
async fn crash_at_every_call_in_every_mode(records: u64, before_ops: &[Op], op: Op) {
    for sync in [SyncMode::Fsync, SyncMode::Batch, SyncMode::None] {
        crash_at_every_call(sync, records, before_ops, op).await;
    }
}

#[tokio::test]
async fn purge_beyond_the_end_is_crash_safe_at_every_call() {
    crash_at_every_call_in_every_mode(RECORDS, &[], Op::Purge(RECORDS + 10)).await;
}

#[tokio::test]
async fn purge_on_an_empty_log_is_crash_safe_at_every_call() {
    crash_at_every_call_in_every_mode(0, &[], Op::Purge(9)).await;
}

#[tokio::test]
async fn purge_to_the_last_record_is_crash_safe_at_every_call() {
    crash_at_every_call_in_every_mode(RECORDS, &[], Op::Purge(RECORDS)).await;
}

#[tokio::test]
async fn purge_in_the_middle_is_crash_safe_at_every_call() {
    crash_at_every_call_in_every_mode(RECORDS, &[], Op::Purge(RECORDS / 2)).await;
}

#[tokio::test]
async fn append_across_a_rotation_is_crash_safe_at_every_call() {
    // Only `fsync` promises a completed append survives a power loss.
    crash_at_every_call(SyncMode::Fsync, RECORDS, &[], Op::Append(8)).await;
}

#[tokio::test]
async fn append_after_a_purge_beyond_the_end_is_crash_safe_at_every_call() {
    let purge = Op::Purge(RECORDS + 10);
    crash_at_every_call(SyncMode::Fsync, RECORDS, &[purge], Op::Append(8)).await;
}

#[tokio::test]
async fn truncate_inside_the_last_segment_is_crash_safe_at_every_call() {
    crash_at_every_call_in_every_mode(RECORDS, &[], Op::Truncate(RECORDS - 1)).await;
}

#[tokio::test]
async fn truncate_across_segments_is_crash_safe_at_every_call() {
    crash_at_every_call_in_every_mode(RECORDS, &[], Op::Truncate(5)).await;
}

#[tokio::test]
async fn truncate_of_everything_is_crash_safe_at_every_call() {
    crash_at_every_call_in_every_mode(RECORDS, &[], Op::Truncate(1)).await;
}

#[tokio::test]
async fn truncate_below_a_purged_start_is_crash_safe_at_every_call() {
    let purge = Op::Purge(RECORDS / 2);
    crash_at_every_call_in_every_mode(RECORDS, &[purge], Op::Truncate(3)).await;
}

/// The bug: purging past the last record writes the marker, starts an empty segment at
/// `purged + 1`, then deletes the old segments. Cut between the last two steps, the old
/// segments (ending below `purged + 1`) sat next to the new one, and recovery's
/// contiguity check refused the log as corrupt. openraft purges like this when a
/// follower installs a snapshot ahead of its log.
#[tokio::test]
async fn purge_beyond_the_end_then_crash_reopens() {
    for reboot in Reboot::ALL {
        let fs = prepared(SyncMode::Fsync, RECORDS, &[]).await;
        let wal = open_sim(&fs, &config(SyncMode::Fsync)).expect("open");
        let segments = wal.stats().segments;
        assert!(segments > 2, "{segments} segments");
        // Everything up to the first delete happens (and is durable); the delete fails.
        fs.fail_next(FsCall::RemoveFile, io::Error::other("cut here"));
        assert!(wal.purge_to(RECORDS + 10).await.is_err());
        drop(wal);
        reboot.apply(&fs);

        let wal = match open_sim(&fs, &config(SyncMode::Fsync)) {
            Ok(wal) => wal,
            Err(e) => panic!("{reboot:?}: reopen failed: {e}\n{}", journal(&fs)),
        };
        let report = wal.recovery_report();
        assert_eq!(report.segments_purged, segments, "{reboot:?}");
        assert_eq!((report.segments, report.records), (1, 0), "{reboot:?}");
        assert_eq!(wal.first_index(), None);
        assert_eq!(wal.next_index(), RECORDS + 11);
        let next = RECORDS + 11;
        append_durable(&wal, vec![(next, record(next))])
            .await
            .expect("append after reopen");
    }
}
