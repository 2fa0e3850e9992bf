//! A table's sort lead through storage's public API: decided by the first freeze that
//! holds more than one series, declared by every file, kept across a restart (from the
//! snapshot image or, without one, from the files), and honoured by compaction.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    AsArray, Float64Array, RecordBatch, StringDictionaryBuilder, TimestampNanosecondArray,
};
use arrow::datatypes::{Int32Type, TimestampNanosecondType};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use quiver_storage::compaction::{CompactionOutcome, CompactionSettings};
use quiver_storage::{
    canonical_schema, read_image, write_image, ColumnKind, FieldType, FileMeta, FileSet, LogIndex,
    Storage, StorageConfig, TableKey, TimestampNs,
};

const HOUR: i64 = TimestampNs::HOUR_NS;
/// 2026-01-01T10:00:00Z
const T0: i64 = 1_767_225_600_000_000_000 + 10 * HOUR;

/// Rows of (dc, host, time); `dc` sorts before `host` by name.
fn batch(rows: &[(&str, &str, i64)]) -> RecordBatch {
    let schema = canonical_schema([
        ("dc", ColumnKind::Tag),
        ("host", ColumnKind::Tag),
        ("v", ColumnKind::Field(FieldType::Float)),
    ]);
    let mut dc = StringDictionaryBuilder::<Int32Type>::new();
    let mut host = StringDictionaryBuilder::<Int32Type>::new();
    for (d, h, _) in rows {
        dc.append_value(d);
        host.append_value(h);
    }
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from(
                rows.iter().map(|r| r.2).collect::<Vec<_>>(),
            )),
            Arc::new(dc.finish()),
            Arc::new(host.finish()),
            Arc::new(Float64Array::from(vec![1.0; rows.len()])),
        ],
    )
    .unwrap()
}

fn config(dir: &Path) -> StorageConfig {
    StorageConfig {
        dir: dir.to_path_buf(),
        compaction: CompactionSettings {
            hour_files_min: 2,
            ..CompactionSettings::default()
        },
        ..StorageConfig::default()
    }
}

fn key() -> TableKey {
    TableKey::new("db", "cpu")
}

/// Writes `rows` at `index`, flushes at `index + 1` and persists the segment.
async fn segment(s: &Storage, index: u64, rows: &[(&str, &str, i64)]) {
    s.apply_write(LogIndex(index), "db", &[("cpu".into(), batch(rows))])
        .unwrap();
    s.apply_flush(LogIndex(index + 1), &[key()]);
    assert!(s.persist_next().await.unwrap());
}

/// The file of the segment that starts at log index `log_first`.
fn file_from(s: &Storage, log_first: u64) -> FileMeta {
    s.files()
        .into_iter()
        .find(|f| f.log_first == LogIndex(log_first))
        .unwrap()
}

/// A file's rows as (dc, host, time), in file order, and its declared sort columns.
fn file_rows(dir: &Path, meta: &FileMeta) -> (Vec<(String, String, i64)>, Vec<String>) {
    let file = std::fs::File::open(dir.join("parquet").join(&meta.path)).unwrap();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let row_group = builder.metadata().row_group(0);
    let schema = builder.parquet_schema();
    let declared = row_group
        .sorting_columns()
        .unwrap()
        .iter()
        .map(|c| schema.column(c.column_idx as usize).name().to_string())
        .collect();
    let mut out = Vec::new();
    for b in builder.build().unwrap() {
        let b = b.unwrap();
        let dc = b.column_by_name("dc").unwrap().as_string::<i32>();
        let host = b.column_by_name("host").unwrap().as_string::<i32>();
        let time = b
            .column_by_name("time")
            .unwrap()
            .as_primitive::<TimestampNanosecondType>();
        for i in 0..b.num_rows() {
            out.push((
                dc.value(i).to_string(),
                host.value(i).to_string(),
                time.value(i),
            ));
        }
    }
    (out, declared)
}

/// Six hosts in two data centres whose names order them the other way round.
fn fleet(t: i64) -> Vec<(&'static str, &'static str, i64)> {
    vec![
        ("dc-b", "h1", t),
        ("dc-a", "h4", t),
        ("dc-b", "h2", t + 1),
        ("dc-a", "h5", t + 1),
        ("dc-b", "h3", t + 2),
        ("dc-a", "h6", t + 2),
    ]
}

fn is_sorted_by_host_dc_time(rows: &[(String, String, i64)]) -> bool {
    rows.windows(2)
        .all(|w| (&w[0].1, &w[0].0, w[0].2) <= (&w[1].1, &w[1].0, w[1].2))
}

#[tokio::test]
async fn the_tag_with_most_values_leads_and_stays_the_lead_across_restarts_and_merges() {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open_with(config(dir.path()), FileSet::Nothing)
        .await
        .unwrap();
    // One series first: nothing to decide from, written in name order.
    segment(&s, 1, &[("dc-a", "h9", T0), ("dc-a", "h9", T0 + 5)]).await;
    let first = s.files()[0].clone();
    assert_eq!(first.sort_lead, None);
    // Six hosts, two data centres: `host` leads from now on.
    segment(&s, 3, &fleet(T0 + 10)).await;
    let second = file_from(&s, 3);
    assert_eq!(second.sort_lead.as_deref(), Some("host"));
    let (rows, declared) = file_rows(dir.path(), &second);
    assert_eq!(declared, ["host", "dc", "time"]);
    assert!(is_sorted_by_host_dc_time(&rows), "{rows:?}");
    assert_eq!(rows[0].1, "h1");

    // Restart from the snapshot image: a segment where `dc` has the most values would
    // choose `dc`, but the decision is the table's and is kept.
    let mut bytes = Vec::new();
    write_image(&s.memory_image(), &mut bytes).unwrap();
    let image = read_image(&mut bytes.as_slice()).unwrap();
    let manifest = s.files();
    drop(s);
    let s = Storage::open_with(
        config(dir.path()),
        FileSet::Manifest {
            files: manifest,
            jobs: Vec::new(),
        },
    )
    .await
    .unwrap();
    s.restore_memory(image).unwrap();
    let dcs = [
        ("dc-c", "h1", T0 + 20),
        ("dc-d", "h1", T0 + 21),
        ("dc-e", "h1", T0 + 22),
    ];
    segment(&s, 5, &dcs).await;
    let third = file_from(&s, 5);
    assert_eq!(
        third.sort_lead.as_deref(),
        Some("host"),
        "kept through the image"
    );

    // Restart from the files alone (no snapshot): the files say which lead they use.
    drop(s);
    let s = Storage::open(config(dir.path())).await.unwrap();
    segment(&s, 7, &[("dc-x", "h0", T0 + 30), ("dc-y", "h0", T0 + 31)]).await;
    let fourth = file_from(&s, 7);
    assert_eq!(
        fourth.sort_lead.as_deref(),
        Some("host"),
        "kept through the files"
    );

    // The hour's four files (one of them one series, in name order) merge into one
    // file sorted by host first.
    let now = TimestampNs(T0 + 60_000_000_000);
    let mut plans = s.compaction_candidates(now);
    assert_eq!(plans.len(), 1);
    let plan = plans.remove(0);
    assert_eq!(plan.inputs.len(), 4);
    assert_eq!(
        s.apply_compact(LogIndex(9), plan),
        CompactionOutcome::Scheduled
    );
    assert!(s.compact_next().await.unwrap());
    let files = s.files();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].sort_lead.as_deref(), Some("host"));
    let (rows, declared) = file_rows(dir.path(), &files[0]);
    assert_eq!(declared, ["host", "dc", "time"]);
    assert_eq!(rows.len(), 2 + 6 + 3 + 2, "every row, once");
    assert!(is_sorted_by_host_dc_time(&rows), "{rows:?}");
}

#[tokio::test]
async fn a_decision_whose_segment_is_not_yet_written_travels_in_the_image() {
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s = Storage::open_with(config(one.path()), FileSet::Nothing)
        .await
        .unwrap();
    s.apply_write(LogIndex(1), "db", &[("cpu".into(), batch(&fleet(T0)))])
        .unwrap();
    s.apply_flush(LogIndex(2), &[key()]);
    // Frozen, not yet written: no file can tell another node the decision.
    let mut bytes = Vec::new();
    write_image(&s.memory_image(), &mut bytes).unwrap();
    let restored = Storage::open_with(config(two.path()), FileSet::Nothing)
        .await
        .unwrap();
    restored
        .restore_memory(read_image(&mut bytes.as_slice()).unwrap())
        .unwrap();
    // Three data centres, one host: deciding again would choose `dc`.
    let dcs = [
        ("dc-c", "h1", T0 + 20),
        ("dc-d", "h1", T0 + 21),
        ("dc-e", "h1", T0 + 22),
    ];
    segment(&restored, 3, &dcs).await;
    assert!(
        restored.persist_next().await.unwrap(),
        "the second segment is written too"
    );
    let files = restored.files();
    assert_eq!(files.len(), 2);
    for f in &files {
        assert_eq!(f.sort_lead.as_deref(), Some("host"), "{}", f.path);
        let (rows, declared) = file_rows(two.path(), f);
        assert_eq!(declared, ["host", "dc", "time"]);
        assert!(is_sorted_by_host_dc_time(&rows));
    }
}

#[tokio::test]
async fn a_table_restored_from_an_image_older_than_leads_keeps_name_order() {
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s = Storage::open_with(config(one.path()), FileSet::Nothing)
        .await
        .unwrap();
    s.apply_write(LogIndex(1), "db", &[("cpu".into(), batch(&fleet(T0)))])
        .unwrap();
    s.apply_flush(LogIndex(2), &[key()]);
    // As an older build wrote it: no decisions, frozen segments without a lead.
    let mut image = s.memory_image();
    image.sort_leads = None;
    for table in &mut image.tables {
        for segment in &mut table.frozen {
            segment.sort_lead = None;
        }
    }
    let mut bytes = Vec::new();
    write_image(&image, &mut bytes).unwrap();
    let restored = Storage::open_with(config(two.path()), FileSet::Nothing)
        .await
        .unwrap();
    restored
        .restore_memory(read_image(&mut bytes.as_slice()).unwrap())
        .unwrap();
    // Six hosts again: a new table would let `host` lead; this one stays in name order,
    // so its files keep merging with the ones the older build wrote.
    segment(&restored, 3, &fleet(T0 + 10)).await;
    assert!(restored.persist_next().await.unwrap());
    let files = restored.files();
    assert_eq!(files.len(), 2);
    for f in &files {
        assert_eq!(f.sort_lead, None, "{}", f.path);
        let (_, declared) = file_rows(two.path(), f);
        assert_eq!(declared, ["dc", "host", "time"]);
    }
}
