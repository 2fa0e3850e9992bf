//! File counts and one bad table: a node whose snapshot lists thousands of Parquet
//! files restarts, and a table whose files cannot be written holds up no other table.

use std::time::Duration;

use serde_json::json;

use crate::common::{Node, NodeSpec};

/// One row in each of `hours` consecutive hours from a UTC midnight: one Parquet file
/// per hour at flush while `hours` is at most 48 (the newest two days of a flush go by
/// the hour; older days make a file each).
fn hourly_rows(measurement: &str, hours: i64) -> Vec<u8> {
    rmp_serde::to_vec_named(&hourly_object(measurement, hours)).unwrap()
}

fn hourly_object(measurement: &str, hours: i64) -> serde_json::Value {
    // 2020-09-13T00:00:00Z.
    let base = 1_599_955_200_000_000_000i64;
    let hour = 3_600_000_000_000i64;
    json!({"m": measurement, "columns": {
        "time": (0..hours).map(|h| base + h * hour).collect::<Vec<_>>(),
        "v": (0..hours).map(|h| h as f64).collect::<Vec<_>>(),
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_listing_100_000_files_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    // 2,100 measurements over two days of hours each: 100,800 files, a manifest far
    // past the old 1 MiB frame bound ("frame header of 1098001 bytes" at 2,400 files).
    let (measurements, hours) = (2_100i64, 48i64);
    let files = measurements * hours;
    let mut node = Node::start(
        NodeSpec::new(dir.path())
            .with("QUIVER_STORAGE_FLUSH_AGE_MS", 100)
            .with("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", 100)
            // The point is a snapshot of many files; merging them is compaction's.
            .with("QUIVER_COMPACTION_ENABLED", false),
    )
    .await;
    for first in (0..measurements).step_by(100) {
        let objects: Vec<serde_json::Value> = (first..first + 100)
            .map(|m| hourly_object(&format!("backfill{m}"), hours))
            .collect();
        let body = rmp_serde::to_vec_named(&objects).unwrap();
        let (status, text) = node.write_msgpack("db", body).await;
        assert_eq!(status, 204, "{text}");
    }
    let written = std::time::Instant::now();
    node.wait_for(
        "files written and the log purged",
        Duration::from_secs(900),
        || async {
            node.metric("quiver_parquet_files").await >= files as f64
                && node.metric("quiver_buffer_rows").await == 0.0
                && node.metric("quiver_frozen_segments").await == 0.0
                && node.metric("quiver_snapshots_built_total").await >= 1.0
        },
    )
    .await;
    // The snapshot that lists every file covers everything applied.
    node.wait_for(
        "a snapshot of all files",
        Duration::from_secs(120),
        || async {
            let s = node.status().await;
            s["snapshot_index"].is_u64() && s["snapshot_index"] == s["applied_index"]
        },
    )
    .await;
    let snapshot_bytes: u64 = std::fs::read_dir(node.spec.data_dir.join("snapshots"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.metadata().ok().map(|m| m.len()))
        .max()
        .unwrap_or(0);
    let restart = std::time::Instant::now();
    node.restart().await;
    eprintln!(
        "{files} files: written in {:?}, snapshot {snapshot_bytes} bytes, restart to ready in {:?}",
        written.elapsed() - restart.elapsed(),
        restart.elapsed()
    );
    assert!(
        node.log().contains("restored snapshot"),
        "the restart must go through the snapshot: {}",
        node.log_tail()
    );
    assert_eq!(node.metric("quiver_parquet_files").await, files as f64);
    for m in [0, measurements / 2, measurements - 1] {
        let rows = node
            .rows("db", &format!("SELECT count(*), sum(v) FROM backfill{m}"))
            .await;
        assert_eq!(rows[0][0], json!(hours));
        assert_eq!(rows[0][1], json!((hours * (hours - 1) / 2) as f64));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_table_whose_files_cannot_be_written_stalls_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let node =
        Node::start(NodeSpec::new(dir.path()).with("QUIVER_STORAGE_FLUSH_AGE_MS", 200)).await;
    // Where `blocked`'s files would go, a plain file: creating its directories fails.
    let parquet = node.spec.data_dir.join("parquet").join("data").join("db");
    std::fs::create_dir_all(&parquet).unwrap();
    std::fs::write(parquet.join("blocked"), b"not a directory").unwrap();
    let (status, text) = node.write_msgpack("db", hourly_rows("blocked", 2)).await;
    assert_eq!(status, 204, "{text}");
    node.wait_for(
        "the blocked table to fail",
        Duration::from_secs(30),
        || async { node.metric("quiver_flush_failures_total").await >= 1.0 },
    )
    .await;
    // Other tables, flushed after it, are written while it keeps failing.
    for m in ["free1", "free2", "free3"] {
        let (status, text) = node.write_msgpack("db", hourly_rows(m, 3)).await;
        assert_eq!(status, 204, "{text}");
    }
    node.wait_for(
        "the other tables' files",
        Duration::from_secs(30),
        || async { node.metric("quiver_parquet_files").await >= 9.0 },
    )
    .await;
    assert_eq!(node.metric("quiver_tables_failing_to_flush").await, 1.0);
    // The blocked rows stay queryable from memory, and are written once the cause goes.
    let rows = node.rows("db", "SELECT count(*) FROM blocked").await;
    assert_eq!(rows[0][0], json!(2));
    std::fs::remove_file(parquet.join("blocked")).unwrap();
    node.wait_for(
        "the blocked table's files",
        Duration::from_secs(60),
        || async {
            node.metric("quiver_parquet_files").await >= 11.0
                && node.metric("quiver_tables_failing_to_flush").await == 0.0
        },
    )
    .await;
}
