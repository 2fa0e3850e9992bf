//! Segments rotate by size, and every sync mode reopens with everything after a clean
//! drop.

use std::time::Duration;

use quiver_wal::{format, SyncMode, Wal, WalConfig};

use crate::common::{
    append_all, assert_holds, callback, config, file_first_index, open, open_small, payload,
    segment_files,
};

const LEN: usize = 100;

#[tokio::test]
async fn segments_rotate_by_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment_bytes_max = 1024;
    let wal = open_small(dir.path(), segment_bytes_max);
    append_all(&wal, 1..=100, LEN).await;
    let files = segment_files(dir.path());
    let frame = (format::FRAME_HEADER_BYTES + LEN) as u64;
    assert!(files.len() >= 100 * frame as usize / segment_bytes_max as usize);
    assert_eq!(file_first_index(&files[0]), 1);
    let mut next = 1;
    for file in &files {
        assert_eq!(file_first_index(file), next, "segments are contiguous");
        let len = std::fs::metadata(file).expect("metadata").len();
        // A segment passes the limit by at most one record.
        assert!(
            len < segment_bytes_max + frame,
            "{} is {len} bytes",
            file.display()
        );
        next += (len - format::SEGMENT_HEADER_BYTES as u64) / frame;
    }
    assert_eq!(next, 101);
    let stats = wal.stats();
    assert_eq!(stats.segments, files.len());
    assert_eq!(stats.records, 100);
    drop(wal);

    let wal = open_small(dir.path(), segment_bytes_max);
    assert_eq!(wal.recovery_report().segments, files.len());
    assert_eq!(wal.recovery_report().records, 100);
    assert_holds(&wal, 1..=100, LEN);
}

#[tokio::test]
async fn every_sync_mode_reopens_with_all_records_after_clean_drop() {
    for mode in [SyncMode::Fsync, SyncMode::Batch, SyncMode::None] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = WalConfig {
            segment_bytes_max: 2048,
            ..config(dir.path(), mode)
        };
        {
            let wal = Wal::open(config.clone()).expect("open");
            append_all(&wal, 1..=50, LEN).await;
            // Dropped with records possibly still queued: drop waits for the writer.
            let (cb, _durable) = callback();
            wal.append(vec![(51, payload(51, LEN))], cb)
                .await
                .expect("append");
        }
        let wal = Wal::open(config).expect("reopen");
        assert_eq!(wal.recovery_report().torn_tail, None, "{mode}");
        assert_holds(&wal, 1..=51, LEN);
        if mode == SyncMode::None {
            assert_eq!(wal.stats().fsyncs, 0);
        }
    }
}

#[tokio::test]
async fn batch_mode_syncs_within_the_interval() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path(), SyncMode::Batch);
    append_all(&wal, 1..=3, LEN).await;
    let fsyncs = wal.stats().fsyncs;
    // sync_interval_ms is 20 in the test config.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while wal.stats().fsyncs == fsyncs {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no background fsync"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Nothing dirty: no more syncs.
    let fsyncs = wal.stats().fsyncs;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(wal.stats().fsyncs, fsyncs);
    wal.sync().await.expect("sync");
}
