//! Which files survive a restart once compactions have replaced some of them: a segment
//! that spans several hours loses one hour's file to a merge, and its other hours must
//! stay (regressions of a restart that took those for a crash-interrupted flush).

use std::path::Path;
use std::sync::Arc;

use arrow::array::{Float64Array, RecordBatch, StringDictionaryBuilder, TimestampNanosecondArray};
use arrow::datatypes::Int32Type;
use quiver_storage::compaction::CompactionSettings;
use quiver_storage::{
    canonical_schema, ColumnKind, FieldType, FileSet, LogIndex, Storage, StorageConfig, TableKey,
    TableSource, TimestampNs,
};

const HOUR: i64 = TimestampNs::HOUR_NS;
/// 2026-01-01T10:00:00Z
const T0: i64 = 1_767_225_600_000_000_000 + 10 * HOUR;

fn batch(times: &[i64]) -> RecordBatch {
    let schema = canonical_schema([
        ("host", ColumnKind::Tag),
        ("v", ColumnKind::Field(FieldType::Float)),
    ]);
    let mut host = StringDictionaryBuilder::<Int32Type>::new();
    for _ in times {
        host.append_value("a");
    }
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from(times.to_vec())),
            Arc::new(host.finish()),
            Arc::new(Float64Array::from(vec![1.0; times.len()])),
        ],
    )
    .unwrap()
}

fn config(dir: &Path) -> StorageConfig {
    StorageConfig {
        dir: dir.to_path_buf(),
        compaction: CompactionSettings {
            input_grace_ms: 0,
            ..CompactionSettings::default()
        },
        ..StorageConfig::default()
    }
}

fn key() -> TableKey {
    TableKey::new("db", "cpu")
}

fn rows_in_files(s: &Storage) -> u64 {
    s.table("db", "cpu")
        .map(|t| t.files.all().iter().map(|f| f.rows).sum())
        .unwrap_or(0)
}

/// Segment 1 (log 1..=2) spans hours 10 and 11 (two files); segment 2 (log 3..=4) adds
/// hour 10 again.
async fn write_two_segments(s: &Storage) {
    s.apply_write(
        LogIndex(1),
        "db",
        &[("cpu".into(), batch(&[T0, T0 + HOUR, T0 + HOUR + 1]))],
    )
    .unwrap();
    s.apply_flush(LogIndex(2), &[key()]);
    assert!(s.persist_next().await.unwrap());
    s.apply_write(LogIndex(3), "db", &[("cpu".into(), batch(&[T0 + 5]))])
        .unwrap();
    s.apply_flush(LogIndex(4), &[key()]);
    assert!(s.persist_next().await.unwrap());
}

/// [`write_two_segments`], then hour 10's two files merged (entry 5) and the inputs
/// deleted.
async fn merge_one_hour_of_a_two_hour_segment(s: &Storage) {
    write_two_segments(s).await;
    assert_eq!(s.table("db", "cpu").unwrap().files.all().len(), 3);
    let plan = s
        .compaction_candidates(TimestampNs(T0 + 3 * HOUR))
        .into_iter()
        .next()
        .expect("hour 10 is closed and has two files");
    assert_eq!(plan.inputs.len(), 2);
    s.apply_compact(LogIndex(5), plan);
    assert!(s.compact_next().await.unwrap());
    // The grace period is 0, but a file leaves the disk only once a durable snapshot
    // no longer lists it.
    assert_eq!(s.delete_condemned().await, 0);
    let image = s.memory_image();
    s.snapshot_durable(image.generation);
    assert_eq!(s.delete_condemned().await, 2);
    assert_eq!(rows_in_files(s), 4);
}

#[tokio::test]
async fn a_segment_keeps_its_other_hours_after_one_hour_is_merged_and_the_node_restarts() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Storage::open(config(dir.path())).await.unwrap();
        merge_one_hour_of_a_two_hour_segment(&s).await;
    }
    // Reopened from the files alone (no snapshot to say which are live).
    let s = Storage::open(config(dir.path())).await.unwrap();
    assert_eq!(
        rows_in_files(&s),
        4,
        "hour 11 of the first segment must survive: {:?}",
        s.open_report()
    );
    assert!(s
        .open_report()
        .catalog
        .incomplete_files_quarantined
        .is_empty());
}

#[tokio::test]
async fn a_snapshot_manifest_decides_which_files_are_live_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let manifest;
    let written_after;
    {
        let s = Storage::open(config(dir.path())).await.unwrap();
        merge_one_hour_of_a_two_hour_segment(&s).await;
        manifest = s.memory_image().files;
        assert_eq!(manifest.len(), 2);
        // A file written after the snapshot (its entries are still in the log).
        s.apply_write(LogIndex(6), "db", &[("cpu".into(), batch(&[T0 + 9]))])
            .unwrap();
        s.apply_flush(LogIndex(7), &[key()]);
        assert!(s.persist_next().await.unwrap());
        let files = s.files();
        assert_eq!(files.len(), 3);
        written_after = files
            .iter()
            .find(|f| f.log_last == LogIndex(7))
            .unwrap()
            .path
            .clone();
    }
    // And two stray files an earlier life left under names replay never writes again:
    // one within what the node holds at open (snapshot and log reach 7: garbage), one
    // beyond it (perhaps the only copy of its rows: kept).
    let stray =
        quiver_storage::parquet_path("db", "cpu", TimestampNs(T0), LogIndex(6), LogIndex(6));
    let beyond =
        quiver_storage::parquet_path("db", "cpu", TimestampNs(T0), LogIndex(100), LogIndex(101));
    for name in [&stray, &beyond] {
        std::fs::copy(
            dir.path().join("parquet").join(&written_after),
            dir.path().join("parquet").join(name),
        )
        .unwrap();
    }
    let s = Storage::open_with(
        config(dir.path()),
        FileSet::Manifest {
            files: manifest.clone(),
            jobs: Vec::new(),
        },
    )
    .await
    .unwrap();
    let files = s.table("db", "cpu").unwrap().files.all();
    let mut paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    paths.sort();
    let mut expected: Vec<&str> = manifest.iter().map(|f| f.path.as_str()).collect();
    expected.sort();
    assert_eq!(paths, expected, "exactly the manifest's files");
    assert!(s.sweep_due());
    // Replaying entries 6 and 7 writes the same file again, before the sweep runs (the
    // node serves and replays while it sweeps).
    s.apply_write(LogIndex(6), "db", &[("cpu".into(), batch(&[T0 + 9]))])
        .unwrap();
    s.apply_flush(LogIndex(7), &[key()]);
    assert!(s.persist_next().await.unwrap());
    let swept = s.sweep(LogIndex(7)).await.unwrap();
    assert_eq!(
        swept.unlisted_files_deleted,
        vec![stray.clone()],
        "only the stray within reach goes: the file replay wrote again is live"
    );
    assert_eq!(swept.unaccounted, vec![beyond.clone()]);
    assert!(swept.lacking.is_empty());
    assert!(!dir.path().join("parquet").join(&stray).exists());
    assert!(dir.path().join("parquet").join(&beyond).exists());
    assert!(dir.path().join("parquet").join(&written_after).exists());
    let unaccounted = s.unaccounted_files();
    assert_eq!(unaccounted.files, 1);
    assert_eq!(unaccounted.log_end_max, Some(101));
    assert_eq!(unaccounted.examples, vec![beyond.clone()]);
    assert_eq!(rows_in_files(&s), 5, "its row is back, once");
    assert!(!s.sweep_due());
    assert!(
        !s.sweep(LogIndex(7)).await.unwrap().ran,
        "a sweep runs once"
    );
    // sled now holds exactly the live files: a reopen from the footers agrees with it.
    drop(s);
    std::fs::remove_file(dir.path().join("parquet").join(&beyond)).unwrap();
    let s = Storage::open(config(dir.path())).await.unwrap();
    assert_eq!(s.open_report().catalog.rebuilt_because, None);
    assert_eq!(rows_in_files(&s), 5);
}

#[tokio::test]
async fn with_no_snapshot_and_a_whole_log_every_file_is_regenerated() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Storage::open(config(dir.path())).await.unwrap();
        merge_one_hour_of_a_two_hour_segment(&s).await;
    }
    let s = Storage::open_with(config(dir.path()), FileSet::Nothing)
        .await
        .unwrap();
    assert!(s
        .table("db", "cpu")
        .is_none_or(|t| t.files.all().is_empty()));
    // The log reaches entry 5 (the merge): every file is within it.
    assert_eq!(
        s.sweep(LogIndex(5))
            .await
            .unwrap()
            .unlisted_files_deleted
            .len(),
        2
    );
}

/// A node whose local state is gone (a lost disk, files in a bucket; or a lost WAL
/// volume) opens with nothing and a log that reaches no index: the files are the only
/// copy of their rows, so the sweep keeps every one and reports them.
#[tokio::test]
async fn an_empty_state_proves_nothing_so_the_sweep_keeps_every_file() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Storage::open(config(dir.path())).await.unwrap();
        merge_one_hour_of_a_two_hour_segment(&s).await;
    }
    let s = Storage::open_with(config(dir.path()), FileSet::Nothing)
        .await
        .unwrap();
    let swept = s.sweep(LogIndex(0)).await.unwrap();
    assert!(swept.unlisted_files_deleted.is_empty(), "{swept:?}");
    assert_eq!(swept.unaccounted.len(), 2, "{swept:?}");
    let unaccounted = s.unaccounted_files();
    assert_eq!(unaccounted.files, 2);
    assert!(unaccounted.bytes > 0);
    assert_eq!(unaccounted.log_end_max, Some(5));
    drop(s);
    // Still there: the files a restore would adopt.
    let s = Storage::open(config(dir.path())).await.unwrap();
    assert_eq!(rows_in_files(&s), 4);
}

/// A file the manifest lists is gone, another holds other bytes: the sweep takes both
/// out of their table (quarantining the second) and reports them for a peer to supply.
#[tokio::test]
async fn the_sweep_reports_listed_files_the_disk_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let manifest;
    {
        let s = Storage::open(config(dir.path())).await.unwrap();
        merge_one_hour_of_a_two_hour_segment(&s).await;
        manifest = s.memory_image().files;
    }
    assert_eq!(manifest.len(), 2);
    let parquet = dir.path().join("parquet");
    std::fs::remove_file(parquet.join(&manifest[0].path)).unwrap();
    std::fs::write(parquet.join(&manifest[1].path), b"not parquet").unwrap();
    let s = Storage::open_with(
        config(dir.path()),
        FileSet::Manifest {
            files: manifest.clone(),
            jobs: Vec::new(),
        },
    )
    .await
    .unwrap();
    assert_eq!(s.table("db", "cpu").unwrap().files.all().len(), 2);
    let swept = s.sweep(LogIndex(5)).await.unwrap();
    let mut lacking: Vec<&str> = swept.lacking.iter().map(|f| f.path.as_str()).collect();
    lacking.sort();
    let mut expected: Vec<&str> = manifest.iter().map(|f| f.path.as_str()).collect();
    expected.sort();
    assert_eq!(lacking, expected);
    assert!(s.table("db", "cpu").unwrap().files.all().is_empty());
    assert!(!parquet.join(&manifest[1].path).exists(), "moved aside");
    assert!(dir
        .path()
        .join("quarantine")
        .join(&manifest[1].path)
        .exists());
}

/// `n` files of 100 measurements, each of `size` bytes, one per (measurement, hour).
fn many_files(dir: &Path, n: u64, size: u64) -> Vec<quiver_storage::FileMeta> {
    use quiver_storage::{parquet_path, ColumnMeta, FileMeta};
    let root = dir.join("parquet");
    (0..n)
        .map(|i| {
            let measurement = format!("m{}", i % 100);
            let hour = TimestampNs(T0 + (i / 100) as i64 * HOUR);
            let (first, last) = (LogIndex(i * 2 + 1), LogIndex(i * 2 + 2));
            let path = parquet_path("db", &measurement, hour, first, last);
            let on_disk = root.join(&path);
            std::fs::create_dir_all(on_disk.parent().unwrap()).unwrap();
            std::fs::write(&on_disk, vec![0u8; size as usize]).unwrap();
            FileMeta {
                version: 1,
                path,
                database: "db".into(),
                measurement,
                rows: 10,
                time_min: hour,
                time_max: TimestampNs(hour.0 + 10),
                log_first: first,
                log_last: last,
                segment_files: 1,
                columns: vec![
                    ColumnMeta::new("time", ColumnKind::Time),
                    ColumnMeta::new("host", ColumnKind::Tag),
                    ColumnMeta::new("v", ColumnKind::Field(FieldType::Float)),
                ]
                .into(),
                size_bytes: size,
                compaction: None,
                tag_distinct: Vec::new(),
                sort_lead: None,
            }
        })
        .collect()
}

/// A restart at 100,000 files: storage opens from the manifest without reading a
/// footer, and a table's view lists its files without touching the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_files_open_from_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let files = many_files(dir.path(), 100_000, 64);
    for round in 0..2 {
        let started = std::time::Instant::now();
        let s = Storage::open_with(
            config(dir.path()),
            FileSet::Manifest {
                files: files.clone(),
                jobs: Vec::new(),
            },
        )
        .await
        .unwrap();
        let opened = started.elapsed();
        assert_eq!(s.files().len(), 100_000);
        let started = std::time::Instant::now();
        let swept = s.sweep(LogIndex(200_000)).await.unwrap();
        let sweep_time = started.elapsed();
        assert_eq!(swept.listed, 100_000);
        assert!(swept.lacking.is_empty());
        assert!(swept.unlisted_files_deleted.is_empty());
        // The first start fills sled; the second finds it in sync.
        let expected_added = if round == 0 { 100_000 } else { 0 };
        assert_eq!(swept.catalog_added, expected_added);
        let started = std::time::Instant::now();
        let table = s.table("db", "m7").unwrap();
        let viewed = started.elapsed();
        assert_eq!(table.files.all().len(), 1_000);
        println!(
            "100,000 files: open {} ms, sweep {} ms ({}), one table's view {} us",
            opened.as_millis(),
            sweep_time.as_millis(),
            if round == 0 {
                "sled filled"
            } else {
                "sled in sync"
            },
            viewed.as_micros()
        );
    }
}

/// Regression (issue 36, item 9): retention runs on the leader's wall clock, and a
/// clock that jumped a month ahead dropped a month of live rows on every replica. The
/// physical drop now trusts the clock at most a day beyond the database's newest row.
#[tokio::test]
async fn a_clock_that_jumped_ahead_does_not_drop_live_files() {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(config(dir.path())).await.unwrap();
    // Ten days of one row an hour, flushed a day at a time.
    let day = 24 * HOUR;
    let mut index = 1;
    for d in 0..10 {
        let times: Vec<i64> = (0..24).map(|h| T0 + d * day + h * HOUR).collect();
        s.apply_write(LogIndex(index), "db", &[("cpu".into(), batch(&times))])
            .unwrap();
        s.apply_flush(LogIndex(index + 1), &[key()]);
        while s.persist_next().await.unwrap() {}
        index += 2;
    }
    s.apply_policy(
        LogIndex(index),
        quiver_storage::PolicyChange::SetRetention {
            database: "db".into(),
            measurement: None,
            duration_ns: 3 * day,
        },
    );
    let newest = T0 + 9 * day + 23 * HOUR;
    let dropped_before = |now: i64| {
        s.compaction_candidates(TimestampNs(now))
            .into_iter()
            .find(|job| job.bucket_ns == 0)
            .and_then(|job| job.drop_before)
            .map(|t| t.0)
    };
    // A clock in step with the data drops what is past three days.
    let in_step = dropped_before(newest + HOUR).expect("a drop is due");
    assert_eq!(in_step, (newest + HOUR - 3 * day) / HOUR * HOUR);
    // A clock a month ahead drops no more than it would a day after the newest row.
    let jumped = dropped_before(newest + 30 * day).expect("the old files still go");
    assert!(
        jumped <= newest + day - 3 * day,
        "the cut moved with the clock: {} hours beyond the newest row",
        (jumped - newest) / HOUR
    );
    assert!(jumped > in_step - day, "{jumped} {in_step}");
}

/// A snapshot taken while a compaction was queued lists the compaction's inputs; the
/// compaction runs after it, and the node restarts from that snapshot. The inputs are
/// not live (the output on disk replaced them) but stay on disk, through the sweep,
/// until a newer snapshot is durable: this node may still send the old snapshot to a
/// follower, which then fetches them from it. Deleted at open, such a follower could
/// fetch them from no one and failed its install forever (the raft simulation, seed 138).
#[tokio::test]
async fn inputs_the_restart_snapshot_lists_stay_on_disk_until_a_newer_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let image;
    let inputs: Vec<String>;
    {
        let s = Storage::open(config(dir.path())).await.unwrap();
        write_two_segments(&s).await;
        let plan = s
            .compaction_candidates(TimestampNs(T0 + 3 * HOUR))
            .into_iter()
            .next()
            .expect("hour 10 is closed and has two files");
        inputs = plan.inputs.iter().map(|i| i.path.clone()).collect();
        s.apply_compact(LogIndex(5), plan);
        // The snapshot: three files listed, the merge queued.
        image = s.memory_image();
        assert_eq!(image.files.len(), 3);
        assert_eq!(image.compactions.len(), 1);
        assert!(s.compact_next().await.unwrap());
        // Crash before another snapshot: the inputs are still on disk.
    }
    let parquet = dir.path().join("parquet");
    let reopen = || async {
        Storage::open_with(
            config(dir.path()),
            FileSet::Manifest {
                files: image.files.clone(),
                jobs: image.compactions.clone(),
            },
        )
        .await
        .unwrap()
    };
    let s = reopen().await;
    // Live: the output and hour 11's file; the inputs are not, and the rows are whole.
    assert_eq!(s.table("db", "cpu").unwrap().files.all().len(), 2);
    assert_eq!(rows_in_files(&s), 4);
    let swept = s.sweep(LogIndex(5)).await.unwrap();
    assert!(swept.lacking.is_empty(), "{swept:?}");
    for input in &inputs {
        assert!(
            parquet.join(input).exists(),
            "{input} deleted before a newer snapshot"
        );
    }
    assert_eq!(s.delete_condemned().await, 0);
    // A crash here and another start from the same snapshot keep them again.
    drop(s);
    let s = reopen().await;
    s.sweep(LogIndex(5)).await.unwrap();
    assert_eq!(s.delete_condemned().await, 0);
    for input in &inputs {
        assert!(
            parquet.join(input).exists(),
            "{input} deleted on the second start"
        );
    }
    // A newer snapshot is durable: now they go.
    let newer = s.memory_image();
    s.snapshot_durable(newer.generation);
    assert_eq!(s.delete_condemned().await, 2);
    for input in &inputs {
        assert!(
            !parquet.join(input).exists(),
            "{input} kept after a newer snapshot"
        );
    }
    assert_eq!(rows_in_files(&s), 4);
}
