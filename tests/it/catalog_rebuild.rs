//! The sled catalog is an index: deleted or corrupted, it is rebuilt from the Parquet
//! files and no row is lost.

use std::time::Duration;

use crate::common::{batch_payload, Node, NodeSpec};

async fn flushed_node(dir: &std::path::Path) -> Node {
    // Compaction off: these tests compare file counts across a restart. Snapshots
    // soon after each flush: a node restarts from its newest snapshot's manifest, so the
    // files it must find in the catalog are the ones a snapshot lists.
    let node = Node::start(
        NodeSpec::new(dir)
            .with("QUIVER_STORAGE_FLUSH_AGE_MS", 100)
            .with("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", 100)
            .with("QUIVER_COMPACTION_ENABLED", false),
    )
    .await;
    for batch in 0..10 {
        let (status, text) = node
            .write_msgpack(
                "c",
                batch_payload(
                    "m",
                    batch,
                    300,
                    1_700_000_000_000_000_000 + batch * 10_000_000_000,
                    5,
                ),
            )
            .await;
        assert_eq!(status, 204, "{text}");
    }
    node.wait_for("files written", Duration::from_secs(60), || async {
        node.metric("quiver_parquet_files").await > 0.0
            && node.metric("quiver_buffer_rows").await == 0.0
            && node.metric("quiver_frozen_segments").await == 0.0
    })
    .await;
    node.wait_for_snapshot_of_everything().await;
    node
}

/// Waits until the node's log says `text`: the catalog is brought to the live files
/// by the sweep that runs once the node serves.
async fn logged(node: &Node, text: &str) {
    node.wait_for(text, Duration::from_secs(60), || async {
        node.log().contains(text)
    })
    .await;
}

async fn count(node: &Node) -> u64 {
    node.rows("c", "SELECT count(*) FROM m").await[0][0]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleted_catalog_is_rebuilt_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = flushed_node(dir.path()).await;
    let files = node.metric("quiver_parquet_files").await;
    node.kill();
    std::fs::remove_dir_all(node.spec.data_dir.join("catalog")).unwrap();
    node.restart().await;
    assert_eq!(count(&node).await, 3000);
    assert_eq!(node.metric("quiver_parquet_files").await, files);
    logged(&node, "rebuilding the catalog").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn corrupted_catalog_is_rebuilt_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = flushed_node(dir.path()).await;
    node.kill();
    let catalog = node.spec.data_dir.join("catalog");
    for entry in std::fs::read_dir(&catalog).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::write(&path, vec![0xA5u8; 4096]).unwrap();
        }
    }
    node.restart().await;
    assert_eq!(count(&node).await, 3000);
    logged(&node, "rebuilding the catalog").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_catalog_that_disagrees_with_the_files_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = flushed_node(dir.path()).await;
    node.kill();
    let catalog = node.spec.data_dir.join("catalog");
    let stale = dir.path().join("stale-catalog");
    copy_dir(&catalog, &stale);
    node.restart().await;
    for batch in 10..20 {
        let (status, text) = node
            .write_msgpack(
                "c",
                batch_payload(
                    "m",
                    batch,
                    300,
                    1_700_000_000_000_000_000 + batch * 10_000_000_000,
                    5,
                ),
            )
            .await;
        assert_eq!(status, 204, "{text}");
    }
    node.wait_for("new files written", Duration::from_secs(60), || async {
        node.metric("quiver_buffer_rows").await == 0.0
            && node.metric("quiver_frozen_segments").await == 0.0
    })
    .await;
    node.wait_for_snapshot_of_everything().await;
    node.kill();
    std::fs::remove_dir_all(&catalog).unwrap();
    copy_dir(&stale, &catalog);
    node.restart().await;
    assert_eq!(count(&node).await, 6000);
    // The rebuild names the disagreement.
    logged(&node, "is not in the catalog").await;
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
