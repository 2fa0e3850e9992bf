//! Three real nodes against what stops clusters: a leader cut off from its quorum, a
//! follower asked to read its own write, a voter that lost its data, a slow link.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::cluster_support::{applied, content, leader, specs, start, write_batches, SECRET};
use crate::common::{batch_payload, free_port, Node};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_to_a_leader_cut_off_from_its_quorum_ends_within_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("QUIVER_HTTP_WRITE_TIMEOUT_MS", "2000".to_string())];
    let nodes = start(specs(dir.path(), 3, &env)).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    write_batches(&nodes[lead], 0..3).await;
    let followers: Vec<usize> = (0..3).filter(|i| *i != lead).collect();
    for &f in &followers {
        nodes[f].signal("STOP");
    }
    // Each write answers within the deadline: 503 (refused before anything was
    // appended) or 504 (appended, outcome unknown), never a hang holding its slot.
    for attempt in 0..4 {
        let started = Instant::now();
        let body = batch_payload("cpu", 100 + attempt, 10, 1_700_000_000_000_000_000, 2);
        let (status, text) = nodes[lead].write_msgpack("db", body).await;
        let took = started.elapsed();
        assert!(
            status == 503 || status == 504,
            "attempt {attempt}: {status} {text}"
        );
        assert!(
            took < Duration::from_secs(6),
            "attempt {attempt} took {took:?}"
        );
    }
    // Once the leader knows it has no quorum, it says so and refuses before proposing.
    nodes[lead]
        .wait_for(
            "the cut-off leader to report itself unready",
            Duration::from_secs(20),
            || async {
                let r = nodes[lead]
                    .client
                    .get(format!("{}/ready", nodes[lead].url))
                    .send()
                    .await;
                r.is_ok_and(|r| r.status() == 503)
            },
        )
        .await;
    let body = batch_payload("cpu", 200, 10, 1_700_000_000_000_000_000, 2);
    let (status, text) = nodes[lead].write_msgpack("db", body).await;
    assert_eq!(status, 503, "{text}");
    for &f in &followers {
        nodes[f].signal("CONT");
    }
    let lead = leader(&nodes, &[0, 1, 2]).await;
    write_batches(&nodes[lead], 300..302).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_acknowledged_by_a_follower_is_visible_there_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = start(specs(dir.path(), 3, &[])).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    let follower = &nodes[(lead + 1) % 3];
    for id in 0..40i64 {
        let body = batch_payload("cpu", id, 50, 1_700_000_000_000_000_000 + id * 1_000_000, 3);
        let (status, text) = follower.write_msgpack("db", body).await;
        assert_eq!(status, 204, "{text}");
        // A default (local) read on the same follower, right after the 204.
        let rows = follower
            .rows("db", "SELECT count(DISTINCT batch) FROM cpu")
            .await;
        assert_eq!(
            rows[0][0],
            json!(id + 1),
            "write {id} not visible on the follower"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voter_that_lost_its_data_votes_only_after_catching_up() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("QUIVER_STORAGE_FLUSH_ROWS_MAX", "2000".to_string()),
        ("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", "100".to_string()),
    ];
    let mut nodes = start(specs(dir.path(), 3, &env)).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    write_batches(&nodes[lead], 0..20).await;
    let wiped = (lead + 1) % 3;
    nodes[wiped].kill();
    std::fs::remove_dir_all(&nodes[wiped].spec.data_dir).unwrap();
    // Frozen before it starts: it must not vote while it holds nothing.
    nodes[wiped].respawn();
    nodes[wiped]
        .wait_for(
            "the wiped node to say it will not vote",
            Duration::from_secs(30),
            || async {
                nodes[wiped]
                    .log()
                    .contains("will not vote until a leader has brought it up to date")
            },
        )
        .await;
    // It catches up from the leader, then votes again; its content equals the leader's.
    nodes[wiped]
        .wait_for(
            "the wiped node to catch up",
            Duration::from_secs(60),
            || async { nodes[wiped].log().contains("this node votes again") },
        )
        .await;
    nodes[wiped].wait_ready().await;
    let commit = nodes[lead].status().await["commit_index"].as_u64().unwrap();
    applied(&nodes[wiped], commit).await;
    assert_eq!(content(&nodes[wiped]).await, content(&nodes[lead]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wiped_voter_refuses_votes_while_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(specs(dir.path(), 3, &[])).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    write_batches(&nodes[lead], 0..5).await;
    let wiped = (lead + 1) % 3;
    let other = (lead + 2) % 3;
    nodes[wiped].kill();
    // The other follower stops too, so nobody can bring the wiped node up to date.
    nodes[lead].kill();
    std::fs::remove_dir_all(&nodes[wiped].spec.data_dir).unwrap();
    nodes[wiped].respawn();
    // A stale candidate asking the wiped node for its vote is refused.
    let vote = json!({"vote": {"leader_id": {"term": 99, "node_id": other + 1}, "committed": false},
                      "last_log_id": null});
    let body = rmp_serde::to_vec_named(&vote).unwrap();
    nodes[wiped]
        .wait_for(
            "the wiped node to refuse a vote",
            Duration::from_secs(30),
            || refuses(&nodes[wiped], "/internal/raft/vote", &body, "empty log"),
        )
        .await;
    // And the survivor cannot become leader with the wiped node's help.
    let survivor = &nodes[other];
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        let status = survivor.status().await;
        assert_ne!(
            status["role"],
            json!("leader"),
            "elected with a wiped node's vote"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A wiped node forgot the vote it had granted; taking entries from a stale leader, it
/// could make that leader's majority while a newer term commits elsewhere. So it takes
/// none until every peer has told it its vote (found by the cluster simulation).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wiped_voter_takes_entries_only_after_hearing_every_peers_vote() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(specs(dir.path(), 3, &[])).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    write_batches(&nodes[lead], 0..5).await;
    let wiped = (lead + 1) % 3;
    let other = (lead + 2) % 3;
    nodes[wiped].kill();
    nodes[other].kill();
    std::fs::remove_dir_all(&nodes[wiped].spec.data_dir).unwrap();
    // The log file outlives the data directory: read only this start's lines.
    let since = nodes[wiped].log().len();
    nodes[wiped].respawn();
    // With a peer silent, entries from anyone (here, a term-99 leader) are refused.
    let append = json!({"vote": {"leader_id": {"term": 99, "node_id": lead + 1}, "committed": true},
                        "prev_log_id": null, "leader_commit": null, "entries": []});
    let body = rmp_serde::to_vec_named(&append).unwrap();
    nodes[wiped]
        .wait_for(
            "the wiped node to refuse entries",
            Duration::from_secs(30),
            || refuses(&nodes[wiped], "/internal/raft/append", &body, "every peer"),
        )
        .await;
    assert!(
        !nodes[wiped].log()[since..].contains("heard every peer's vote"),
        "a vote floor learned with a peer down"
    );
    // Once the last peer answers, it learns the newest vote, catches up and votes.
    nodes[other].respawn();
    nodes[wiped]
        .wait_for(
            "the wiped node to hear every peer's vote",
            Duration::from_secs(60),
            || async { nodes[wiped].log()[since..].contains("heard every peer's vote") },
        )
        .await;
    nodes[wiped]
        .wait_for(
            "the wiped node to catch up",
            Duration::from_secs(60),
            || async { nodes[wiped].log()[since..].contains("this node votes again") },
        )
        .await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    write_batches(&nodes[lead], 5..8).await;
    let commit = nodes[lead].status().await["commit_index"].as_u64().unwrap();
    applied(&nodes[wiped], commit).await;
    assert_eq!(content(&nodes[wiped]).await, content(&nodes[lead]).await);
}

/// Whether `node` answers a Raft RPC (MessagePack `body`, to internal `path`) with 503
/// and a reason containing `needle`.
async fn refuses(node: &Node, path: &str, body: &[u8], needle: &str) -> bool {
    let sent = node
        .client
        .post(format!("{}{path}", node.url))
        .header("x-quiver-cluster-secret", SECRET)
        .body(body.to_vec())
        .send()
        .await;
    match sent {
        Ok(r) => {
            let status = r.status().as_u16();
            let text = r.text().await.unwrap_or_default();
            status == 503 && text.contains(needle)
        }
        Err(_) => false,
    }
}

/// A TCP proxy that forwards to `target` at about `bytes_per_s` in each direction per
/// connection: a slow network link between nodes.
async fn slow_link(target: SocketAddr, bytes_per_s: usize) -> u16 {
    let port = free_port();
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(outbound) = TcpStream::connect(target).await else {
                    return;
                };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                tokio::spawn(pace(ri, wo, bytes_per_s));
                tokio::spawn(pace(ro, wi, bytes_per_s));
            });
        }
    });
    port
}

/// Copies `from` to `to`, one chunk every few milliseconds, at `bytes_per_s`.
async fn pace(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    bytes_per_s: usize,
) {
    const TICK_MS: u64 = 10;
    let chunk = (bytes_per_s * TICK_MS as usize / 1000).max(1);
    let mut buf = vec![0u8; chunk];
    let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
    loop {
        tick.tick().await;
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn entries_larger_than_a_heartbeat_can_carry_replicate_over_a_slow_link() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("QUIVER_HTTP_WRITE_TIMEOUT_MS", "20000".to_string()),
        ("QUIVER_RAFT_REPLICATION_BYTES_MAX", (1 << 20).to_string()),
    ];
    let mut all = specs(dir.path(), 3, &env);
    // Peers reach each node through a 2 MB/s link; clients reach it directly.
    let mut links = Vec::new();
    for spec in &all {
        let target: SocketAddr = format!("127.0.0.1:{}", spec.port).parse().unwrap();
        links.push(slow_link(target, 2 << 20).await);
    }
    let peers = links
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}=http://127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    for spec in &mut all {
        spec.env.retain(|(k, _)| k != "QUIVER_CLUSTER_PEERS");
        spec.env
            .push(("QUIVER_CLUSTER_PEERS".into(), peers.clone()));
    }
    let nodes = start(all).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    // About 1.5 MB per entry: 0.75 s on the link, fifteen heartbeat intervals.
    for id in 0..3i64 {
        let body = batch_payload(
            "big",
            id,
            30_000,
            1_700_000_000_000_000_000 + id * 1_000_000_000,
            50,
        );
        let started = Instant::now();
        let (status, text) = nodes[lead].write_msgpack("db", body).await;
        assert_eq!(
            status,
            204,
            "write {id}: {text}\n{}",
            nodes[lead].log_tail()
        );
        eprintln!("write {id} committed in {:?}", started.elapsed());
    }
    let commit = nodes[lead].status().await["commit_index"].as_u64().unwrap();
    for (i, node) in nodes.iter().enumerate() {
        applied(node, commit).await;
        let rows = node.rows("db", "SELECT count(*) FROM big").await;
        assert_eq!(rows[0][0], json!(90_000), "node {}", i + 1);
    }
}
