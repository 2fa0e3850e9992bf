//! Spreading data group leaders (docs/ARCHITECTURE.md, "Groups"): a node that leads
//! more groups than its share hands one over to a voter leading fewer, while writes go
//! on; none is refused and every row is stored once.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::cluster_support::{specs, start};
use crate::common::{Node, TOKEN};

const GROUPS: u64 = 6;
const MEASUREMENTS: usize = 12;

fn body(batch: usize) -> String {
    let t0 = 1_700_000_000_000_000_000i64;
    (0..MEASUREMENTS)
        .map(|m| format!("m{m},host=h v={batch}i {}\n", t0 + batch as i64 * 1_000_000))
        .collect()
}

/// Who leads each data group, as `node` (a member of every group here) sees it.
pub(crate) async fn leaders(node: &Node) -> BTreeMap<u64, Option<u64>> {
    let r = node
        .client
        .get(format!("{}/api/v1/cluster/groups", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("groups request");
    let body: serde_json::Value = r.json().await.expect("groups json");
    body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter(|g| g["role"] == "data")
        .map(|g| (g["id"].as_u64().unwrap_or(0), g["leader"].as_u64()))
        .collect()
}

/// Groups led per node (nodes leading none included).
fn led_per_node(leaders: &BTreeMap<u64, Option<u64>>) -> BTreeMap<u64, usize> {
    let mut out: BTreeMap<u64, usize> = (1..=3).map(|n| (n, 0)).collect();
    for leader in leaders.values().flatten() {
        *out.entry(*leader).or_default() += 1;
    }
    out
}

/// Writes `batches` through the nodes in turn; every answer must be 204: a handover
/// pauses a group's writes, it refuses none.
async fn write_all(nodes: &[Node], batches: std::ops::Range<usize>) {
    for batch in batches {
        let node = &nodes[batch % nodes.len()];
        let (status, answer) = node.write_lp("/write?db=db", &body(batch)).await;
        assert_eq!(status, 204, "batch {batch}: {answer}\n{}", node.log_tail());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_from_a_kill_is_handed_its_share_of_leaders_while_writes_go_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", GROUPS.to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "3".to_string()),
    ];
    let mut nodes = start(specs(dir.path(), 3, &env)).await;
    write_all(&nodes, 0..20).await;

    // Node 3 dies: the other two lead every group. Back, it leads none until one is
    // handed to it (nothing else elects while the leaders live).
    nodes[2].kill();
    nodes[0]
        .wait_for(
            "nodes 1 and 2 lead every group",
            Duration::from_secs(60),
            || async {
                let led = leaders(&nodes[0]).await;
                led.len() as u64 == GROUPS && led.values().all(|l| matches!(l, Some(1 | 2)))
            },
        )
        .await;
    let mut taken_before = 0.0;
    for node in &nodes[..2] {
        taken_before += node
            .metric("quiver_leadership_handovers_total")
            .await
            .max(0.0);
    }
    nodes[2].restart().await;

    let writer_nodes: Vec<&Node> = nodes.iter().collect();
    let writes = async {
        for batch in 20..120 {
            let node = writer_nodes[batch % 3];
            let (status, answer) = node.write_lp("/write?db=db", &body(batch)).await;
            assert_eq!(status, 204, "batch {batch}: {answer}\n{}", node.log_tail());
        }
    };
    let share = GROUPS.div_ceil(3) as usize;
    let spread = nodes[0].wait_for(
        "no node leading more than its share of the groups",
        Duration::from_secs(90),
        || async {
            let per_node = led_per_node(&leaders(&nodes[0]).await);
            per_node.values().all(|n| *n <= share) && per_node[&3] >= 1
        },
    );
    tokio::join!(writes, spread);
    write_all(&nodes, 120..130).await;

    // Handovers did it (node 3 was never elected by a lost leader), counted as taken.
    let mut taken = 0.0;
    for node in &nodes {
        let value = node.metric("quiver_leadership_handovers_total").await;
        if value.is_finite() {
            taken += value;
        }
    }
    assert!(taken - taken_before >= 1.0, "handovers counted: {taken}");
    for node in &nodes {
        node.wait_for("every row, once", Duration::from_secs(30), || async {
            let (status, answer) = node
                .query("db", "SELECT count(*), count(DISTINCT v) FROM m0")
                .await;
            status == 200 && answer["data"][0] == serde_json::json!([130, 130])
        })
        .await;
        for m in 1..MEASUREMENTS {
            let rows = node.rows("db", &format!("SELECT count(*) FROM m{m}")).await;
            assert_eq!(rows[0][0].as_i64(), Some(130), "m{m} on {}", node.url);
        }
    }
}
