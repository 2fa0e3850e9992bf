//! `quiver backup` and `quiver restore --from`: a backup taken under load holds every
//! row acknowledged before it, a second backup into the same directory copies only
//! new files, a node restored from it answers with the same digests as its source for
//! what the backup holds, and a damaged backup is refused, naming the file.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster_support::{specs, start};
use crate::common::{batch_payload, Node, NodeSpec, TOKEN};

/// Rows in one batch of the load writer (each batch in its own hour, so the digest's
/// hour partitions are batches).
const LOAD_ROWS: usize = 50;
/// Most batches the load writer sends.
const LOAD_BATCHES_MAX: u64 = 3_000;
/// Hours (and so files) of the table written before the load.
const FIXED_HOURS: i64 = 200;
/// The first hour of the load.
const LOAD_BASE_NS: i64 = 1_700_000_000_000_000_000 / HOUR_NS * HOUR_NS;
const HOUR_NS: i64 = 3_600_000_000_000;

/// Runs `quiver` with `args` (and `env`) to its end: exit code and output.
fn quiver(args: &[&str], env: &[(&str, String)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quiver"));
    cmd.args(args).env("QUIVER_LOG_LEVEL", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run quiver");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// `quiver backup` of `node` into `to`; panics unless it succeeds. Returns its output.
fn backup(node: &Node, to: &Path) -> String {
    let to = to.to_str().expect("utf-8 path");
    let (code, out) = quiver(
        &["backup", "--url", &node.url, "--token", TOKEN, "--to", to],
        &[],
    );
    assert_eq!(code, Some(0), "backup failed: {out}\n{}", node.log_tail());
    out
}

/// `quiver restore --from` into `spec`'s directories.
fn restore(from: &Path, spec: &NodeSpec) -> (Option<i32>, String) {
    let wal = spec.wal_dir.clone().expect("a WAL dir");
    let env: Vec<(&str, String)> = spec
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    quiver(
        &[
            "restore",
            "--from",
            from.to_str().expect("utf-8"),
            "--data-dir",
            spec.data_dir.to_str().expect("utf-8"),
            "--wal-dir",
            wal.to_str().expect("utf-8"),
            "--http-addr",
            &format!("127.0.0.1:{}", spec.port),
        ],
        &env,
    )
}

/// The manifests of a backup directory, oldest first.
fn manifests(dir: &Path) -> Vec<Value> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir.join("manifests"))
        .expect("manifests dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| serde_json::from_slice(&std::fs::read(p).expect("read")).expect("json"))
        .collect()
}

/// The group numbers a manifest holds, in its order.
fn group_ids(manifest: &Value) -> Vec<u64> {
    manifest["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| g["id"].as_u64().expect("id"))
        .collect()
}

/// `/api/v1/cluster/digest` of `node`: per table, its partitions by hour.
async fn digest(node: &Node) -> Vec<Value> {
    let r = node
        .client
        .get(format!("{}/api/v1/cluster/digest", node.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("digest request");
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.expect("digest json");
    body["tables"].as_array().expect("tables").clone()
}

fn table<'a>(tables: &'a [Value], measurement: &str) -> &'a Value {
    tables
        .iter()
        .find(|t| t["measurement"] == measurement)
        .unwrap_or_else(|| panic!("no table {measurement} in {tables:?}"))
}

/// Parquet files anywhere under `dir` (every group's).
fn parquet_files_under(dir: &Path) -> usize {
    count_files(dir, &|p| p.extension().is_some_and(|x| x == "parquet"))
}

/// Files of any kind anywhere under `dir` (empty directories do not count: loading the
/// settings checks that the directories can be created).
fn files_under(dir: &Path) -> usize {
    count_files(dir, &|_| true)
}

fn count_files(dir: &Path, counts: &dyn Fn(&Path) -> bool) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                count_files(&p, counts)
            } else {
                usize::from(counts(&p))
            }
        })
        .sum()
}

/// A node spec with its WAL on its own directory, as operators run it.
/// Compaction is off: files are only added, so what an incremental backup copies is
/// exactly what was flushed since the last one.
fn spec_in(dir: &Path) -> NodeSpec {
    let mut spec = NodeSpec::new(dir)
        .with("QUIVER_STORAGE_FLUSH_AGE_MS", 300)
        .with("QUIVER_COMPACTION_ENABLED", false);
    spec.wal_dir = Some(dir.join("wal"));
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_under_load_restores_every_acknowledged_row_and_refuses_a_corrupt_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = Node::start(spec_in(&dir.path().join("source"))).await;
    // Rows written before: a table the restored node must hold whole, in files of an
    // hour or (its older days) a day.
    for b in 0..FIXED_HOURS {
        let body = batch_payload("fixed", b, 20, LOAD_BASE_NS - (b + 1) * HOUR_NS, 4);
        assert_eq!(source.write_msgpack("db", body).await.0, 204);
    }
    source
        .wait_for(
            "the fixed table in Parquet",
            Duration::from_secs(60),
            || async {
                source.metric("quiver_buffer_rows").await == 0.0
                    && source.metric("quiver_frozen_segments").await == 0.0
                    && parquet_files_under(&source.spec.data_dir) >= (FIXED_HOURS / 24) as usize
            },
        )
        .await;
    let token = create_token(&source).await;

    // A writer under load: batch k in hour k, counted once acknowledged.
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop) = (acked.clone(), stop.clone());
        let (url, client) = (source.url.clone(), source.client.clone());
        tokio::spawn(async move {
            for k in 0..LOAD_BATCHES_MAX {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let body = batch_payload(
                    "load",
                    k as i64,
                    LOAD_ROWS,
                    LOAD_BASE_NS + k as i64 * HOUR_NS,
                    4,
                );
                let r = client
                    .post(format!("{url}/api/v1/write/msgpack"))
                    .bearer_auth(TOKEN)
                    .header("x-arc-database", "db")
                    .body(body)
                    .send()
                    .await
                    .expect("write");
                assert_eq!(r.status(), 204, "batch {k}");
                acked.store(k + 1, Ordering::SeqCst);
                // Pacing, so the backup runs beside a steady load, not a flood.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    source
        .wait_for("the load to start", Duration::from_secs(30), || async {
            acked.load(Ordering::SeqCst) >= 20
        })
        .await;

    let backups = dir.path().join("backups");
    let acked_before_first = acked.load(Ordering::SeqCst);
    let started = Instant::now();
    let out = backup(&source, &backups);
    eprintln!("first backup in {:?}: {out}", started.elapsed());
    source
        .wait_for("more load", Duration::from_secs(30), || async {
            acked.load(Ordering::SeqCst) >= acked_before_first + 5
        })
        .await;
    let acked_before_second = acked.load(Ordering::SeqCst);
    let started = Instant::now();
    let out = backup(&source, &backups);
    eprintln!("second backup in {:?}: {out}", started.elapsed());
    let acked_after_second = acked.load(Ordering::SeqCst);
    stop.store(true, Ordering::SeqCst);
    writer.await.expect("writer");

    // Incremental: the second run found the first's files and copied fewer.
    let runs = manifests(&backups);
    assert_eq!(runs.len(), 2, "one manifest per backup, older kept");
    let (first, second) = (&runs[0]["run"], &runs[1]["run"]);
    eprintln!("first run {first}, second run {second}");
    assert!(
        second["files_copied"].as_u64() < first["files_copied"].as_u64(),
        "the second backup copies fewer files: {first} then {second}"
    );
    assert!(second["files_reused"].as_u64().unwrap_or(0) > 0, "{second}");

    // Restore the newest backup into fresh directories and start a node there.
    let restored_spec = spec_in(&dir.path().join("restored"));
    let started = Instant::now();
    let (code, out) = restore(&backups, &restored_spec);
    assert_eq!(code, Some(0), "{out}");
    eprintln!("restore in {:?}: {out}", started.elapsed());
    let restored = Node::start(restored_spec).await;

    // Every batch acknowledged before the backup began is there, none beyond the
    // acknowledged, and no batch is torn.
    let rows = restored
        .rows(
            "db",
            "SELECT count(*), count(DISTINCT batch), max(batch) FROM load",
        )
        .await;
    let (count, batches, max) = (
        rows[0][0].as_u64().unwrap_or(0),
        rows[0][1].as_u64().unwrap_or(0),
        rows[0][2].as_u64().unwrap_or(0),
    );
    assert_eq!(count, batches * LOAD_ROWS as u64, "whole batches only");
    assert_eq!(max + 1, batches, "a prefix of the batches");
    assert!(
        (acked_before_second..=acked_after_second).contains(&batches),
        "{batches} batches restored; {acked_before_second} were acknowledged before the \
         backup, {acked_after_second} after"
    );
    // The digests agree: the table written before whole, the load table hour by hour
    // for every batch the backup holds.
    let (from, to) = (digest(&source).await, digest(&restored).await);
    assert_eq!(table(&from, "fixed"), table(&to, "fixed"));
    let source_hours = table(&from, "load")["partitions"]
        .as_array()
        .expect("partitions")
        .clone();
    let restored_hours = table(&to, "load")["partitions"]
        .as_array()
        .expect("partitions")
        .clone();
    assert_eq!(restored_hours.len() as u64, batches);
    assert_eq!(restored_hours[..], source_hours[..restored_hours.len()]);
    // The replicated settings came along: the token made on the source works here.
    let r = restored
        .client
        .post(format!("{}/api/v1/query", restored.url))
        .bearer_auth(&token)
        .header("x-arc-database", "db")
        .json(&serde_json::json!({"sql": "SELECT count(*) FROM fixed"}))
        .send()
        .await
        .expect("query");
    assert_eq!(r.status(), 200, "the source's token is restored");
    // And the restored node takes writes after the snapshot.
    let body = batch_payload("after", 0, 10, LOAD_BASE_NS, 2);
    assert_eq!(restored.write_msgpack("db", body).await.0, 204);

    // A damaged file: restore refuses, names it, and writes nothing.
    let newest = runs.last().expect("a manifest");
    let victim = newest["groups"][0]["files"][0]["path"]
        .as_str()
        .expect("a file")
        .to_string();
    let victim_path = backups.join(&victim);
    let mut bytes = std::fs::read(&victim_path).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&victim_path, &bytes).expect("corrupt");
    let fresh = spec_in(&dir.path().join("fresh"));
    let (code, out) = restore(&backups, &fresh);
    assert_ne!(code, Some(0), "a corrupt backup is refused: {out}");
    assert!(out.contains(&victim) && out.contains("corrupt"), "{out}");
    assert_eq!(files_under(&fresh.data_dir), 0, "nothing written");
}

/// A read token made on the source, to find on the restored node.
async fn create_token(node: &Node) -> String {
    let r = node
        .client
        .post(format!("{}/api/v1/tokens", node.url))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"name": "reader", "scopes": ["read"]}))
        .send()
        .await
        .expect("create token");
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.expect("json");
    body["token"].as_str().expect("token").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_of_three_data_groups_restores_every_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let groups_env = ("QUIVER_CLUSTER_DATA_GROUPS", 3);
    let source =
        Node::start(spec_in(&dir.path().join("source")).with(groups_env.0, groups_env.1)).await;
    let mut lines = String::new();
    for m in 0..12 {
        for r in 0..30 {
            let t = LOAD_BASE_NS + r * 1_000_000;
            lines.push_str(&format!("m{m},host=h{} v={r} {t}\n", r % 3));
        }
    }
    let (status, answer) = source.write_lp("/write?db=db", &lines).await;
    assert_eq!(status, 204, "{answer}");
    // Some rows in Parquet, some only in the buffers: the snapshot carries both.
    source
        .wait_for("a flush", Duration::from_secs(30), || async {
            parquet_files_under(&source.spec.data_dir) > 0
        })
        .await;
    let (status, answer) = source
        .write_lp("/write?db=db", "m0,host=late v=1 1700000000000000001\n")
        .await;
    assert_eq!(status, 204, "{answer}");
    let backups = dir.path().join("backups");
    backup(&source, &backups);
    let manifest = &manifests(&backups)[0];
    let groups = group_ids(manifest);
    assert_eq!(groups, vec![0, 1, 2, 3], "every group the node runs");

    // Restoring with another number of data groups is refused before anything is written.
    let wrong = spec_in(&dir.path().join("wrong"));
    let (code, out) = restore(&backups, &wrong);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("cluster.data_groups = 3"), "{out}");
    assert_eq!(files_under(&wrong.data_dir), 0, "nothing written");

    let restored_spec = spec_in(&dir.path().join("restored")).with(groups_env.0, groups_env.1);
    let (code, out) = restore(&backups, &restored_spec);
    assert_eq!(code, Some(0), "{out}");
    let restored = Node::start(restored_spec).await;
    assert_eq!(digest(&source).await, digest(&restored).await);
    let rows = restored.rows("db", "SELECT count(*) FROM m0").await;
    assert_eq!(rows[0][0].as_u64(), Some(31));
}

/// Per measurement `m0..m11` of `db`: its row count and the sum of `v`.
async fn sums(node: &Node) -> Vec<(Option<i64>, Option<f64>)> {
    let mut out = Vec::new();
    for m in 0..12 {
        let rows = node
            .rows("db", &format!("SELECT count(*), sum(v) FROM m{m}"))
            .await;
        out.push((rows[0][0].as_i64(), rows[0][1].as_f64()));
    }
    out
}

/// A cluster whose data groups each live on some nodes only (replication 2 on 3 nodes):
/// one backup asked of one node takes the groups that node does not run from their
/// members, and a restore makes one node holding every group and every row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_of_a_cluster_with_placed_groups_takes_each_group_from_a_member() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("QUIVER_CLUSTER_DATA_GROUPS", "3".to_string()),
        ("QUIVER_CLUSTER_REPLICATION", "2".to_string()),
        ("QUIVER_STORAGE_FLUSH_AGE_MS", "300".to_string()),
    ];
    let nodes = start(specs(&dir.path().join("cluster"), 3, &env)).await;
    let mut lines = String::new();
    for m in 0..12 {
        for r in 0..30 {
            let t = LOAD_BASE_NS + r * 1_000_000;
            lines.push_str(&format!("m{m},host=h{} v={r} {t}\n", r % 3));
        }
    }
    let (status, answer) = nodes[0].write_lp("/write?db=db", &lines).await;
    assert_eq!(status, 204, "{answer}");
    let expected: Vec<(Option<i64>, Option<f64>)> =
        (0..12).map(|_| (Some(30), Some(435.0))).collect();
    nodes[0]
        .wait_for("every group's rows", Duration::from_secs(30), || async {
            sums(&nodes[0]).await == expected
        })
        .await;

    let backups = dir.path().join("backups");
    let out = backup(&nodes[0], &backups);
    assert!(
        out.contains("(from "),
        "a group taken from another node: {out}"
    );
    let manifest = &manifests(&backups)[0];
    let groups = group_ids(manifest);
    assert_eq!(groups, vec![0, 1, 2, 3], "every group of the cluster");

    let restored_spec = spec_in(&dir.path().join("restored")).with("QUIVER_CLUSTER_DATA_GROUPS", 3);
    let (code, out) = restore(&backups, &restored_spec);
    assert_eq!(code, Some(0), "{out}");
    let restored = Node::start(restored_spec).await;
    assert_eq!(sums(&restored).await, expected);
}
