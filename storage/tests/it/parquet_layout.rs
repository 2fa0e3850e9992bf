//! What a flushed segment looks like on disk: one file per hour, sorted by tags then
//! time, dictionary-encoded tags recorded as strings, and self-describing metadata.

use std::sync::Arc;

use arrow::array::{
    Array, AsArray, Float64Array, RecordBatch, StringDictionaryBuilder, TimestampNanosecondArray,
};
use arrow::datatypes::{DataType, Int32Type, TimestampNanosecondType};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use quiver_storage::{
    canonical_schema, ColumnKind, FieldType, FileMeta, LogIndex, Storage, StorageConfig, TableKey,
    TableSource, FILE_META_KEY,
};

const HOUR: i64 = 3_600_000_000_000;

#[tokio::test]
async fn a_segment_is_one_sorted_file_per_hour_with_its_own_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(StorageConfig {
        dir: dir.path().to_path_buf(),
        ..StorageConfig::default()
    })
    .await
    .unwrap();
    let schema = canonical_schema([
        ("host", ColumnKind::Tag),
        ("v", ColumnKind::Field(FieldType::Float)),
    ]);
    // Rows out of order, over three hours, two hosts.
    let times: Vec<i64> = (0..30).map(|i| (29 - i) * HOUR / 10).collect();
    let mut host = StringDictionaryBuilder::<Int32Type>::new();
    for i in 0..30 {
        host.append_value(if i % 2 == 0 { "b" } else { "a" });
    }
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from(times.clone())),
            Arc::new(host.finish()),
            Arc::new(Float64Array::from(
                (0..30).map(f64::from).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap();
    s.apply_write(LogIndex(5), "db", &[("cpu".into(), batch)])
        .unwrap();
    s.apply_flush(LogIndex(6), &[TableKey::new("db", "cpu")]);
    assert!(s.persist_next().await.unwrap());

    let table = s.table("db", "cpu").unwrap();
    assert_eq!(table.files.all().len(), 3, "30 rows over 3 hours: 3 files");
    let mut total = 0;
    for f in &table.files.all() {
        let path = dir.path().join("parquet").join(&f.path);
        let reader =
            ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap()).unwrap();
        let kv = reader
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .unwrap()
            .clone();
        let meta: FileMeta = serde_json::from_str(
            kv.iter()
                .find(|k| k.key == FILE_META_KEY)
                .unwrap()
                .value
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (meta.log_first, meta.log_last, meta.segment_files),
            (LogIndex(1), LogIndex(6), 3)
        );
        assert_eq!(meta.path, f.path);
        // Both hosts write in every hour: the planner's group estimate for `host`.
        assert_eq!(meta.tag_distinct, vec![2], "distinct hosts recorded");
        assert_eq!(f.tag_distinct("host"), Some(2), "and seen by queries");
        assert_eq!(
            meta.time_min.0 / HOUR,
            meta.time_max.0 / HOUR,
            "one hour per file"
        );
        // Tags are dictionary-encoded on disk but recorded as plain strings, so readers
        // build strings (or views) from the dictionary pages instead of dictionaries.
        let host_chunk = reader
            .metadata()
            .row_group(0)
            .columns()
            .iter()
            .find(|c| c.column_path().string() == "host")
            .unwrap()
            .clone();
        assert!(
            host_chunk.dictionary_page_offset().is_some(),
            "host pages are dictionary-encoded"
        );
        let batches: Vec<RecordBatch> = reader.build().unwrap().map(|b| b.unwrap()).collect();
        let b = &batches[0];
        assert_eq!(
            b.column_by_name("host").unwrap().data_type(),
            &DataType::Utf8,
            "the recorded Arrow type of a tag"
        );
        assert_eq!(
            b.column_by_name("time").unwrap().data_type(),
            &quiver_storage::TIME_TYPE,
            "time keeps its exact type"
        );
        let hosts: Vec<String> = b
            .column_by_name("host")
            .unwrap()
            .as_string::<i32>()
            .iter()
            .map(|h| h.unwrap().to_string())
            .collect();
        let t = b
            .column_by_name("time")
            .unwrap()
            .as_primitive::<TimestampNanosecondType>();
        for i in 1..b.num_rows() {
            let ordered =
                (hosts[i - 1].as_str(), t.value(i - 1)) <= (hosts[i].as_str(), t.value(i));
            assert!(ordered, "rows sorted by host then time");
        }
        assert_eq!(meta.rows as usize, b.num_rows());
        total += b.num_rows();
        assert_eq!(t.len(), b.num_rows());
    }
    assert_eq!(total, 30);
}
