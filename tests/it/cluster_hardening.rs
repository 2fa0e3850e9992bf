//! Three real nodes against what stops clusters: a leader cut off from its quorum, a
//! follower asked to read its own write, a voter that lost its data, a slow link.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::cluster_support::{applied, content, leader, specs, start, write_batches, SECRET};
use crate::common::{batch_payload, free_port, run_with_node_settings, Node};

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

/// A stale candidate's vote request, as `/internal/raft/vote` takes it.
fn stale_vote_request(candidate: u64) -> Vec<u8> {
    let vote = json!({"vote": {"leader_id": {"term": 99, "node_id": candidate}, "committed": false},
                      "last_log_id": null});
    rmp_serde::to_vec_named(&vote).unwrap()
}

/// Regression (issue 36, item 7): the vote barrier closed only for a node of the static
/// voter set. A voter added later (`add-learner`, `promote`), wiped, started with an
/// empty log and voted at once: its settings do not name it a voter, its peers do.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voter_added_later_that_lost_its_data_votes_only_after_catching_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut all = specs(dir.path(), 4, &[]);
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
    let mut nodes = start(all).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    write_batches(&nodes[lead], 0..5).await;
    let mut fourth = Node::spawn(spec4);
    for (path, body) in [
        (
            "/api/v1/cluster/add-learner",
            json!({"node_id": 4, "addr": fourth.url}),
        ),
        ("/api/v1/cluster/promote", json!({"node_ids": [4]})),
    ] {
        let (status, text, _) = nodes[lead]
            .post(
                path,
                &[("content-type", "application/json")],
                serde_json::to_vec(&body).unwrap(),
            )
            .await;
        assert_eq!(status, 200, "{path}: {text}");
    }
    fourth.wait_ready().await;
    // Node 4 loses its data while two of the original three are down: nobody can bring
    // it up to date, and one survivor asks it for a vote.
    let survivor = (lead + 1) % 3;
    fourth.kill();
    for i in (0..3).filter(|i| *i != survivor) {
        nodes[i].kill();
    }
    std::fs::remove_dir_all(&fourth.spec.data_dir).unwrap();
    fourth.respawn();
    let body = stale_vote_request(survivor as u64 + 1);
    fourth
        .wait_for(
            "the wiped added voter to refuse a vote",
            Duration::from_secs(30),
            || refuses(&fourth, "/internal/raft/vote", &body, "may lack entries"),
        )
        .await;
    // Once the others are back it catches up, votes again, and holds what they hold.
    for i in (0..3).filter(|i| *i != survivor) {
        nodes[i].respawn();
    }
    let lead = leader(&nodes, &[0, 1, 2]).await;
    fourth
        .wait_for("node 4 to vote again", Duration::from_secs(60), || async {
            fourth.log().contains("this node votes again")
        })
        .await;
    let commit = nodes[lead].status().await["commit_index"].as_u64().unwrap();
    applied(&fourth, commit).await;
    assert_eq!(content(&fourth).await, content(&nodes[lead]).await);
}

/// Regression (issue 36, item 7): a voter restored from an old copy of its disks (its
/// directories known, its log shorter than what it had acknowledged) voted at once.
/// The leader knows how far the node's log had matched; the node asks at start, and
/// while it lacks entries it acknowledged it neither votes nor takes entries from a
/// leader older than its peers' votes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_voter_restored_from_an_old_copy_votes_only_after_catching_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(specs(dir.path(), 3, &[])).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    write_batches(&nodes[lead], 0..3).await;
    let restored = (lead + 1) % 3;
    let other = (lead + 2) % 3;
    // A copy of its disks now, taken with the node stopped.
    let data = nodes[restored].spec.data_dir.clone();
    let copy = dir.path().join("old-copy");
    nodes[restored].kill();
    copy_dir(&data, &copy);
    nodes[restored].respawn();
    nodes[restored].wait_ready().await;
    // It acknowledges more, then its disks are replaced by the old copy.
    write_batches(&nodes[lead], 3..10).await;
    let commit = nodes[lead].status().await["commit_index"].as_u64().unwrap();
    applied(&nodes[restored], commit).await;
    nodes[restored].kill();
    std::fs::remove_dir_all(&data).unwrap();
    copy_dir(&copy, &data);
    // The other follower is stopped (frozen), so the restored node cannot learn every
    // peer's vote, nor be brought up to date, while it is asked to vote.
    nodes[other].signal("STOP");
    nodes[restored].respawn();
    let body = stale_vote_request(other as u64 + 1);
    let node = &nodes[restored];
    node.wait_for(
        "the restored node to refuse a vote",
        Duration::from_secs(30),
        || refuses(node, "/internal/raft/vote", &body, "may lack entries"),
    )
    .await;
    assert!(
        node.log().contains("no longer holds"),
        "{}",
        node.log_tail()
    );
    nodes[other].signal("CONT");
    nodes[restored]
        .wait_for(
            "the restored node to vote again",
            Duration::from_secs(60),
            || async { nodes[restored].log().contains("this node votes again") },
        )
        .await;
    applied(&nodes[restored], commit).await;
    assert_eq!(content(&nodes[restored]).await, content(&nodes[lead]).await);
}

/// Regression (found by the simulation): an old copy put back after the leader that saw
/// the node acknowledge had changed was caught by nothing, voted at once, and helped
/// elect a candidate that lacked committed entries. Nothing in a copy can tell how old
/// it is, so `quiver restore` on a member of a cluster closes its vote barrier.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_old_copy_restored_after_a_failover_votes_only_after_catching_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(specs(dir.path(), 3, &[])).await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    write_batches(&nodes[lead], 0..3).await;
    let restored = (lead + 1) % 3;
    let other = (lead + 2) % 3;
    let data = nodes[restored].spec.data_dir.clone();
    let copy = dir.path().join("old-copy");
    nodes[restored].kill();
    copy_dir(&data, &copy);
    nodes[restored].respawn();
    nodes[restored].wait_ready().await;
    write_batches(&nodes[lead], 3..10).await;
    let commit = nodes[lead].status().await["commit_index"].as_u64().unwrap();
    applied(&nodes[restored], commit).await;
    nodes[restored].kill();
    // The leader that saw how far the node's log reached goes down and comes back: no
    // node remembers it any more.
    nodes[lead].kill();
    nodes[lead].respawn();
    leader(&nodes, &[lead, other]).await;
    std::fs::remove_dir_all(&data).unwrap();
    copy_dir(&copy, &data);
    let (code, out) = run_with_node_settings(&nodes[restored].spec, "restore");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("votes again once it has caught up"), "{out}");
    // The other follower is frozen, so the restored node can neither learn every peer's
    // vote nor be brought up to date while it is asked to vote.
    nodes[other].signal("STOP");
    nodes[restored].respawn();
    let body = stale_vote_request(other as u64 + 1);
    let node = &nodes[restored];
    node.wait_for(
        "the restored node to refuse a vote",
        Duration::from_secs(30),
        || refuses(node, "/internal/raft/vote", &body, "may lack entries"),
    )
    .await;
    nodes[other].signal("CONT");
    nodes[restored]
        .wait_for(
            "the restored node to vote again",
            Duration::from_secs(60),
            || async { nodes[restored].log().contains("this node votes again") },
        )
        .await;
    let lead = leader(&nodes, &[0, 1, 2]).await;
    let commit = nodes[lead].status().await["commit_index"].as_u64().unwrap();
    applied(&nodes[restored], commit).await;
    assert_eq!(content(&nodes[restored]).await, content(&nodes[lead]).await);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "quiver.lock" {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
