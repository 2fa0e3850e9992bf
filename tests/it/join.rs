//! `quiver serve --join URL`: a node given only its id, the cluster's secret and one
//! node's address takes the cluster's settings, is added as a voter and, with several
//! data groups, is given replicas with their files; it restarts from what it recorded
//! even when the node it joined through is down; an id the cluster already uses at
//! another address is refused at start.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::cluster_support::{specs, start, SECRET};
use crate::common::{free_port, Node, NodeSpec, TOKEN};
use crate::groups::count_files as count_parquet;
use crate::moves::{every_node_reads, group_as_seen_by, write_all};

/// A node that knows nothing of the cluster but `join`'s address and the secret.
fn joiner(dir: &std::path::Path, node_id: u64, join: &str) -> NodeSpec {
    let mut spec = NodeSpec::new(&dir.join(format!("joiner{node_id}")))
        .with("QUIVER_CLUSTER_NODE_ID", node_id)
        .with("QUIVER_CLUSTER_SECRET", SECRET)
        .with("QUIVER_RAFT_LEADER_WAIT_MS", 2_000)
        .with("QUIVER_CLUSTER_JOIN", join);
    spec.port = free_port();
    spec
}

/// `node`'s `/api/v1/cluster/status` (null when it does not answer).
async fn status_of(node: &Node) -> Value {
    match node
        .client
        .get(format!("{}/api/v1/cluster/status", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
    {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

/// Whether `node` lists node `id` as a voter of its first group.
async fn is_voter_as_seen_by(node: &Node, id: u64) -> bool {
    status_of(node).await["members"]
        .as_array()
        .is_some_and(|m| m.iter().any(|n| n["node_id"] == id && n["voter"] == true))
}

/// The query workers `node` routes stages to, by node id.
async fn query_workers_known_by(node: &Node) -> std::collections::BTreeMap<String, String> {
    status_of(node).await["query_workers"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(id, url)| (id.clone(), url.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_node_is_given_replicas_and_restarts_without_the_node_it_joined_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "4".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "3".to_string()),
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "300".to_string()),
    ];
    // Three nodes, three replicas: each holds all four groups. Each has a query
    // worker, listed in the three nodes' settings; node 4's is in no list.
    let worker_ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let listed = (0..3)
        .map(|i| format!("{}=http://127.0.0.1:{}", i + 1, worker_ports[i]))
        .collect::<Vec<_>>()
        .join(",");
    let three: Vec<NodeSpec> = specs(dir.path(), 3, &env)
        .into_iter()
        .zip(&worker_ports)
        .map(|(spec, port)| {
            spec.with("QUIVER_CLUSTER_QUERY_WORKERS", &listed).with(
                "QUIVER_CLUSTER_QUERY_WORKER_ADDR",
                format!("127.0.0.1:{port}"),
            )
        })
        .collect();
    let mut nodes = start(three).await;
    write_all(&nodes, 0..10).await;

    // Node 4 shares the cluster's node settings (its flush age: a leader decides
    // flushes, and node 4 may lead a group it receives), not its cluster settings.
    let join_url = nodes[0].url.clone();
    nodes.push(Node::spawn(
        joiner(dir.path(), 4, &join_url)
            .with("QUIVER_STORAGE_FLUSH_AGE_MS", 300)
            .with(
                "QUIVER_CLUSTER_QUERY_WORKER_ADDR",
                format!("0.0.0.0:{}", worker_ports[3]),
            ),
    ));
    nodes[3].wait_ready().await;
    for node in &nodes {
        node.wait_for("node 4 a voter", Duration::from_secs(60), || async {
            is_voter_as_seen_by(node, 4).await
        })
        .await;
    }
    // Every node routes stages to every worker: node 4 by the cluster's list, the
    // others by asking node 4 (its worker listens on every interface; it is reached
    // at the host it advertises).
    let node_4_worker = format!("http://127.0.0.1:{}/", worker_ports[3]);
    for node in &nodes {
        node.wait_for(
            "every query worker known",
            Duration::from_secs(30),
            || async {
                let workers = query_workers_known_by(node).await;
                workers.len() == 4 && workers.get("4") == Some(&node_4_worker)
            },
        )
        .await;
    }
    // Twelve replicas over four nodes: node 4 receives three, each with its files,
    // without anyone asking for a rebalance.
    nodes[3]
        .wait_for(
            "node 4 holding three replicas with their files",
            Duration::from_secs(120),
            || async {
                let mut with_files = 0;
                for g in 1..=4u64 {
                    let dir = nodes[3].spec.data_dir.join("groups").join(g.to_string());
                    let held = group_as_seen_by(&nodes[3], g).await;
                    if held.1 && count_parquet(&dir) > 0 {
                        with_files += 1;
                    }
                }
                with_files == 3
            },
        )
        .await;
    let all: Vec<&Node> = nodes.iter().collect();
    every_node_reads(&all, 10).await;
    write_all(&nodes, 10..16).await;
    every_node_reads(&all, 16).await;
    assert!(
        nodes[3].spec.data_dir.join("joined.json").exists(),
        "the cluster's settings are recorded"
    );

    // Killed (-9) and restarted while the node it joined through is down: it starts
    // from its record, and reads and takes writes with the three others' groups.
    nodes[0].kill();
    nodes[3].restart().await;
    let live = &nodes[1..];
    let live_refs: Vec<&Node> = live.iter().collect();
    every_node_reads(&live_refs, 16).await;
    write_all(live, 16..20).await;
    every_node_reads(&live_refs, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_data_group_a_joined_node_holds_every_row_and_an_id_in_use_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let flush = [("QUIVER_STORAGE_FLUSH_AGE_MS", "300".to_string())];
    let mut nodes = start(specs(dir.path(), 3, &flush)).await;
    write_all(&nodes, 0..6).await;
    let join_url = nodes[0].url.clone();

    // Node 2's id, at another address: refused at start, naming the id.
    let taken = joiner(dir.path(), 2, &join_url);
    let out = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(["serve", "--http-addr", &format!("127.0.0.1:{}", taken.port)])
        .arg("--data-dir")
        .arg(&taken.data_dir)
        .envs(taken.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("QUIVER_BOOTSTRAP_TOKEN", TOKEN)
        .output()
        .expect("quiver serve runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("node 2 is already a member"), "{stderr}");

    // Node 4 joins the one group: it holds every row itself, a voter of the group.
    nodes.push(Node::spawn(
        joiner(dir.path(), 4, &join_url).with("QUIVER_STORAGE_FLUSH_AGE_MS", 300),
    ));
    nodes[3].wait_ready().await;
    for node in &nodes {
        node.wait_for("node 4 a voter", Duration::from_secs(60), || async {
            is_voter_as_seen_by(node, 4).await
        })
        .await;
    }
    let all: Vec<&Node> = nodes.iter().collect();
    every_node_reads(&all, 6).await;
    write_all(&nodes, 6..10).await;
    every_node_reads(&all, 10).await;
    // Its own copy: the group's applied rows are on node 4's disk.
    nodes[3]
        .wait_for(
            "node 4's own Parquet files",
            Duration::from_secs(60),
            || async { count_parquet(&nodes[3].spec.data_dir) > 0 },
        )
        .await;

    // Removed from the cluster, then restarted with the same --join: it does not ask
    // to be added again.
    let (status, text, _) = nodes[0]
        .post(
            "/api/v1/cluster/remove",
            &[("content-type", "application/json")],
            br#"{"node_ids": [4]}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    let mut removed = nodes.pop().expect("node 4");
    removed.kill();
    let removed = Node::spawn(removed.spec.clone());
    removed
        .wait_for(
            "node 4 saying it does not join again",
            Duration::from_secs(60),
            || async { removed.log().contains("does not ask to join again") },
        )
        .await;
    for node in &nodes {
        assert!(!is_voter_as_seen_by(node, 4).await, "node 4 added again");
    }
}
