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

/// A second `quiver serve` on a data directory (or only a WAL directory) that a running
/// node holds exits at once naming the directory, and the running node is untouched;
/// after a kill -9 the lock file left behind does not block the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_the_same_directories_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let wal_dir = dir.path().join("wal-volume");
    let mut spec = NodeSpec::new(dir.path());
    spec.wal_dir = Some(wal_dir.clone());
    let mut first = Node::start(spec).await;
    let (status, text) = first
        .write_msgpack(
            "db",
            crate::common::batch_payload("cpu", 0, 100, 1_700_000_000_000_000_000, 4),
        )
        .await;
    assert_eq!(status, 204, "{text}");

    // The same data directory, on another port.
    let mut same_data = NodeSpec::new(dir.path());
    same_data.wal_dir = Some(wal_dir.clone());
    let mut second = Node::spawn(same_data);
    assert_eq!(second.wait_exit(Duration::from_secs(30)), Some(1));
    let log = first.log();
    assert!(
        log.contains("storage.dir") && log.contains("in use by another quiver process"),
        "{log}"
    );
    assert!(
        log.contains(&format!("pid {}", first.pid().unwrap())),
        "{log}"
    );

    // Another data directory, but the WAL directory the first node holds.
    let other = tempfile::tempdir().unwrap();
    let mut same_wal = NodeSpec::new(other.path());
    same_wal.wal_dir = Some(wal_dir.clone());
    let mut third = Node::spawn(same_wal);
    assert_eq!(third.wait_exit(Duration::from_secs(30)), Some(1));
    assert!(third.log().contains("wal.dir"), "{}", third.log());

    assert_eq!(
        first.rows("db", "SELECT count(*) FROM cpu").await,
        vec![vec![serde_json::json!(100)]]
    );
    first.restart().await;
    assert_eq!(
        first.rows("db", "SELECT count(*) FROM cpu").await,
        vec![vec![serde_json::json!(100)]]
    );
}
