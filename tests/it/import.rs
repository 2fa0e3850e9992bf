//! `quiver import` against a real node: line protocol, CSV and Parquet files of months
//! of history, a resume point honoured, a second import of the same file stored once,
//! bad lines reported with the valid ones stored, and the acked = persisted check.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, RecordBatch, StringArray, TimestampNanosecondArray};

use crate::common::{Node, NodeSpec, TOKEN};

/// 2024-01-01T00:00:00Z, in seconds.
const START_S: i64 = 1_704_067_200;

fn import(node: &Node, args: &[&str], files: &[&Path]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .arg("import")
        .args(["--url", &node.url, "--token", TOKEN, "--database", "imp"])
        .args(args)
        .args(files)
        .output()
        .expect("run quiver import");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

async fn count(node: &Node, table: &str) -> i64 {
    node.rows("imp", &format!("SELECT count(*) FROM {table}"))
        .await[0][0]
        .as_i64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn files_of_months_load_once_resume_and_are_checked_against_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(&dir.path().join("node"))).await;

    // Line protocol: 120 days, a row every two hours, seconds.
    let lp = dir.path().join("history.lp");
    let mut text = String::from("# exported\n");
    for i in 0..120 * 12 {
        text.push_str(&format!(
            "weather,site=s{} temp={}.5,rain={}i {}\n",
            i % 3,
            i % 40,
            i % 7,
            START_S + i * 7_200
        ));
    }
    std::fs::write(&lp, &text).unwrap();
    let (code, out) = import(
        &node,
        &["--precision", "s", "--chunk-bytes", "20000"],
        &[&lp],
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("weather: 1440 rows acknowledged"), "{out}");
    assert_eq!(count(&node, "weather").await, 1_440);
    assert!(
        !lp.with_extension("lp.quiver-import").exists(),
        "the resume point goes"
    );

    // The same file again: every chunk carries the same write id, so nothing doubles.
    let (code, out) = import(
        &node,
        &["--precision", "s", "--chunk-bytes", "20000"],
        &[&lp],
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(count(&node, "weather").await, 1_440);

    // A resume point half-way through another file: only the rest is sent.
    let second = dir.path().join("more.lp");
    let lines: Vec<String> = (0..100)
        .map(|i| format!("resumed v={i} {}\n", START_S + i * 86_400))
        .collect();
    std::fs::write(&second, lines.concat()).unwrap();
    let half: usize = lines[..40].iter().map(String::len).sum();
    let meta = std::fs::metadata(&second).unwrap();
    let modified = meta
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::fs::write(
        dir.path().join("more.lp.quiver-import"),
        serde_json::json!({"database": "imp", "size": meta.len(), "modified_ns": modified, "done": half})
            .to_string(),
    )
    .unwrap();
    let (code, out) = import(&node, &["--precision", "s"], &[&second]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(count(&node, "resumed").await, 60, "{out}");

    // CSV (types inferred; `site` text is a tag) and Parquet, named by their files.
    let csv = dir.path().join("readings.csv");
    let mut body = String::from("time,site,level\n");
    for i in 0..500 {
        body.push_str(&format!(
            "{},r{},{}.25\n",
            (START_S + i * 3_600) * 1_000,
            i % 4,
            i
        ));
    }
    std::fs::write(&csv, body).unwrap();
    let parquet_path = dir.path().join("power.parquet");
    let times: Vec<i64> = (0..300)
        .map(|i| (START_S + i * 43_200) * 1_000_000_000)
        .collect();
    let batch = RecordBatch::try_from_iter([
        (
            "time",
            Arc::new(TimestampNanosecondArray::from(times)) as ArrayRef,
        ),
        (
            "meter",
            Arc::new(StringArray::from_iter_values(
                (0..300).map(|i| format!("m{}", i % 5)),
            )) as ArrayRef,
        ),
        (
            "kw",
            Arc::new(Float64Array::from_iter_values((0..300).map(f64::from))) as ArrayRef,
        ),
    ])
    .unwrap();
    let file = std::fs::File::create(&parquet_path).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let (code, out) = import(&node, &["--precision", "ms"], &[&csv, &parquet_path]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(count(&node, "readings").await, 500);
    assert_eq!(count(&node, "power").await, 300);
    let rows = node
        .rows(
            "imp",
            "SELECT count(DISTINCT site), sum(level), min(time) FROM readings",
        )
        .await;
    assert_eq!(rows[0][0], 4);
    assert_eq!(
        rows[0][1].as_f64().unwrap(),
        (0..500).map(|i| i as f64 + 0.25).sum::<f64>()
    );
    assert!(rows[0][2]
        .as_str()
        .unwrap()
        .starts_with("2024-01-01T00:00:00"));
    let rows = node
        .rows("imp", "SELECT sum(kw), count(DISTINCT meter) FROM power")
        .await;
    assert_eq!(rows[0][0].as_f64().unwrap(), 44_850.0);
    assert_eq!(rows[0][1], 5);

    // Bad lines: reported with their place, the import fails, the good rows are stored.
    let bad = dir.path().join("bad.lp");
    std::fs::write(
        &bad,
        format!(
            "mixed v=1 {START_S}\nmixed v=oops {START_S}\nmixed v=3 {}\n",
            START_S + 1
        ),
    )
    .unwrap();
    let (code, out) = import(&node, &["--precision", "s"], &[&bad]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("line 2") && out.contains("refused as bad input"),
        "{out}"
    );
    assert!(
        out.contains("mixed: 2 rows acknowledged, 2 stored"),
        "{out}"
    );
    assert_eq!(count(&node, "mixed").await, 2);
}
