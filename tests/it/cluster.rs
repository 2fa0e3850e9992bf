//! Three real nodes on loopback: replication, a killed leader under load, a frozen
//! follower, a lone node, and a learner that catches up by snapshot.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cluster_support::{applied, content, leader, specs, start, write_batches};
use crate::common::{Node, TOKEN};
use crate::writers::{verify_exactly_once, Writers};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_leader_loses_no_acknowledged_row_and_rejoins() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("QUIVER_STORAGE_FLUSH_ROWS_MAX", "20000".to_string()),
        ("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", "300".to_string()),
    ];
    let mut nodes = start(specs(dir.path(), 3, &env)).await;
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let next = Arc::new(AtomicI64::new(0));
    let writers = Writers::start_cluster(urls, "db", "cpu", 4, next.clone());
    let acked = writers.acked_count.clone();
    let wait_acked = |target: i64, what: &'static str| {
        let acked = acked.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while acked.load(Ordering::Relaxed) < target {
                assert!(Instant::now() < deadline, "writes stalled: {what}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    wait_acked(40, "before the kill").await;
    let old = leader(&nodes, &[0, 1, 2]).await;
    nodes[old].kill();
    let killed_at = Instant::now();
    let before = acked.load(Ordering::Relaxed);
    wait_acked(before + 40, "after the kill").await;
    let resumed_ms = killed_at.elapsed().as_millis();
    let outcome = writers.finish().await;
    let alive: Vec<usize> = (0..3).filter(|i| *i != old).collect();
    let new = leader(&nodes, &alive).await;
    assert_ne!(new, old);
    let commit = nodes[new].status().await["commit_index"].as_u64().unwrap();
    for &i in &alive {
        applied(&nodes[i], commit).await;
        verify_exactly_once(&nodes[i], "db", "cpu", &outcome).await;
    }
    eprintln!(
        "leader {} killed; writes resumed after {resumed_ms} ms; {} batches acked, {} unknown",
        old + 1,
        outcome.acked.len(),
        outcome.unknown.len()
    );
    // The killed node comes back, catches up, and holds the same content.
    nodes[old].restart().await;
    applied(&nodes[old], commit).await;
    verify_exactly_once(&nodes[old], "db", "cpu", &outcome).await;
    let want = content(&nodes[new]).await;
    for node in &nodes {
        assert_eq!(content(node).await, want, "replica {}", node.url);
    }
    // `quiver verify` agrees: sentinels visible everywhere, every partition equal.
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(["verify", "--nodes", &urls.join(","), "--token", TOKEN])
        .output()
        .expect("run quiver verify");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&report).expect("verify prints JSON");
    assert_eq!(report["ok"], json!(true));
    assert!(report["tables_compared"].as_u64().unwrap() >= 2, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn frozen_follower_catches_up_and_a_lone_node_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(specs(dir.path(), 3, &[])).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    let frozen = (lead + 1) % 3;
    let other = (lead + 2) % 3;
    nodes[frozen].signal("STOP");
    // Two of three still commit; writes sent to the other follower are forwarded.
    write_batches(&nodes[other], 0..10).await;
    write_batches(&nodes[lead], 10..20).await;
    nodes[frozen].signal("CONT");
    let commit = nodes[lead].status().await["commit_index"].as_u64().unwrap();
    applied(&nodes[frozen], commit).await;
    let want = content(&nodes[lead]).await;
    assert_eq!(want[0][1], json!(20));
    assert_eq!(content(&nodes[frozen]).await, want);
    // A linearizable read on a follower sees a write acknowledged just before.
    write_batches(&nodes[lead], 20..21).await;
    let r = nodes[frozen]
        .client
        .post(format!("{}/api/v1/query", nodes[frozen].url))
        .bearer_auth(TOKEN)
        .header("x-arc-database", "db")
        .json(
            &json!({"sql": "SELECT count(DISTINCT batch) FROM cpu", "consistency": "linearizable"}),
        )
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["data"][0][0], json!(21), "{body}");

    // Cut off from the majority, a node refuses writes with 503 and Retry-After.
    nodes[lead].kill();
    nodes[other].kill();
    let body = crate::common::batch_payload("cpu", 99, 10, 1_700_000_000_000_000_000, 1);
    let (status, text, headers) = nodes[frozen]
        .post("/api/v1/write/msgpack", &[("x-arc-database", "db")], body)
        .await;
    assert_eq!(status, 503, "{text}");
    assert!(headers.contains_key("retry-after"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn learner_added_after_purge_catches_up_by_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("QUIVER_STORAGE_FLUSH_ROWS_MAX", "2000".to_string()),
        ("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", "100".to_string()),
    ];
    let mut all = specs(dir.path(), 4, &env);
    // Node 4 is not in the static set: it starts empty and waits to be added.
    let peers3: String = all[..3]
        .iter()
        .enumerate()
        .map(|(i, s)| format!("{}=http://127.0.0.1:{}", i + 1, s.port))
        .collect::<Vec<_>>()
        .join(",");
    for spec in &mut all {
        spec.env.retain(|(k, _)| k != "QUIVER_CLUSTER_PEERS");
        spec.env
            .push(("QUIVER_CLUSTER_PEERS".into(), peers3.clone()));
    }
    let spec4 = all.pop().unwrap();
    let nodes = start(all).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    write_batches(&nodes[lead], 0..30).await;
    nodes[lead]
        .wait_for(
            "the log purged after a snapshot",
            Duration::from_secs(60),
            || async {
                nodes[lead].status().await["purged_index"]
                    .as_u64()
                    .unwrap_or(0)
                    > 0
            },
        )
        .await;
    write_batches(&nodes[lead], 30..33).await;
    let learner = Node::spawn(spec4);
    let follower = &nodes[(lead + 1) % 3];
    let (status, text, _) = follower
        .post(
            "/api/v1/cluster/add-learner",
            &[("content-type", "application/json")],
            serde_json::to_vec(&json!({"node_id": 4, "addr": learner.url})).unwrap(),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    let (status, text, _) = follower
        .post(
            "/api/v1/cluster/promote",
            &[("content-type", "application/json")],
            serde_json::to_vec(&json!({"node_ids": [4]})).unwrap(),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    learner.wait_ready().await;
    let commit = nodes[lead].status().await["commit_index"].as_u64().unwrap();
    applied(&learner, commit).await;
    assert!(learner.metric("quiver_snapshot_files_fetched_total").await >= 1.0);
    let want = content(&nodes[lead]).await;
    assert_eq!(want[0][1], json!(33));
    assert_eq!(content(&learner).await, want);
    let voters: Vec<u64> = nodes[lead].status().await["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["voter"] == json!(true))
        .map(|m| m["node_id"].as_u64().unwrap())
        .collect();
    assert_eq!(voters, [1, 2, 3, 4]);

    // The CLI: status through any node, then remove the learner-turned-voter again.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_quiver"))
            .args(args)
            .args(["--url", &learner.url, "--token", TOKEN])
            .output()
            .expect("run quiver cluster");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("JSON answer")
    };
    let status = cli(&["cluster", "status"]);
    assert_eq!(status["node_id"], json!(4));
    assert_eq!(status["leader"], json!(lead as u64 + 1));
    cli(&["cluster", "remove", "--node-id", "4"]);
    nodes[lead]
        .wait_for("node 4 removed", Duration::from_secs(30), || async {
            let members = nodes[lead].status().await["members"].clone();
            members.as_array().is_some_and(|m| m.len() == 3)
        })
        .await;
}
