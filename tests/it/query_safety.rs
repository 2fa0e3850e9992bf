//! Query safety over HTTP: every refused statement class is a 400, and the timeout, both
//! memory limits, a full queue and a failure after streaming began each answer as
//! documented (504, 507, 429 with `Retry-After`, a cut-off body).

use std::time::Duration;

use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::common::{batch_payload, Node, NodeSpec, TOKEN};

const DB: &str = "s";
/// 2024-01-01T00:00:00Z.
const T0_NS: i64 = 1_704_067_200_000_000_000;
const ROWS: usize = 3000;
const TIMEOUT_MS: u64 = 4000;
/// Runs for minutes on any machine, in constant memory, until its deadline stops it.
const ENDLESS: &str = "SELECT max(value * 2) FROM generate_series(1, 100000000000)";
/// Joins every row with the others of its host and sorts: tens of megabytes.
const MEMORY_HUNGRY: &str =
    "SELECT a.time, b.value FROM cpu a JOIN cpu b ON a.host = b.host ORDER BY b.value";

async fn node_with(dir: &std::path::Path, settings: &[(&str, u64)]) -> Node {
    let mut spec = NodeSpec::new(dir);
    for (key, value) in settings {
        spec = spec.with(key, value);
    }
    let node = Node::start(spec).await;
    let (status, text) = node
        .write_msgpack(DB, batch_payload("cpu", 1, ROWS, T0_NS, 10))
        .await;
    assert_eq!(status, 204, "{text}");
    node
}

/// The start of a body, for assertion messages (a wrong answer can be megabytes).
fn short(body: &Value) -> String {
    body.to_string().chars().take(300).collect()
}

/// Error message of a JSON error answer.
fn error_of(body: &Value) -> &str {
    assert_eq!(body["success"], json!(false), "{}", short(body));
    body["error"].as_str().unwrap_or_default()
}

fn spawn_query(node: &Node, sql: &str) -> JoinHandle<(u16, Value)> {
    let request = node
        .client
        .post(format!("{}/api/v1/query", node.url))
        .bearer_auth(TOKEN)
        .header("x-arc-database", DB)
        .json(&json!({"sql": sql}));
    tokio::spawn(async move {
        let r = request.send().await.expect("sent");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refused_statement_class_is_a_400() {
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(dir.path(), &[]).await;
    let classes: [(&str, &[&str], &str); 6] = [
        (
            "DDL",
            &[
                "CREATE TABLE t (a INT)",
                "CREATE VIEW v AS SELECT * FROM cpu",
                "DROP TABLE cpu",
                "ALTER TABLE cpu ADD COLUMN x INT",
            ],
            "DDL",
        ),
        (
            "DML",
            &[
                "INSERT INTO cpu (value) VALUES (1.0)",
                "UPDATE cpu SET value = 1.0",
                "DELETE FROM cpu",
            ],
            "DML",
        ),
        (
            "COPY",
            &[
                "COPY cpu TO '/tmp/quiver-copy.parquet'",
                "COPY (SELECT * FROM cpu) TO '/tmp/quiver-copy.csv'",
            ],
            "COPY",
        ),
        (
            "external tables",
            &["CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '/etc/'"],
            "CREATE EXTERNAL TABLE",
        ),
        (
            "file-reading table functions",
            &[
                "SELECT * FROM read_parquet('/etc/passwd')",
                "SELECT * FROM read_csv('/etc/passwd')",
                "SELECT * FROM '/etc/passwd'",
            ],
            "",
        ),
        (
            "settings",
            &[
                "SET datafusion.execution.target_partitions = 1",
                "RESET datafusion.execution.batch_size",
            ],
            "SET",
        ),
    ];
    for (class, statements, named) in classes {
        for sql in statements {
            let (status, body) = node.query(DB, sql).await;
            assert_eq!(status, 400, "{class}: {sql}: {}", short(&body));
            let message = error_of(&body);
            assert!(message.contains(named), "{class}: {sql}: {message}");
            if !named.is_empty() {
                assert!(message.contains("read-only"), "{class}: {sql}: {message}");
            }
        }
    }
    // Nothing was created, changed or read from outside.
    let rows = node.rows(DB, "SELECT count(*) FROM cpu").await;
    assert_eq!(rows[0][0].as_u64(), Some(ROWS as u64));
    let tables = node.rows(DB, "SHOW TABLES").await;
    assert!(
        tables.iter().all(|r| r[2].as_str() != Some("t")),
        "{tables:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_memory_limit_and_full_queue_answer_with_their_errors() {
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(
        dir.path(),
        &[
            ("QUIVER_QUERY_CONCURRENCY_MAX", 1),
            ("QUIVER_QUERY_QUEUE_MAX", 1),
            ("QUIVER_QUERY_TIMEOUT_MS", TIMEOUT_MS),
            ("QUIVER_QUERY_MEMORY_BYTES_MAX", 256 * 1024),
            // One partition: no repartition buffers, so the endless query needs almost
            // no memory and hits its deadline rather than the tiny memory limit.
            ("QUIVER_QUERY_TARGET_PARTITIONS", 1),
        ],
    )
    .await;

    let (status, body) = node.query(DB, MEMORY_HUNGRY).await;
    assert_eq!(status, 507, "{}", short(&body));
    let message = error_of(&body);
    assert!(
        message.contains("memory limit of 262144 bytes"),
        "{message}"
    );
    assert!(message.contains("query.memory_bytes_max"), "{message}");

    let (status, body) = node.query(DB, ENDLESS).await;
    assert_eq!(status, 504, "{}", short(&body));
    assert!(
        error_of(&body).contains(&format!("time limit of {TIMEOUT_MS} ms")),
        "{}",
        short(&body)
    );

    // One running, one queued, and the third is refused.
    let running = spawn_query(&node, ENDLESS);
    node.wait_for("a running query", Duration::from_secs(10), || async {
        node.metric("quiver_queries_running").await == 1.0
    })
    .await;
    let queued = spawn_query(&node, ENDLESS);
    node.wait_for("a queued query", Duration::from_secs(10), || async {
        node.metric("quiver_queries_queued").await == 1.0
    })
    .await;
    let (status, text, headers) = node
        .post(
            "/api/v1/query",
            &[("x-arc-database", DB), ("content-type", "application/json")],
            br#"{"sql": "SELECT 1"}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 429, "{text}");
    assert_eq!(
        headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert!(text.contains("too many queries"), "{text}");
    for handle in [running, queued] {
        let (status, body) = handle.await.expect("join");
        assert_eq!(status, 504, "{}", short(&body));
    }
    // Slots and memory come back (memory once the cancelled tasks have unwound).
    let rows = node.rows(DB, "SELECT count(*) FROM cpu").await;
    assert_eq!(rows[0][0].as_u64(), Some(ROWS as u64));
    node.wait_for("query memory released", Duration::from_secs(10), || async {
        node.metric("quiver_query_memory_bytes").await == 0.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_wide_memory_limit_is_a_507_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(
        dir.path(),
        &[("QUIVER_QUERY_NODE_MEMORY_BYTES_MAX", 256 * 1024)],
    )
    .await;
    let (status, body) = node.query(DB, MEMORY_HUNGRY).await;
    assert_eq!(status, 507, "{}", short(&body));
    let message = error_of(&body);
    assert!(
        message.contains("shared memory limit of 262144 bytes"),
        "{message}"
    );
    assert!(message.contains("query.node_memory_bytes_max"), "{message}");
}

/// Rows are on the wire (status 200) when the query fails: the body must be cut off, so
/// no client can take the rows sent so far for the whole result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_after_streaming_began_cuts_the_body_off() {
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(dir.path(), &[("QUIVER_QUERY_TIMEOUT_MS", 2000)]).await;
    let sql = format!(
        "SELECT CAST(value AS VARCHAR) AS v FROM cpu UNION ALL \
         SELECT CAST(m AS VARCHAR) FROM ({ENDLESS_INNER})"
    );
    let r = node
        .client
        .post(format!("{}/api/v1/query", node.url))
        .bearer_auth(TOKEN)
        .header("x-arc-database", DB)
        .json(&json!({"sql": sql}))
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status(), 200, "the first rows came before the deadline");
    match r.bytes().await {
        Err(_) => {}
        Ok(body) => panic!(
            "a failed query's body must not end cleanly; got {} bytes ending {:?}",
            body.len(),
            String::from_utf8_lossy(&body[body.len().saturating_sub(80)..])
        ),
    }
}

/// [`ENDLESS`] as a subquery with a named column.
const ENDLESS_INNER: &str = "SELECT max(value * 2) AS m FROM generate_series(1, 100000000000)";
