//! Damage a crash cannot explain is corruption: open fails naming file and offset, and
//! never skips past it. The rule (see `quiver_wal::format`): a bad frame is a torn tail
//! only in the last segment and only if nothing but zeros follows it or it ends exactly
//! at end of file; anywhere else it is `Error::Corrupt`.

use std::fs;

use quiver_wal::{format, Error, SyncMode, Wal};

use crate::common::{
    append_all, assert_holds, flip_byte, frame_offset, open, open_small, payload, segment_files,
};

const LEN: usize = 100;

async fn ten_records(dir: &std::path::Path) -> std::path::PathBuf {
    let wal = open(dir, SyncMode::Fsync);
    append_all(&wal, 1..=10, LEN).await;
    drop(wal);
    let files = segment_files(dir);
    assert_eq!(files.len(), 1);
    files[0].clone()
}

fn expect_corrupt(result: Result<Wal, Error>) -> (std::path::PathBuf, u64, String) {
    match result {
        Err(Error::Corrupt {
            path,
            offset,
            reason,
        }) => (path, offset, reason),
        Err(other) => panic!("expected Corrupt, got {other}"),
        Ok(_) => panic!("expected Corrupt, but the log opened"),
    }
}

#[tokio::test]
async fn flipped_byte_in_an_early_record_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = ten_records(dir.path()).await;
    let record_3 = frame_offset(1, 3, LEN);
    flip_byte(&segment, record_3 + format::FRAME_HEADER_BYTES as u64 + 50);

    let (path, offset, reason) = expect_corrupt(Wal::open(crate::common::config(
        dir.path(),
        SyncMode::Fsync,
    )));
    assert_eq!(path, segment);
    assert_eq!(offset, record_3);
    assert!(reason.contains("checksum"), "{reason}");
    // Nothing was repaired: the file is untouched and still fails.
    assert!(Wal::open(crate::common::config(dir.path(), SyncMode::Fsync)).is_err());
}

#[tokio::test]
async fn flipped_length_field_in_an_early_record_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = ten_records(dir.path()).await;
    let record_2 = frame_offset(1, 2, LEN);
    flip_byte(&segment, record_2); // low byte of `len`: the frame now ends elsewhere
    let (path, offset, _) = expect_corrupt(Wal::open(crate::common::config(
        dir.path(),
        SyncMode::Fsync,
    )));
    assert_eq!((path, offset), (segment, record_2));
}

#[tokio::test]
async fn length_field_pointing_past_the_end_of_an_early_record_is_corrupt_not_torn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = ten_records(dir.path()).await;
    let record_2 = frame_offset(1, 2, LEN);
    flip_byte(&segment, record_2 + 3); // high byte of `len`: the frame "ends" past EOF
    let (path, offset, reason) = expect_corrupt(Wal::open(crate::common::config(
        dir.path(),
        SyncMode::Fsync,
    )));
    assert_eq!((path, offset), (segment, record_2));
    assert!(reason.contains("record 3 follows"), "{reason}");
}

#[tokio::test]
async fn flipped_byte_in_a_header_is_corrupt_and_says_why() {
    let cases: [(u64, &str); 3] = [(0, "magic"), (9, "checksum"), (14, "checksum")];
    for (byte, expected) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let segment = ten_records(dir.path()).await;
        flip_byte(&segment, byte);
        let (path, offset, reason) = expect_corrupt(Wal::open(crate::common::config(
            dir.path(),
            SyncMode::Fsync,
        )));
        assert_eq!((path, offset), (segment, 0));
        assert!(reason.contains(expected), "byte {byte}: {reason}");
    }
}

#[tokio::test]
async fn segment_from_a_newer_format_version_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = ten_records(dir.path()).await;
    let mut bytes = fs::read(&segment).expect("read");
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c(&bytes[0..20]);
    bytes[20..24].copy_from_slice(&crc.to_le_bytes());
    fs::write(&segment, bytes).expect("write");
    let (_, offset, reason) = expect_corrupt(Wal::open(crate::common::config(
        dir.path(),
        SyncMode::Fsync,
    )));
    assert_eq!(offset, 0);
    assert!(reason.contains("version 2"), "{reason}");
}

/// CRC32C, bitwise: enough to forge a header in a test without another dependency.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[tokio::test]
async fn flipped_byte_in_the_final_record_is_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = ten_records(dir.path()).await;
    let record_10 = frame_offset(1, 10, LEN);
    flip_byte(&segment, record_10 + format::FRAME_HEADER_BYTES as u64 + 7);

    let wal = open(dir.path(), SyncMode::Fsync);
    let torn = wal.recovery_report().torn_tail.clone().expect("torn tail");
    assert_eq!((torn.path, torn.offset), (segment, record_10));
    assert_holds(&wal, 1..=9, LEN);
    append_all(&wal, 10..=10, LEN).await;
}

#[tokio::test]
async fn flipped_byte_in_the_final_record_of_an_earlier_segment_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let wal = open_small(dir.path(), 1024);
        append_all(&wal, 1..=40, LEN).await;
    }
    let files = segment_files(dir.path());
    assert!(files.len() >= 3);
    let second_first = crate::common::file_first_index(&files[1]);
    let last_of_first = frame_offset(1, second_first - 1, LEN);
    flip_byte(&files[0], last_of_first + 20);
    let (path, offset, reason) = expect_corrupt(Wal::open(crate::common::config(
        dir.path(),
        SyncMode::Fsync,
    )));
    assert_eq!((path, offset), (files[0].clone(), last_of_first));
    assert!(reason.contains("not the last"), "{reason}");
}

#[tokio::test]
async fn missing_middle_segment_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let wal = open_small(dir.path(), 1024);
        append_all(&wal, 1..=40, LEN).await;
    }
    let files = segment_files(dir.path());
    fs::remove_file(&files[1]).expect("remove");
    let (path, offset, reason) = expect_corrupt(Wal::open(crate::common::config(
        dir.path(),
        SyncMode::Fsync,
    )));
    assert_eq!((path, offset), (files[2].clone(), 0));
    assert!(reason.contains("ends before index"), "{reason}");
}

#[tokio::test]
async fn corrupt_record_is_reported_when_read_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wal = open(dir.path(), SyncMode::Fsync);
    append_all(&wal, 1..=10, LEN).await;
    let segment = segment_files(dir.path()).remove(0);
    let record_4 = frame_offset(1, 4, LEN);
    flip_byte(&segment, record_4 + 30);

    match wal.read(4) {
        Err(Error::Corrupt { path, offset, .. }) => assert_eq!((path, offset), (segment, record_4)),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(matches!(wal.read_range(1..11), Err(Error::Corrupt { .. })));
    assert_eq!(wal.read(5).expect("read 5"), Some(payload(5, LEN)));
}

#[tokio::test]
async fn missing_oldest_unpurged_segment_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let wal = open_small(dir.path(), 1024);
        append_all(&wal, 1..=40, LEN).await;
        wal.purge_to(10).await.expect("purge");
    }
    let files = segment_files(dir.path());
    fs::remove_file(&files[0]).expect("remove");
    let (path, offset, reason) = expect_corrupt(Wal::open(crate::common::config(
        dir.path(),
        SyncMode::Fsync,
    )));
    assert_eq!((path, offset), (files[1].clone(), 0));
    assert!(reason.contains("purge marker"), "{reason}");
}
