//! Query answers checked against values computed here from the generated rows, with the
//! data in the buffer only, in Parquet only, mixed, and after a restart.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::common::{Node, NodeSpec};

pub(crate) const DB: &str = "q";
/// 2023-11-14T22:00:00Z, the start of an hour.
pub(crate) const T0_S: i64 = 1_699_999_200;
pub(crate) const HOSTS: usize = 4;
const ROWS_PER_HOST: usize = 600;

/// One generated row of `cpu`: tag `host` = `h{host}`, fields `value` and `n`.
#[derive(Clone, Copy)]
pub(crate) struct Row {
    pub(crate) host: usize,
    pub(crate) time_s: i64,
    pub(crate) value: f64,
    pub(crate) n: i64,
}

fn dataset(first_hour: i64) -> Vec<Row> {
    let mut out = Vec::new();
    for host in 0..HOSTS {
        for i in 0..ROWS_PER_HOST {
            out.push(Row {
                host,
                time_s: T0_S + first_hour * 3600 + i as i64 * 12,
                value: host as f64 * 100.0 + i as f64 * 0.25,
                n: i as i64,
            });
        }
    }
    out
}

async fn write(node: &Node, rows: &[Row]) {
    for host in 0..HOSTS {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.host == host).collect();
        let body = rmp_serde::to_vec_named(&json!({"m": "cpu", "columns": {
            "time": mine.iter().map(|r| r.time_s).collect::<Vec<_>>(),
            "host": mine.iter().map(|r| format!("h{}", r.host)).collect::<Vec<_>>(),
            "value": mine.iter().map(|r| r.value).collect::<Vec<_>>(),
            "n": mine.iter().map(|r| r.n).collect::<Vec<_>>(),
        }}))
        .unwrap();
        let (status, text) = node.write_msgpack(DB, body).await;
        assert_eq!(status, 204, "{text}");
    }
}

pub(crate) fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

pub(crate) fn rfc3339(s: i64) -> String {
    chrono::DateTime::from_timestamp(s, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

async fn check(node: &Node, rows: &[Row], phase: &str) {
    let total = node.rows(DB, "SELECT count(*) FROM cpu").await;
    assert_eq!(
        total[0][0].as_u64(),
        Some(rows.len() as u64),
        "{phase}: count"
    );

    let per_host = node
        .rows(DB, "SELECT host, count(*), sum(value), avg(value), min(value), max(value), sum(n) FROM cpu GROUP BY host ORDER BY host")
        .await;
    assert_eq!(per_host.len(), HOSTS, "{phase}");
    for (h, got) in per_host.iter().enumerate() {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.host == h).collect();
        let sum: f64 = mine.iter().map(|r| r.value).sum();
        let min = mine.iter().map(|r| r.value).fold(f64::INFINITY, f64::min);
        let max = mine
            .iter()
            .map(|r| r.value)
            .fold(f64::NEG_INFINITY, f64::max);
        let n: i64 = mine.iter().map(|r| r.n).sum();
        assert_eq!(got[0].as_str(), Some(format!("h{h}").as_str()), "{phase}");
        assert_eq!(
            got[1].as_u64(),
            Some(mine.len() as u64),
            "{phase}: count h{h}"
        );
        assert!(
            close(got[2].as_f64().unwrap(), sum),
            "{phase}: sum h{h}: {} vs {sum}",
            got[2]
        );
        assert!(
            close(got[3].as_f64().unwrap(), sum / mine.len() as f64),
            "{phase}: avg h{h}"
        );
        assert!(close(got[4].as_f64().unwrap(), min), "{phase}: min h{h}");
        assert!(close(got[5].as_f64().unwrap(), max), "{phase}: max h{h}");
        assert_eq!(got[6].as_i64(), Some(n), "{phase}: sum(n) h{h}");
    }

    let mut hourly: BTreeMap<i64, u64> = BTreeMap::new();
    for r in rows {
        *hourly
            .entry(r.time_s - r.time_s.rem_euclid(3600))
            .or_default() += 1;
    }
    for sql in [
        "SELECT date_trunc('hour', time) AS h, count(*) FROM cpu GROUP BY h ORDER BY h",
        "SELECT time_bucket(INTERVAL '1 hour', time) AS h, count(*) FROM cpu GROUP BY h ORDER BY h",
    ] {
        let got = node.rows(DB, sql).await;
        let want: Vec<(String, u64)> = hourly.iter().map(|(h, c)| (rfc3339(*h), *c)).collect();
        let got: Vec<(String, u64)> = got
            .iter()
            .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_u64().unwrap()))
            .collect();
        assert_eq!(got, want, "{phase}: {sql}");
    }

    let (lo, hi) = (T0_S + 3600, T0_S + 7200);
    let in_range = rows
        .iter()
        .filter(|r| r.time_s >= lo && r.time_s < hi)
        .count() as u64;
    let got = node
        .rows(
            DB,
            &format!(
                "SELECT count(*) FROM cpu WHERE time >= '{}' AND time < '{}'",
                rfc3339(lo),
                rfc3339(hi)
            ),
        )
        .await;
    assert_eq!(got[0][0].as_u64(), Some(in_range), "{phase}: time range");

    crate::query_functions::check(node, rows, phase).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answers_match_across_buffer_parquet_mixed_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    // Compaction off: the files-and-buffer layouts below are the point.
    let never = NodeSpec::new(dir.path())
        .with("QUIVER_STORAGE_FLUSH_AGE_MS", 3_600_000)
        .with("QUIVER_COMPACTION_ENABLED", false);
    let mut node = Node::start(never.clone()).await;
    let mut rows = dataset(0);
    write(&node, &rows).await;
    assert_eq!(node.metric("quiver_parquet_files").await, 0.0);
    check(&node, &rows, "buffer only").await;

    // Restart with a short flush age: the log replays into the buffer, then flushes.
    node.kill();
    node.spec = never.clone().with("QUIVER_STORAGE_FLUSH_AGE_MS", 100);
    node.restart().await;
    node.wait_for("everything flushed", Duration::from_secs(60), || async {
        node.metric("quiver_parquet_files").await >= 2.0
            && node.metric("quiver_buffer_rows").await == 0.0
            && node.metric("quiver_frozen_segments").await == 0.0
    })
    .await;
    check(&node, &rows, "parquet only").await;

    // Back to no flushes: new rows stay in the buffer next to the files. A restart
    // opens with the files of the newest snapshot and replays the log after it into
    // the buffer, so the files survive the kill only once a snapshot lists them.
    node.wait_for_snapshot_of_everything().await;
    node.kill();
    node.spec = never;
    node.restart().await;
    let more = dataset(2);
    write(&node, &more).await;
    rows.extend(more);
    assert!(node.metric("quiver_buffer_rows").await > 0.0);
    assert!(node.metric("quiver_parquet_files").await > 0.0);
    check(&node, &rows, "mixed").await;

    node.kill();
    node.restart().await;
    check(&node, &rows, "mixed after restart").await;
}
