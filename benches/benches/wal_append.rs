//! WAL append throughput in `fsync` mode: group commit with 1, 4 and 16 concurrent
//! writers, against a naive loop of `write` + `fdatasync` per record on a plain file.
//!
//! One iteration is one record from each writer, so `Throughput::Bytes` compares
//! directly across writer counts and with the baseline. Records are 1 KiB (a small
//! request) and 250 KB (about a 5,000-row batch). Set `QUIVER_BENCH_DIR` to measure a
//! particular volume (default: the system temp dir).
//!
//! Run: `cargo bench -p quiver-benches --bench wal_append`

use std::{
    collections::BTreeMap,
    fs::File,
    io::Write,
    path::PathBuf,
    sync::{Arc, Mutex as StdMutex},
    time::{Duration, Instant},
};

use bytes::Bytes;
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use quiver_wal::{DurableCallback, SyncMode, Wal, WalConfig};
use tokio::sync::{oneshot, Mutex};

const RECORD_SIZES: [(&str, usize); 2] = [("1KiB", 1024), ("250KB", 250_000)];
const WRITER_COUNTS: [usize; 3] = [1, 4, 16];

fn bench_dir() -> tempfile::TempDir {
    match std::env::var_os("QUIVER_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(PathBuf::from(dir)).expect("tempdir in QUIVER_BENCH_DIR"),
        None => tempfile::tempdir().expect("tempdir"),
    }
}

/// A payload that does not compress or dedupe to nothing.
fn payload(size: usize) -> Bytes {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

/// Appends and fsyncs per (record size, writers), summed over every run, to show how
/// many records one fsync carried.
static FSYNC_SHARING: StdMutex<BTreeMap<(usize, usize), (u64, u64)>> =
    StdMutex::new(BTreeMap::new());

/// `writers` tasks each append `iters` records to a fresh WAL, waiting for each to be
/// durable before the next. Returns the time until all are durable.
async fn group_commit(payload: Bytes, writers: usize, iters: u64) -> Duration {
    let dir = bench_dir();
    let wal = Wal::open(WalConfig {
        dir: dir.path().join("wal"),
        sync: SyncMode::Fsync,
        ..WalConfig::default()
    })
    .expect("open WAL");
    // Indexes must be contiguous, so writers take turns picking one (openraft serialises
    // its appends the same way); the turn ends when the record is queued, not durable.
    let turn = Arc::new(Mutex::new(()));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(writers);
    for _ in 0..writers {
        let wal = wal.clone();
        let turn = Arc::clone(&turn);
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..iters {
                let (tx, durable) = oneshot::channel();
                let on_durable: DurableCallback = Box::new(move |result| {
                    let _ = tx.send(result);
                });
                {
                    let _turn = turn.lock().await;
                    let index = wal.next_index();
                    wal.append(vec![(index, payload.clone())], on_durable)
                        .await
                        .expect("append");
                }
                durable.await.expect("callback").expect("durable");
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer task");
    }
    let elapsed = started.elapsed();
    let stats = wal.stats();
    if let Ok(mut sharing) = FSYNC_SHARING.lock() {
        let entry = sharing.entry((payload.len(), writers)).or_default();
        entry.0 += stats.appends;
        entry.1 += stats.fsyncs;
    }
    drop(wal);
    elapsed
}

/// The baseline: one `write` and one `fdatasync` per record, no batching.
fn write_fdatasync_each(payload: &[u8], iters: u64) -> Duration {
    let dir = bench_dir();
    let mut file = File::create(dir.path().join("naive.log")).expect("create");
    let started = Instant::now();
    for _ in 0..iters {
        file.write_all(payload).expect("write");
        file.sync_data().expect("fdatasync");
    }
    started.elapsed()
}

fn wal_append(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("wal_append");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, size) in RECORD_SIZES {
        let payload = payload(size);
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(
            BenchmarkId::new(format!("{name}/write_fdatasync_each"), 1),
            |b| {
                b.iter_custom(|iters| write_fdatasync_each(&payload, iters));
            },
        );
        for writers in WRITER_COUNTS {
            group.throughput(Throughput::Bytes((size * writers) as u64));
            let id = BenchmarkId::new(format!("{name}/group_commit"), writers);
            group.bench_with_input(id, &writers, |b, &writers| {
                b.iter_custom(|iters| {
                    runtime.block_on(group_commit(payload.clone(), writers, iters))
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, wal_append);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    let Ok(sharing) = FSYNC_SHARING.lock() else {
        return;
    };
    if !sharing.is_empty() {
        println!("\ngroup commit: appends per fsync (all runs, fsyncs include rotations)");
        for ((size, writers), (appends, fsyncs)) in sharing.iter() {
            let ratio = *appends as f64 / (*fsyncs).max(1) as f64;
            println!("  {size:>7} B x {writers:>2} writers: {appends} appends, {fsyncs} fsyncs, {ratio:.1} per fsync");
        }
    }
}
