//! Reads see pending (unwritten) and written records alike, across segments.

use quiver_wal::SyncMode;

use crate::common::{all_records, append_all, block_writer, callback, open, open_small, payload};

const LEN: usize = 100;

#[tokio::test]
async fn read_range_spans_segment_boundaries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open_small(dir.path(), 700);
    append_all(&wal, 1..=40, LEN).await;
    assert!(wal.stats().segments >= 5);
    let records = wal.read_range(3..37).expect("read_range");
    let expected: Vec<_> = (3..37).map(|i| (i, payload(i, LEN))).collect();
    assert!(records == expected);
    // Clamped to what the log holds.
    assert_eq!(wal.read_range(0..3).expect("read_range").len(), 2);
    assert_eq!(wal.read_range(39..1000).expect("read_range").len(), 2);
    assert!(wal.read_range(41..50).expect("read_range").is_empty());
    assert!(wal.read_range(10..10).expect("read_range").is_empty());
    assert_eq!(wal.read(0).expect("read"), None);
    assert_eq!(wal.read(41).expect("read"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appended_records_are_readable_before_they_are_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open_small(dir.path(), 700);
    append_all(&wal, 1..=10, LEN).await;
    let release = block_writer(&wal, 11).await;
    let mut durable = Vec::new();
    for index in 12..=20 {
        let (cb, rx) = callback();
        wal.append(vec![(index, payload(index, LEN))], cb)
            .await
            .expect("append");
        durable.push(rx);
    }
    let stats = wal.stats();
    assert_eq!(stats.records_pending, 9, "{stats:?}");
    assert_eq!(wal.last_index(), Some(20));
    assert_eq!(wal.read(15).expect("read"), Some(payload(15, LEN)));
    // Written records from several segments, the blocking record, then pending ones.
    let records = wal.read_range(2..21).expect("read_range");
    assert_eq!(records.len(), 19);
    for (index, bytes) in &records {
        let len = if *index == 11 { 8 } else { LEN };
        assert_eq!(*bytes, payload(*index, len), "record {index}");
    }
    drop(release);
    for rx in durable {
        rx.await.expect("callback").expect("durable");
    }
    assert_eq!(wal.stats().records_pending, 0);
    assert!(all_records(&wal)[1..] == records[..]);
    drop(wal);
    let wal = open(dir.path(), SyncMode::Fsync);
    assert_eq!(wal.read_range(1..21).expect("read_range").len(), 20);
}
