//! A write spanning several data groups while one group's leader is killed
//! (src/http/write_parts.rs): the part for that group is proposed again inside the
//! server until its group has a new leader, so a client that sends an
//! `Idempotency-Key` gets 204 (or a 503 that wrote nothing), never a 504 for a write
//! half committed, and every batch is stored exactly once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::cluster_support::{specs, start};
use crate::common::Node;
use crate::leaders::leaders;
use crate::moves::{body, every_node_reads};

const BATCHES: usize = 40;
/// Batches written before the kill.
const BEFORE_KILL: usize = 8;

/// Writes batches `first, first + 2, ...` below [`BATCHES`] through `node`, each with
/// its own key; a 503 (nothing written) is resent. Returns the other answers that were
/// not 204, with their batch.
async fn write_every_other(node: &Node, first: usize, done: &AtomicUsize) -> Vec<String> {
    let mut failures = Vec::new();
    for batch in (first..BATCHES).step_by(2) {
        let key = format!("parts-batch-{batch}");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (status, text, _) = node
                .post(
                    "/write?db=db",
                    &[("Idempotency-Key", key.as_str())],
                    body(batch).into_bytes(),
                )
                .await;
            match status {
                204 => break,
                503 if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => {
                    failures.push(format!("batch {batch}: {status} {text}"));
                    break;
                }
            }
        }
        done.fetch_add(1, Ordering::SeqCst);
    }
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_leader_killed_under_writes_spanning_groups_costs_no_504() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "4".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "3".to_string()),
        // Room for the group's election inside one write.
        ("QUIVER_HTTP_WRITE_TIMEOUT_MS", "10000".to_string()),
    ];
    let mut nodes = start(specs(dir.path(), 3, &env)).await;
    // The node to kill leads a data group (the writes go through node 1).
    let victim = std::cell::Cell::new(None);
    nodes[0]
        .wait_for(
            "node 2 or 3 leading a data group",
            Duration::from_secs(60),
            || async {
                let led = leaders(&nodes[0]).await;
                victim.set(
                    [2u64, 3]
                        .into_iter()
                        .find(|n| led.values().any(|l| *l == Some(*n))),
                );
                victim.get().is_some()
            },
        )
        .await;
    let victim = victim.get().expect("a victim was found");
    let (first, rest) = nodes.split_at_mut(1);
    let writer = &first[0];
    let done = AtomicUsize::new(0);
    let writes = async {
        let (a, b) = tokio::join!(
            write_every_other(writer, 0, &done),
            write_every_other(writer, 1, &done)
        );
        [a, b].concat()
    };
    let kill = async {
        writer
            .wait_for(
                "the first batches written",
                Duration::from_secs(60),
                || async { done.load(Ordering::SeqCst) >= BEFORE_KILL },
            )
            .await;
        rest[(victim - 2) as usize].kill();
    };
    let (failures, ()) = tokio::join!(writes, kill);
    assert!(
        failures.is_empty(),
        "answers other than 204/503 while a group leader was killed: {failures:?}\n{}",
        writer.log_tail()
    );
    let alive: Vec<&Node> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i as u64 + 1 != victim)
        .map(|(_, n)| n)
        .collect();
    every_node_reads(&alive, BATCHES).await;
    nodes[(victim - 1) as usize].restart().await;
    let all: Vec<&Node> = nodes.iter().collect();
    every_node_reads(&all, BATCHES).await;
}
