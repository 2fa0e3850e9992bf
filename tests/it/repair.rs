//! Re-replication of a dead node's replicas (src/groups/moves/repair.rs): a node that
//! stays down past `cluster.rereplicate_after_ms` has its data group replicas rebuilt on
//! the live nodes, files included, while writes go on; when it comes back it finds
//! itself removed and deletes its copies.

use std::time::Duration;

use crate::cluster_support::{specs, start};
use crate::common::Node;
use crate::moves::{
    every_node_reads, group_as_seen_by, group_dir_exists, wait_for_members, write_all,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_replicas_are_rebuilt_on_the_live_nodes_and_it_retires_its_copies_when_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "4".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "3".to_string()),
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "300".to_string()),
        ("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", "200".to_string()),
        ("QUIVER_CLUSTER_REREPLICATE_AFTER_MS", "3000".to_string()),
    ];
    let mut nodes = start(specs(dir.path(), 4, &env)).await;
    write_all(&nodes, 0..10).await;
    // Four nodes, four groups of three: node 4 holds some of them.
    let mut held_by_four = Vec::new();
    for group in 1..=4u64 {
        if group_as_seen_by(&nodes[0], group).await.0.contains(&4) {
            held_by_four.push(group);
        }
    }
    assert!(!held_by_four.is_empty(), "placement gave node 4 no group");

    nodes[3].kill();
    // Writes go on through the live nodes while node 4's replicas are rebuilt on them.
    let live = &nodes[..3];
    let writes = write_all(live, 10..40);
    let repaired = async {
        let all: Vec<&Node> = live.iter().collect();
        for group in 1..=4u64 {
            wait_for_members(&all, group, &[1, 2, 3]).await;
        }
    };
    tokio::join!(writes, repaired);
    let all: Vec<&Node> = live.iter().collect();
    every_node_reads(&all, 40).await;
    // One move per replica node 4 held, each counted where it was driven.
    nodes[0]
        .wait_for(
            "every re-replication counted",
            Duration::from_secs(30),
            || async {
                let mut moved = 0.0;
                for node in live {
                    moved += node
                        .metric("quiver_group_rereplications_total")
                        .await
                        .max(0.0);
                }
                moved == held_by_four.len() as f64
            },
        )
        .await;
    // The new replicas hold the group's files: every live node now holds every group.
    for node in live {
        for group in 1..=4u64 {
            assert!(
                group_as_seen_by(node, group).await.1,
                "node {} does not serve group {group}",
                node.spec.port
            );
        }
    }

    // Node 4 comes back: removed from its groups while down, it deletes its copies and
    // reads every row through the others.
    nodes[3].restart().await;
    let four = &nodes[3];
    four.wait_for(
        "node 4 retired every copy it held",
        Duration::from_secs(60),
        || async { held_by_four.iter().all(|g| !group_dir_exists(four, *g)) },
    )
    .await;
    let all: Vec<&Node> = nodes.iter().collect();
    every_node_reads(&all, 40).await;
    for group in 1..=4u64 {
        wait_for_members(&[four], group, &[1, 2, 3]).await;
    }
}
