//! The storage life cycle: writes at log indexes, a flush, Parquet, reopen, replay.

use crate::support::open;
use std::sync::Arc;

use arrow::array::{Float64Array, RecordBatch, StringDictionaryBuilder, TimestampNanosecondArray};
use arrow::datatypes::Int32Type;
use quiver_storage::{
    canonical_schema, read_image, write_image, ColumnKind, FieldType, LogIndex, Storage, TableKey,
    TableSource,
};

fn batch(hosts: &[&str], times: &[i64], values: &[f64]) -> RecordBatch {
    let schema = canonical_schema([
        ("host", ColumnKind::Tag),
        ("v", ColumnKind::Field(FieldType::Float)),
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

fn rows_in(storage: &Storage, db: &str, m: &str) -> (usize, usize) {
    let t = storage.table(db, m).expect("table exists");
    (
        t.memory.iter().map(|b| b.num_rows()).sum(),
        t.files.all().iter().map(|f| f.rows as usize).sum(),
    )
}

#[tokio::test]
async fn flushed_rows_move_to_parquet_and_replay_skips_them() {
    let dir = tempfile::tempdir().unwrap();
    let key = TableKey::new("db", "cpu");
    {
        let s = open(dir.path()).await;
        s.apply_write(
            LogIndex(1),
            "db",
            &[("cpu".into(), batch(&["a", "b"], &[10, 20], &[1.0, 2.0]))],
        )
        .unwrap();
        s.apply_write(
            LogIndex(2),
            "db",
            &[("cpu".into(), batch(&["a"], &[30], &[3.0]))],
        )
        .unwrap();
        s.apply_flush(LogIndex(3), std::slice::from_ref(&key));
        assert_eq!(
            rows_in(&s, "db", "cpu"),
            (3, 0),
            "frozen rows stay queryable in memory"
        );
        let freed = s.memory_freed_signal();
        assert!(s.persist_next().await.unwrap());
        assert!(!s.persist_next().await.unwrap());
        assert_eq!(rows_in(&s, "db", "cpu"), (0, 3));
        // The flush announced the memory it freed, so the heap release runs.
        tokio::time::timeout(std::time::Duration::from_secs(5), freed.notified())
            .await
            .expect("a written segment announces the memory it freed");
        s.apply_write(
            LogIndex(4),
            "db",
            &[("cpu".into(), batch(&["c"], &[40], &[4.0]))],
        )
        .unwrap();
    }
    // Reopen: files are found; replaying entries 1..=4 adds only entry 4.
    let s = open(dir.path()).await;
    assert_eq!(rows_in(&s, "db", "cpu"), (0, 3));
    for (i, b) in [
        (1, batch(&["a", "b"], &[10, 20], &[1.0, 2.0])),
        (2, batch(&["a"], &[30], &[3.0])),
        (4, batch(&["c"], &[40], &[4.0])),
    ] {
        s.apply_write(LogIndex(i), "db", &[("cpu".into(), b)])
            .unwrap();
    }
    s.apply_flush(LogIndex(3), std::slice::from_ref(&key));
    assert_eq!(
        rows_in(&s, "db", "cpu"),
        (1, 3),
        "replay must not duplicate flushed rows"
    );
}

#[tokio::test]
async fn a_schema_conflict_rejects_the_whole_entry() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    s.apply_write(
        LogIndex(1),
        "db",
        &[("cpu".into(), batch(&["a"], &[1], &[1.0]))],
    )
    .unwrap();
    let schema = canonical_schema([("v", ColumnKind::Field(FieldType::Integer))]);
    let ints = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from(vec![2])),
            Arc::new(arrow::array::Int64Array::from(vec![5])),
        ],
    )
    .unwrap();
    let err = s
        .apply_write(
            LogIndex(2),
            "db",
            &[
                ("mem".into(), batch(&["a"], &[1], &[1.0])),
                ("cpu".into(), ints),
            ],
        )
        .unwrap_err();
    assert!(err.to_string().contains("\"v\""), "{err}");
    assert!(
        s.table("db", "mem").is_none(),
        "no part of a rejected entry is applied"
    );
    assert_eq!(rows_in(&s, "db", "cpu"), (1, 0));
}

#[tokio::test]
async fn memory_image_round_trips_and_restores_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let key = TableKey::new("db", "cpu");
    let s = open(dir.path()).await;
    s.apply_write(
        LogIndex(1),
        "db",
        &[("cpu".into(), batch(&["a"], &[1], &[1.0]))],
    )
    .unwrap();
    s.apply_flush(LogIndex(2), std::slice::from_ref(&key));
    s.apply_write(
        LogIndex(3),
        "db",
        &[("cpu".into(), batch(&["b", "c"], &[2, 3], &[2.0, 3.0]))],
    )
    .unwrap();
    let image = s.memory_image();
    let mut bytes = Vec::new();
    write_image(&image, &mut bytes).unwrap();
    let back = read_image(&mut bytes.as_slice()).unwrap();
    assert_eq!(back.tables.len(), 1);
    assert_eq!(back.tables[0].frozen.len(), 1);
    assert_eq!(back.tables[0].active.len(), 1);

    // The frozen segment is written after the image was taken; restoring the image
    // must skip it (it is in a file now) and keep the live rows.
    assert!(s.persist_next().await.unwrap());
    drop(s);
    let reopened = open(dir.path()).await;
    reopened.restore_memory(back).unwrap();
    assert_eq!(rows_in(&reopened, "db", "cpu"), (2, 1));

    let mut damaged = bytes.clone();
    let at = damaged.len() / 2;
    damaged[at] ^= 0xff;
    assert!(
        read_image(&mut damaged.as_slice()).is_err(),
        "a damaged image is detected"
    );
}

#[tokio::test]
async fn measurements_resolve_within_their_database_exactly_then_by_case() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let one_row = || batch(&["a"], &[10], &[1.0]);
    // Neighbouring databases sort around "db": their tables must not leak into it.
    for (i, (db, m)) in [
        ("da", "cpu"),
        ("db", "CPU"),
        ("db", "Mem"),
        ("db", "mem"),
        ("dc", "disk"),
    ]
    .into_iter()
    .enumerate()
    {
        s.apply_write(LogIndex(i as u64 + 1), db, &[(m.into(), one_row())])
            .unwrap();
    }
    assert_eq!(s.measurements("db"), ["CPU", "Mem", "mem"]);
    assert_eq!(s.resolve_measurement("db", "CPU").as_deref(), Some("CPU"));
    assert_eq!(s.resolve_measurement("db", "cpu").as_deref(), Some("CPU"));
    assert_eq!(s.resolve_measurement("db", "mem").as_deref(), Some("mem"));
    assert_eq!(s.resolve_measurement("db", "MEM"), None, "ambiguous");
    assert_eq!(
        s.resolve_measurement("db", "disk"),
        None,
        "another database's"
    );
    assert_eq!(s.resolve_measurement("dc", "disk").as_deref(), Some("disk"));
    assert_eq!(s.resolve_measurement("nope", "cpu"), None);
}
