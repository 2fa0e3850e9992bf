//! The data lifecycle on three nodes: compactions, a retention drop, a delete and
//! continuous-query windows decided by the leader and carried out by every replica,
//! through kill -9 of the leader in the middle of them and a follower that was down
//! for all of it. At the end every replica holds the same files, byte for byte, and
//! `quiver verify` is green.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::cluster_support::{leader, specs, start};
use crate::common::{Node, TOKEN};
use crate::lifecycle::{admin, hourly, now_ns, parquet_files, DAY_NS, HOUR_NS};

fn env() -> Vec<(&'static str, String)> {
    vec![
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "200".into()),
        ("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", "300".into()),
        ("QUIVER_COMPACTION_CHECK_INTERVAL_MS", "200".into()),
        ("QUIVER_COMPACTION_CLOSED_AFTER_MS", "1000".into()),
        ("QUIVER_QUERY_TIMEOUT_MS", "5000".into()),
        ("QUIVER_COMPACTION_INPUT_GRACE_MS", "6000".into()),
        ("QUIVER_LIMITS_WRITE_HOURS_MAX", "5000".into()),
    ]
}

/// The files of a node with their bytes.
fn files_with_bytes(node: &Node) -> BTreeMap<String, Vec<u8>> {
    let root = node.spec.data_dir.join("parquet");
    parquet_files(node)
        .into_iter()
        .map(|(p, _)| {
            let bytes = std::fs::read(root.join(&p)).unwrap_or_default();
            (p, bytes)
        })
        .collect()
}

async fn content(node: &Node) -> Vec<Vec<Value>> {
    node.rows(
        "db",
        "SELECT host, count(*), sum(v), min(time), max(time) FROM cpu GROUP BY host ORDER BY host",
    )
    .await
}

async fn settled(node: &Node) -> bool {
    let Ok(r) = node
        .client
        .get(format!("{}/api/v1/storage", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
    else {
        return false;
    };
    let Ok(s) = r.json::<Value>().await else {
        return false;
    };
    s["compactions_pending"] == 0
        && node.metric("quiver_buffer_rows").await == 0.0
        && node.metric("quiver_frozen_segments").await == 0.0
}

fn verify(nodes: &[Node]) -> Value {
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(["verify", "--nodes", &urls.join(","), "--token", TOKEN])
        .output()
        .expect("run quiver verify");
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&report).expect("verify prints JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_decisions_survive_leader_kills_and_a_follower_that_missed_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(specs(dir.path(), 3, &env())).await;
    let l = leader(&nodes, &[0, 1, 2]).await;
    let away = (l + 1) % 3;
    let other = (l + 2) % 3;

    // Five days of hourly rows for hosts a and b, ending 90 minutes ago, written in
    // several requests (several segments per hour: merges to do). Rows sit half an
    // hour away from the retention cutoff's hourly crossings, so no row crosses it
    // while the test runs.
    let end = now_ns() - 3 * HOUR_NS / 2;
    let start_ns = end - 5 * DAY_NS;
    for offset in [0, 60_000_000_000, 120_000_000_000] {
        let (s, t) = nodes[l]
            .write_msgpack("db", hourly("cpu", start_ns + offset, 5 * 24, &["a", "b"]))
            .await;
        assert_eq!(s, 204, "{t}");
    }
    // The follower goes away for everything that follows.
    nodes[away].kill();

    // Retention of 3 days drops two days of files; a delete hides host a's first day
    // of what is left; a continuous query rolls up every hour.
    let (s, body) = admin(
        &nodes[l],
        reqwest::Method::PUT,
        "/api/v1/retention/db",
        Some(json!({"duration": "3d"})),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let cut = end - 2 * DAY_NS;
    let (s, body) = admin(
        &nodes[l],
        reqwest::Method::POST,
        "/api/v1/delete",
        Some(json!({"database": "db", "measurement": "cpu",
            "where": format!("host = 'a' AND time < {cut}")})),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let query = "SELECT time_bucket(INTERVAL '1 hour', time) AS time, host, sum(v) AS v, count(*) AS n FROM cpu GROUP BY 1, 2";
    let (s, body) = admin(
        &nodes[l],
        reqwest::Method::POST,
        "/api/v1/continuous_queries",
        Some(
            json!({"name": "roll", "database": "db", "query": query, "into": "cpu_1h",
            "every": "1h", "lag": "1m", "backfill": "4d"}),
        ),
    )
    .await;
    assert_eq!(s, 201, "{body}");

    // Kill -9 the leader while merges, drops and windows are under way, twice.
    let mut alive = vec![l, other];
    for round in 0..2 {
        let lead = leader(&nodes, &alive).await;
        nodes[lead]
            .wait_for("work under way", Duration::from_secs(60), || async {
                nodes[lead].metric("quiver_compactions_total").await >= (round + 1) as f64
                    || nodes[lead].metric("quiver_cq_windows_written_total").await >= 1.0
            })
            .await;
        nodes[lead].kill();
        nodes[lead].respawn();
        nodes[lead].wait_ready().await;
        alive.sort();
    }
    for &i in &alive {
        let node = &nodes[i];
        node.wait_for("lifecycle work done", Duration::from_secs(120), || async {
            settled(node).await
        })
        .await;
    }
    let lead = leader(&nodes, &alive).await;
    nodes[lead]
        .wait_for("72 windows rolled up", Duration::from_secs(120), || async {
            let (_, body) = admin(
                &nodes[lead],
                reqwest::Method::GET,
                "/api/v1/continuous_queries",
                None,
            )
            .await;
            body["continuous_queries"][0]["next_window_start"]
                .as_str()
                .is_some_and(|t| chrono_like_ns(t) >= end - HOUR_NS)
        })
        .await;

    // What the decisions made of the data: 3 days kept (retention), host a's first
    // kept day deleted, each rollup row once per (hour, host).
    let expected = content(&nodes[lead]).await;
    let a = &expected[0];
    let b = &expected[1];
    assert_eq!(a[0], "a");
    assert!(
        b[1].as_i64().unwrap() <= 3 * 24 * 3 && b[1].as_i64().unwrap() >= 3 * 24 * 3 - 6,
        "host b keeps about 3 days: {expected:?}"
    );
    assert!(
        a[1].as_i64().unwrap() <= 2 * 24 * 3 && a[1].as_i64().unwrap() >= 2 * 24 * 3 - 6,
        "host a keeps about 2 days: {expected:?}"
    );
    let dupes = nodes[lead]
        .rows(
            "db",
            "SELECT count(*) FROM (SELECT time, host FROM cpu_1h GROUP BY 1, 2 HAVING count(*) > 1)",
        )
        .await;
    assert_eq!(dupes[0][0], 0, "one rollup row per (window, host)");

    // The follower comes back and catches up to the same files and rows.
    nodes[away].respawn();
    nodes[away].wait_ready().await;
    // Compared in one poll: new windows or an hour's merge may still change them.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let mut all_settled = true;
        for node in &nodes {
            all_settled &= settled(node).await;
        }
        let files: Vec<_> = nodes.iter().map(files_with_bytes).collect();
        if all_settled && files[0] == files[1] && files[1] == files[2] && !files[0].is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replicas' files differ: {:?}",
            files
                .iter()
                .map(|f| f.keys().cloned().collect::<Vec<_>>())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (i, node) in nodes.iter().enumerate() {
        assert_eq!(content(node).await, expected, "node {}", i + 1);
    }
    let report = verify(&nodes);
    assert_eq!(report["ok"], json!(true), "{report}");
}

/// Nanoseconds of an RFC 3339 time.
fn chrono_like_ns(text: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_nanos_opt().unwrap_or(0))
        .unwrap_or(0)
}
