//! History loaded over the ordinary write path: months in one request, stored as one
//! file per day (an hour per file only for the newest two days of the data), read back
//! whole after kill -9, and merged by compaction like any other files.

use std::time::Duration;

use serde_json::Value;

use crate::common::{Node, NodeSpec, TOKEN};

/// 2023-01-01T00:00:00Z, in seconds.
const START_S: i64 = 1_672_531_200;
const DAYS: i64 = 90;

async fn storage(node: &Node) -> Value {
    let response = node
        .client
        .get(format!("{}/api/v1/storage", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// (rows, sum of v, rows of the tenth day).
async fn totals(node: &Node) -> (i64, i64, i64) {
    let rows = node
        .rows(
            "hist",
            &format!(
                "SELECT count(*), sum(v), \
                 sum(CASE WHEN time >= to_timestamp({}) AND time < to_timestamp({}) \
                 THEN 1 ELSE 0 END) FROM temp",
                START_S + 9 * 86_400,
                START_S + 10 * 86_400
            ),
        )
        .await;
    let n = |v: &Value| v.as_i64().unwrap_or(-1);
    (n(&rows[0][0]), n(&rows[0][1]), n(&rows[0][2]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ninety_days_in_one_write_make_day_files_and_survive_kill_9_and_merges() {
    let dir = tempfile::tempdir().unwrap();
    let spec = NodeSpec::new(dir.path())
        .with("QUIVER_COMPACTION_ENABLED", "false")
        .with("QUIVER_STORAGE_FLUSH_AGE_MS", "300");
    let mut node = Node::start(spec).await;
    // One row an hour for 90 days, two sensors: 4,320 rows in one request spanning
    // 2,160 hours (the old limit refused anything past 168).
    let mut body = String::new();
    let mut sum = 0i64;
    for hour in 0..DAYS * 24 {
        for sensor in ["a", "b"] {
            let v = hour % 97;
            sum += v;
            body.push_str(&format!(
                "temp,sensor={sensor} v={v}i {}\n",
                START_S + hour * 3_600
            ));
        }
    }
    let (status, answer) = node.write_lp("/write?db=hist&precision=s", &body).await;
    assert_eq!(status, 204, "{answer}");
    node.wait_for("the flush", Duration::from_secs(30), || async {
        node.metric("quiver_buffer_rows").await == 0.0 && storage(&node).await["files"] != 0
    })
    .await;
    // 88 day files, and 2 x 24 hour files for the newest two days.
    assert_eq!(storage(&node).await["files"], 88 + 48);
    let expected = (DAYS * 48, sum, 48);
    assert_eq!(totals(&node).await, expected);

    node.kill();
    node.respawn();
    node.wait_ready().await;
    assert_eq!(totals(&node).await, expected, "{}", node.log_tail());
    // Files written after the newest snapshot are written again from the log, under
    // the same names: the same 136.
    node.wait_for("the same files again", Duration::from_secs(30), || async {
        storage(&node).await["files"] == 88 + 48 && node.metric("quiver_buffer_rows").await == 0.0
    })
    .await;
    assert_eq!(totals(&node).await, expected, "{}", node.log_tail());

    // With compaction on, the closed hours of the last two days merge into day files
    // beside the day files the flush wrote; nothing is lost or doubled.
    node.kill();
    node.spec
        .env
        .retain(|(k, _)| k != "QUIVER_COMPACTION_ENABLED");
    node.spec
        .env
        .push(("QUIVER_COMPACTION_CHECK_INTERVAL_MS".into(), "200".into()));
    node.respawn();
    node.wait_ready().await;
    node.wait_for("day files only", Duration::from_secs(60), || async {
        let s = storage(&node).await;
        s["files"] == DAYS && s["compactions_pending"] == 0
    })
    .await;
    assert_eq!(totals(&node).await, expected, "{}", node.log_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_past_the_file_limit_is_refused_whole_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let spec = NodeSpec::new(dir.path()).with("QUIVER_LIMITS_WRITE_FILES_MAX", "30");
    let node = Node::start(spec).await;
    // 40 days, a row a day: 38 day files and 2 hour files, past 30.
    let body: String = (0..40)
        .map(|d| format!("temp v={d} {}\n", START_S + d * 86_400))
        .collect();
    let (status, answer) = node.write_lp("/write?db=hist&precision=s", &body).await;
    assert_eq!(status, 400, "{answer}");
    let text = answer.to_string();
    assert!(
        text.contains("write_files_max") && text.contains("split them by time"),
        "{text}"
    );
    let (status, _) = node.query("hist", "SELECT count(*) FROM temp").await;
    assert_ne!(status, 200, "nothing of a refused write is stored");
    // The old name of the limit is still read.
    drop(node);
    let dir = tempfile::tempdir().unwrap();
    let spec = NodeSpec::new(dir.path()).with("QUIVER_LIMITS_WRITE_HOURS_MAX", "30");
    let node = Node::start(spec).await;
    let (status, _) = node.write_lp("/write?db=hist&precision=s", &body).await;
    assert_eq!(status, 400);
}
