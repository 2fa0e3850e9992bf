//! A crash mid-write leaves a torn tail; recovery cuts it and keeps everything before.

use std::fs::{self, OpenOptions};

use proptest::prelude::*;
use quiver_wal::{format, SyncMode, Wal, WalConfig};

use crate::common::{
    all_records, append_all, append_durable, assert_holds, file_first_index, open, payload,
    segment_files,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn cut_file(path: &std::path::Path, len: u64) {
    let file = OpenOptions::new().write(true).open(path).expect("open");
    file.set_len(len).expect("set_len");
}

/// Writes `payload_lens.len()` records starting at index 1 into a log with
/// `segment_bytes_max`, cuts `cut_back_bytes` off the end of the last segment (at most
/// the whole last record), reopens, and checks that exactly the complete records
/// survive, that the log takes the next append, and that a second reopen is clean.
fn cut_and_recover(payload_lens: &[usize], segment_bytes_max: u64, cut_back_bytes: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = WalConfig {
        segment_bytes_max,
        ..crate::common::config(dir.path(), SyncMode::Fsync)
    };
    let rt = runtime();
    let count = payload_lens.len() as u64;
    {
        let wal = Wal::open(config.clone()).expect("open");
        rt.block_on(async {
            for (k, len) in payload_lens.iter().enumerate() {
                let index = k as u64 + 1;
                append_durable(&wal, vec![(index, payload(index, *len))])
                    .await
                    .expect("append");
            }
        });
    }
    let files = segment_files(dir.path());
    let last = files.last().expect("a segment");
    let last_first = file_first_index(last);
    let record_start = format::SEGMENT_HEADER_BYTES as u64
        + (last_first..count)
            .map(|i| (format::FRAME_HEADER_BYTES + payload_lens[(i - 1) as usize]) as u64)
            .sum::<u64>();
    let file_len = fs::metadata(last).expect("metadata").len();
    assert_eq!(
        file_len - record_start,
        (format::FRAME_HEADER_BYTES + payload_lens[(count - 1) as usize]) as u64
    );
    let cut = file_len - cut_back_bytes.min(file_len - record_start);
    cut_file(last, cut);

    let survivors = if cut == file_len { count } else { count - 1 };
    let check = |wal: &Wal| {
        let records = all_records(wal);
        assert_eq!(
            records.len() as u64,
            survivors,
            "cut at {cut} of {file_len}"
        );
        for (index, bytes) in &records {
            assert_eq!(*bytes, payload(*index, payload_lens[(*index - 1) as usize]));
        }
    };
    {
        let wal = Wal::open(config.clone()).expect("reopen after cut");
        let torn = wal.recovery_report().torn_tail.clone();
        if record_start < cut && cut < file_len {
            let torn = torn.expect("torn tail reported");
            assert_eq!(torn.path, *last);
            assert_eq!(torn.offset, record_start);
            assert_eq!(torn.bytes, cut - record_start);
        } else {
            assert_eq!(torn, None, "no torn tail when cut on a frame boundary");
        }
        check(&wal);
        assert_eq!(wal.next_index(), survivors + 1);
        let index = survivors + 1;
        rt.block_on(append_durable(&wal, vec![(index, payload(index, 3))]))
            .expect("append after recovery");
    }
    let wal = Wal::open(config).expect("reopen again");
    assert_eq!(
        wal.recovery_report().torn_tail,
        None,
        "second recovery is clean"
    );
    assert_eq!(wal.last_index(), Some(survivors + 1));
    assert_eq!(
        wal.read(survivors + 1).expect("read"),
        Some(payload(survivors + 1, 3))
    );
    drop(wal);
}

#[test]
fn torn_tail_at_every_offset_of_a_small_final_record_is_truncated() {
    let lens = [5, 0, 17, 9, 12];
    let frame = (format::FRAME_HEADER_BYTES + 12) as u64;
    for cut_back_bytes in 0..=frame {
        cut_and_recover(&lens, 1 << 20, cut_back_bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn torn_tail_anywhere_in_the_final_record_keeps_every_complete_record(
        lens in prop::collection::vec(0usize..600, 1..24),
        segment_bytes_max in 200u64..4096,
        cut_back_fraction in 0.0f64..=1.0,
    ) {
        let last = (format::FRAME_HEADER_BYTES + lens[lens.len() - 1]) as f64;
        let cut_back_bytes = (last * cut_back_fraction) as u64;
        cut_and_recover(&lens, segment_bytes_max, cut_back_bytes);
    }
}

#[tokio::test]
async fn zero_filled_tail_is_truncated() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let wal = open(dir.path(), SyncMode::Fsync);
        append_all(&wal, 1..=4, 40).await;
    }
    let last = segment_files(dir.path()).pop().expect("segment");
    let len = fs::metadata(&last).expect("metadata").len();
    cut_file(&last, len + 4096);

    let wal = open(dir.path(), SyncMode::Fsync);
    let torn = wal.recovery_report().torn_tail.clone().expect("torn tail");
    assert_eq!((torn.offset, torn.bytes), (len, 4096));
    assert_eq!(fs::metadata(&last).expect("metadata").len(), len);
    assert_holds(&wal, 1..=4, 40);
}

#[tokio::test]
async fn torn_header_of_a_new_last_segment_is_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let wal = open(dir.path(), SyncMode::Fsync);
        append_all(&wal, 1..=4, 40).await;
    }
    // A crash right after rotation created the next segment and wrote half its header.
    let half = &format::encode_segment_header(5)[..10];
    let path = dir.path().join(format::segment_file_name(5));
    fs::write(&path, half).expect("write");

    let wal = open(dir.path(), SyncMode::Fsync);
    let torn = wal.recovery_report().torn_tail.clone().expect("torn tail");
    assert!(torn.segment_deleted);
    assert_eq!(torn.path, path);
    assert!(!path.exists());
    assert_holds(&wal, 1..=4, 40);
    append_all(&wal, 5..=5, 40).await;
}

#[tokio::test]
async fn all_zero_last_segment_is_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let wal = open(dir.path(), SyncMode::Fsync);
        append_all(&wal, 1..=3, 40).await;
    }
    let path = dir.path().join(format::segment_file_name(4));
    fs::write(&path, vec![0u8; 4096]).expect("write");
    let wal = open(dir.path(), SyncMode::Fsync);
    assert!(wal
        .recovery_report()
        .torn_tail
        .as_ref()
        .is_some_and(|t| t.segment_deleted));
    assert_holds(&wal, 1..=3, 40);
}
