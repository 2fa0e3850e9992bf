//! Integer fields held narrow in memory: less memory per buffered row, and every reader
//! (queries, the flush, a memory image) sees exactly the 64-bit values that were
//! written.

use crate::support::open;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, RecordBatch, StringDictionaryBuilder,
    TimestampNanosecondArray, UInt64Array,
};
use arrow::compute::{concat_batches, lexsort_to_indices, take_record_batch, SortColumn};
use arrow::datatypes::{DataType, Int32Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use quiver_storage::{
    canonical_schema, conform, held_bytes, read_image, write_image, ColumnKind, FieldType,
    LogIndex, Storage, TableKey, TableSource,
};

const ROWS: usize = 1_000;

/// `ROWS` rows from `first_time` of: a small integer (0..100, or up to 30,000 when
/// `wider`), a large one (beyond 32 bits, negative too), an unsigned one and an integer
/// that is null on every other row.
fn rows(first_time: i64, wider: bool) -> RecordBatch {
    let schema = canonical_schema([
        ("host", ColumnKind::Tag),
        ("small", ColumnKind::Field(FieldType::Integer)),
        ("large", ColumnKind::Field(FieldType::Integer)),
        ("count", ColumnKind::Field(FieldType::UInteger)),
        ("sparse", ColumnKind::Field(FieldType::Integer)),
    ]);
    let mut host = StringDictionaryBuilder::<Int32Type>::new();
    for i in 0..ROWS {
        host.append_value(format!("h{}", i % 13));
    }
    let n = ROWS as i64;
    let small_max = if wider { 30_000 } else { 100 };
    // Schema order: time, tags, then fields by name (count, large, small, sparse).
    let columns: Vec<ArrayRef> = vec![
        Arc::new(TimestampNanosecondArray::from_iter_values(
            (0..n).map(|i| first_time + i),
        )),
        Arc::new(host.finish()),
        Arc::new(UInt64Array::from_iter_values(
            (0..ROWS as u64).map(|i| i % 200),
        )),
        Arc::new(Int64Array::from_iter_values(
            (0..n).map(|i| (i - n / 2) * (1 << 40)),
        )),
        Arc::new(Int64Array::from_iter_values((0..n).map(|i| i % small_max))),
        Arc::new(Int64Array::from_iter(
            (0..n).map(|i| (i % 2 == 0).then_some(-i)),
        )),
    ];
    RecordBatch::try_new(schema, columns).unwrap()
}

/// `batches` as one batch of `schema`'s types, rows ordered by time.
fn by_time(batches: &[RecordBatch], schema: &arrow::datatypes::SchemaRef) -> RecordBatch {
    let conformed: Vec<RecordBatch> = batches
        .iter()
        .map(|b| conform(b, schema).unwrap())
        .collect();
    let all = concat_batches(schema, &conformed).unwrap();
    let order = lexsort_to_indices(
        &[SortColumn {
            values: all.column_by_name("time").unwrap().clone(),
            options: None,
        }],
        None,
    )
    .unwrap();
    take_record_batch(&all, &order).unwrap()
}

/// What a query of `db.m` reads from memory, cast to the schema's types as a query
/// casts the columns it reads; checks that what is held is no wider than written.
fn memory_rows(s: &Storage, schema: &arrow::datatypes::SchemaRef) -> RecordBatch {
    let table = s.table("db", "m").unwrap();
    for batch in &table.memory {
        let small = batch.column_by_name("small").unwrap().data_type();
        assert!(
            matches!(small, DataType::Int8 | DataType::Int16),
            "small held as {small}"
        );
    }
    by_time(&table.memory, schema)
}

#[tokio::test]
async fn integers_are_held_narrow_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let key = TableKey::new("db", "m");
    let first = rows(0, false);
    let second = rows(ROWS as i64, true);
    let schema = first.schema();

    s.apply_write(LogIndex(1), "db", &[("m".into(), first.clone())])
        .unwrap();
    // `small` and `count` fit one byte here and `sparse` two: 20 bytes a row are not
    // held.
    let wide = held_bytes(&first);
    assert!(
        s.memory_bytes() + (7 + 7 + 6) * ROWS <= wide,
        "held {} bytes for {} wide",
        s.memory_bytes(),
        wide
    );
    s.apply_write(LogIndex(2), "db", &[("m".into(), second.clone())])
        .unwrap();
    let written = by_time(&[first.clone(), second.clone()], &schema);
    assert_eq!(
        memory_rows(&s, &schema),
        written,
        "queries of the live buffer"
    );

    // A memory image carries full-width integers, and restores the same rows.
    let mut image = Vec::new();
    write_image(&s.memory_image(), &mut image).unwrap();
    let back = read_image(&mut image.as_slice()).unwrap();
    for buffered in &back.tables[0].active {
        for name in ["small", "large", "sparse"] {
            assert_eq!(
                buffered.batch.column_by_name(name).unwrap().data_type(),
                &DataType::Int64,
                "{name} in the image"
            );
        }
        assert_eq!(
            buffered.batch.column_by_name("count").unwrap().data_type(),
            &DataType::UInt64
        );
    }
    let restored_dir = tempfile::tempdir().unwrap();
    let restored = open(restored_dir.path()).await;
    restored.restore_memory(back).unwrap();
    assert_eq!(
        memory_rows(&restored, &schema),
        written,
        "restored from the image"
    );
    assert!(restored.memory_bytes() < held_bytes(&first) + held_bytes(&second));

    // Frozen (batches of two widths in one segment), then written: the file holds
    // 64-bit columns with the same values.
    s.apply_flush(LogIndex(3), std::slice::from_ref(&key));
    assert_eq!(
        memory_rows(&s, &schema),
        written,
        "queries of the frozen segment"
    );
    assert!(s.persist_next().await.unwrap());
    assert_eq!(s.memory_bytes(), 0);
    let table = s.table("db", "m").unwrap();
    let mut from_files = Vec::new();
    for f in &table.files.all() {
        let path = dir.path().join("parquet").join(&f.path);
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            assert_eq!(
                batch.column_by_name("small").unwrap().data_type(),
                &DataType::Int64
            );
            from_files.push(batch);
        }
    }
    assert_eq!(by_time(&from_files, &schema), written, "rows in Parquet");
    let large = written
        .column_by_name("large")
        .unwrap()
        .as_primitive::<arrow::datatypes::Int64Type>();
    assert!(
        large.values().iter().any(|&v| v < i64::from(i32::MIN)),
        "the large column needs 64 bits"
    );
    assert_eq!(written.column_by_name("sparse").unwrap().null_count(), ROWS);
}
