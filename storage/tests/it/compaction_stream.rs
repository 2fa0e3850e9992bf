//! The streaming merge: inputs larger than one read batch, with different tag sets,
//! merged under the smallest memory bound the policy allows and under a large one,
//! give the same bytes, hold every row once, and are sorted as every file declares
//! (the table's sort lead `host`, then the other tags by name with nulls first, then
//! time).

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, RecordBatch, StringDictionaryBuilder,
    TimestampNanosecondArray,
};
use arrow::datatypes::{Int32Type, TimestampNanosecondType};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use quiver_storage::compaction::{CompactionOutcome, CompactionSettings};
use quiver_storage::{
    canonical_schema, ColumnKind, FieldType, LogIndex, Storage, StorageConfig, TableKey,
    TimestampNs,
};

const HOUR: i64 = TimestampNs::HOUR_NS;
/// 2026-01-01T10:00:00Z
const T0: i64 = 1_767_225_600_000_000_000 + 10 * HOUR;
/// Rows per segment: several read batches of the smallest size (1,024).
const ROWS: usize = 5_000;

fn tags(values: impl Iterator<Item = String>) -> ArrayRef {
    let mut b = StringDictionaryBuilder::<Int32Type>::new();
    for v in values {
        b.append_value(v);
    }
    Arc::new(b.finish())
}

/// One segment's rows: 50 hosts, times interleaving with the other segments', and a
/// `dc` tag only in segment 1 (the other inputs lack the column: null there).
fn segment(seg: u64) -> RecordBatch {
    let with_dc = seg == 1;
    let mut columns = vec![
        ("host", ColumnKind::Tag),
        ("v", ColumnKind::Field(FieldType::Float)),
    ];
    if with_dc {
        columns.push(("dc", ColumnKind::Tag));
    }
    let schema = canonical_schema(columns);
    let times: Vec<i64> = (0..ROWS as i64).map(|i| T0 + i * 13 + seg as i64).collect();
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(TimestampNanosecondArray::from(times))];
    if with_dc {
        arrays.push(tags((0..ROWS).map(|i| format!("dc{}", i % 3))));
    }
    arrays.push(tags(
        (0..ROWS).map(|i| format!("h{:02}", (i * 7 + seg as usize) % 50)),
    ));
    arrays.push(Arc::new(Float64Array::from_iter_values(
        (0..ROWS).map(|i| (seg as usize * ROWS + i) as f64),
    )));
    RecordBatch::try_new(schema, arrays).unwrap()
}

async fn merged_replica(dir: &Path, memory_bytes_max: u64) -> (Vec<u8>, Storage) {
    let s = Storage::open(StorageConfig {
        dir: dir.to_path_buf(),
        compaction: CompactionSettings {
            hour_files_min: 4,
            memory_bytes_max,
            ..CompactionSettings::default()
        },
        ..StorageConfig::default()
    })
    .await
    .unwrap();
    let key = TableKey::new("db", "cpu");
    for seg in 0..4u64 {
        s.apply_write(LogIndex(seg * 2 + 1), "db", &[("cpu".into(), segment(seg))])
            .unwrap();
        s.apply_flush(LogIndex(seg * 2 + 2), std::slice::from_ref(&key));
        assert!(s.persist_next().await.unwrap());
    }
    let mut plans = s.compaction_candidates(TimestampNs(T0 + 60_000_000_000));
    assert_eq!(plans.len(), 1, "four files of an hour are due");
    let plan = plans.remove(0);
    assert_eq!(plan.inputs.len(), 4, "the memory bound admits all four");
    assert_eq!(
        s.apply_compact(LogIndex(9), plan),
        CompactionOutcome::Scheduled
    );
    assert!(s.compact_next().await.unwrap());
    let files = s.files();
    assert_eq!(files.len(), 1);
    let bytes = std::fs::read(dir.join("parquet").join(&files[0].path)).unwrap();
    assert_eq!(bytes.len() as u64, files[0].size_bytes);
    (bytes, s)
}

/// The smallest bound under which the policy still merges four inputs of three or
/// four columns: one 1,024-row batch per input.
fn smallest_bound() -> u64 {
    4 * 1024 * 4 * 24
}

#[tokio::test]
async fn a_streamed_merge_is_sorted_complete_and_the_same_under_any_memory_bound() {
    let (small, large) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (bytes_small, s) = merged_replica(small.path(), smallest_bound()).await;
    let (bytes_large, _) = merged_replica(large.path(), 512 << 20).await;
    assert!(
        bytes_small == bytes_large,
        "replicas with different memory settings wrote different bytes"
    );
    let meta = s.files()[0].clone();
    assert_eq!(meta.rows, 4 * ROWS as u64);
    assert!(
        meta.columns.iter().any(|c| c.name == "dc"),
        "the union of the inputs' columns"
    );

    // Read back in file order: (host, dc, time) never decreases, dc null first.
    assert_eq!(
        meta.sort_lead.as_deref(),
        Some("host"),
        "50 hosts, one dc at most"
    );
    let file = std::fs::File::open(small.path().join("parquet").join(&meta.path)).unwrap();
    let mut keys: Vec<(String, Option<String>, i64)> = Vec::new();
    let mut values: Vec<u64> = Vec::new();
    for b in ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap()
    {
        let b = b.unwrap();
        let dc = b.column_by_name("dc").unwrap().as_string::<i32>();
        let host = b.column_by_name("host").unwrap().as_string::<i32>();
        let time = b
            .column_by_name("time")
            .unwrap()
            .as_primitive::<TimestampNanosecondType>();
        let v = b
            .column_by_name("v")
            .unwrap()
            .as_primitive::<arrow::datatypes::Float64Type>();
        for i in 0..b.num_rows() {
            let dc = (!dc.is_null(i)).then(|| dc.value(i).to_string());
            keys.push((host.value(i).to_string(), dc, time.value(i)));
            values.push(v.value(i) as u64);
        }
    }
    assert!(
        keys.windows(2).all(|w| w[0] <= w[1]),
        "rows sorted by host, then dc (nulls first), then time"
    );
    assert!(keys[0].1.is_none() && keys.last().unwrap().1.is_some());
    assert_eq!(
        keys.iter().map(|k| k.2).min().unwrap(),
        meta.time_min.0,
        "time_min recorded"
    );
    assert_eq!(
        keys.iter().map(|k| k.2).max().unwrap(),
        meta.time_max.0,
        "time_max recorded"
    );
    values.sort_unstable();
    assert_eq!(
        values,
        (0..4 * ROWS as u64).collect::<Vec<_>>(),
        "every row once"
    );
}

#[tokio::test]
async fn the_policy_merges_no_more_inputs_than_the_memory_bound_reads_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(StorageConfig {
        dir: dir.path().to_path_buf(),
        compaction: CompactionSettings {
            hour_files_min: 4,
            // Room for two inputs' smallest batches, not four.
            memory_bytes_max: smallest_bound() / 2,
            ..CompactionSettings::default()
        },
        ..StorageConfig::default()
    })
    .await
    .unwrap();
    let key = TableKey::new("db", "cpu");
    for seg in [0u64, 2, 3, 0] {
        let index = s.files().len() as u64 * 2;
        s.apply_write(LogIndex(index + 1), "db", &[("cpu".into(), segment(seg))])
            .unwrap();
        s.apply_flush(LogIndex(index + 2), std::slice::from_ref(&key));
        assert!(s.persist_next().await.unwrap());
    }
    let plans = s.compaction_candidates(TimestampNs(T0 + 3 * HOUR));
    assert_eq!(plans.len(), 1);
    assert_eq!(plans[0].inputs.len(), 2, "a prefix of the hour that fits");
}
