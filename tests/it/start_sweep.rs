//! A node is ready without walking its Parquet files; the sweep after that does what
//! the walk did: deletes what an earlier life left, and fetches from a peer a file its
//! snapshot lists that the disk lost.

use std::time::Duration;

use crate::cluster_support::{content, leader, specs, start, write_batches};
use crate::common::Node;
use crate::lifecycle::parquet_files;

async fn flushed(node: &Node) -> bool {
    node.metric("quiver_parquet_files").await > 0.0
        && node.metric("quiver_buffer_rows").await == 0.0
        && node.metric("quiver_frozen_segments").await == 0.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_that_lost_a_listed_file_serves_at_once_and_fetches_it_from_a_peer() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "200".to_string()),
        ("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", "300".to_string()),
        ("QUIVER_COMPACTION_ENABLED", "false".to_string()),
    ];
    let mut nodes = start(specs(dir.path(), 3, &env)).await;
    let l = leader(&nodes, &[0, 1, 2]).await;
    write_batches(&nodes[l], 0..6).await;
    let f = (l + 1) % 3;
    let follower = &nodes[f];
    follower
        .wait_for(
            "the follower's rows in Parquet",
            Duration::from_secs(60),
            || flushed(follower),
        )
        .await;
    follower.wait_for_snapshot_of_everything().await;
    let expected = content(&nodes[l]).await;
    let files = parquet_files(follower);
    assert!(!files.is_empty());
    nodes[f].kill();
    // One listed file lost; a stray an earlier life left within the log this node holds
    // (garbage: whatever it held is in the snapshot or the log); and one beyond anything
    // the node holds, which may be the only copy of its rows: kept and reported.
    let parquet = nodes[f].spec.data_dir.join("parquet");
    let (lost, lost_size) = files[0].clone();
    std::fs::remove_file(parquet.join(&lost)).unwrap();
    let stray = std::path::Path::new(&lost)
        .with_file_name("00000000000000000001-00000000000000000001.parquet");
    std::fs::write(parquet.join(&stray), b"left by an earlier life").unwrap();
    let beyond = std::path::Path::new(&lost)
        .with_file_name("00000000000000900001-00000000000000900002.parquet");
    std::fs::write(parquet.join(&beyond), b"of a log this node does not hold").unwrap();
    nodes[f].restart().await;
    let follower = &nodes[f];
    follower
        .wait_for(
            "the lost file fetched and the stray deleted",
            Duration::from_secs(60),
            || async {
                let now = parquet_files(follower);
                now.contains(&(lost.clone(), lost_size))
                    && !now.iter().any(|(p, _)| std::path::Path::new(p) == stray)
            },
        )
        .await;
    let mut with_beyond = files.clone();
    with_beyond.push((beyond.to_string_lossy().to_string(), 32));
    with_beyond.sort();
    assert_eq!(
        parquet_files(follower),
        with_beyond,
        "the same files as before, and the one beyond kept"
    );
    let log = follower.log();
    assert!(log.contains("missing from its disk"), "{log}");
    assert!(log.contains("cannot account for"), "{log}");
    assert_eq!(
        follower.metric("quiver_storage_unaccounted_files").await,
        1.0
    );
    let storage: serde_json::Value = follower
        .client
        .get(format!("{}/api/v1/storage", follower.url))
        .bearer_auth(crate::common::TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(storage["unaccounted"]["files"], 1, "{storage}");
    assert_eq!(storage["unaccounted"]["log_end_max"], 900002, "{storage}");
    // A local read on the follower sees every row again.
    follower
        .wait_for("the follower's rows", Duration::from_secs(30), || async {
            content(follower).await == expected
        })
        .await;
}
