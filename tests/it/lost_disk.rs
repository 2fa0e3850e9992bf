//! A node that lost part of its disk keeps the files it cannot account for, says so,
//! and `quiver restore` brings their rows back (issue 36, item 1, local disk; the bucket
//! variant runs against an S3 server in tests/compat/test_s3.py).

use std::time::Duration;

use crate::cluster_support::{content, write_batches};
use crate::common::{run_with_node_settings, Node, NodeSpec};
use crate::lifecycle::parquet_files;

/// Waits until every row the node holds is in Parquet.
async fn all_flushed(node: &Node) {
    node.wait_for("every row in Parquet", Duration::from_secs(60), || async {
        node.metric("quiver_parquet_files").await > 0.0
            && node.metric("quiver_buffer_rows").await == 0.0
            && node.metric("quiver_frozen_segments").await == 0.0
    })
    .await;
}

fn spec(dir: &std::path::Path, snapshot_interval_ms: u64) -> NodeSpec {
    NodeSpec {
        wal_dir: Some(dir.join("wal-volume")),
        ..NodeSpec::new(dir)
    }
    .with("QUIVER_STORAGE_FLUSH_AGE_MS", 200)
    .with("QUIVER_RAFT_FLUSH_CHECK_INTERVAL_MS", 50)
    .with("QUIVER_COMPACTION_ENABLED", "false")
    .with("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", snapshot_interval_ms)
}

/// Regression: a single node whose WAL volume was lost started with an empty log, and
/// its start sweep deleted every Parquet file written after its newest snapshot (not in
/// the snapshot's manifest, "replay writes them again": but the log was gone), the only
/// copy of acknowledged rows; and its new log reused the old indexes, the files' names.
/// Now it refuses to start, changes nothing, and `quiver restore` adopts the files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_wal_volume_keeps_the_files_and_restore_brings_their_rows_back() {
    let dir = tempfile::tempdir().unwrap();
    // First life: batches 0..4 flushed and in a snapshot.
    let mut node = Node::start(spec(dir.path(), 300)).await;
    write_batches(&node, 0..4).await;
    all_flushed(&node).await;
    node.wait_for_snapshot_of_everything().await;
    node.kill();
    // Second life: no snapshot for ten minutes, so batches 4..8 reach Parquet files that
    // no snapshot lists; only the log knows them.
    node.spec = NodeSpec {
        port: node.spec.port,
        ..spec(dir.path(), 600_000)
    };
    node.respawn();
    node.wait_ready().await;
    write_batches(&node, 4..8).await;
    all_flushed(&node).await;
    let expected = content(&node).await;
    let files = parquet_files(&node);
    node.kill();
    // The WAL volume is lost.
    std::fs::remove_dir_all(dir.path().join("wal-volume")).unwrap();
    node.respawn();
    let code = node.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(1), "log:\n{}", node.log_tail());
    let log = node.log_tail();
    assert!(
        log.contains("holds no log") && log.contains("quiver restore"),
        "{log}"
    );
    assert_eq!(parquet_files(&node), files, "nothing deleted");
    // The operator restores, then starts the node as before.
    let (code, out) = run_with_node_settings(&node.spec, "restore");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("adopted"), "{out}");
    node.respawn();
    node.wait_ready().await;
    assert_eq!(content(&node).await, expected, "every flushed row is back");
    // New writes go on after the adopted files: nothing is written over them.
    write_batches(&node, 8..10).await;
    all_flushed(&node).await;
    let now = parquet_files(&node);
    for file in &files {
        assert!(now.contains(file), "{file:?} was replaced: {now:?}");
    }
    let counted = &content(&node).await[0];
    assert_eq!(counted[1], serde_json::json!(10), "{counted:?}");
    // And a restart keeps them all (the sweep now proves nothing of them garbage).
    node.kill();
    node.respawn();
    node.wait_ready().await;
    assert_eq!(&content(&node).await[0], counted);
    assert_eq!(node.metric("quiver_storage_unaccounted_files").await, 0.0);
}
