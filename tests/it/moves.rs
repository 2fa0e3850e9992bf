//! Moving data group replicas between running nodes (docs/ARCHITECTURE.md, "Groups"):
//! `quiver cluster move` sent to a node that is not a member of the group, the new
//! replica catching up with the group's rows and files, the old one deleting its copy,
//! every node reading everything throughout, kill -9 and restarts of both ends, and
//! `drain` emptying a node.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::cluster_support::{specs, start};
use crate::common::{Node, NodeSpec, TOKEN};
use crate::groups::count_files as count_parquet;

const MEASUREMENTS: usize = 12;
const ROWS_PER_LINE_GROUP: usize = 20;

/// One body: `ROWS_PER_LINE_GROUP` rows of every measurement, batch `batch`.
pub(crate) fn body(batch: usize) -> String {
    let mut out = String::new();
    for m in 0..MEASUREMENTS {
        for r in 0..ROWS_PER_LINE_GROUP {
            let t = 1_700_000_000_000_000_000i64 + (batch * 1_000 + r) as i64 * 1_000_000;
            out.push_str(&format!("m{m},host=h{r} v={batch},b={batch}i {t}\n"));
        }
    }
    out
}

/// Writes `batches` through the nodes in turn, each with its own Idempotency-Key, as a
/// client of a cluster with several data groups should: a refusal that wrote nothing
/// (429, 503) or a write whose parts partly committed (504, while a group elects its
/// next leader after one left) is resent with the same key until a deadline, and the
/// counts the tests check then prove each batch stored exactly once. Anything else
/// fails the test.
pub(crate) async fn write_all(nodes: &[Node], batches: std::ops::Range<usize>) {
    for batch in batches {
        let node = &nodes[batch % nodes.len()];
        let key = format!("moves-batch-{batch}");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (status, text, _) = node
                .post(
                    "/write?db=db",
                    &[("Idempotency-Key", key.as_str())],
                    body(batch).into_bytes(),
                )
                .await;
            if status == 204 {
                break;
            }
            assert!(
                matches!(status, 429 | 503 | 504) && std::time::Instant::now() < deadline,
                "batch {batch}: {status} {text}\n{}",
                node.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Rows per measurement as one node reads them (-1: the query failed).
pub(crate) async fn counts(node: &Node) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for m in 0..MEASUREMENTS {
        let (status, answer) = node
            .query("db", &format!("SELECT count(*) FROM m{m}"))
            .await;
        let rows = if status == 200 {
            answer["data"][0][0].as_i64().unwrap_or(-1)
        } else {
            -1
        };
        out.insert(format!("m{m}"), rows);
    }
    out
}

pub(crate) fn expected(batches: usize) -> BTreeMap<String, i64> {
    (0..MEASUREMENTS)
        .map(|m| (format!("m{m}"), (batches * ROWS_PER_LINE_GROUP) as i64))
        .collect()
}

pub(crate) async fn every_node_reads(nodes: &[&Node], batches: usize) {
    for node in nodes {
        node.wait_for(
            "every row, read on this node",
            Duration::from_secs(60),
            || async { counts(node).await == expected(batches) },
        )
        .await;
    }
}

/// `(members, held_here)` of data group `group` as `node` lists it.
pub(crate) async fn group_as_seen_by(node: &Node, group: u64) -> (Vec<u64>, bool) {
    let r = node
        .client
        .get(format!("{}/api/v1/cluster/groups", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("groups request");
    let body: Value = r.json().await.expect("groups json");
    let entry = body["groups"]
        .as_array()
        .and_then(|all| all.iter().find(|g| g["id"].as_u64() == Some(group)))
        .cloned()
        .unwrap_or(Value::Null);
    let mut members: Vec<u64> = entry["members"]
        .as_array()
        .map(|m| m.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    members.sort_unstable();
    (members, entry["held_here"] == true)
}

pub(crate) async fn wait_for_members(nodes: &[&Node], group: u64, members: &[u64]) {
    for node in nodes {
        node.wait_for(
            &format!("group {group} listed with members {members:?}"),
            Duration::from_secs(30),
            || async { group_as_seen_by(node, group).await.0 == members },
        )
        .await;
    }
}

pub(crate) fn group_dir_exists(node: &Node, group: u64) -> bool {
    node.spec
        .data_dir
        .join("groups")
        .join(group.to_string())
        .exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_moves_with_its_files_and_a_drained_node_ends_up_holding_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "2".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "3".to_string()),
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "300".to_string()),
        ("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", "200".to_string()),
    ];
    let mut nodes = start(specs(dir.path(), 4, &env)).await;
    // Placement: group 1 on nodes 1, 2, 3; group 2 on nodes 4, 1, 2.
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for_members(&all, 1, &[1, 2, 3]).await;
    wait_for_members(&all, 2, &[1, 2, 4]).await;
    write_all(&nodes, 0..10).await;
    // Every member snapshots the files, so the log before them is gone: the new replica
    // must take a snapshot and fetch the group's Parquet files.
    for node in &nodes[..3] {
        let group_dir = node.spec.data_dir.join("groups").join("1");
        node.wait_for(
            "group 1's files and a snapshot of them",
            Duration::from_secs(60),
            || async {
                count_parquet(&group_dir) > 0
                    && std::fs::read_dir(group_dir.join("snapshots")).is_ok_and(|entries| {
                        entries
                            .flatten()
                            .any(|e| e.file_name().to_string_lossy().ends_with(".snap"))
                    })
            },
        )
        .await;
    }

    // Asked of node 4, which is not a member of group 1: a member drives the move.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(["cluster", "move", "--url", &nodes[3].url, "--token", TOKEN])
        .args(["--group", "1", "--from", "3", "--to", "4"])
        .output()
        .expect("quiver cluster move runs");
    let printed = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{printed}{}\nnode 1:\n{}",
        String::from_utf8_lossy(&output.stderr),
        nodes[0].log_tail()
    );
    let answer: Value = serde_json::from_str(&printed).expect("move answer is JSON");
    assert_eq!(answer["members"], serde_json::json!([1, 2, 4]), "{answer}");

    // Every node learns the new members; node 4 holds the group with its rows and files,
    // node 3 kept no copy.
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for_members(&all, 1, &[1, 2, 4]).await;
    nodes[3]
        .wait_for(
            "node 4 serving group 1",
            Duration::from_secs(30),
            || async { group_as_seen_by(&nodes[3], 1).await.1 },
        )
        .await;
    assert!(
        !group_dir_exists(&nodes[2], 1),
        "node 3 kept group 1's directory"
    );
    assert!(
        !nodes[2]
            .spec
            .data_dir
            .join("wal")
            .join("groups")
            .join("1")
            .exists(),
        "node 3 kept group 1's log"
    );
    nodes[3]
        .wait_for(
            "group 1's files on node 4",
            Duration::from_secs(60),
            || async { count_parquet(&nodes[3].spec.data_dir.join("groups").join("1")) > 0 },
        )
        .await;
    every_node_reads(&all, 10).await;

    // Writes through every node, the one that left the group included.
    write_all(&nodes, 10..20).await;
    every_node_reads(&all, 20).await;

    // kill -9 both ends of the move; each comes back with the groups it holds now.
    nodes[3].kill();
    nodes[3].restart().await;
    nodes[2].kill();
    nodes[2].restart().await;
    assert!(
        group_as_seen_by(&nodes[3], 1).await.1,
        "node 4 holds group 1 after a restart"
    );
    assert!(!group_dir_exists(&nodes[2], 1));
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for_members(&all, 1, &[1, 2, 4]).await;
    every_node_reads(&all, 20).await;
    write_all(&nodes, 20..24).await;

    // Draining node 2 moves both its replicas to node 3, the only node without them.
    let (status, text, _) = nodes[2]
        .post(
            "/api/v1/cluster/drain",
            &[("content-type", "application/json")],
            br#"{"node_id": 2}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 200, "{text}\n{}", nodes[0].log_tail());
    let drained: Value = serde_json::from_str(&text).expect("drain answer");
    assert_eq!(
        drained["moves"].as_array().map(Vec::len),
        Some(2),
        "{drained}"
    );
    wait_for_members(&all, 1, &[1, 3, 4]).await;
    wait_for_members(&all, 2, &[1, 3, 4]).await;
    for group in [1, 2] {
        assert!(
            !group_dir_exists(&nodes[1], group),
            "node 2 kept group {group}"
        );
    }
    every_node_reads(&all, 24).await;
    write_all(&nodes, 24..28).await;
    every_node_reads(&all, 28).await;

    // A move to a node that is not in the cluster is refused, naming it.
    let (status, text, _) = nodes[0]
        .post(
            "/api/v1/cluster/groups/1/move",
            &[("content-type", "application/json")],
            br#"{"from": 1, "to": 9}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("node 9"), "{text}");
}

/// Specs of four nodes with `env`, whose static voters are the first three: node 4 is
/// started later and added to the running cluster.
fn three_and_a_newcomer(dir: &std::path::Path, env: &[(&str, String)]) -> Vec<NodeSpec> {
    let four = specs(dir, 4, env);
    let first_three = four[..3]
        .iter()
        .enumerate()
        .map(|(i, s)| format!("{}=http://127.0.0.1:{}", i + 1, s.port))
        .collect::<Vec<_>>()
        .join(",");
    four.into_iter()
        .map(|s| s.with("QUIVER_CLUSTER_PEERS", &first_three))
        .collect()
}

/// Starts node 4 from `spec` and adds it to the cluster (`add-learner`, `promote`
/// asked of node 1), waiting until it is ready.
async fn add_node_four(nodes: &mut Vec<Node>, spec: NodeSpec) {
    nodes.push(Node::spawn(spec));
    let newcomer = nodes[3].url.clone();
    for (path, request) in [
        (
            "/api/v1/cluster/add-learner",
            format!(r#"{{"node_id": 4, "addr": "{newcomer}"}}"#),
        ),
        (
            "/api/v1/cluster/promote",
            r#"{"node_ids": [4]}"#.to_string(),
        ),
    ] {
        let (status, text, _) = nodes[0]
            .post(
                path,
                &[("content-type", "application/json")],
                request.into_bytes(),
            )
            .await;
        assert_eq!(status, 200, "{path}: {text}\n{}", nodes[0].log_tail());
    }
    nodes[3].wait_ready().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_added_to_a_running_cluster_takes_its_share_of_the_replicas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "3".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "2".to_string()),
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "300".to_string()),
    ];
    // The cluster is nodes 1-3 (each holds two of the six replicas); node 4 is started
    // later with the same settings and added while the cluster runs.
    let four = three_and_a_newcomer(dir.path(), &env);
    let mut nodes = start(four[..3].to_vec()).await;
    write_all(&nodes, 0..10).await;
    add_node_four(&mut nodes, four[3].clone()).await;
    let newcomer = nodes[3].url.clone();
    for group in 1..=3 {
        assert!(
            !group_as_seen_by(&nodes[3], group).await.1,
            "no replica before rebalance"
        );
    }

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(["cluster", "rebalance", "--url", &newcomer, "--token", TOKEN])
        .output()
        .expect("quiver cluster rebalance runs");
    let printed = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_str(&printed).expect("rebalance answer is JSON");
    let moves = answer["moves"].as_array().cloned().unwrap_or_default();
    assert!(!moves.is_empty(), "{answer}");
    assert!(moves.iter().all(|m| m["to"] == 4), "{answer}");

    // Node 4 now holds a replica, with the group's files, and every node (itself
    // included) reads every row and takes writes.
    let moved = moves[0]["group"].as_u64().expect("group moved");
    nodes[3]
        .wait_for(
            "node 4 serving the moved group",
            Duration::from_secs(30),
            || async { group_as_seen_by(&nodes[3], moved).await.1 },
        )
        .await;
    let group_dir = nodes[3]
        .spec
        .data_dir
        .join("groups")
        .join(moved.to_string());
    nodes[3]
        .wait_for(
            "the moved group's files on node 4",
            Duration::from_secs(60),
            || async { count_parquet(&group_dir) > 0 },
        )
        .await;
    let all: Vec<&Node> = nodes.iter().collect();
    every_node_reads(&all, 10).await;
    write_all(&nodes, 10..14).await;
    every_node_reads(&all, 14).await;

    // No two nodes differ by more than one replica now.
    let mut held = [0usize; 4];
    for group in 1..=3 {
        for id in group_as_seen_by(&nodes[0], group).await.0 {
            held[(id - 1) as usize] += 1;
        }
    }
    assert_eq!(held.iter().sum::<usize>(), 6, "{held:?}");
    assert!(
        held.iter().max().unwrap_or(&0) - held.iter().min().unwrap_or(&0) <= 1,
        "{held:?}"
    );

    // A node holding replicas is not removed before it is drained.
    let (status, text, _) = nodes[0]
        .post(
            "/api/v1/cluster/remove",
            &[("content-type", "application/json")],
            br#"{"node_ids": [4]}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("drain"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_holds_no_replica_finds_a_group_after_every_first_member_moved_away() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "2".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "2".to_string()),
    ];
    // Placement: group 1 on nodes 1 and 2, group 2 on nodes 3 and 4; node 5 holds none.
    let mut nodes = start(specs(dir.path(), 5, &env)).await;
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for_members(&all, 1, &[1, 2]).await;
    wait_for_members(&all, 2, &[3, 4]).await;
    write_all(&nodes, 0..6).await;
    for (from, to) in [(1, 3), (2, 4)] {
        let (status, text, _) = nodes[4]
            .post(
                "/api/v1/cluster/groups/1/move",
                &[("content-type", "application/json")],
                format!(r#"{{"from": {from}, "to": {to}}}"#).into_bytes(),
            )
            .await;
        assert_eq!(status, 200, "{text}");
    }
    wait_for_members(&all, 1, &[3, 4]).await;
    // Node 5 records what it learned, so a restart does not look for group 1 on nodes
    // 1 and 2 (placement's members), which hold it no more.
    let recorded = nodes[4].spec.data_dir.join("groups").join("members.json");
    nodes[4]
        .wait_for(
            "node 5 recording group 1's members",
            Duration::from_secs(30),
            || async {
                std::fs::read_to_string(&recorded)
                    .ok()
                    .and_then(|text| serde_json::from_str::<Value>(&text).ok())
                    .is_some_and(|v| {
                        v["1"]
                            .as_array()
                            .map(|m| m.iter().filter_map(|p| p[0].as_u64()).collect::<Vec<_>>())
                            == Some(vec![3, 4])
                    })
            },
        )
        .await;
    nodes[4].kill();
    nodes[4].restart().await;
    let all: Vec<&Node> = nodes.iter().collect();
    every_node_reads(&all, 6).await;
    write_all(&nodes, 6..10).await;
    every_node_reads(&all, 10).await;

    // Without the record, it asks the cluster's nodes: still found.
    nodes[4].kill();
    std::fs::remove_file(&recorded).expect("remove the record");
    nodes[4].restart().await;
    nodes[4]
        .wait_for(
            "group 1 found through the other nodes",
            Duration::from_secs(30),
            || async { group_as_seen_by(&nodes[4], 1).await.0 == [3, 4] },
        )
        .await;
    every_node_reads(&[&nodes[4]], 10).await;
}

/// Bytes each node stores as `node` lists the groups: the sum of the sizes of the
/// groups it is a member of.
async fn loads_as_seen_by(node: &Node, groups: u64, nodes: u64) -> Vec<u64> {
    let r = node
        .client
        .get(format!("{}/api/v1/cluster/groups", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("groups request");
    let body: Value = r.json().await.expect("groups json");
    let mut loads = vec![0u64; nodes as usize];
    for g in body["groups"].as_array().cloned().unwrap_or_default() {
        let id = g["id"].as_u64().unwrap_or(0);
        if !(1..=groups).contains(&id) {
            continue;
        }
        let bytes = g["bytes"].as_u64().unwrap_or(0);
        for member in g["members"].as_array().cloned().unwrap_or_default() {
            if let Some(m) = member.as_u64().filter(|m| (1..=nodes).contains(m)) {
                loads[(m - 1) as usize] += bytes;
            }
        }
    }
    loads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_added_to_a_cluster_holding_data_receives_replicas_by_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "4".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "3".to_string()),
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "300".to_string()),
        // Any data is enough to balance here (the default waits for 1 GiB).
        ("QUIVER_CLUSTER_BALANCE_BYTES_MIN", "1".to_string()),
    ];
    let four = three_and_a_newcomer(dir.path(), &env);
    let mut nodes = start(four[..3].to_vec()).await;
    write_all(&nodes, 0..12).await;
    // Three nodes, three replicas: every node holds every group, so nothing moves.
    nodes[0]
        .wait_for(
            "every group's rows in Parquet",
            Duration::from_secs(60),
            || async {
                (1..=4).all(|g| {
                    count_parquet(&nodes[0].spec.data_dir.join("groups").join(g.to_string())) > 0
                })
            },
        )
        .await;

    add_node_four(&mut nodes, four[3].clone()).await;

    // No one asks for a rebalance: the metadata leader sees node 4 holding nothing and
    // moves replicas to it, files included, while writes go on.
    let writes = write_all(&nodes, 12..40);
    let received = nodes[3].wait_for(
        "node 4 holding replicas with their files",
        Duration::from_secs(120),
        || async {
            let mut with_files = 0;
            for g in 1..=4u64 {
                let dir = nodes[3].spec.data_dir.join("groups").join(g.to_string());
                if group_as_seen_by(&nodes[3], g).await.1 && count_parquet(&dir) > 0 {
                    with_files += 1;
                }
            }
            with_files >= 2
        },
    );
    tokio::join!(writes, received);
    let all: Vec<&Node> = nodes.iter().collect();
    every_node_reads(&all, 40).await;

    // The moves narrowed the nodes' spread of bytes: node 4 holds at least half the
    // mean, no node more than 1.5 times it.
    nodes[0]
        .wait_for(
            "the nodes' bytes evened out",
            Duration::from_secs(60),
            || async {
                let loads = loads_as_seen_by(&nodes[0], 4, 4).await;
                let mean = loads.iter().sum::<u64>() as f64 / 4.0;
                mean > 0.0
                    && loads
                        .iter()
                        .all(|l| (*l as f64) >= 0.5 * mean && (*l as f64) <= 1.5 * mean)
            },
        )
        .await;
    // Both replicas node 4 holds came by finished moves (a move's last step, the old
    // replica leaving, may still be under way when node 4 already serves the group).
    nodes[0]
        .wait_for("two moves finished", Duration::from_secs(60), || async {
            let mut moved = 0.0;
            for node in &nodes {
                moved += node
                    .metric("quiver_group_moves_finished_total")
                    .await
                    .max(0.0);
            }
            moved >= 2.0
        })
        .await;
}

/// Two moves of one group driven at once by different nodes, both to node 4 but from
/// different replicas (3 -> 4 asked of node 1, 2 -> 4 asked of node 2), as two
/// deciders (a joining node's rebalance and the metadata leader's byte balance) could
/// start them, each asking again after a 503. Each adds node 4, then removes its own
/// source: both removals would leave the group with two voters. The later one must be
/// refused, never the group left short; every row stays readable and writable. Then
/// the same two moves one after the other: the second is refused as it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_moves_of_one_group_at_once_never_leave_it_short_of_replicas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "2".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "3".to_string()),
        ("QUIVER_CLUSTER_BALANCE_REPLICAS", "false".to_string()),
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "300".to_string()),
    ];
    let nodes = start(specs(dir.path(), 4, &env)).await;
    let all: Vec<&Node> = nodes.iter().collect();
    wait_for_members(&all, 1, &[1, 2, 3]).await;
    write_all(&nodes, 0..12).await;

    // Each decider asks again after a refusal that says to (503), as the joining
    // node's rebalance and the byte balance do, until its move is done or refused for
    // good.
    let decider = |node: &'static str, asked: usize, from: u64| {
        let node_ref = &nodes[asked];
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                let (status, text) = ask_move(node_ref, 1, from, 4).await;
                if status != 503 || std::time::Instant::now() > deadline {
                    return (status, format!("{node}: {text}"));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let (first, second) = tokio::join!(decider("node 1", 0, 3), decider("node 2", 1, 2));
    for (status, text) in [&first, &second] {
        // 400 for the one that found node 4 a member already and the group at
        // cluster.replication voters.
        assert!(
            *status == 200 || (*status == 400 && text.contains("cluster.replication")),
            "{status} {text}\nnode 1:\n{}",
            nodes[0].log_tail()
        );
    }
    assert!(
        first.0 == 200 || second.0 == 200,
        "neither move finished: {first:?} {second:?}"
    );

    // Whatever the interleaving: three voters, node 4 among them, listed alike by
    // every node, each serving its copy.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let members = loop {
        let (members, _) = group_as_seen_by(&nodes[0], 1).await;
        if members.len() >= 3 && members.contains(&4) {
            break members;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "group 1 has members {members:?} after {first:?} / {second:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(members.len(), 3, "{members:?} after {first:?} / {second:?}");
    wait_for_members(&all, 1, &members).await;
    every_node_reads(&all, 12).await;
    write_all(&nodes, 12..16).await;
    every_node_reads(&all, 16).await;

    // One after the other, on group 2 (nodes 1, 2, 4 by placement): node 3 takes node
    // 4's replica, then a second decider asks node 3 to take node 2's.
    wait_for_members(&all, 2, &[1, 2, 4]).await;
    let (status, text) = ask_move(&nodes[0], 2, 4, 3).await;
    assert_eq!(status, 200, "{text}");
    wait_for_members(&all, 2, &[1, 2, 3]).await;
    let (status, text) = ask_move(&nodes[0], 2, 2, 3).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("cluster.replication"), "{text}");
    wait_for_members(&all, 2, &[1, 2, 3]).await;
}

/// Asks `node` to move group `group`'s replica from `from` to `to`.
async fn ask_move(node: &Node, group: u64, from: u64, to: u64) -> (u16, String) {
    let r = node
        .client
        .post(format!("{}/api/v1/cluster/groups/{group}/move", node.url))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"from": from, "to": to}))
        .send()
        .await
        .expect("move request");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap_or_default())
}
