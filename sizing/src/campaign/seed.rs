//! Seeding a query dataset: `rows` rows over the last 24 hours from `hosts` hosts,
//! written as fast as the node takes them (closed loop: seeding is not measured),
//! every row acknowledged and counted back before any query runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::batch::{encode_columnar_batch, host_names, BatchShape};
use crate::error::{Error, Result};
use crate::target::Target;

/// Rows per seeding request.
const SEED_BATCH_ROWS: u64 = 10_000;
/// Concurrent seeding requests.
const SEED_WORKERS: usize = 4;
/// Tries of one seeding batch answered 429/503 (nothing written) before giving up.
const SEED_TRIES_MAX: u32 = 600;
/// The span the dataset covers.
pub const SEED_SPAN_NS: i64 = 24 * 3_600 * 1_000_000_000;

/// Writes the dataset and checks `count(*)`; returns the seconds it took.
pub async fn seed(
    target: &Target,
    measurement: &str,
    hosts: u64,
    rows: u64,
    end_ns: i64,
) -> Result<f64> {
    if rows == 0 || hosts == 0 {
        return Err(Error::InvalidArgs("a dataset needs rows and hosts".into()));
    }
    let steps = rows.div_ceil(hosts).max(1);
    let shape = Arc::new(BatchShape {
        measurement: measurement.to_string(),
        hosts,
        start_ns: end_ns - SEED_SPAN_NS,
        interval_ns: (SEED_SPAN_NS / steps as i64).max(1),
        kind: crate::batch::RowKind::Arc,
    });
    let names = Arc::new(host_names(hosts));
    let next = Arc::new(AtomicU64::new(0));
    let url = format!("{}/api/v1/write/msgpack", target.first_url());
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(SEED_WORKERS);
    for _ in 0..SEED_WORKERS {
        let (target, shape, names, next, url) = (
            target.clone(),
            shape.clone(),
            names.clone(),
            next.clone(),
            url.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(SEED_BATCH_ROWS, Ordering::Relaxed);
                if first >= rows {
                    return Ok(());
                }
                let count = SEED_BATCH_ROWS.min(rows - first);
                let body = bytes::Bytes::from(encode_columnar_batch(&shape, &names, first, count));
                post_until_accepted(&target, &url, body).await?;
            }
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| Error::malformed("seeding worker", e))??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let counted = target
        .sql(&format!("SELECT count(*) FROM \"{measurement}\""))
        .await?
        .first()
        .and_then(|r| r.first())
        .and_then(serde_json::Value::as_u64);
    if counted != Some(rows) {
        return Err(Error::GateFailed(format!(
            "seeding {measurement}: {rows} rows acknowledged, {counted:?} counted"
        )));
    }
    Ok(seconds)
}

async fn post_until_accepted(target: &Target, url: &str, body: bytes::Bytes) -> Result<()> {
    for _ in 0..SEED_TRIES_MAX {
        let response = target
            .post(url)
            .header("content-type", "application/msgpack")
            .timeout(Duration::from_secs(60))
            .body(body.clone())
            .send()
            .await
            .map_err(|e| Error::http("seeding write", e))?;
        let status = response.status().as_u16();
        if response.status().is_success() {
            return Ok(());
        }
        if status != 429 && status != 503 {
            return Err(Error::Server {
                what: "seeding write".into(),
                status,
                body: response.text().await.unwrap_or_default(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(Error::Server {
        what: "seeding write".into(),
        status: 503,
        body: format!("refused {SEED_TRIES_MAX} times"),
    })
}

/// Waits until `measurement` has no rows left in memory (all in Parquet), up to
/// `timeout`; returns whether it got there.
pub async fn wait_flushed(target: &Target, measurement: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(list) = target.storage(target.first_url()).await {
            let in_memory = list
                .iter()
                .find(|m| m["measurement"] == measurement)
                .and_then(|m| m["rows_in_memory"].as_u64());
            if in_memory == Some(0) {
                return true;
            }
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Parquet bytes per row of `measurement` on the first node, once flushed.
pub async fn parquet_bytes_per_row(target: &Target, measurement: &str) -> Option<f64> {
    let list = target.storage(target.first_url()).await.ok()?;
    let m = list.iter().find(|m| m["measurement"] == measurement)?;
    let (bytes, rows, in_memory) = (
        m["bytes"].as_f64()?,
        m["rows"].as_f64()?,
        m["rows_in_memory"].as_f64()?,
    );
    let on_disk = rows - in_memory;
    (on_disk > 0.0).then(|| bytes / on_disk)
}
