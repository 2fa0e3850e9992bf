//! `quiver sizing load`, the operators' load generator, against a real node: every row
//! it reports acknowledged is persisted, and a node pushing back with 429 is waited for
//! and retried, not counted as loss.

use std::process::Command;

use serde_json::Value;

use crate::common::{Node, NodeSpec, TOKEN};

const DB: &str = "sizing";

/// 40,000 rows from four workers in 500-row batches: against one write slot, they meet
/// 429s.
const CONTENDED: &[&str] = &["--rows", "40000", "--batch-size", "500", "--workers", "4"];

/// Runs the load tool against `node`; returns its exit success and JSON report.
async fn run_load(node: &Node, args: &[&str]) -> (bool, Value) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_quiver"));
    command
        .args(["sizing", "load", "--url", &node.url, "--token", TOKEN])
        .args(["--database", DB])
        .args(args);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("join")
        .expect("the load tool runs");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let report = stdout
        .find('{')
        .and_then(|start| serde_json::from_str(&stdout[start..]).ok())
        .unwrap_or_else(|| {
            panic!(
                "no report: {stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    (output.status.success(), report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_batches_are_retried_and_every_acked_row_is_persisted() {
    let dir = tempfile::tempdir().unwrap();
    // One write at a time: four workers keep running into 429 "too many writes".
    let node =
        Node::start(NodeSpec::new(dir.path()).with("QUIVER_HTTP_WRITES_IN_FLIGHT_MAX", 1)).await;
    let (ok, report) = run_load(&node, &[CONTENDED, &["--measurement", "retried"]].concat()).await;
    assert!(ok, "{report}");
    assert_eq!(report["acked_rows"], 40000, "{report}");
    assert_eq!(report["failed_rows"], 0, "{report}");
    assert_eq!(report["persisted_rows"], 40000, "{report}");
    assert_eq!(report["persisted_equals_acked"], true, "{report}");
    assert!(
        report["refused_requests"].as_u64().unwrap_or(0) > 0,
        "one write slot and four workers must meet 429s: {report}"
    );
    let rows = node.rows(DB, "SELECT count(*) FROM retried").await;
    assert_eq!(rows[0][0].as_u64(), Some(40000));

    // With retries off, a refusal is a failure, reported as such; what was acknowledged
    // is still exactly what was persisted.
    let (ok, report) = run_load(
        &node,
        &[
            CONTENDED,
            &["--measurement", "not_retried", "--retry-refused-s", "0"],
        ]
        .concat(),
    )
    .await;
    assert!(ok, "{report}");
    let acked = report["acked_rows"].as_u64().unwrap_or(0);
    assert!(report["failed_rows"].as_u64().unwrap_or(0) > 0, "{report}");
    assert_eq!(report["persisted_rows"].as_u64(), Some(acked), "{report}");
    let rows = node.rows(DB, "SELECT count(*) FROM not_retried").await;
    assert_eq!(rows[0][0].as_u64(), Some(acked));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn line_protocol_load_is_persisted_too() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let (ok, report) = run_load(
        &node,
        &["--format", "lp", "--measurement", "lp", "--rows", "10000"],
    )
    .await;
    assert!(ok, "{report}");
    assert_eq!(report["format"], "lp");
    assert_eq!(report["acked_rows"], 10000, "{report}");
    assert_eq!(report["persisted_equals_acked"], true, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_load_is_counted_per_batch_by_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let (ok, report) = run_load(
        &node,
        &[
            "--rate",
            "50000",
            "--duration-s",
            "2",
            "--measurement",
            "open",
        ],
    )
    .await;
    assert!(ok, "{report}");
    assert_eq!(report["spec"]["rate_rows_per_s"], 50000.0, "{report}");
    assert_eq!(report["offered_rows"], 100000, "{report}");
    assert_eq!(report["acked_rows"], 100000, "{report}");
    // 20 batches of 5,000, every one answered and timed from its scheduled send.
    assert_eq!(report["statuses"]["204"], 20, "{report}");
    assert_eq!(report["latency_ms"]["count"], 20, "{report}");
    assert!(
        report["latency_ms"]["p50"].as_f64().unwrap()
            >= report["service_latency_ms"]["p50"].as_f64().unwrap(),
        "latency from the schedule can't be shorter than from the send: {report}"
    );
    // Encoded before the clock started, and its cost reported.
    assert_eq!(report["generator"]["encoded_ahead_batches"], 20, "{report}");
    assert!(
        report["generator"]["encode_cpu_s"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    let audit = &report["audit"];
    assert_eq!(audit["batches_acked"], 20, "{report}");
    assert_eq!(audit["batches_whole"], 20, "{report}");
    assert_eq!(audit["persisted_rows"], 100000, "{report}");
    assert_eq!(report["persisted_equals_acked"], true, "{report}");
    let rows = node.rows(DB, "SELECT count(*) FROM open").await;
    assert_eq!(rows[0][0].as_u64(), Some(100000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_refusals_are_not_retried_and_no_refused_batch_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    // One write at a time against 16 requests in flight: most of them meet 429.
    let node =
        Node::start(NodeSpec::new(dir.path()).with("QUIVER_HTTP_WRITES_IN_FLIGHT_MAX", 1)).await;
    let (ok, report) = run_load(
        &node,
        &[
            "--rate",
            "400000",
            "--duration-s",
            "1",
            "--batch-size",
            "500",
            "--in-flight-max",
            "16",
            "--measurement",
            "refused",
        ],
    )
    .await;
    assert!(ok, "{report}");
    let (acked, refused) = (
        report["acked_rows"].as_u64().unwrap(),
        report["refused_rows"].as_u64().unwrap(),
    );
    assert!(
        refused > 0,
        "one write slot must refuse some of 16 in flight: {report}"
    );
    assert!(acked > 0, "{report}");
    assert_eq!(
        acked
            + refused
            + report["rejected_rows"].as_u64().unwrap()
            + report["unanswered_rows"].as_u64().unwrap()
            + report["not_sent_rows"].as_u64().unwrap(),
        400000,
        "{report}"
    );
    let audit = &report["audit"];
    assert_eq!(audit["refused_batches_stored"], 0, "{report}");
    assert_eq!(audit["persisted_rows"].as_u64(), Some(acked), "{report}");
    let rows = node.rows(DB, "SELECT count(*) FROM refused").await;
    assert_eq!(rows[0][0].as_u64(), Some(acked));
}
