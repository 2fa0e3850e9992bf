//! Measurement names at the longest the rules allow, in several scripts, through every
//! path that names a file: flush, compaction, snapshot, and a wiped follower fetching
//! the files from a peer (issue 36, item 3).

use std::time::Duration;

use serde_json::{json, Value};

use crate::cluster_support::{leader, specs, start};
use crate::common::{batch_payload, Node, TOKEN};

/// Every name is 125 to 128 bytes, the limit; object_store stores each escaped byte
/// of them as five (`%7Exx`), so none but the ASCII one fits a file name whole.
fn longest_names() -> Vec<String> {
    vec![
        "温度传感器读数".repeat(6), // 42 CJK characters, 126 bytes
        "é".repeat(64),             // 128 bytes
        "давление".repeat(8),       // Cyrillic, 128 bytes
        "🌡".repeat(32),             // 4-byte characters, 128 bytes
        format!("cpu load/{}", " ".repeat(119)).replace('/', "~"), // punctuation
        "m".repeat(128),            // plain ASCII
    ]
}

fn env() -> Vec<(&'static str, String)> {
    vec![
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "200".into()),
        ("QUIVER_RAFT_FLUSH_CHECK_INTERVAL_MS", "50".into()),
        ("QUIVER_RAFT_SNAPSHOT_INTERVAL_MS_MIN", "300".into()),
        ("QUIVER_COMPACTION_CHECK_INTERVAL_MS", "200".into()),
        ("QUIVER_COMPACTION_CLOSED_AFTER_MS", "1000".into()),
        ("QUIVER_COMPACTION_INPUT_GRACE_MS", "6000".into()),
        ("QUIVER_QUERY_TIMEOUT_MS", "5000".into()),
    ]
}

async fn storage(node: &Node) -> Value {
    node.client
        .get(format!("{}/api/v1/storage?database=db", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("storage")
        .json()
        .await
        .expect("json")
}

/// Files per measurement on `node`, once nothing waits in memory or for a merge.
async fn settled_files(node: &Node) -> Option<Vec<(String, u64, u64)>> {
    let doc = storage(node).await;
    if doc["compactions_pending"] != 0 {
        return None;
    }
    let mut out = Vec::new();
    for m in doc["databases"][0]["measurements"].as_array()? {
        if m["rows_in_memory"] != 0 {
            return None;
        }
        out.push((
            m["measurement"].as_str()?.to_string(),
            m["files"].as_u64()?,
            m["rows"].as_u64()?,
        ));
    }
    Some(out)
}

async fn counts(node: &Node, names: &[String]) -> Vec<Value> {
    let mut out = Vec::new();
    for name in names {
        let sql = format!(
            "SELECT count(*), sum(seq) FROM \"{}\"",
            name.replace('"', "\"\"")
        );
        out.push(json!(node.rows("db", &sql).await));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_longest_names_in_every_script_are_flushed_merged_and_fetched_by_a_wiped_follower() {
    let names = longest_names();
    for name in &names {
        assert!(
            name.len() >= 125 && name.len() <= 128,
            "{name}: {}",
            name.len()
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = start(specs(dir.path(), 3, &env())).await;
    let l = leader(&nodes, &[0, 1, 2]).await;
    // Two closed hours long ago, two writes each: four files a merge makes one per name.
    let hour = 3_600_000_000_000i64;
    let base = (1_700_000_000_000_000_000i64 / hour) * hour;
    for (i, name) in names.iter().enumerate() {
        for write in 0..4i64 {
            let at = base + (write % 2) * hour + write * 1_000_000;
            let body = batch_payload(name, i as i64 * 10 + write, 50, at, 3);
            let (status, text) = nodes[l].write_msgpack("db", body).await;
            assert_eq!(status, 204, "{name}: {text}");
        }
    }
    let expected = counts(&nodes[l], &names).await;
    let leader_node = &nodes[l];
    leader_node
        .wait_for(
            "every name flushed and merged",
            Duration::from_secs(90),
            || async {
                leader_node.metric("quiver_compactions_total").await >= names.len() as f64
                    && settled_files(leader_node).await.is_some_and(|files| {
                        files.len() == names.len()
                            && files.iter().all(|(_, f, r)| *f <= 2 && *r == 200)
                    })
            },
        )
        .await;
    let on_leader = settled_files(leader_node).await;
    leader_node.wait_for_snapshot_of_everything().await;
    // A follower loses everything and catches up from the leader's snapshot and files.
    let f = (l + 1) % 3;
    nodes[f].kill();
    std::fs::remove_dir_all(&nodes[f].spec.data_dir).unwrap();
    nodes[f].respawn();
    nodes[f].wait_ready().await;
    let follower = &nodes[f];
    follower
        .wait_for(
            "the wiped follower holds every file again",
            Duration::from_secs(90),
            || async { settled_files(follower).await == on_leader },
        )
        .await;
    assert_eq!(counts(follower, &names).await, expected);
    // Every file of the follower is under a component that fits the file system.
    let root = follower.spec.data_dir.join("parquet");
    // Files a merge replaced stay on disk for the compaction input grace (6 s here)
    // before the follower deletes them: wait for the disk to hold just the listed ones.
    let listed: u64 = on_leader.iter().flatten().map(|(_, f, _)| f).sum();
    follower
        .wait_for(
            "replaced files deleted after their grace",
            Duration::from_secs(60),
            || async { crate::lifecycle::parquet_files(follower).len() as u64 == listed },
        )
        .await;
    let files = crate::lifecycle::parquet_files(follower);
    assert_eq!(files.len() as u64, listed, "{files:?}");
    for (path, _) in &files {
        for part in std::path::Path::new(path).components() {
            assert!(part.as_os_str().len() <= 255, "{path}");
        }
        assert!(root.join(path).exists());
    }
}
