//! Restarts with the WAL on its own directory, in every `wal.sync` mode.

use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{Node, NodeSpec};
use crate::writers::{verify_exactly_once, Writers};

async fn restart_keeps_rows(sync: &str, kill: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::new(dir.path()).with("QUIVER_WAL_SYNC", sync);
    let wal_dir = dir.path().join("separate-wal-volume");
    spec.wal_dir = Some(wal_dir.clone());
    let mut node = Node::start(spec).await;
    let next = Arc::new(AtomicI64::new(0));
    let writers = Writers::start(&node, "r", "m", 3, next);
    let acked = writers.acked_count.clone();
    node.wait_for("acknowledged batches", Duration::from_secs(60), || {
        let acked = acked.clone();
        async move { acked.load(std::sync::atomic::Ordering::Relaxed) >= 20 }
    })
    .await;
    if kill {
        node.kill();
    } else {
        assert_eq!(
            node.terminate(),
            Some(0),
            "SIGTERM must exit cleanly; log:\n{}",
            node.log_tail()
        );
    }
    let outcome = writers.finish().await;
    let segments: Vec<_> = std::fs::read_dir(&wal_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "wal"))
        .collect();
    assert!(
        !segments.is_empty(),
        "WAL segments must be in the WAL directory"
    );
    assert!(
        !node.spec.data_dir.join("wal").exists(),
        "nothing of the WAL may land in the data directory"
    );
    node.restart().await;
    verify_exactly_once(&node, "r", "m", &outcome).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn separate_wal_dir_fsync_survives_sigkill() {
    restart_keeps_rows("fsync", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn separate_wal_dir_batch_survives_sigkill() {
    restart_keeps_rows("batch", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn separate_wal_dir_none_survives_sigkill_of_the_process() {
    restart_keeps_rows("none", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn separate_wal_dir_survives_a_clean_restart() {
    restart_keeps_rows("fsync", false).await;
}
