//! What a crash or a damaged disk leaves behind: files written durably, temporary files
//! cleaned up, unreadable files quarantined instead of stopping the node.

use crate::support::open;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Float64Array, RecordBatch, StringDictionaryBuilder, TimestampNanosecondArray};
use arrow::datatypes::Int32Type;
use quiver_storage::{
    canonical_schema, ColumnKind, FieldType, FileMeta, LogIndex, Storage, TableKey, TableSource,
};

const HOUR_NS: i64 = 3_600_000_000_000;

fn batch(host: &str, time: i64, value: f64) -> RecordBatch {
    let schema = canonical_schema([
        ("host", ColumnKind::Tag),
        ("v", ColumnKind::Field(FieldType::Float)),
    ]);
    let mut hosts = StringDictionaryBuilder::<Int32Type>::new();
    hosts.append_value(host);
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(TimestampNanosecondArray::from(vec![time])),
            Arc::new(hosts.finish()),
            Arc::new(Float64Array::from(vec![value])),
        ],
    )
    .unwrap()
}

/// Writes `segments` one-row segments of `db.cpu` (one file each) and returns the files.
async fn write_segments(storage: &Storage, segments: u64) -> Vec<FileMeta> {
    let key = TableKey::new("db", "cpu");
    for i in 0..segments {
        let index = LogIndex(2 * i + 1);
        storage
            .apply_write(
                index,
                "db",
                &[("cpu".into(), batch("a", i as i64 * HOUR_NS, i as f64))],
            )
            .unwrap();
        storage.apply_flush(LogIndex(2 * i + 2), std::slice::from_ref(&key));
        assert!(storage.persist_next().await.unwrap());
    }
    let mut files = storage.files();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(files.len() as u64, segments);
    files
}

fn on_disk(dir: &Path, meta: &FileMeta) -> PathBuf {
    dir.join("parquet").join(&meta.path)
}

/// Every regular file under `dir`, relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn flushed_files_leave_no_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    let files = write_segments(&s, 3).await;
    let expected: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(files_under(&dir.path().join("parquet")), expected);
}

/// A node whose catalog had to be rebuilt refused to start when one footer could not
/// be read (`read_footer(..)?` aborted `Catalog::open`).
#[tokio::test]
async fn unreadable_parquet_file_is_quarantined_and_the_node_starts() {
    let dir = tempfile::tempdir().unwrap();
    let files = {
        let s = open(dir.path()).await;
        write_segments(&s, 3).await
    };
    // A power loss truncated one file; another file is not Parquet at all; a crash left
    // a temporary file.
    let truncated = &files[1];
    let bytes = std::fs::read(on_disk(dir.path(), truncated)).unwrap();
    std::fs::write(on_disk(dir.path(), truncated), &bytes[..bytes.len() / 2]).unwrap();
    let garbage = "data/db/cpu/1970-01-01/00/00000000000000000090-00000000000000000091.parquet";
    std::fs::write(dir.path().join("parquet").join(garbage), b"not parquet").unwrap();
    let temp = format!("{}.tmp", files[0].path);
    std::fs::write(dir.path().join("parquet").join(&temp), b"partial").unwrap();

    let s = open(dir.path()).await;
    let report = &s.open_report().catalog;
    assert!(report.rebuilt_because.is_some());
    let mut quarantined = report.quarantined.clone();
    quarantined.sort();
    let mut expected = vec![garbage.to_string(), truncated.path.clone()];
    expected.sort();
    assert_eq!(quarantined, expected);
    assert_eq!(report.temp_files_removed, [temp]);
    assert!(report.incomplete_files_quarantined.is_empty());

    // The readable files are kept and queryable; the others wait in quarantine.
    let kept: Vec<String> = s.files().iter().map(|f| f.path.clone()).collect();
    let mut expected_kept = vec![files[0].path.clone(), files[2].path.clone()];
    expected_kept.sort();
    let mut kept_sorted = kept.clone();
    kept_sorted.sort();
    assert_eq!(kept_sorted, expected_kept);
    let table = s.table("db", "cpu").unwrap();
    assert_eq!(table.files.all().iter().map(|f| f.rows).sum::<u64>(), 2);
    assert_eq!(files_under(&dir.path().join("quarantine")), expected);
    assert_eq!(
        std::fs::read(dir.path().join("quarantine").join(&truncated.path)).unwrap(),
        &bytes[..bytes.len() / 2]
    );

    // The next start finds a consistent catalog and quarantines nothing more.
    drop(s);
    let s = open(dir.path()).await;
    assert_eq!(s.open_report().catalog.rebuilt_because, None);
    assert!(s.open_report().catalog.quarantined.is_empty());
    assert_eq!(s.files().len(), 2);
}

#[tokio::test]
async fn adopted_file_is_checked_before_it_is_moved_into_place() {
    let source_dir = tempfile::tempdir().unwrap();
    let source = open(source_dir.path()).await;
    let files = write_segments(&source, 2).await;

    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).await;
    // The wrong bytes for a file: refused, nothing at the final name.
    let staged = s.incoming_path(&files[0]);
    std::fs::create_dir_all(staged.parent().unwrap()).unwrap();
    std::fs::copy(on_disk(source_dir.path(), &files[1]), &staged).unwrap();
    let mut wrong = files[0].clone();
    wrong.size_bytes = files[1].size_bytes;
    assert!(s.adopt_file(&wrong, &staged).await.is_err());
    assert!(!on_disk(dir.path(), &files[0]).exists());
    assert!(!s.has_file(&files[0]));

    // The right bytes: adopted, durable, recorded.
    std::fs::copy(on_disk(source_dir.path(), &files[0]), &staged).unwrap();
    s.adopt_file(&files[0], &staged).await.unwrap();
    assert!(s.has_file(&files[0]));
    assert!(!staged.exists());
    assert_eq!(
        std::fs::read(on_disk(dir.path(), &files[0])).unwrap(),
        std::fs::read(on_disk(source_dir.path(), &files[0])).unwrap()
    );
    drop(s);
    let s = open(dir.path()).await;
    assert_eq!(s.open_report().catalog.rebuilt_because, None);
    assert_eq!(s.files(), vec![files[0].clone()]);
}
