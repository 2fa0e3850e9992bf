//! What `quiver sizing plan` prints: the size, then every assumption with where its
//! value came from, as an aligned table or as JSON.

use serde::Serialize;

use super::calibration::Calibration;
use super::model::{Assumptions, Plan, Workload};
use crate::units::{percent, sig3, thousands};

/// One coefficient or assumption and its provenance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assumption {
    /// Name (the calibration field or the flag).
    pub name: String,
    /// Value used.
    pub value: f64,
    /// Unit of `value`.
    pub unit: String,
    /// Where it came from: a calibration run, the reference machine, or a flag.
    pub source: String,
}

/// The whole answer, as printed with `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct PlanOutput {
    /// The workload asked about.
    pub workload: Workload,
    /// The size.
    pub plan: Plan,
    /// Every coefficient and assumption used.
    pub assumptions: Vec<Assumption>,
}

/// Lists every number the plan used, with its source: the calibration's fields carry
/// `calibration_source`, the planner's own assumptions name their flag.
pub fn assumptions(
    calibration: &Calibration,
    calibration_source: &str,
    a: &Assumptions,
) -> Vec<Assumption> {
    let measured = |name: &str, value: f64, unit: &str, how: &str| Assumption {
        name: name.to_string(),
        value,
        unit: unit.to_string(),
        source: format!("{calibration_source}: {how}"),
    };
    let flag = |name: &str, value: f64, unit: &str, flag: &str| Assumption {
        name: name.to_string(),
        value,
        unit: unit.to_string(),
        source: format!("assumption ({flag})"),
    };
    let c = calibration;
    vec![
        measured(
            "node_cpu_us_per_row",
            c.node_cpu_us_per_row,
            "CPU-µs/row",
            "node CPU ÷ acked rows, confirmed MessagePack fsync run",
        ),
        measured(
            "fields",
            c.fields as f64,
            "fields/row",
            "measured rows; a row of F fields costs (F+2)/(this+2) of one",
        ),
        measured(
            "parquet_bytes_per_row",
            c.parquet_bytes_per_row,
            "B/row",
            "Parquet bytes ÷ rows once flushed",
        ),
        measured(
            "wal_bytes_per_row",
            c.wal_bytes_per_row,
            "B/row",
            "WAL bytes written ÷ acked rows",
        ),
        measured(
            "wire_bytes_per_row",
            c.wire_bytes_per_row,
            "B/row",
            "MessagePack body bytes ÷ rows",
        ),
        measured(
            "memory_base_mb",
            c.memory_base_mb,
            "MB",
            "resident memory of an idle node",
        ),
        measured(
            "memory_bytes_per_row_per_s",
            c.memory_bytes_per_row_per_s,
            "B per row/s",
            "peak resident memory above idle ÷ confirmed rate",
        ),
        measured(
            "memory_bytes_per_series",
            c.memory_bytes_per_series,
            "B/series",
            "resident memory, 100,000-host dataset minus 10,000-host dataset ÷ 90,000",
        ),
        measured(
            "query_cpu_ms_per_mrows",
            c.query_cpu_ms_per_mrows,
            "CPU-ms per M rows",
            "node CPU per query of the mix at 1 client ÷ dataset rows",
        ),
        measured(
            "query_memory_mb_per_client",
            c.query_memory_mb_per_client,
            "MB/client",
            "resident memory growth under the query mix ÷ clients",
        ),
        measured(
            "wal_held_s",
            c.wal_held_s,
            "s",
            "peak WAL on disk ÷ WAL bytes written per second",
        ),
        measured(
            "wal_volume_fdatasync_per_s",
            c.wal_volume_fdatasync_per_s,
            "fdatasync/s",
            "machine probe of the WAL volume (4 KiB write + fdatasync, one writer)",
        ),
        measured(
            "wal_volume_write_mb_per_s",
            c.wal_volume_write_mb_per_s,
            "MB/s",
            "machine probe of the WAL volume (1 MiB writes, then fdatasync)",
        ),
        measured(
            "data_volume_write_mb_per_s",
            c.data_volume_write_mb_per_s,
            "MB/s",
            "machine probe of the data volume (1 MiB writes, then fdatasync)",
        ),
        flag(
            "headroom_fraction",
            a.headroom_fraction,
            "of capacity",
            "--headroom-percent",
        ),
        flag(
            "disk_free_fraction",
            a.disk_free_fraction,
            "of disk",
            "--disk-free-percent",
        ),
        flag(
            "rows_per_request",
            a.rows_per_request,
            "rows",
            "--rows-per-request; worst case one fdatasync per request",
        ),
        flag(
            "query_rows_scanned",
            a.query_rows_scanned,
            "rows/query",
            "--query-rows-scanned",
        ),
        flag(
            "query_p95_target_s",
            a.query_p95_target_s,
            "s",
            "--query-p95-target-s",
        ),
        flag(
            "compaction_rewrites",
            a.compaction_rewrites,
            "rewrites",
            "hour merge and day merge write Parquet again",
        ),
        flag(
            "compaction_room_s",
            a.compaction_room_s,
            "s",
            "a day file's inputs and output coexist while it merges",
        ),
    ]
}

/// The plan as an aligned text table followed by the assumptions.
pub fn table(output: &PlanOutput) -> String {
    let w = &output.workload;
    let p = &output.plan;
    let n = &p.per_node;
    let b = &p.breakdown;
    let mut rows: Vec<(String, String, String)> = vec![
        (
            "cores".into(),
            n.cores.to_string(),
            format!(
                "ingest {} + queries {} cores, ÷ (1 − headroom)",
                sig3(b.ingest_cores),
                sig3(b.query_cores)
            ),
        ),
        (
            "memory".into(),
            format!("{} GB", sig3(n.memory_gb)),
            format!("{} MB needed, ÷ (1 − headroom)", thousands(b.memory_mb)),
        ),
        (
            "disk".into(),
            format!("{} GB", thousands(n.disk_gb)),
            format!(
                "Parquet {} + WAL {} + compaction {} GB, ÷ (1 − free share)",
                thousands(b.data_gb),
                sig3(b.wal_gb),
                thousands(b.compaction_gb)
            ),
        ),
        (
            "WAL fdatasync".into(),
            format!("{}/s", thousands(n.wal_fdatasync_per_s)),
            format!(
                "{} of the calibrated WAL volume",
                percent(p.wal_volume_busy_fraction)
            ),
        ),
        (
            "WAL writes".into(),
            format!("{} MB/s", sig3(n.wal_write_mb_per_s)),
            String::new(),
        ),
        (
            "network".into(),
            format!("{} MB/s", sig3(n.network_mb_per_s)),
            format!(
                "at the leader: bodies in, entries out to {} follower(s)",
                w.replicas.saturating_sub(1)
            ),
        ),
    ];
    rows.push((
        "data volume".into(),
        percent(p.data_volume_busy_fraction),
        "of the calibrated data volume's write MB/s (flush + compaction)".into(),
    ));
    rows.push((
        "clusters".into(),
        p.clusters_for_disks.to_string(),
        if p.clusters_for_disks > 1 {
            "the disks limit this load: split it, or use faster volumes".into()
        } else {
            "one cluster's volumes carry this load".into()
        },
    ));
    let mut out = format!(
        "Per node ({} nodes, {} rows/s, {} fields, {} series, {} query clients):\n",
        p.nodes,
        thousands(w.rows_per_s),
        w.fields,
        thousands(w.series as f64),
        w.query_concurrency
    );
    out.push_str(&aligned(&rows));
    out.push_str(&format!(
        "cluster disk: {} GB\n\nAssumptions:\n",
        thousands(p.cluster_disk_gb)
    ));
    let assumption_rows: Vec<(String, String, String)> = output
        .assumptions
        .iter()
        .map(|a| {
            (
                a.name.clone(),
                format!("{} {}", sig3(a.value), a.unit),
                a.source.clone(),
            )
        })
        .collect();
    out.push_str(&aligned(&assumption_rows));
    out
}

/// Three columns padded to their widest cell.
fn aligned(rows: &[(String, String, String)]) -> String {
    let width_a = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let width_b = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (a, b, c) in rows {
        let line = format!("  {a:<width_a$}  {b:>width_b$}  {c}");
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
