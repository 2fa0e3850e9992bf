//! `quiver sizing drill`: the failover drill. Starts its own three-node cluster of this
//! binary on loopback, keeps a steady write load on it, `kill -9`s the leader, and
//! measures what an operator cares about:
//!
//! - detection to new leader: from the kill until a survivor reports a different leader;
//! - first successful write after the kill: from the kill until the first request
//!   *sent after it* is acknowledged;
//! - acknowledged rows lost: every acknowledged batch's key is read back from every
//!   survivor (must be 0);
//! - requests in flight at the kill that got no answer (unacknowledged, allowed).
//!
//! The load generator reconnects by itself: a worker whose request fails moves on to
//! the next node. The killed node is restarted and caught up before the next drill.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::{json, Value};

/// Database and measurement the drill writes.
const DATABASE: &str = "drill";
const MEASUREMENT: &str = "load";

/// Flags of `quiver sizing drill`.
#[derive(Debug, Clone, clap::Args)]
pub struct DrillArgs {
    /// Drills to run (each kills the current leader once).
    #[arg(long, default_value_t = 5)]
    pub drills: usize,
    /// Concurrent writers.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Rows per request.
    #[arg(long, default_value_t = 1000)]
    pub batch_size: usize,
    /// Seconds of steady load before each kill.
    #[arg(long, default_value_t = 2.0)]
    pub warmup_s: f64,
    /// wal.sync of the nodes.
    #[arg(long, default_value = "fsync")]
    pub wal_sync: String,
    /// Keep the cluster's directory (data, WAL, logs) afterwards.
    #[arg(long)]
    pub keep_dir: bool,
}

/// One drill's measurements.
#[derive(Debug, Clone, Serialize)]
pub struct DrillRecord {
    /// Which drill.
    pub drill: usize,
    /// Node killed.
    pub killed_node: u64,
    /// New leader.
    pub new_leader: u64,
    /// Kill to a survivor naming another leader.
    pub detection_to_new_leader_ms: f64,
    /// Kill to the first acknowledgement of a request sent after the kill.
    pub first_write_after_kill_ms: f64,
    /// Batches acknowledged during the drill.
    pub acked_batches: u64,
    /// Acknowledged rows not found on some survivor (must be 0).
    pub acked_rows_lost: u64,
    /// Requests that got no answer or a 5xx (not acknowledged).
    pub unacknowledged_requests: u64,
}

/// The drill's JSON record.
#[derive(Debug, Clone, Serialize)]
pub struct DrillReport {
    /// Drills run.
    pub drills: usize,
    /// wal.sync used.
    pub wal_sync: String,
    /// Median of `detection_to_new_leader_ms`.
    pub detection_ms_median: f64,
    /// Slowest detection.
    pub detection_ms_max: f64,
    /// Median of `first_write_after_kill_ms`.
    pub first_write_ms_median: f64,
    /// Sum of acknowledged rows lost over all drills.
    pub acked_rows_lost_total: u64,
    /// Every drill.
    pub records: Vec<DrillRecord>,
}

struct ClusterNode {
    id: u64,
    url: String,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl ClusterNode {
    fn spawn(&mut self, exe: &Path, env: &[(String, String)]) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut cmd = Command::new(exe);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().context("starting a node")?);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    acked: Arc<Mutex<Vec<(u64, Instant, Instant)>>>,
    failed: Arc<AtomicU64>,
}

/// Runs the drills and prints the JSON record.
pub async fn run_drill(args: DrillArgs) -> Result<()> {
    let report = drill(args).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    if report.acked_rows_lost_total > 0 {
        bail!("acknowledged rows were lost");
    }
    Ok(())
}

/// Runs the drills and returns the record.
pub async fn drill(args: DrillArgs) -> Result<DrillReport> {
    if args.drills == 0 || args.workers == 0 || args.batch_size == 0 {
        bail!("--drills, --workers and --batch-size must be at least 1");
    }
    let exe = std::env::current_exe().context("finding the quiver binary")?;
    let dir = std::env::temp_dir().join(format!("quiver-drill-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir)?;
    let token = format!("{:032x}", rand::random::<u128>());
    let secret = format!("{:032x}", rand::random::<u128>());
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_>>()?;
    let peers = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}=http://127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let env = vec![
        ("QUIVER_BOOTSTRAP_TOKEN".to_string(), token.clone()),
        ("QUIVER_CLUSTER_SECRET".to_string(), secret),
        ("QUIVER_CLUSTER_PEERS".to_string(), peers),
        ("QUIVER_WAL_SYNC".to_string(), args.wal_sync.clone()),
        ("QUIVER_LOG_LEVEL".to_string(), "info".to_string()),
    ];
    let mut nodes: Vec<ClusterNode> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let node_dir = dir.join(format!("n{}", i + 1));
            ClusterNode {
                id: i as u64 + 1,
                url: format!("http://127.0.0.1:{port}"),
                args: vec![
                    "serve".into(),
                    "--http-addr".into(),
                    format!("127.0.0.1:{port}"),
                    "--data-dir".into(),
                    node_dir.join("data").display().to_string(),
                    "--node-id".into(),
                    (i + 1).to_string(),
                ],
                log: dir.join(format!("n{}.log", i + 1)),
                child: None,
            }
        })
        .collect();
    for node in &mut nodes {
        node.spawn(&exe, &env)?;
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    for node in &nodes {
        wait_ready(&http, &node.url).await?;
    }
    let mut records = Vec::new();
    let mut next_batch = 0u64;
    for d in 0..args.drills {
        let record = one_drill(
            &args,
            &http,
            &token,
            &mut nodes,
            &exe,
            &env,
            d,
            &mut next_batch,
        )
        .await
        .with_context(|| format!("drill {d} (logs in {})", dir.display()))?;
        eprintln!(
            "drill {d}: killed node {} -> leader {} in {:.0} ms, first write after {:.0} ms, lost {}",
            record.killed_node,
            record.new_leader,
            record.detection_to_new_leader_ms,
            record.first_write_after_kill_ms,
            record.acked_rows_lost
        );
        records.push(record);
    }
    for node in &mut nodes {
        node.kill();
    }
    if !args.keep_dir {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let detection: Vec<f64> = records
        .iter()
        .map(|r| r.detection_to_new_leader_ms)
        .collect();
    let first: Vec<f64> = records
        .iter()
        .map(|r| r.first_write_after_kill_ms)
        .collect();
    Ok(DrillReport {
        drills: records.len(),
        wal_sync: args.wal_sync.clone(),
        detection_ms_median: median(&detection),
        detection_ms_max: detection.iter().copied().fold(0.0, f64::max),
        first_write_ms_median: median(&first),
        acked_rows_lost_total: records.iter().map(|r| r.acked_rows_lost).sum(),
        records,
    })
}

#[allow(clippy::too_many_arguments)]
async fn one_drill(
    args: &DrillArgs,
    http: &reqwest::Client,
    token: &str,
    nodes: &mut [ClusterNode],
    exe: &Path,
    env: &[(String, String)],
    drill: usize,
    next_batch: &mut u64,
) -> Result<DrillRecord> {
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let first_batch = *next_batch;
    let counter = Arc::new(AtomicU64::new(first_batch));
    let load = start_load(args, &urls, token, counter.clone());
    tokio::time::sleep(Duration::from_secs_f64(args.warmup_s)).await;
    let (old_leader, _) = leader_of(http, token, &urls).await?;
    let victim = nodes
        .iter_mut()
        .find(|n| n.id == old_leader)
        .ok_or_else(|| anyhow!("leader {old_leader} is not a drill node"))?;
    victim.kill();
    let killed_at = Instant::now();
    let survivors: Vec<String> = nodes
        .iter()
        .filter(|n| n.id != old_leader)
        .map(|n| n.url.clone())
        .collect();
    // Detection: poll survivors until one names another leader.
    let new_leader = loop {
        let mut found = None;
        for url in &survivors {
            if let Ok(status) = get_json(http, token, &format!("{url}/api/v1/cluster/status")).await
            {
                if let Some(l) = status["leader"].as_u64().filter(|l| *l != old_leader) {
                    found = Some(l);
                }
            }
        }
        if let Some(l) = found {
            break l;
        }
        if killed_at.elapsed() > Duration::from_secs(30) {
            bail!("no new leader 30 s after killing node {old_leader}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let detection_ms = killed_at.elapsed().as_secs_f64() * 1000.0;
    // Keep the load on until a write sent after the kill is acknowledged, plus a beat.
    let first_write_ms = loop {
        let first = load
            .acked
            .lock()
            .map_err(|_| anyhow!("load state poisoned"))?
            .iter()
            .filter(|(_, sent, _)| *sent >= killed_at)
            .map(|(_, _, acked)| acked.duration_since(killed_at))
            .min();
        if let Some(first) = first {
            break first.as_secs_f64() * 1000.0;
        }
        if killed_at.elapsed() > Duration::from_secs(30) {
            bail!("no write acknowledged in 30 s after the kill");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (acked, failed) = stop_load(load).await;
    *next_batch = counter.load(Ordering::Relaxed);
    // Every acknowledged batch must be whole on every survivor.
    let mut lost_rows = 0u64;
    for url in &survivors {
        let stored = stored_batches(http, token, url, first_batch, *next_batch).await?;
        for id in &acked {
            if stored.get(id).copied().unwrap_or(0) < args.batch_size as u64 {
                lost_rows += args.batch_size as u64 - stored.get(id).copied().unwrap_or(0);
            }
        }
    }
    // Bring the killed node back before the next drill.
    let victim = nodes
        .iter_mut()
        .find(|n| n.id == old_leader)
        .ok_or_else(|| anyhow!("node {old_leader} vanished"))?;
    victim.spawn(exe, env)?;
    wait_ready(http, &victim.url).await?;
    Ok(DrillRecord {
        drill,
        killed_node: old_leader,
        new_leader,
        detection_to_new_leader_ms: detection_ms,
        first_write_after_kill_ms: first_write_ms,
        acked_batches: acked.len() as u64,
        acked_rows_lost: lost_rows,
        unacknowledged_requests: failed,
    })
}

fn start_load(args: &DrillArgs, urls: &[String], token: &str, next: Arc<AtomicU64>) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(AtomicU64::new(0));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default();
    let tasks = (0..args.workers)
        .map(|w| {
            let (stop, acked, failed, next, client) = (
                stop.clone(),
                acked.clone(),
                failed.clone(),
                next.clone(),
                client.clone(),
            );
            let urls = urls.to_vec();
            let token = token.to_string();
            let rows = args.batch_size;
            tokio::spawn(async move {
                let mut at = w % urls.len();
                while !stop.load(Ordering::Relaxed) {
                    let id = next.fetch_add(1, Ordering::Relaxed);
                    let body = batch(id, rows);
                    let sent = Instant::now();
                    let r = client
                        .post(format!("{}/api/v1/write/msgpack", urls[at]))
                        .bearer_auth(&token)
                        .header("x-arc-database", DATABASE)
                        .body(body)
                        .send()
                        .await;
                    match r {
                        Ok(r) if r.status().as_u16() == 204 => {
                            if let Ok(mut a) = acked.lock() {
                                a.push((id, sent, Instant::now()));
                            }
                        }
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            at = (at + 1) % urls.len();
                        }
                    }
                }
            })
        })
        .collect();
    Load {
        stop,
        tasks,
        acked,
        failed,
    }
}

async fn stop_load(load: Load) -> (BTreeSet<u64>, u64) {
    load.stop.store(true, Ordering::Relaxed);
    for t in load.tasks {
        let _ = t.await;
    }
    let acked = load
        .acked
        .lock()
        .map(|a| a.iter().map(|(id, _, _)| *id).collect())
        .unwrap_or_default();
    (acked, load.failed.load(Ordering::Relaxed))
}

/// One batch: `rows` rows with the batch id as a field, times unique per batch.
fn batch(id: u64, rows: usize) -> Vec<u8> {
    let base = 1_700_000_000_000_000_000i64 + (id as i64) * rows as i64 * 1_000;
    let time: Vec<i64> = (0..rows as i64).map(|i| base + i * 1_000).collect();
    let host: Vec<String> = (0..rows).map(|i| format!("host-{}", i % 100)).collect();
    let batch = vec![id as i64; rows];
    let value: Vec<f64> = (0..rows).map(|i| i as f64 / 100.0).collect();
    rmp_serde::to_vec_named(&json!({"m": MEASUREMENT, "columns": {
        "time": time, "host": host, "batch": batch, "value": value}}))
    .unwrap_or_default()
}

async fn stored_batches(
    http: &reqwest::Client,
    token: &str,
    url: &str,
    first: u64,
    end: u64,
) -> Result<BTreeMap<u64, u64>> {
    let sql = format!(
        "SELECT batch, count(*) FROM {MEASUREMENT} WHERE batch >= {first} AND batch < {end} GROUP BY batch"
    );
    let r = http
        .post(format!("{url}/api/v1/query"))
        .bearer_auth(token)
        .header("x-arc-database", DATABASE)
        .json(&json!({"sql": sql, "consistency": "linearizable"}))
        .send()
        .await?;
    let status = r.status();
    let body: Value = r.json().await?;
    if !status.is_success() {
        bail!("{url}: {body}");
    }
    Ok(body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|row| Some((row[0].as_u64()?, row[1].as_u64()?)))
        .collect())
}

async fn get_json(http: &reqwest::Client, token: &str, url: &str) -> Result<Value> {
    Ok(http
        .get(url)
        .bearer_auth(token)
        .timeout(Duration::from_millis(500))
        .send()
        .await?
        .json()
        .await?)
}

async fn leader_of(http: &reqwest::Client, token: &str, urls: &[String]) -> Result<(u64, String)> {
    for url in urls {
        if let Ok(status) = get_json(http, token, &format!("{url}/api/v1/cluster/status")).await {
            if let Some(l) = status["leader"].as_u64() {
                return Ok((l, url.clone()));
            }
        }
    }
    bail!("no node names a leader")
}

async fn wait_ready(http: &reqwest::Client, url: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = http.get(format!("{url}/ready")).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("{url} not ready after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(median(&[]), 0.0);
    }
}
