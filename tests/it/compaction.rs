//! Compaction end to end: a cluster merges its files through the log, every replica
//! ends with the same single file and the same rows, and a kill -9 inside the window
//! where replaced files are still on disk loses and doubles nothing.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::cluster_support::{content, leader, specs, start, write_batches};
use crate::common::Node;

/// Parquet files under a node's data directory (what is on disk, not what it lists).
fn parquet_files_on_disk(node: &Node) -> usize {
    fn walk(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| {
                        let p = e.path();
                        if p.is_dir() {
                            walk(&p)
                        } else {
                            usize::from(p.extension().is_some_and(|x| x == "parquet"))
                        }
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    walk(&node.spec.data_dir.join("parquet"))
}

async fn storage(node: &Node) -> Value {
    let response = node
        .client
        .get(format!("{}/api/v1/storage", node.url))
        .bearer_auth(crate::common::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn merged(node: &Node, rows: u64) -> bool {
    let s = storage(node).await;
    s["files"] == 1 && s["rows"] == rows && s["compactions_pending"] == 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_merges_its_files_identically_and_survives_kill_9_in_the_grace_window() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("QUIVER_STORAGE_FLUSH_ROWS_MAX", "1000".to_string()),
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "300".to_string()),
        ("QUIVER_COMPACTION_CHECK_INTERVAL_MS", "200".to_string()),
        ("QUIVER_QUERY_TIMEOUT_MS", "10000".to_string()),
        ("QUIVER_COMPACTION_INPUT_GRACE_MS", "600000".to_string()),
    ];
    let mut nodes = start(specs(dir.path(), 3, &env)).await;
    let l = leader(&nodes, &[0, 1, 2]).await;
    // 12,000 rows of one closed hour (2023), flushed every ~1,000 rows: many files.
    for chunk in 0..6 {
        write_batches(&nodes[l], chunk * 4..chunk * 4 + 4).await;
        let ln = &nodes[l];
        ln.wait_for("a flush", Duration::from_secs(30), || async {
            ln.metric("quiver_buffer_rows").await == 0.0
        })
        .await;
    }
    for node in &nodes {
        node.wait_for("one merged file", Duration::from_secs(60), || async {
            merged(node, 12_000).await
        })
        .await;
        assert!(node.metric("quiver_compactions_total").await >= 1.0);
    }
    let expected = content(&nodes[0]).await;
    assert_eq!(expected[0][0], 12_000);
    for node in &nodes {
        assert_eq!(
            content(node).await,
            expected,
            "replicas agree after merging"
        );
        assert!(
            parquet_files_on_disk(node) > 1,
            "replaced files wait out their grace period on disk"
        );
    }
    let s = storage(&nodes[0]).await;
    let table = &s["databases"][0]["measurements"][0];
    assert_eq!(table["measurement"], "cpu");
    assert_eq!(table["rows"], 12_000);
    assert!(table["oldest"].as_str().unwrap().starts_with("2023-11-14T"));
    for node in &nodes {
        let s = storage(node).await;
        assert_eq!(
            s["databases"][0]["measurements"][0]["sort_lead"], "host",
            "every replica decided the same sort lead"
        );
    }

    // kill -9 everything while the replaced files are still there. The next start
    // keeps what the newest snapshot lists and replays the log after it (merging again
    // what it merged after that snapshot); the files it replaces then leave the disk
    // once a snapshot no longer lists them and their (now short) grace period is over.
    for node in &mut nodes {
        node.kill();
    }
    for node in &mut nodes {
        for (key, value) in [
            ("QUIVER_COMPACTION_INPUT_GRACE_MS", "1500"),
            ("QUIVER_QUERY_TIMEOUT_MS", "1000"),
        ] {
            node.spec.env.push((key.to_string(), value.to_string()));
        }
        node.respawn();
    }
    for node in &nodes {
        node.wait_ready().await;
    }
    leader(&nodes, &[0, 1, 2]).await;
    for node in &nodes {
        assert_eq!(content(node).await, expected, "{}", node.log_tail());
        node.wait_for(
            "one merged file, alone on disk",
            Duration::from_secs(60),
            || async { merged(node, 12_000).await && parquet_files_on_disk(node) == 1 },
        )
        .await;
        assert_eq!(content(node).await, expected, "{}", node.log_tail());
        let s = storage(node).await;
        assert_eq!(
            s["databases"][0]["measurements"][0]["sort_lead"], "host",
            "the decision survives kill -9"
        );
    }
}
