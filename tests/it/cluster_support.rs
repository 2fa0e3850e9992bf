//! Starting a static cluster of real nodes and asking it who leads, shared by the
//! cluster tests.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{free_port, Node, NodeSpec};

/// The cluster secret every test cluster shares.
pub const SECRET: &str = "test-cluster-secret-0123456789";

/// Specs of an `n`-node static cluster in `dir`, with extra environment.
pub fn specs(dir: &std::path::Path, n: usize, env: &[(&str, String)]) -> Vec<NodeSpec> {
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let peers = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}=http://127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let mut spec = NodeSpec::new(&dir.join(format!("n{}", i + 1)))
                .with("QUIVER_CLUSTER_NODE_ID", i + 1)
                .with("QUIVER_CLUSTER_PEERS", &peers)
                .with("QUIVER_CLUSTER_SECRET", SECRET)
                .with("QUIVER_RAFT_LEADER_WAIT_MS", 2_000);
            spec.port = *port;
            for (k, v) in env {
                spec = spec.with(k, v);
            }
            spec
        })
        .collect()
}

pub async fn start(specs: Vec<NodeSpec>) -> Vec<Node> {
    let nodes: Vec<Node> = specs.into_iter().map(Node::spawn).collect();
    for node in &nodes {
        node.wait_ready().await;
    }
    nodes
}

/// The index of the node every live node agrees leads, once that node says it is ready
/// (a leader that has not yet heard from its quorum again, after a partition heals,
/// rightly refuses writes with 503 until it has).
pub async fn leader(nodes: &[Node], alive: &[usize]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut leaders = Vec::new();
        for &i in alive {
            leaders.push(nodes[i].status().await["leader"].as_u64());
        }
        if let Some(Some(id)) = leaders.first() {
            let i = *id as usize - 1;
            if leaders.iter().all(|l| *l == Some(*id))
                && alive.contains(&i)
                && ready(&nodes[i]).await
            {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "no agreed leader: {leaders:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until `node` has applied at least `index`.
pub async fn applied(node: &Node, index: u64) {
    node.wait_for("log applied", Duration::from_secs(60), || async {
        node.status().await["applied_index"].as_u64().unwrap_or(0) >= index
    })
    .await;
}

/// What a node holds of `cpu`, in a form equal across replicas with equal content.
pub async fn content(node: &Node) -> Vec<Vec<Value>> {
    node.rows(
        "db",
        "SELECT count(*), count(DISTINCT batch), sum(seq), round(sum(value), 3), min(time), max(time) FROM cpu",
    )
    .await
}

pub async fn write_batches(node: &Node, ids: std::ops::Range<i64>) {
    for id in ids {
        let base = 1_700_000_000_000_000_000 + id * 500 * 1_000;
        let body = crate::common::batch_payload("cpu", id, 500, base, 7);
        let (status, text) = node.write_msgpack("db", body).await;
        assert_eq!(status, 204, "batch {id}: {text}");
    }
}

/// Whether `/ready` answers 200 now.
async fn ready(node: &Node) -> bool {
    let r = node.client.get(format!("{}/ready", node.url)).send().await;
    r.is_ok_and(|r| r.status() == 200)
}
