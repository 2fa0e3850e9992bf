//! Which live buffers the leader asks to flush: by rows, bytes, age, and the idle rule.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Float64Array, RecordBatch, StringDictionaryBuilder, TimestampNanosecondArray};
use arrow::datatypes::Int32Type;
use quiver_storage::{
    canonical_schema, ColumnKind, FieldType, LogIndex, Storage, StorageConfig, TableKey,
};

const IDLE: Duration = Duration::from_secs(10);

fn rows(n: usize) -> RecordBatch {
    let schema = canonical_schema([
        ("host", ColumnKind::Tag),
        ("v", ColumnKind::Field(FieldType::Float)),
    ]);
    let mut host = StringDictionaryBuilder::<Int32Type>::new();
    for i in 0..n {
        host.append_value(format!("h{}", i % 7));
    }
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from_iter_values(0..n as i64)),
            Arc::new(host.finish()),
            Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64))),
        ],
    )
    .unwrap()
}

async fn open(dir: &std::path::Path, idle_ms: u64, idle_bytes_min: usize) -> Storage {
    Storage::open(StorageConfig {
        dir: dir.to_path_buf(),
        flush_idle_ms: idle_ms,
        flush_idle_bytes_min: idle_bytes_min,
        ..StorageConfig::default()
    })
    .await
    .unwrap()
}

/// Writes `n` rows into `db.m` at `index`; returns when the write was applied.
fn write(s: &Storage, index: u64, measurement: &str, n: usize) -> Instant {
    s.apply_write(LogIndex(index), "db", &[(measurement.into(), rows(n))])
        .unwrap();
    Instant::now()
}

#[tokio::test]
async fn a_large_buffer_that_stopped_growing_is_flushed_once_idle() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), IDLE.as_millis() as u64, 64 * 1024).await;
    let big = TableKey::new("db", "big");
    let small = TableKey::new("db", "small");
    write(&s, 1, "small", 10);
    let last = write(&s, 2, "big", 20_000);
    assert!(
        s.memory_bytes() > 64 * 1024,
        "the big buffer must pass the idle minimum for this test to mean anything"
    );

    assert!(
        s.flush_candidates(last + IDLE / 2).is_empty(),
        "a buffer written to within the idle time stays"
    );
    assert_eq!(
        s.flush_candidates(last + IDLE + Duration::from_millis(1)),
        vec![big.clone()],
        "an idle buffer over the minimum is flushed; a small one waits for its age"
    );
    let age = Duration::from_millis(StorageConfig::default().flush_age_ms);
    let mut at_age = s.flush_candidates(last + age);
    at_age.sort();
    assert_eq!(
        at_age,
        vec![big.clone(), small],
        "the age rule still holds for small buffers"
    );

    s.apply_flush(LogIndex(3), std::slice::from_ref(&big));
    assert!(
        s.flush_candidates(last + IDLE * 2).is_empty(),
        "a frozen buffer is not proposed again"
    );
}

#[tokio::test]
async fn an_idle_time_of_zero_turns_the_idle_flush_off() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), 0, 0).await;
    let last = write(&s, 1, "big", 20_000);
    assert!(s.flush_candidates(last + IDLE * 6).is_empty());
}
