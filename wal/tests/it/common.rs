//! Helpers shared by the integration tests.

use std::{
    fs,
    path::{Path, PathBuf},
};

use bytes::Bytes;
use quiver_wal::{format, DurableCallback, Error, SyncMode, Wal, WalConfig};
use tokio::sync::oneshot;

/// A config for `dir` with small segments so tests rotate.
pub fn config(dir: &Path, sync: SyncMode) -> WalConfig {
    WalConfig {
        dir: dir.to_path_buf(),
        sync,
        sync_interval_ms: 20,
        segment_bytes_max: 64 << 10,
        queue_len_max: 256,
    }
}

/// Opens with [`config`], panicking on error.
pub fn open(dir: &Path, sync: SyncMode) -> Wal {
    Wal::open(config(dir, sync)).expect("open WAL")
}

/// Opens with a given segment size.
pub fn open_small(dir: &Path, segment_bytes_max: u64) -> Wal {
    Wal::open(WalConfig {
        segment_bytes_max,
        ..config(dir, SyncMode::Fsync)
    })
    .expect("open WAL")
}

/// Deterministic payload for `index`, `len` bytes long.
pub fn payload(index: u64, len: usize) -> Bytes {
    let seed = index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..len)
        .map(|i| (seed.rotate_left((i % 64) as u32) as u8) ^ (i as u8))
        .collect::<Vec<u8>>()
        .into()
}

/// A callback and the receiver its outcome arrives on.
pub fn callback() -> (DurableCallback, oneshot::Receiver<Result<(), Error>>) {
    let (tx, rx) = oneshot::channel();
    let callback: DurableCallback = Box::new(move |result| {
        let _ = tx.send(result);
    });
    (callback, rx)
}

/// Appends and waits until durable.
pub async fn append_durable(wal: &Wal, records: Vec<(u64, Bytes)>) -> Result<(), Error> {
    let (callback, rx) = callback();
    wal.append(records, callback).await?;
    rx.await.expect("callback dropped")
}

/// Appends `len`-byte payloads for `indexes`, one append each, and waits for all.
pub async fn append_all(wal: &Wal, indexes: std::ops::RangeInclusive<u64>, len: usize) {
    let mut waits = Vec::new();
    for index in indexes {
        let (callback, rx) = callback();
        wal.append(vec![(index, payload(index, len))], callback)
            .await
            .expect("append");
        waits.push(rx);
    }
    for rx in waits {
        rx.await.expect("callback dropped").expect("durable");
    }
}

/// Every record the log holds.
pub fn all_records(wal: &Wal) -> Vec<(u64, Bytes)> {
    wal.read_range(0..u64::MAX).expect("read_range")
}

/// Checks the log holds exactly `indexes`, each with `payload(index, len)`.
pub fn assert_holds(wal: &Wal, indexes: std::ops::RangeInclusive<u64>, len: usize) {
    let records = all_records(wal);
    let expected: Vec<(u64, Bytes)> = indexes.map(|i| (i, payload(i, len))).collect();
    assert_eq!(records.len(), expected.len(), "record count");
    assert!(records == expected, "record contents differ");
}

/// Segment files in `dir`, in log order.
pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    files.sort();
    files
}

/// First index named by a segment file.
pub fn file_first_index(path: &Path) -> u64 {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("file name");
    format::parse_segment_file_name(name).expect("segment file name")
}

/// Byte offset of the frame of `index` in a segment starting at `first_index`, when
/// every record has a `len`-byte payload.
pub fn frame_offset(first_index: u64, index: u64, len: usize) -> u64 {
    let frame = (format::FRAME_HEADER_BYTES + len) as u64;
    format::SEGMENT_HEADER_BYTES as u64 + (index - first_index) * frame
}

/// XORs one byte of a file.
pub fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).expect("read segment");
    bytes[offset as usize] ^= 0x5a;
    fs::write(path, bytes).expect("write segment");
}

/// Blocks the writer thread inside an append callback until the returned sender is
/// used (or dropped), so later operations stay queued and their records pending.
pub async fn block_writer(wal: &Wal, index: u64) -> std::sync::mpsc::Sender<()> {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (started_tx, started) = oneshot::channel::<()>();
    let callback: DurableCallback = Box::new(move |result| {
        result.expect("blocking append durable");
        let _ = started_tx.send(());
        let _ = released.recv();
    });
    wal.append(vec![(index, payload(index, 8))], callback)
        .await
        .expect("append");
    started.await.expect("writer reached the blocking callback");
    release
}
