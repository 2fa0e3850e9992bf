//! Compaction through storage's public API: the leader's plan, the replicated job, the
//! merge on two replicas (byte-identical), the crash window, and replay.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    Array, AsArray, Float64Array, RecordBatch, StringDictionaryBuilder, TimestampNanosecondArray,
};
use arrow::datatypes::{Int32Type, TimestampNanosecondType};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use quiver_storage::compaction::{CompactionOutcome, CompactionSettings};
use quiver_storage::{
    canonical_schema, read_image, write_image, ColumnKind, FieldType, LogIndex, Storage,
    StorageConfig, TableKey, TableSource, TimestampNs,
};

const HOUR: i64 = TimestampNs::HOUR_NS;
/// 2026-01-01T10:00:00Z
const T0: i64 = 1_767_225_600_000_000_000 + 10 * HOUR;

fn batch(hosts: &[&str], times: &[i64], field: &str, values: &[f64]) -> RecordBatch {
    let schema = canonical_schema([
        ("host", ColumnKind::Tag),
        (field, ColumnKind::Field(FieldType::Float)),
    ]);
    let mut host = StringDictionaryBuilder::<Int32Type>::new();
    for h in hosts {
        host.append_value(h);
    }
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from(times.to_vec())),
            Arc::new(host.finish()),
            Arc::new(Float64Array::from(values.to_vec())),
        ],
    )
    .unwrap()
}

async fn open(dir: &Path) -> Storage {
    Storage::open(StorageConfig {
        dir: dir.to_path_buf(),
        compaction: CompactionSettings {
            hour_files_min: 4,
            ..CompactionSettings::default()
        },
        ..StorageConfig::default()
    })
    .await
    .unwrap()
}

fn key() -> TableKey {
    TableKey::new("db", "cpu")
}

/// Four flushes of hour-10 rows (the third adds a column), each persisted: four files.
/// Log indexes 1..=8.
async fn four_segments(s: &Storage) {
    let hosts = ["b", "a", "c"];
    for seg in 0..4u64 {
        let field = if seg == 2 { "w" } else { "v" };
        let times: Vec<i64> = (0..3).map(|i| T0 + (seg as i64) * 1_000 + i * 7).collect();
        let values: Vec<f64> = (0..3).map(|i| (seg * 10 + i) as f64).collect();
        s.apply_write(
            LogIndex(seg * 2 + 1),
            "db",
            &[("cpu".into(), batch(&hosts, &times, field, &values))],
        )
        .unwrap();
        s.apply_flush(LogIndex(seg * 2 + 2), &[key()]);
        assert!(s.persist_next().await.unwrap());
    }
}

/// Every row of the table's files as (host, time, v, w), sorted.
fn rows(dir: &Path, s: &Storage) -> Vec<(String, i64, Option<u64>, Option<u64>)> {
    let table = s.table("db", "cpu").unwrap();
    let mut out = Vec::new();
    for f in &table.files.all() {
        let file = std::fs::File::open(dir.join("parquet").join(&f.path)).unwrap();
        for b in ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
        {
            let b = b.unwrap();
            let time = b
                .column_by_name("time")
                .unwrap()
                .as_primitive::<TimestampNanosecondType>();
            let host = b.column_by_name("host").unwrap().as_string::<i32>();
            let float = |name: &str, i: usize| {
                b.column_by_name(name).and_then(|c| {
                    let c = c.as_primitive::<arrow::datatypes::Float64Type>();
                    (!c.is_null(i)).then(|| c.value(i).to_bits())
                })
            };
            for i in 0..b.num_rows() {
                out.push((
                    host.value(i).to_string(),
                    time.value(i),
                    float("v", i),
                    float("w", i),
                ));
            }
        }
    }
    out.sort();
    out
}

fn files_on_disk(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.join("parquet")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                let name = p.file_name().unwrap().to_string_lossy().to_string();
                out.insert(name, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[tokio::test]
async fn two_replicas_merge_into_byte_identical_files_with_every_row() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (r1, r2) = (open(d1.path()).await, open(d2.path()).await);
    four_segments(&r1).await;
    four_segments(&r2).await;
    let before = rows(d1.path(), &r1);
    assert_eq!(before.len(), 12);
    assert_eq!(r1.table("db", "cpu").unwrap().files.all().len(), 4);

    // The leader (r1) plans; an open hour with 4 files is due.
    let now = TimestampNs(T0 + 60_000_000_000);
    let mut plans = r1.compaction_candidates(now);
    assert_eq!(plans.len(), 1);
    let plan = plans.remove(0);
    assert_eq!(plan.inputs.len(), 4);
    for r in [&r1, &r2] {
        assert_eq!(
            r.apply_compact(LogIndex(9), plan.clone()),
            CompactionOutcome::Scheduled
        );
        assert_eq!(r.compaction_backlog(), 1);
        assert!(
            r1.compaction_candidates(now).is_empty(),
            "one job per table at a time"
        );
        assert!(r.compact_next().await.unwrap());
        assert!(!r.compact_next().await.unwrap());
        assert_eq!(r.compaction_backlog(), 0);
    }
    for (d, r) in [(d1.path(), &r1), (d2.path(), &r2)] {
        let table = r.table("db", "cpu").unwrap();
        assert_eq!(table.files.all().len(), 1, "the four files are now one");
        assert_eq!(table.files.all()[0].rows, 12);
        assert_eq!(rows(d, r), before, "the same rows, none lost or doubled");
    }
    let out1 = r1.files()[0].clone();
    assert!(out1.compaction.is_some());
    assert_eq!(
        out1.tag_distinct,
        vec![3],
        "a merge counts its output's hosts"
    );
    let (f1, f2) = (files_on_disk(d1.path()), files_on_disk(d2.path()));
    let name = out1.path.rsplit('/').next().unwrap().to_string();
    assert_eq!(
        f1.get(&name),
        f2.get(&name),
        "replicas wrote the same bytes"
    );
    assert_eq!(
        f1.len(),
        5,
        "inputs stay on disk through their grace period"
    );

    // The same entry again (another leader's duplicate) is refused on both.
    for r in [&r1, &r2] {
        assert!(matches!(
            r.apply_compact(LogIndex(10), plan.clone()),
            CompactionOutcome::Rejected(_)
        ));
    }
    // A snapshot taken before the merge names the inputs: the node still counts them.
    let input = quiver_storage::FileMeta {
        path: plan.inputs[0].path.clone(),
        ..out1.clone()
    };
    let input = quiver_storage::FileMeta {
        log_first: plan.inputs[0].log_first,
        log_last: plan.inputs[0].log_last,
        time_min: TimestampNs(T0),
        time_max: TimestampNs(T0 + 10),
        compaction: None,
        ..input
    };
    assert!(r1.has_file_or_successor(&input));
}

#[tokio::test]
async fn a_restart_inside_the_grace_period_deletes_the_inputs_and_replay_is_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let plan;
    let before;
    {
        let s = open(dir.path()).await;
        four_segments(&s).await;
        before = rows(dir.path(), &s);
        plan = s
            .compaction_candidates(TimestampNs(T0 + HOUR * 3))
            .remove(0);
        s.apply_compact(LogIndex(9), plan.clone());
        assert!(s.compact_next().await.unwrap());
        assert_eq!(files_on_disk(dir.path()).len(), 5);
        // Dropped here, as a kill -9 would: the inputs' deletion never ran.
    }
    let s = open(dir.path()).await;
    assert_eq!(
        s.open_report().catalog.superseded_files_deleted.len(),
        4,
        "{:?}",
        s.open_report()
    );
    assert_eq!(files_on_disk(dir.path()).len(), 1);
    assert_eq!(rows(dir.path(), &s), before);
    // The log replays the entries: rows are already in the output, the merge is done.
    for seg in 0..4u64 {
        let b = batch(&["x"], &[T0], "v", &[1.0]);
        s.apply_write(LogIndex(seg * 2 + 1), "db", &[("cpu".into(), b)])
            .unwrap();
        s.apply_flush(LogIndex(seg * 2 + 2), &[key()]);
    }
    assert_eq!(
        s.apply_compact(LogIndex(9), plan),
        CompactionOutcome::AlreadyDone
    );
    assert_eq!(rows(dir.path(), &s), before);
    assert!(s.table("db", "cpu").unwrap().memory.is_empty());
}

#[tokio::test]
async fn a_queued_compaction_travels_in_the_memory_image() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    four_segments(&s).await;
    let plan = s
        .compaction_candidates(TimestampNs(T0 + HOUR * 3))
        .remove(0);
    s.apply_compact(LogIndex(9), plan.clone());
    let image = s.memory_image();
    assert_eq!(image.compactions.len(), 1);
    let mut bytes = Vec::new();
    write_image(&image, &mut bytes).unwrap();
    let back = read_image(&mut bytes.as_slice()).unwrap();
    assert_eq!(back.compactions, image.compactions);
    // Restoring it where the job is already queued or done adds nothing twice.
    s.restore_memory(back.clone()).unwrap();
    assert_eq!(s.compaction_backlog(), 1);
    assert!(s.compact_next().await.unwrap());
    s.restore_memory(back).unwrap();
    assert_eq!(s.compaction_backlog(), 0, "done here: not queued again");
}

/// Four more flushes of hour-10 rows after the first merge (log indexes from `first`).
async fn four_more_segments(s: &Storage, first: u64) {
    let hosts = ["d", "e", "f"];
    for seg in 0..4u64 {
        let times: Vec<i64> = (0..3)
            .map(|i| T0 + 100_000 + (seg as i64) * 1_000 + i * 7)
            .collect();
        let values: Vec<f64> = (0..3).map(|i| (seg * 10 + i) as f64).collect();
        s.apply_write(
            LogIndex(first + seg * 2),
            "db",
            &[("cpu".into(), batch(&hosts, &times, "v", &values))],
        )
        .unwrap();
        s.apply_flush(LogIndex(first + seg * 2 + 1), &[key()]);
        assert!(s.persist_next().await.unwrap());
    }
}

/// A replica that was away merges a job while a snapshot arrives whose state already
/// merged that job's output again: the merge is moot, and its output must leave the disk
/// like any replaced file (found in CI: one replica kept such a file its peers did not
/// have).
#[tokio::test]
async fn a_merge_made_moot_by_a_snapshot_leaves_no_file_behind() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let no_grace = |dir: &Path| {
        Storage::open(StorageConfig {
            dir: dir.to_path_buf(),
            compaction: CompactionSettings {
                hour_files_min: 4,
                input_grace_ms: 0,
                ..CompactionSettings::default()
            },
            ..StorageConfig::default()
        })
    };
    let (away, leader) = (
        no_grace(d1.path()).await.unwrap(),
        no_grace(d2.path()).await.unwrap(),
    );
    four_segments(&away).await;
    four_segments(&leader).await;
    let now = TimestampNs(T0 + 60_000_000_000);
    let first = leader.compaction_candidates(now).remove(0);
    for r in [&away, &leader] {
        assert_eq!(
            r.apply_compact(LogIndex(9), first.clone()),
            CompactionOutcome::Scheduled
        );
    }
    // The leader merges, takes four more files of the hour and merges them with the
    // first output.
    assert!(leader.compact_next().await.unwrap());
    let first_output = leader.files()[0].path.clone();
    four_more_segments(&leader, 10).await;
    let second = leader.compaction_candidates(now).remove(0);
    assert!(
        second.inputs.iter().any(|i| i.path == first_output),
        "the second merge consumes the first's output: {second:?}"
    );
    assert_eq!(
        leader.apply_compact(LogIndex(18), second),
        CompactionOutcome::Scheduled
    );
    assert!(leader.compact_next().await.unwrap());
    let image = leader.memory_image();
    assert_eq!(image.files.len(), 1);
    let second_output = image.files[0].clone();

    // The away replica has started the first merge when the leader's snapshot arrives.
    let merge = away.compact_next();
    tokio::pin!(merge);
    assert!(
        futures::poll!(&mut merge).is_pending(),
        "the merge runs on its own thread"
    );
    away.reset_memory();
    away.retain_for_snapshot(&image).unwrap();
    let staged = d1.path().join("incoming.parquet");
    std::fs::copy(d2.path().join("parquet").join(&second_output.path), &staged).unwrap();
    away.adopt_file(&second_output, &staged).await.unwrap();
    away.restore_memory(image.clone()).unwrap();
    assert!(merge.await.unwrap(), "the merge ran");
    assert_eq!(
        away.files(),
        vec![second_output.clone()],
        "moot: not listed"
    );
    assert_eq!(away.compaction_backlog(), 0);

    // Once each has a durable snapshot past the removals, both disks hold the same files.
    for r in [&away, &leader] {
        r.snapshot_durable(r.memory_image().generation);
        r.delete_condemned().await;
    }
    let (f1, f2) = (files_on_disk(d1.path()), files_on_disk(d2.path()));
    assert_eq!(
        f1.keys().collect::<Vec<_>>(),
        f2.keys().collect::<Vec<_>>(),
        "no replica keeps a file its peer does not have"
    );
    assert_eq!(f1.len(), 1);
    assert_eq!(f1, f2, "the same bytes");
}
