//! The report's content, in reading order: verdict, recommendation, machine, then what
//! was measured (`measured.rs`: ingest, confirmed runs over time, bytes per row,
//! queries, mixed, cluster), the calibration, and how it was measured.

use super::document::Block;
use super::measured;
use super::model::Report;
use crate::units::{percent, sig3, thousands};

/// A count or rate with thousands separators.
pub fn n(value: f64) -> String {
    thousands(value)
}

pub(super) fn opt(value: Option<f64>, f: impl Fn(f64) -> String) -> String {
    value
        .filter(|v| v.is_finite())
        .map(f)
        .unwrap_or_else(|| "—".into())
}

pub(super) fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

/// Every block of the report.
pub fn blocks(r: &Report) -> Vec<Block> {
    let mut b = Vec::new();
    b.push(Block::Heading(1, "Quiver sizing report".into()));
    b.push(Block::Para(format!(
        "Quiver {} on `{}`: {} cores, {} MB of memory. Started {}, took {} s{}. Command: `{}`.",
        r.version,
        if r.machine.hostname.is_empty() {
            "this machine"
        } else {
            &r.machine.hostname
        },
        r.machine.cores,
        n(r.machine.memory_total_mb),
        r.started_at,
        n(r.duration_s),
        if r.settings.quick {
            " (`--quick`: short runs, a first look, not a sizing)"
        } else {
            ""
        },
        r.command.join(" ")
    )));
    verdict(r, &mut b);
    recommendation(r, &mut b);
    machine(r, &mut b);
    measured::ingest(r, &mut b);
    measured::confirmed(r, &mut b);
    measured::bytes(r, &mut b);
    measured::queries(r, &mut b);
    measured::mixed(r, &mut b);
    measured::cluster(r, &mut b);
    calibration(r, &mut b);
    method(r, &mut b);
    b
}

fn verdict(r: &Report, b: &mut Vec<Block>) {
    b.push(Block::Heading(2, "Verdict".into()));
    let failed = r.gates.iter().filter(|g| !g.passed).count();
    b.push(Block::Para(if failed == 0 {
        "Every gate held on every chosen operating point.".into()
    } else {
        format!("{failed} gate(s) failed: the command exited non-zero.")
    }));
    b.push(Block::Table(
        row(&["gate", "held", "detail"]),
        r.gates
            .iter()
            .map(|g| {
                vec![
                    g.name.clone(),
                    if g.passed { "yes" } else { "**no**" }.into(),
                    g.detail.clone(),
                ]
            })
            .collect(),
    ));
}

fn recommendation(r: &Report, b: &mut Vec<Block>) {
    let rec = &r.recommendation;
    b.push(Block::Heading(2, "Recommendation".into()));
    b.push(Block::Para(format!(
        "Starting sizes keep {} headroom below what this machine sustained: plan for the \"recommended\" column, not the \"measured\" one.",
        percent(rec.headroom_fraction)
    )));
    b.push(Block::Table(
        row(&[
            "workload",
            "measured on this machine",
            "recommended",
            "what limited it",
        ]),
        rec.sizes
            .iter()
            .map(|s| {
                vec![
                    s.what.clone(),
                    s.measured.clone(),
                    s.recommended.clone(),
                    s.limit.clone(),
                ]
            })
            .collect(),
    ));
    b.push(Block::Heading(3, "Disk by retention".into()));
    b.push(Block::Para(format!(
        "At the recommended MessagePack rate: measured Parquet bytes/row × rate × retention, plus the WAL ({} s of writes held), one day of compaction room, and 20 % of the disk kept free (the planner's arithmetic: `quiver sizing plan --calibration report.json`).",
        sig3(r.calibration.wal_held_s)
    )));
    b.push(Block::Table(
        row(&[
            "retention",
            "rows/s",
            "replicas",
            "Parquet GB/node",
            "WAL GB/node",
            "compaction GB/node",
            "disk GB/node",
            "disk GB, all replicas",
        ]),
        rec.retention
            .iter()
            .map(|t| {
                vec![
                    format!("{} d", t.days),
                    n(t.rows_per_s),
                    t.replicas.to_string(),
                    n(t.parquet_gb),
                    sig3(t.wal_gb),
                    n(t.compaction_gb),
                    n(t.disk_gb_per_node),
                    n(t.disk_gb_total),
                ]
            })
            .collect(),
    ));
    b.push(Block::Heading(3, "What limited each configuration".into()));
    b.push(Block::List(rec.sentences.clone()));
}

fn machine(r: &Report, b: &mut Vec<Block>) {
    let m = &r.machine;
    b.push(Block::Heading(2, "Machine".into()));
    b.push(Block::Para(format!(
        "{} cores ({}), {} MB, kernel {}.",
        m.cores,
        m.cpu_model.clone().unwrap_or_else(|| "CPU unknown".into()),
        n(m.memory_total_mb),
        m.kernel.clone().unwrap_or_else(|| "unknown".into())
    )));
    if !m.volumes.is_empty() {
        b.push(Block::Table(
            row(&[
                "volume",
                "path",
                "device",
                "sequential write MB/s",
                "fdatasync/s (4 KiB, one writer)",
            ]),
            m.volumes
                .iter()
                .map(|v| {
                    vec![
                        v.role.clone(),
                        format!("`{}`", v.path.display()),
                        v.device.clone().unwrap_or_else(|| "—".into()),
                        n(v.sequential_write_mb_per_s),
                        n(v.fdatasync_per_s),
                    ]
                })
                .collect(),
        ));
    }
}

fn calibration(r: &Report, b: &mut Vec<Block>) {
    let c = &r.calibration;
    b.push(Block::Heading(2, "Calibration".into()));
    b.push(Block::Para(format!(
        "What `quiver sizing plan --calibration report.json` multiplies. Source: {}.",
        c.source
    )));
    let rows = [
        ("node CPU per row", sig3(c.node_cpu_us_per_row), "CPU-µs"),
        ("Parquet per row", sig3(c.parquet_bytes_per_row), "bytes"),
        ("WAL per row", sig3(c.wal_bytes_per_row), "bytes"),
        ("request body per row", sig3(c.wire_bytes_per_row), "bytes"),
        ("idle node", sig3(c.memory_base_mb), "MB resident"),
        (
            "memory per row/s",
            sig3(c.memory_bytes_per_row_per_s),
            "bytes resident",
        ),
        (
            "memory per series",
            sig3(c.memory_bytes_per_series),
            "bytes resident",
        ),
        (
            "query CPU per million rows",
            sig3(c.query_cpu_ms_per_mrows),
            "CPU-ms",
        ),
        (
            "memory per query client",
            sig3(c.query_memory_mb_per_client),
            "MB resident",
        ),
        ("WAL held", sig3(c.wal_held_s), "seconds of writes"),
        ("WAL volume", n(c.wal_volume_fdatasync_per_s), "fdatasync/s"),
        ("WAL volume", n(c.wal_volume_write_mb_per_s), "MB/s"),
        ("data volume", n(c.data_volume_write_mb_per_s), "MB/s"),
    ];
    b.push(Block::Table(
        row(&["coefficient", "value", "unit"]),
        rows.iter()
            .map(|(a, v, u)| vec![a.to_string(), v.clone(), u.to_string()])
            .collect(),
    ));
}

fn method(r: &Report, b: &mut Vec<Block>) {
    let s = &r.settings;
    b.push(Block::Heading(2, "How this was measured".into()));
    b.push(Block::List(vec![
        format!("Batches of {} rows (MessagePack columnar or line protocol: `time`, a `host` tag from {} hosts, three f64 fields), encoded before the clock starts; at most {} requests in flight.", n(s.batch_rows as f64), n(s.hosts as f64), s.in_flight_max),
        format!("Sweeps start at {} rows/s and multiply by {} per step of {} s (stepping down instead when the first fails); the best qualifying rate is confirmed for {} s (up to {} tries: 20 % lower each, then the sweep's next lower qualifying rate).", n(s.start_rate_rows_per_s), s.rate_factor, s.step_s, s.confirm_s, s.confirm_attempts_max),
        format!("Limits: p99 ≤ {} ms, acknowledged ≥ {} of offered, resident memory ≤ {} MB per node.", n(s.limits.latency_p99_ms_max), format!("{:.1} %", s.limits.acked_fraction_min * 100.0), n(s.limits.memory_budget_mb)),
        "Resources sampled every second from /proc (CPU and RSS per process, device write MB/s and flushes/s from /proc/diskstats) and each node's /metrics.".into(),
        format!("Node settings beyond the defaults: {}.", r.node_config.iter().map(|(k, v)| format!("`{k}={v}`")).collect::<Vec<_>>().join(", ")),
        "Every number is in report.json, with every per-second sample.".into(),
    ]));
}
