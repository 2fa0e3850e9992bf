//! Queries that run where the data is (docs/ARCHITECTURE.md "Distributed queries"):
//! with data groups placed on some nodes and `cluster.query_workers` set, a query's
//! scan of a measurement held elsewhere, with the filters and partial aggregates above
//! it, runs on a member of its group; the node the query came to merges. Answers are
//! the same on every node and with a member of each group killed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::cluster_support::{specs, start};
use crate::common::{free_port, Node};

const MEASUREMENTS: usize = 8;
const HOSTS: usize = 10;
const BATCHES: usize = 12;

/// Batch `batch`: `HOSTS` rows of every measurement.
fn body(batch: usize) -> String {
    let mut out = String::new();
    for m in 0..MEASUREMENTS {
        for h in 0..HOSTS {
            let t = 1_700_000_000_000_000_000i64 + (batch * HOSTS + h) as i64 * 1_000_000_000;
            let v = (batch * 7 + h * 3 + m) as f64 / 4.0;
            out.push_str(&format!("m{m},host=h{h} v={v},n={batch}i {t}\n"));
        }
    }
    out
}

/// An aggregation per measurement as `node` answers it (rows as JSON text).
async fn answers(node: &Node) -> Result<BTreeMap<usize, String>, String> {
    let mut out = BTreeMap::new();
    for m in 0..MEASUREMENTS {
        let sql = format!(
            "SELECT host, count(*), sum(v), avg(v), min(n), max(n) FROM m{m} \
             WHERE n >= 2 GROUP BY host ORDER BY host"
        );
        let (status, answer) = node.query("db", &sql).await;
        if status != 200 {
            return Err(format!("m{m}: {status} {answer}"));
        }
        out.insert(m, answer["data"].to_string());
        // Without ORDER BY the stage's partitions reach the client unmerged by a sort.
        let unordered = format!("SELECT host, count(*) FROM m{m} WHERE n >= 2 GROUP BY host");
        let (status, answer) = node.query("db", &unordered).await;
        if status != 200 {
            return Err(format!("m{m} unordered: {status} {answer}"));
        }
        let mut rows: Vec<String> = answer["data"]
            .as_array()
            .map(|rows| rows.iter().map(Value::to_string).collect())
            .unwrap_or_default();
        rows.sort();
        let counts: Vec<String> = (0..HOSTS)
            .map(|h| format!("[\"h{h}\",{}]", BATCHES - 2))
            .collect();
        let mut counts = counts;
        counts.sort();
        if rows != counts {
            return Err(format!("m{m} unordered: {rows:?}"));
        }
        // A measurement joined with its own aggregate (TSBS's lastpoint shape): two
        // scans of a remote measurement in one plan.
        let join = format!(
            "SELECT count(*) FROM m{m} c JOIN (SELECT host, max(n) AS last FROM m{m} \
             GROUP BY host) x ON c.host = x.host AND c.n = x.last"
        );
        let (status, answer) = node.query("db", &join).await;
        if status != 200 || answer["data"][0][0].as_u64() != Some(HOSTS as u64) {
            return Err(format!("m{m} joined with itself: {status} {answer}"));
        }
        // Joined with the next measurement, which this node may hold while it does not
        // hold this one (one stage, the other side read here): every (host, n) of one
        // matches exactly one row of the other.
        let next = (m + 1) % MEASUREMENTS;
        let pair =
            format!("SELECT count(*) FROM m{m} a JOIN m{next} b ON a.host = b.host AND a.n = b.n");
        let (status, answer) = node.query("db", &pair).await;
        if status != 200 || answer["data"][0][0].as_u64() != Some((HOSTS * BATCHES) as u64) {
            return Err(format!("m{m} joined with m{next}: {status} {answer}"));
        }
    }
    Ok(out)
}

/// What every node must answer for measurement `m`.
fn expected(m: usize) -> Vec<(String, i64, f64, i64, i64)> {
    (0..HOSTS)
        .map(|h| {
            let values: Vec<f64> = (2..BATCHES)
                .map(|b| (b * 7 + h * 3 + m) as f64 / 4.0)
                .collect();
            (
                format!("h{h}"),
                values.len() as i64,
                values.iter().sum(),
                2,
                BATCHES as i64 - 1,
            )
        })
        .collect()
}

/// Whether `answer` (JSON rows) is what measurement `m` holds.
fn right(m: usize, answer: &str) -> bool {
    let rows: Vec<Vec<Value>> = serde_json::from_str(answer).unwrap_or_default();
    rows.len() == HOSTS
        && rows.iter().zip(expected(m)).all(|(r, e)| {
            r[0].as_str() == Some(e.0.as_str())
                && r[1].as_i64() == Some(e.1)
                && (r[2].as_f64().unwrap_or(f64::NAN) - e.2).abs() < 1e-9
                && r[4].as_i64() == Some(e.3)
                && r[5].as_i64() == Some(e.4)
        })
}

fn plan_text(rows: &[Vec<Value>]) -> String {
    rows.iter()
        .map(|r| {
            r.iter()
                .map(|v| v.as_str().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Four nodes, four data groups of two replicas each, every node a query worker.
fn worker_cluster(dir: &std::path::Path) -> Vec<crate::common::NodeSpec> {
    let worker_ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let workers = worker_ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}=http://127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "4".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "2".to_string()),
        ("QUIVER_CLUSTER_QUERY_WORKERS", workers),
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "500".to_string()),
    ];
    specs(dir, 4, &env)
        .into_iter()
        .zip(&worker_ports)
        .map(|(spec, port)| {
            spec.with(
                "QUIVER_CLUSTER_QUERY_WORKER_ADDR",
                format!("127.0.0.1:{port}"),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_of_groups_held_elsewhere_run_on_their_members_and_answer_the_same_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut nodes = start(worker_cluster(dir.path())).await;
    for batch in 0..BATCHES {
        let node = &nodes[batch % nodes.len()];
        let (status, answer) = node.write_lp("/write?db=db", &body(batch)).await;
        assert_eq!(status, 204, "batch {batch}: {answer}\n{}", node.log_tail());
    }

    // Node 1 holds two of the four groups: the plans of the others' measurements scan
    // on a member (a stage behind a network boundary, the partial aggregate in it).
    let mut remote = 0;
    for m in 0..MEASUREMENTS {
        let plan = plan_text(
            &nodes[0]
                .rows(
                    "db",
                    &format!("EXPLAIN SELECT host, avg(v) FROM m{m} GROUP BY host"),
                )
                .await,
        );
        if plan.contains("GroupScanExec") {
            remote += 1;
            assert!(plan.contains("NetworkCoalesceExec"), "{plan}");
            assert!(plan.contains("DistributedExec"), "{plan}");
            let stage = &plan[plan.find("NetworkCoalesceExec").unwrap_or(0)..];
            assert!(
                stage.contains("mode=Partial"),
                "partial aggregate at the data: {plan}"
            );
        } else {
            assert!(!plan.contains("NetworkCoalesceExec"), "{plan}");
        }
    }
    assert!(
        (1..MEASUREMENTS).contains(&remote),
        "node 1 holds some groups and not others: {remote} of {MEASUREMENTS} remote"
    );

    // Every node answers every aggregation, the same, and right; some stages ran on
    // nodes other than the one asked.
    let mut first: Option<BTreeMap<usize, String>> = None;
    for node in &nodes {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let got = loop {
            let last = answers(node).await;
            if let Ok(a) = &last {
                if (0..MEASUREMENTS).all(|m| right(m, &a[&m])) {
                    break a.clone();
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} never answered right: {last:?}\n{}",
                node.url,
                node.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        match &first {
            None => first = Some(got),
            Some(f) => assert_eq!(f, &got, "answers differ between nodes"),
        }
    }
    let mut stages_run = 0.0;
    for node in &nodes {
        stages_run += node
            .metric("quiver_query_stages_run_for_other_nodes_total")
            .await;
    }
    assert!(
        stages_run >= 1.0,
        "no stage ran on another node ({stages_run})"
    );

    // After flushes, the members read their files for the others too.
    nodes[0]
        .wait_for("files flushed", Duration::from_secs(60), || async {
            nodes[0].metric("quiver_flush_segments_total").await >= 1.0
        })
        .await;
    let before = first.clone().unwrap_or_default();
    assert_eq!(answers(&nodes[0]).await.as_ref(), Ok(&before));

    // The storage gauges add up the data groups a node holds (the first group holds no
    // rows), and each group reports its own Raft state: one leader per group across
    // the cluster (four data groups and the first).
    nodes[0]
        .wait_for(
            "files counted in the gauges",
            Duration::from_secs(60),
            || async {
                nodes[0].metric("quiver_parquet_files").await >= 1.0
                    && nodes[0].metric("quiver_parquet_rows").await >= 1.0
            },
        )
        .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut leaders = 0.0;
        for node in &nodes {
            leaders += node.metric("quiver_group_is_leader").await;
        }
        if leaders == 5.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{leaders} group leaders reported, not 5"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Node 2 killed: every group still has a member, and the others answer the same at
    // once: a group's schema comes from a member that answers, its stage goes there,
    // and a stage sent to the dead node is run again elsewhere.
    nodes[1].kill();
    for i in [0, 2, 3] {
        let node = &nodes[i];
        assert_eq!(
            answers(node).await.as_ref(),
            Ok(&before),
            "{} right after node 2 died\n{}",
            node.url,
            node.log_tail()
        );
    }
    nodes[1].kill();
    drop(nodes);
}

/// Node 1's directory sends node 2's stages to a port where nothing listens (as for a
/// worker that died while its node's HTTP still answers): every stage routed there is
/// run again on the group's other member, and the answers stay exact; with the other
/// member gone too, the query fails as unavailable (503), never partial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_whose_worker_cannot_be_reached_runs_on_another_member() {
    let dir = tempfile::tempdir().expect("tempdir");
    let worker_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let workers = |dead_node_2: Option<u16>| {
        worker_ports
            .iter()
            .enumerate()
            .map(|(i, p)| match (i, dead_node_2) {
                (1, Some(dead)) => format!("2=http://127.0.0.1:{dead}"),
                _ => format!("{}=http://127.0.0.1:{p}", i + 1),
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let dead_port = free_port();
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "3".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "2".to_string()),
    ];
    let specs: Vec<_> = specs(dir.path(), 3, &env)
        .into_iter()
        .zip(&worker_ports)
        .enumerate()
        .map(|(i, (spec, port))| {
            let directory = workers((i == 0).then_some(dead_port));
            spec.with("QUIVER_CLUSTER_QUERY_WORKERS", directory).with(
                "QUIVER_CLUSTER_QUERY_WORKER_ADDR",
                format!("127.0.0.1:{port}"),
            )
        })
        .collect();
    let mut nodes = start(specs).await;
    for batch in 0..BATCHES {
        let (status, answer) = nodes[0].write_lp("/write?db=db", &body(batch)).await;
        assert_eq!(status, 204, "batch {batch}: {answer}");
    }
    // Measurements node 1 does not hold whose group prefers node 2.
    let mut via_node_2 = Vec::new();
    for m in 0..MEASUREMENTS {
        let plan = plan_text(
            &nodes[0]
                .rows("db", &format!("EXPLAIN SELECT count(*) FROM m{m}"))
                .await,
        );
        if plan.contains("nodes=[2,") {
            via_node_2.push(m);
        }
    }
    assert!(
        !via_node_2.is_empty(),
        "no measurement's stage would go to node 2 first; the test needs one"
    );
    let got = answers(&nodes[0]).await;
    let got = got.unwrap_or_else(|e| panic!("{e}\n{}", nodes[0].log_tail()));
    for m in 0..MEASUREMENTS {
        assert!(right(m, &got[&m]), "m{m}: {}", got[&m]);
    }
    assert!(
        nodes[0]
            .metric("quiver_query_reruns_after_unreachable_worker_total")
            .await
            >= 1.0,
        "a stage sent to the unreachable worker was run again"
    );
    assert!(
        nodes[2]
            .metric("quiver_query_stages_run_for_other_nodes_total")
            .await
            >= 1.0
    );

    // Node 3 gone as well: the groups it shared with node 2 have no worker node 1 can
    // reach. The query fails as unavailable, naming the cause; it never answers short.
    nodes[2].kill();
    let m = via_node_2[0];
    let (status, answer) = nodes[0]
        .query("db", &format!("SELECT count(*) FROM m{m}"))
        .await;
    assert_eq!(status, 503, "{answer}");
    assert!(
        answer.to_string().contains("could not be reached"),
        "{answer}"
    );
    nodes[2].kill();
    drop(nodes);
}

/// A measurement held elsewhere joined with a large one held here: the join is
/// partitioned (each side hash-repartitioned on the keys), so the remote side's stage
/// must deliver its rows partitioned as the join expects. Every row matches once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_measurement_joined_with_a_large_local_one_matches_every_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nodes = start(worker_cluster(dir.path())).await;
    // One row in each candidate, then which of them node 1 holds.
    let mut seed = String::new();
    for c in 0..8 {
        seed.push_str(&format!("c{c},host=h0 n=-1i 1700000000000000000\n"));
    }
    let (status, answer) = nodes[0].write_lp("/write?db=db", &seed).await;
    assert_eq!(status, 204, "{answer}");
    let mut local = None;
    let mut remote = None;
    for c in 0..8 {
        let plan = plan_text(
            &nodes[0]
                .rows("db", &format!("EXPLAIN SELECT count(*) FROM c{c}"))
                .await,
        );
        if plan.contains("GroupScanExec") {
            remote.get_or_insert(c);
        } else {
            local.get_or_insert(c);
        }
    }
    let (Some(local), Some(remote)) = (local, remote) else {
        panic!("node 1 holds all or none of eight measurements");
    };
    // Past DataFusion's single-partition join thresholds (128 K rows, 1 MB).
    const ROWS: usize = 150_000;
    for chunk in 0..ROWS / 50_000 {
        let mut body = String::new();
        for i in chunk * 50_000..(chunk + 1) * 50_000 {
            let t = 1_700_000_000_000_000_000i64 + i as i64 * 1_000;
            for c in [local, remote] {
                body.push_str(&format!("c{c},host=h{} n={i}i {t}\n", i % 50));
            }
        }
        let (status, answer) = nodes[0].write_lp("/write?db=db", &body).await;
        assert_eq!(status, 204, "{answer}");
    }
    let join = format!(
        "SELECT count(*) FROM c{local} a JOIN c{remote} b ON a.host = b.host AND a.n = b.n"
    );
    let plan = plan_text(&nodes[0].rows("db", &format!("EXPLAIN {join}")).await);
    assert!(plan.contains("NetworkCoalesceExec"), "{plan}");
    assert!(
        plan.contains("mode=Partitioned"),
        "the join this test is about: {plan}"
    );
    for _ in 0..3 {
        let rows = nodes[0].rows("db", &join).await;
        assert_eq!(rows[0][0].as_u64(), Some(ROWS as u64 + 1), "{plan}");
    }
    // Two scans of the remote measurement (two stages once such plans are shipped;
    // read here while they are not): the same answer.
    let selfjoin = format!(
        "SELECT count(*) FROM c{remote} a JOIN c{remote} b ON a.host = b.host AND a.n = b.n"
    );
    let plan = plan_text(&nodes[0].rows("db", &format!("EXPLAIN {selfjoin}")).await);
    for _ in 0..5 {
        let rows = nodes[0].rows("db", &selfjoin).await;
        assert_eq!(rows[0][0].as_u64(), Some(ROWS as u64 + 1), "{plan}");
    }
}
