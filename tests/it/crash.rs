//! kill -9 under concurrent load, at several points of the flush cycle; after each
//! restart every acknowledged row is queryable exactly once.

use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{metric, Node, NodeSpec};
use crate::writers::{verify_exactly_once, Outcome, Writers};

const DB: &str = "crash";
const M: &str = "load";
const WRITERS: usize = 6;

/// Starts writers, waits for `acked_min` batches and for `condition`, then SIGKILLs.
async fn load_then_kill<F, Fut>(
    node: &mut Node,
    next: &Arc<AtomicI64>,
    acked_min: i64,
    what: &str,
    condition: F,
) -> Outcome
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let writers = Writers::start(node, DB, M, WRITERS, next.clone());
    let acked = writers.acked_count.clone();
    node.wait_for("acknowledged batches", Duration::from_secs(60), || {
        let acked = acked.clone();
        async move { acked.load(std::sync::atomic::Ordering::Relaxed) >= acked_min }
    })
    .await;
    node.wait_for(what, Duration::from_secs(60), condition)
        .await;
    node.kill();
    writers.finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_before_any_flush_replays_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut node =
        Node::start(NodeSpec::new(dir.path()).with("QUIVER_STORAGE_FLUSH_AGE_MS", 3_600_000)).await;
    let next = Arc::new(AtomicI64::new(0));
    let mut outcome = Outcome::default();
    for round in 0..3 {
        outcome.merge(load_then_kill(&mut node, &next, 30, "nothing", || async { true }).await);
        node.restart().await;
        assert_eq!(
            node.metric("quiver_parquet_files").await,
            0.0,
            "round {round}: no flush was expected"
        );
        verify_exactly_once(&node, DB, M, &outcome).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_during_flushes_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let spec = NodeSpec::new(dir.path())
        .with("QUIVER_STORAGE_FLUSH_ROWS_MAX", 20_000)
        .with("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", 100);
    let mut node = Node::start(spec).await;
    let next = Arc::new(AtomicI64::new(0));
    let mut outcome = Outcome::default();
    for round in 0..3 {
        // Kill while a frozen segment is waiting or being written.
        let url = node.url.clone();
        let client = node.client.clone();
        let probe = move || {
            let (url, client) = (url.clone(), client.clone());
            async move {
                metric(&client, &url, "quiver_frozen_segments")
                    .await
                    .unwrap_or(0.0)
                    > 0.0
            }
        };
        outcome.merge(load_then_kill(&mut node, &next, 40, "a flush in progress", probe).await);
        node.restart().await;
        verify_exactly_once(&node, DB, M, &outcome).await;
        assert!(!outcome.acked.is_empty(), "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_after_flush_and_purge_keeps_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let spec = NodeSpec::new(dir.path())
        .with("QUIVER_STORAGE_FLUSH_ROWS_MAX", 20_000)
        .with("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", 100);
    let mut node = Node::start(spec).await;
    let next = Arc::new(AtomicI64::new(0));
    let mut outcome = Outcome::default();
    for _ in 0..2 {
        let url = node.url.clone();
        let client = node.client.clone();
        // A snapshot was built after segments were written, so the log was purged.
        let probe = move || {
            let (url, client) = (url.clone(), client.clone());
            async move {
                let status: serde_json::Value = match client
                    .get(format!("{url}/api/v1/cluster/status"))
                    .bearer_auth(crate::common::TOKEN)
                    .send()
                    .await
                {
                    Ok(r) => r.json().await.unwrap_or_default(),
                    Err(_) => return false,
                };
                status["purged_index"].as_u64().unwrap_or(0) > 0
            }
        };
        outcome.merge(load_then_kill(&mut node, &next, 60, "a purged log", probe).await);
        node.restart().await;
        assert!(node.metric("quiver_parquet_files").await > 0.0);
        verify_exactly_once(&node, DB, M, &outcome).await;
    }
}
