//! Several data groups: measurements spread over Raft groups by their names' hash,
//! each group on `cluster.replication` of the nodes (docs/ARCHITECTURE.md "Groups").
//! Writes spanning groups, reads merging them, a kill -9 mid-load, restarts from the
//! groups' own logs and files, and the guard against changing the number of groups.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::cluster_support::{specs, start};
use crate::common::{run_with_node_settings, Node, NodeSpec, TOKEN};

const MEASUREMENTS: usize = 12;
const ROWS_PER_LINE_GROUP: usize = 20;

/// One body: `ROWS_PER_LINE_GROUP` rows of every measurement, batch `batch`.
fn body(batch: usize) -> String {
    let mut out = String::new();
    for m in 0..MEASUREMENTS {
        for r in 0..ROWS_PER_LINE_GROUP {
            let t = 1_700_000_000_000_000_000i64 + (batch * 1_000 + r) as i64 * 1_000_000;
            out.push_str(&format!("m{m},host=h{r} v={batch},b={batch}i {t}\n"));
        }
    }
    out
}

async fn groups_of(node: &Node) -> Vec<Value> {
    let r = node
        .client
        .get(format!("{}/api/v1/cluster/groups", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("groups request");
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.expect("groups json");
    body["groups"].as_array().expect("groups").clone()
}

/// Rows per measurement as one node reads them.
async fn counts(node: &Node) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for m in 0..MEASUREMENTS {
        let rows = node
            .rows(
                "db",
                &format!("SELECT count(*), count(DISTINCT b) FROM m{m}"),
            )
            .await;
        out.insert(format!("m{m}"), rows[0][0].as_i64().unwrap_or(-1));
    }
    out
}

/// Writes `batches` through the nodes in turn; every answer must be 204.
async fn write_all(nodes: &[Node], batches: std::ops::Range<usize>) {
    for batch in batches {
        let node = &nodes[batch % nodes.len()];
        let (status, answer) = node.write_lp("/write?db=db", &body(batch)).await;
        assert_eq!(status, 204, "batch {batch}: {answer}\n{}", node.log_tail());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_with_four_data_groups_spread_measurements_and_lose_nothing_to_a_kill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "4".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "3".to_string()),
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "500".to_string()),
    ];
    let mut nodes = start(specs(dir.path(), 3, &env)).await;
    write_all(&nodes, 0..9).await;

    // Every node runs the metadata group and the four data groups, each of three voters;
    // the measurements are spread over the data groups, none in the metadata group.
    let groups = groups_of(&nodes[0]).await;
    assert_eq!(groups.len(), 5, "{groups:?}");
    assert_eq!(groups[0]["role"], "metadata");
    assert_eq!(groups[0]["measurements"], 0, "{groups:?}");
    let mut measurements = 0;
    let mut holding = 0;
    for g in &groups[1..] {
        assert_eq!(g["role"], "data");
        assert_eq!(g["members"].as_array().map(Vec::len), Some(3), "{g}");
        let n = g["measurements"].as_u64().unwrap_or(0);
        measurements += n;
        holding += usize::from(n > 0);
    }
    assert_eq!(measurements, MEASUREMENTS as u64, "{groups:?}");
    assert!(
        holding >= 3,
        "12 measurements in at most 2 of 4 groups: {groups:?}"
    );

    // Every node reads every measurement whole, whichever group holds it, and a query
    // joining measurements of different groups merges them.
    let expected: BTreeMap<String, i64> = (0..MEASUREMENTS)
        .map(|m| (format!("m{m}"), (9 * ROWS_PER_LINE_GROUP) as i64))
        .collect();
    // A default read is served by the node's own replica, which may be an entry behind
    // the leader that acknowledged the last write: wait for it to apply.
    for node in &nodes {
        node.wait_for(
            "every row on this node",
            Duration::from_secs(30),
            || async { counts(node).await == expected },
        )
        .await;
    }
    let joined = nodes[1]
        .rows(
            "db",
            "SELECT count(*) FROM m0 JOIN m1 ON m0.time = m1.time AND m0.host = m1.host",
        )
        .await;
    assert_eq!(
        joined[0][0].as_i64(),
        Some((9 * ROWS_PER_LINE_GROUP) as i64)
    );

    // Each group writes its own files, under its own directory.
    nodes[0]
        .wait_for("data groups' files", Duration::from_secs(60), || async {
            let files = count_files(&nodes[0].spec.data_dir.join("groups"));
            files >= holding
        })
        .await;

    // kill -9 a node mid-load: writes through the others go on, nothing is lost, and
    // the node catches up every group when it comes back.
    nodes[2].kill();
    write_all(&nodes[..2], 9..15).await;
    nodes[2].respawn();
    nodes[2].wait_ready().await;
    write_all(&nodes, 15..18).await;
    let expected: BTreeMap<String, i64> = (0..MEASUREMENTS)
        .map(|m| (format!("m{m}"), (18 * ROWS_PER_LINE_GROUP) as i64))
        .collect();
    for node in &nodes {
        node.wait_for("every group caught up", Duration::from_secs(60), || async {
            counts(node).await == expected
        })
        .await;
    }
    // A linearizable read passes every group's read barrier.
    let (status, answer) = query_linearizable(&nodes[2], "SELECT count(*) FROM m5").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["data"][0][0].as_i64(),
        Some((18 * ROWS_PER_LINE_GROUP) as i64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_with_three_data_groups_restarts_from_its_groups_and_keeps_their_number() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = NodeSpec::new(dir.path())
        .with("QUIVER_CLUSTER_DATA_GROUPS", 3)
        .with("QUIVER_STORAGE_FLUSH_AGE_MS", 300);
    let mut node = Node::start(spec.clone()).await;
    write_all(std::slice::from_ref(&node), 0..4).await;
    node.wait_for("files written", Duration::from_secs(60), || async {
        count_files(&node.spec.data_dir.join("groups")) >= 3
    })
    .await;
    write_all(std::slice::from_ref(&node), 4..6).await;
    let before = counts(&node).await;
    assert!(
        before
            .values()
            .all(|c| *c == (6 * ROWS_PER_LINE_GROUP) as i64),
        "{before:?}"
    );
    node.kill();
    node.respawn();
    node.wait_ready().await;
    assert_eq!(
        counts(&node).await,
        before,
        "rows after kill -9 and restart"
    );
    node.kill();

    // The number of data groups is part of where rows live: a change is refused.
    let changed = spec.clone().with("QUIVER_CLUSTER_DATA_GROUPS", 2);
    let (code, out) = run_with_node_settings(&changed, "serve");
    assert_ne!(code, Some(0));
    assert!(
        out.contains("cluster.data_groups = 2") && out.contains("placed in 3"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_with_replication_three_hold_a_share_each_and_every_node_reads_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "8".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "3".to_string()),
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "500".to_string()),
    ];
    let all_specs = specs(dir.path(), 5, &env);
    let mut nodes = start(all_specs.clone()).await;
    write_all(&nodes, 0..10).await;

    // Every data group has three members; each node runs four or five of the eight
    // and knows the others by their members.
    let mut held_per_node = Vec::new();
    for node in &nodes {
        let groups = groups_of(node).await;
        assert_eq!(groups.len(), 9, "{groups:?}");
        let held: Vec<u64> = groups[1..]
            .iter()
            .filter(|g| g["held_here"] == true)
            .map(|g| g["id"].as_u64().unwrap_or(0))
            .collect();
        for g in &groups[1..] {
            assert_eq!(g["members"].as_array().map(Vec::len), Some(3), "{g}");
        }
        assert!((4..=5).contains(&held.len()), "{held:?} {groups:?}");
        // Only the groups it holds have directories on its disks.
        for g in 1..=8u64 {
            let has_dir = node
                .spec
                .data_dir
                .join("groups")
                .join(g.to_string())
                .exists();
            assert_eq!(has_dir, held.contains(&g), "group {g} on {}", node.url);
        }
        held_per_node.push(held);
    }
    assert_eq!(held_per_node.iter().map(Vec::len).sum::<usize>(), 24);

    // Every node reads every measurement whole, those of groups it does not hold from
    // their members, and joins across groups.
    let expected = |batches: usize| -> BTreeMap<String, i64> {
        (0..MEASUREMENTS)
            .map(|m| (format!("m{m}"), (batches * ROWS_PER_LINE_GROUP) as i64))
            .collect()
    };
    for node in &nodes {
        node.wait_for("every group's rows", Duration::from_secs(30), || async {
            counts(node).await == expected(10)
        })
        .await;
    }
    let joined = nodes[3]
        .rows(
            "db",
            "SELECT count(*) FROM m0 JOIN m7 ON m0.time = m7.time AND m0.host = m7.host",
        )
        .await;
    assert_eq!(
        joined[0][0].as_i64(),
        Some((10 * ROWS_PER_LINE_GROUP) as i64)
    );
    // Files flushed by the members are read by the others too.
    nodes[0]
        .wait_for("files written", Duration::from_secs(60), || async {
            count_files(&nodes[0].spec.data_dir.join("groups")) >= 4
        })
        .await;
    for node in &nodes {
        assert_eq!(
            counts(node).await,
            expected(10),
            "{} after flushes",
            node.url
        );
    }
    // The measurements list names every group's tables.
    let listed = get_json(&nodes[1], "/api/v1/measurements?database=db").await;
    assert_eq!(
        listed["measurements"].as_array().map(Vec::len),
        Some(MEASUREMENTS),
        "{listed}"
    );

    // kill -9 a node mid-load: each group keeps two of three members, so writes
    // through every other node go on, reads too, and nothing is lost.
    nodes[2].kill();
    write_all_except(&nodes, 2, 10..16).await;
    for (i, node) in nodes.iter().enumerate() {
        if i != 2 {
            node.wait_for(
                "reads with a node down",
                Duration::from_secs(30),
                || async { counts(node).await == expected(16) },
            )
            .await;
        }
    }
    nodes[2].respawn();
    nodes[2].wait_ready().await;
    write_all(&nodes, 16..18).await;
    for node in &nodes {
        node.wait_for("every group caught up", Duration::from_secs(60), || async {
            counts(node).await == expected(18)
        })
        .await;
    }
    let (status, answer) = query_linearizable(&nodes[4], "SELECT count(*) FROM m3").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["data"][0][0].as_i64(),
        Some((18 * ROWS_PER_LINE_GROUP) as i64)
    );

    // A delete through a node that does not hold the measurement's group is run by a
    // member; every node sees it.
    for m in 0..MEASUREMENTS {
        let (status, text, _) = nodes[0]
            .post(
                "/api/v1/delete",
                &[("content-type", "application/json")],
                serde_json::json!({"database": "db", "measurement": format!("m{m}"), "where": "host = 'h0'"})
                    .to_string()
                    .into_bytes(),
            )
            .await;
        assert_eq!(status, 200, "m{m}: {text}");
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(answer["deleted"].as_u64(), Some(18), "m{m}: {text}");
    }
    for node in &nodes {
        node.wait_for("the deletes", Duration::from_secs(30), || async {
            counts(node)
                .await
                .values()
                .all(|c| *c == (18 * (ROWS_PER_LINE_GROUP - 1)) as i64)
        })
        .await;
    }

    // Placement follows from the replication and the node ids: a restart with others
    // is refused, naming what was recorded.
    nodes[1].kill();
    let changed = all_specs[1].clone().with("QUIVER_CLUSTER_REPLICATION", 2);
    let (code, out) = run_with_node_settings(&changed, "serve");
    assert_ne!(code, Some(0));
    assert!(out.contains("replication=3 nodes=1,2,3,4,5"), "{out}");
}

/// Writes `batches` through the nodes in turn, skipping node `down`.
async fn write_all_except(nodes: &[Node], down: usize, batches: std::ops::Range<usize>) {
    let up: Vec<&Node> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != down)
        .map(|(_, n)| n)
        .collect();
    for batch in batches {
        let node = up[batch % up.len()];
        let (status, answer) = node.write_lp("/write?db=db", &body(batch)).await;
        assert_eq!(status, 204, "batch {batch}: {answer}\n{}", node.log_tail());
    }
}

async fn get_json(node: &Node, path: &str) -> Value {
    let r = node
        .client
        .get(format!("{}{path}", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200, "{path}");
    r.json().await.expect("json")
}

async fn query_linearizable(node: &Node, sql: &str) -> (u16, Value) {
    let r = node
        .client
        .post(format!("{}/api/v1/query", node.url))
        .bearer_auth(TOKEN)
        .header("x-arc-database", "db")
        .json(&serde_json::json!({"sql": sql, "consistency": "linearizable"}))
        .send()
        .await
        .expect("query");
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Parquet files under `dir`, at any depth.
pub(crate) fn count_files(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                count_files(&path)
            } else {
                usize::from(path.extension().is_some_and(|x| x == "parquet"))
            }
        })
        .sum()
}

/// Posts `body` with an `Idempotency-Key`.
async fn write_keyed(node: &Node, key: Option<&str>, body: &str) -> u16 {
    let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
    let (status, text, _) = node
        .post("/write?db=db", &headers, body.as_bytes().to_vec())
        .await;
    assert!(status == 204 || status == 400, "{status}: {text}");
    status
}

async fn total_rows(node: &Node) -> i64 {
    counts(node).await.values().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_resent_with_its_idempotency_key_is_stored_once_even_across_a_restart() {
    for data_groups in [1, 3] {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = NodeSpec::new(dir.path())
            .with("QUIVER_CLUSTER_DATA_GROUPS", data_groups)
            .with("QUIVER_STORAGE_FLUSH_AGE_MS", 200)
            .with("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", 200);
        let mut node = Node::start(spec).await;
        let per_body = (MEASUREMENTS * ROWS_PER_LINE_GROUP) as i64;
        assert_eq!(write_keyed(&node, Some("batch-1"), &body(1)).await, 204);
        assert_eq!(write_keyed(&node, Some("batch-1"), &body(1)).await, 204);
        assert_eq!(
            total_rows(&node).await,
            per_body,
            "groups {data_groups}: resent once"
        );
        // Another key, or none, is another write.
        assert_eq!(write_keyed(&node, Some("batch-2"), &body(1)).await, 204);
        assert_eq!(write_keyed(&node, None, &body(1)).await, 204);
        assert_eq!(total_rows(&node).await, 3 * per_body);
        // A key too long is refused, naming the header, and nothing is written.
        let long = "k".repeat(300);
        assert_eq!(write_keyed(&node, Some(&long), &body(1)).await, 400);
        assert_eq!(total_rows(&node).await, 3 * per_body);

        // The ids survive a snapshot and kill -9: the retry after a restart is still
        // stored once.
        if data_groups == 1 {
            node.wait_for_snapshot_of_everything().await;
        }
        node.kill();
        node.respawn();
        node.wait_ready().await;
        assert_eq!(write_keyed(&node, Some("batch-1"), &body(1)).await, 204);
        assert_eq!(write_keyed(&node, Some("batch-2"), &body(1)).await, 204);
        assert_eq!(
            total_rows(&node).await,
            3 * per_body,
            "groups {data_groups}: retries after the restart"
        );
        assert!(node.metric("quiver_writes_deduplicated_total").await >= 2.0);
    }
}
