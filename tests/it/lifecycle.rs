//! The data lifecycle end to end on one node: a segment that loses one hour's file to
//! a merge keeps its other hours across kill -9; retention hides, refuses and drops;
//! deletes hide at once and are rewritten away; continuous queries write each window
//! once, equal to the same aggregate run directly.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{Node, NodeSpec, TOKEN};

pub const HOUR_NS: i64 = 3_600_000_000_000;
pub const DAY_NS: i64 = 24 * HOUR_NS;

/// Parquet files under a node's data directory, as (object path, bytes).
pub fn parquet_files(node: &Node) -> Vec<(String, u64)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, u64)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
                out.push((rel, e.metadata().map(|m| m.len()).unwrap_or(0)));
            }
        }
    }
    let root = node.spec.data_dir.join("parquet");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out
}

/// A node that flushes and snapshots quickly and deletes replaced files soon.
pub fn quick(spec: NodeSpec) -> NodeSpec {
    spec.with("QUIVER_STORAGE_FLUSH_AGE_MS", 200)
        .with("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", 200)
        .with("QUIVER_COMPACTION_CHECK_INTERVAL_MS", 200)
        .with("QUIVER_QUERY_TIMEOUT_MS", 5_000)
        .with("QUIVER_COMPACTION_INPUT_GRACE_MS", 6_000)
        .with("QUIVER_LIMITS_WRITE_HOURS_MAX", 5_000)
}

pub async fn admin(
    node: &Node,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = node
        .client
        .request(method, format!("{}{path}", node.url))
        .bearer_auth(TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let r = request.send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// One row per `(hour, host)` over `hours` hours from `start_ns`, `v` = hour index.
pub fn hourly(m: &str, start_ns: i64, hours: i64, hosts: &[&str]) -> Vec<u8> {
    let mut time = Vec::new();
    let mut host = Vec::new();
    let mut v = Vec::new();
    for h in 0..hours {
        for (i, name) in hosts.iter().enumerate() {
            time.push(start_ns + h * HOUR_NS + i as i64 * 1_000);
            host.push(name.to_string());
            v.push(h as f64);
        }
    }
    rmp_serde::to_vec_named(&json!({"m": m, "columns": {"time": time, "host": host, "v": v}}))
        .unwrap()
}

pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

async fn quiet(node: &Node) {
    node.wait_for("everything written", Duration::from_secs(60), || async {
        node.metric("quiver_buffer_rows").await == 0.0
            && node.metric("quiver_frozen_segments").await == 0.0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flush_gives_the_memory_it_freed_back_to_the_operating_system() {
    async fn releases_reported(node: &Node) -> bool {
        let text = node
            .client
            .get(format!("{}/metrics", node.url))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .any(|l| l.starts_with("quiver_heap_released_bytes_total "))
    }
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(quick(NodeSpec::new(dir.path()))).await;
    assert!(
        !releases_reported(&node).await,
        "nothing was flushed yet, so nothing was released"
    );
    let hosts: Vec<String> = (0..2_000).map(|i| format!("host-{i}")).collect();
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let t0 = now_ns() / HOUR_NS * HOUR_NS - 3 * HOUR_NS;
    let (s, t) = node.write_msgpack("db", hourly("cpu", t0, 2, &hosts)).await;
    assert_eq!(s, 204, "{t}");
    quiet(&node).await;
    // The flush freed the buffered rows; the node's release task ran after it.
    node.wait_for(
        "a heap release after the flush",
        Duration::from_secs(30),
        || releases_reported(&node),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_segment_keeps_its_other_hour_after_a_merge_and_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    // Days never fit one file here: merges are per hour.
    let spec = quick(NodeSpec::new(dir.path())).with("QUIVER_COMPACTION_DAY_FILE_BYTES_MAX", 1);
    let mut node = Node::start(spec).await;
    // One write spanning hours H and H+1 (one segment, two files), then more rows of
    // hour H (a second segment): closed hour H merges, and its two inputs are deleted;
    // the first segment keeps only its hour H+1 file.
    let t0 = now_ns() / HOUR_NS * HOUR_NS - 5 * HOUR_NS;
    let (s, t) = node
        .write_msgpack("db", hourly("cpu", t0, 2, &["a", "b"]))
        .await;
    assert_eq!(s, 204, "{t}");
    quiet(&node).await;
    let (s, t) = node
        .write_msgpack("db", hourly("cpu", t0 + 5_000, 1, &["c"]))
        .await;
    assert_eq!(s, 204, "{t}");
    node.wait_for(
        "hour 22 merged and its inputs deleted",
        Duration::from_secs(60),
        || async {
            node.metric("quiver_compactions_total").await >= 1.0 && parquet_files(&node).len() == 2
        },
    )
    .await;
    let before = node.rows("db", "SELECT count(*), sum(v) FROM cpu").await;
    assert_eq!(before[0][0], 5);
    node.kill();
    node.respawn();
    node.wait_ready().await;
    assert_eq!(
        node.rows("db", "SELECT count(*), sum(v) FROM cpu").await,
        before,
        "hour 23 of the first segment must survive the restart; log:\n{}",
        node.log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_hides_at_once_refuses_old_writes_and_drops_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(quick(NodeSpec::new(dir.path()))).await;
    // 60 days of hourly rows, two hosts, ending an hour ago.
    let end = now_ns() / HOUR_NS * HOUR_NS - HOUR_NS;
    let start = end - 60 * DAY_NS;
    let (s, t) = node
        .write_msgpack("db", hourly("cpu", start, 60 * 24, &["a", "b"]))
        .await;
    assert_eq!(s, 204, "{t}");
    quiet(&node).await;
    let all = node.rows("db", "SELECT count(*) FROM cpu").await;
    assert_eq!(all[0][0], 60 * 24 * 2);

    let (s, body) = admin(
        &node,
        reqwest::Method::PUT,
        "/api/v1/retention/db",
        Some(json!({"duration": "30d"})),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["retention"]["duration"], "30d");
    let (s, body) = admin(&node, reqwest::Method::GET, "/api/v1/retention", None).await;
    assert_eq!(s, 200);
    assert_eq!(body["retention"][0]["database"], "db");

    // At once: only rows of the last 30 days are visible.
    let cutoff = now_ns() - 30 * DAY_NS;
    let visible = node.rows("db", "SELECT count(*), min(time) FROM cpu").await;
    let cutoff_after = now_ns() - 30 * DAY_NS;
    // Rows at or after `from` among those written (two per hour); the cutoff the node
    // applied lies between the two clock readings (give or take its hour rounding),
    // which may straddle an hour boundary.
    let written_since =
        |from: i64| 2 * (0..60 * 24).filter(|k| start + k * HOUR_NS >= from).count() as i64;
    let expected = node
        .rows(
            "db",
            &format!("SELECT count(*) FROM cpu WHERE time >= to_timestamp_nanos({cutoff})"),
        )
        .await;
    let n = visible[0][0].as_i64().unwrap();
    let (fewest, most) = (
        written_since(cutoff_after + HOUR_NS),
        written_since(cutoff - HOUR_NS),
    );
    assert!(
        (fewest..=most).contains(&n) && most - fewest <= 8,
        "30 days of rows visible ({fewest}..={most}), got {n}"
    );
    assert_eq!(visible[0][0], expected[0][0]);

    // Writing rows past the retention: refused per row, the others written.
    let old = start + DAY_NS;
    let lp = format!(
        "cpu,host=z v=1 {old}\ncpu,host=z v=2 {}\n",
        end - HOUR_NS + 7
    );
    let (s, body) = node
        .write_lp("/api/v2/write?bucket=db&precision=ns", &lp)
        .await;
    assert_eq!(s, 400, "{body}");
    assert_eq!(body["rejected"][0]["line"], 1, "{body}");
    assert!(
        body["rejected"][0]["error"]
            .as_str()
            .unwrap()
            .contains("older than the retention"),
        "{body}"
    );
    let z = node
        .rows("db", "SELECT count(*) FROM cpu WHERE host = 'z'")
        .await;
    assert_eq!(z[0][0], 1, "the line inside the retention is written");
    let (s, text) = node
        .write_msgpack("db", hourly("cpu", start, 2, &["y"]))
        .await;
    assert_eq!(s, 400, "{text}");
    assert!(text.contains("older than its retention"), "{text}");

    // The leader drops the files wholly past the retention; they leave the disk.
    let cutoff_day = chrono_day(cutoff);
    node.wait_for("expired files deleted", Duration::from_secs(90), || async {
        parquet_files(&node)
            .iter()
            .all(|(p, _)| file_day(p) >= cutoff_day - 1)
    })
    .await;
    assert!(node.metric("quiver_retention_files_dropped_total").await >= 1.0);
    let after = node.rows("db", "SELECT count(*) FROM cpu").await;
    node.kill();
    node.respawn();
    node.wait_ready().await;
    let again = node.rows("db", "SELECT count(*) FROM cpu").await;
    assert!(
        again[0][0].as_i64().unwrap() <= after[0][0].as_i64().unwrap(),
        "nothing dropped comes back"
    );
    assert!(again[0][0].as_i64().unwrap() >= after[0][0].as_i64().unwrap() - 4);

    let (s, _) = admin(&node, reqwest::Method::DELETE, "/api/v1/retention/db", None).await;
    assert_eq!(s, 204);
    let (s, _) = admin(&node, reqwest::Method::DELETE, "/api/v1/retention/db", None).await;
    assert_eq!(s, 404);
}

/// Days since the epoch of `ns`.
fn chrono_day(ns: i64) -> i64 {
    ns.div_euclid(DAY_NS)
}

/// Days since the epoch of the `YYYY-MM-DD` directory in an object path.
fn file_day(path: &str) -> i64 {
    let date = path
        .split('/')
        .find(|c| c.len() == 10 && c.as_bytes()[4] == b'-')
        .expect("a date directory");
    let (y, rest) = date.split_at(4);
    let (m, d) = (&rest[1..3], &rest[4..6]);
    days_from_civil(y.parse().unwrap(), m.parse().unwrap(), d.parse().unwrap())
}

/// Howard Hinnant's days-from-civil.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_hides_rows_at_once_keeps_later_ones_and_is_rewritten_away() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(quick(NodeSpec::new(dir.path()))).await;
    let t0 = 1_700_000_000_000_000_000 / HOUR_NS * HOUR_NS;
    // Hosts a, b over 6 hours in Parquet; 2 more hours in memory only.
    let (s, t) = node
        .write_msgpack("db", hourly("cpu", t0, 6, &["a", "b"]))
        .await;
    assert_eq!(s, 204, "{t}");
    quiet(&node).await;
    let (s, t) = node
        .write_msgpack("db", hourly("cpu", t0 + 6 * HOUR_NS, 2, &["a", "b"]))
        .await;
    assert_eq!(s, 204, "{t}");

    let cut = t0 + 7 * HOUR_NS; // deletes host a in hours 0..7: 7 rows
    let where_ = format!("host = 'a' AND time < {cut}");
    let (s, body) = admin(
        &node,
        reqwest::Method::POST,
        "/api/v1/delete",
        Some(json!({"database": "db", "measurement": "cpu", "where": where_})),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["deleted"], 7, "{body}");
    let hosts = "SELECT host, count(*) FROM cpu GROUP BY host ORDER BY host";
    assert_eq!(
        node.rows("db", hosts).await,
        vec![vec![json!("a"), json!(1)], vec![json!("b"), json!(8)]]
    );
    // Written after the delete, inside its range: visible.
    let (s, t) = node
        .write_msgpack("db", hourly("cpu", t0 + 500, 1, &["a"]))
        .await;
    assert_eq!(s, 204, "{t}");
    assert_eq!(
        node.rows("db", "SELECT count(*) FROM cpu WHERE host = 'a'")
            .await[0][0],
        2
    );

    // Refusals name the part.
    for (predicate, part) in [
        ("host = 'a' OR host = 'b'", "OR"),
        ("v > 1", "field"),
        ("region = 'x'", "no tag"),
    ] {
        let (s, body) = admin(
            &node,
            reqwest::Method::POST,
            "/api/v1/delete",
            Some(json!({"database": "db", "measurement": "cpu", "where": predicate})),
        )
        .await;
        assert_eq!(s, 400, "{predicate}: {body}");
        assert!(body["error"].as_str().unwrap().contains(part), "{body}");
    }

    // Compaction rewrites the deleted rows out of the files; the answer stays.
    node.wait_for(
        "deleted rows rewritten away",
        Duration::from_secs(60),
        || async {
            node.metric("quiver_compactions_total").await >= 1.0
                && node.metric("quiver_compaction_backlog").await == 0.0
        },
    )
    .await;
    quiet(&node).await;
    node.wait_for(
        "no file left to rewrite",
        Duration::from_secs(60),
        || async { files_hold_host_a_before(&node, cut) == 1 },
    )
    .await;
    let before = node.rows("db", hosts).await;
    node.kill();
    node.respawn();
    node.wait_ready().await;
    assert_eq!(node.rows("db", hosts).await, before);
    assert_eq!(
        before,
        vec![vec![json!("a"), json!(2)], vec![json!("b"), json!(8)]]
    );
}

/// Regression (issue 36, item 2): text the delete grammar does not wholly consume was
/// applied by its first part: `region = 'eu' host = 'a'` (a missing AND) deleted all 30
/// `eu` rows instead of 10. Every such text is now a 400 naming where it goes wrong, and
/// deletes nothing; a dry run counts what a delete would remove.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_delete_is_refused_with_its_position_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeSpec::new(dir.path())).await;
    let mut body = String::new();
    for (r, region) in ["eu", "us"].iter().enumerate() {
        for (h, host) in ["a", "b", "c"].iter().enumerate() {
            for i in 0..10 {
                let t = 1_700_000_000_000_000_000i64 + ((r * 30 + h * 10 + i) as i64) * 1_000;
                body.push_str(&format!("cpu,region={region},host={host} v={i} {t}\n"));
            }
        }
    }
    let (s, t) = node
        .write_lp("/api/v2/write?bucket=db&precision=ns", &body)
        .await;
    assert_eq!(s, 204, "{t}");
    let count = "SELECT count(*) FROM cpu";
    assert_eq!(node.rows("db", count).await[0][0], 60);
    let delete = |predicate: &str, dry_run: bool| {
        let body = json!({"database": "db", "measurement": "cpu", "where": predicate,
            "dry_run": dry_run});
        admin(&node, reqwest::Method::POST, "/api/v1/delete", Some(body))
    };
    for (predicate, at) in [
        ("region = 'eu' host = 'a'", "`host` at line 1, column 15"),
        ("host = 'a', region = 'us'", "`,` at line 1, column 11"),
        (
            "region = 'eu' AND host = 'a' garbage",
            "`garbage` at line 1, column 30",
        ),
    ] {
        let (s, body) = delete(predicate, false).await;
        assert_eq!(s, 400, "{predicate}: {body}");
        assert!(body["error"].as_str().unwrap().contains(at), "{body}");
        assert_eq!(node.rows("db", count).await[0][0], 60, "{predicate}");
    }
    let meant = "region = 'eu' AND host = 'a'";
    let (s, body) = delete(meant, true).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["would_delete"], 10, "{body}");
    assert_eq!(
        node.rows("db", count).await[0][0],
        60,
        "a dry run deletes nothing"
    );
    let (s, body) = delete(meant, false).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["deleted"], 10, "{body}");
    assert_eq!(node.rows("db", count).await[0][0], 50);
}

/// Rows of host `a` before `cut` in the node's Parquet files, read from the files
/// themselves.
fn files_hold_host_a_before(node: &Node, cut: i64) -> usize {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::TimestampNanosecondType;
    let root = node.spec.data_dir.join("parquet");
    let mut n = 0;
    for (path, _) in parquet_files(node) {
        let Ok(file) = std::fs::File::open(root.join(&path)) else {
            continue;
        };
        let Ok(reader) =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        else {
            continue;
        };
        for batch in reader.build().unwrap() {
            let batch = batch.unwrap();
            let time = batch
                .column_by_name("time")
                .unwrap()
                .as_primitive::<TimestampNanosecondType>();
            let host = arrow::compute::cast(
                batch.column_by_name("host").unwrap(),
                &arrow::datatypes::DataType::Utf8,
            )
            .unwrap();
            let host = host.as_string::<i32>();
            n += (0..batch.num_rows())
                .filter(|&i| host.is_valid(i) && host.value(i) == "a" && time.value(i) < cut)
                .count();
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_continuous_query_writes_each_window_once_equal_to_the_direct_aggregate() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(quick(NodeSpec::new(dir.path()))).await;
    // 12 hours of rows ending two hours ago, 3 hosts, 4 rows per host and hour.
    let end = now_ns() / HOUR_NS * HOUR_NS - 2 * HOUR_NS;
    let start = end - 12 * HOUR_NS;
    for quarter in 0..4 {
        let (s, t) = node
            .write_msgpack(
                "db",
                hourly(
                    "cpu",
                    start + quarter * 900_000_000_000,
                    12,
                    &["a", "b", "c"],
                ),
            )
            .await;
        assert_eq!(s, 204, "{t}");
    }
    let query = "SELECT time_bucket(INTERVAL '1 hour', time) AS time, host, avg(v) AS value, count(*) AS n FROM cpu GROUP BY 1, 2";
    let (s, body) = admin(
        &node,
        reqwest::Method::POST,
        "/api/v1/continuous_queries",
        Some(json!({"name": "cpu_1h", "database": "db", "query": query,
            "into": "cpu_1h", "every": "1h", "lag": "5m", "backfill": "1d"})),
    )
    .await;
    assert_eq!(s, 201, "{body}");
    node.wait_for("12 windows written", Duration::from_secs(60), || async {
        let (_, body) = admin(
            &node,
            reqwest::Method::GET,
            "/api/v1/continuous_queries",
            None,
        )
        .await;
        body["continuous_queries"][0]["windows_written"].as_u64() >= Some(12)
    })
    .await;
    let rollup = "SELECT time, host, value, n FROM cpu_1h ORDER BY time, host";
    let direct = format!(
        "SELECT time_bucket(INTERVAL '1 hour', time) AS time, host, avg(v) AS value, count(*) AS n FROM cpu WHERE time < to_timestamp_nanos({end}) GROUP BY 1, 2 ORDER BY 1, 2"
    );
    let got = node.rows("db", rollup).await;
    assert_eq!(got.len(), 36, "one row per (window, host)");
    assert_eq!(got, node.rows("db", &direct).await);
    let (_, body) = admin(
        &node,
        reqwest::Method::GET,
        "/api/v1/continuous_queries",
        None,
    )
    .await;
    let cq = &body["continuous_queries"][0];
    assert_eq!(cq["every"], "1h");
    assert!(cq["last_window_end"].as_str().is_some(), "{cq}");

    // A restart resumes from the progress in the log: no window twice.
    node.kill();
    node.respawn();
    node.wait_ready().await;
    quiet(&node).await;
    assert_eq!(node.rows("db", rollup).await, got);

    // Recreated over the same windows, it replaces them instead of doubling them.
    let (s, _) = admin(
        &node,
        reqwest::Method::DELETE,
        "/api/v1/continuous_queries/db/cpu_1h",
        None,
    )
    .await;
    assert_eq!(s, 204);
    let (s, body) = admin(
        &node,
        reqwest::Method::POST,
        "/api/v1/continuous_queries",
        Some(json!({"name": "cpu_1h", "database": "db", "query": query,
            "into": "cpu_1h", "every": "1h", "lag": "5m", "backfill": "1d"})),
    )
    .await;
    assert_eq!(s, 201, "{body}");
    node.wait_for("windows written again", Duration::from_secs(60), || async {
        let (_, body) = admin(
            &node,
            reqwest::Method::GET,
            "/api/v1/continuous_queries",
            None,
        )
        .await;
        body["continuous_queries"][0]["windows_written"].as_u64() >= Some(12)
    })
    .await;
    assert_eq!(node.rows("db", rollup).await, got, "replaced, not doubled");

    // A query reading its own target, or that does not run, is refused.
    let (s, body) = admin(
        &node,
        reqwest::Method::POST,
        "/api/v1/continuous_queries",
        Some(
            json!({"name": "loop", "database": "db", "query": "SELECT time, value FROM cpu_1h",
            "into": "cpu_1h", "every": "1h"}),
        ),
    )
    .await;
    assert_eq!(s, 400, "{body}");
    let (s, body) = admin(
        &node,
        reqwest::Method::POST,
        "/api/v1/continuous_queries",
        Some(
            json!({"name": "bad", "database": "db", "query": "SELECT nope FROM cpu",
            "into": "x", "every": "1h"}),
        ),
    )
    .await;
    assert_eq!(s, 400, "{body}");
}
