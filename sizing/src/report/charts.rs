//! The report's charts, built from `report.json`'s numbers.

use super::model::{Report, RunKind, WriteRun};
use super::svg::{BarChart, LineChart, Series};

/// Offered vs acknowledged rate, one line per configuration (sweep steps).
pub fn offered_vs_acked(report: &Report) -> LineChart {
    LineChart {
        title: "Offered vs acknowledged rate, per configuration".into(),
        x_label: "offered rows/s".into(),
        y_label: "acknowledged rows/s".into(),
        series: report
            .sweeps
            .iter()
            .map(|s| Series {
                name: short_label(&s.label),
                points: points(report, &s.steps, |r| {
                    (r.offered_rate_rows_per_s, r.acked_rate_rows_per_s)
                }),
                dashed: false,
            })
            .collect(),
        log_x: true,
        log_y: true,
        diagonal: true,
        ..LineChart::default()
    }
}

/// Latency percentiles (from the scheduled send time) vs offered rate, for one sweep.
pub fn latency_vs_offered(report: &Report, sweep_index: usize) -> Option<LineChart> {
    let sweep = report.sweeps.get(sweep_index)?;
    let pick = |name: &str, f: fn(&WriteRun) -> f64, dashed: bool| Series {
        name: name.into(),
        points: points(report, &sweep.steps, |r| (r.offered_rate_rows_per_s, f(r))),
        dashed,
    };
    Some(LineChart {
        title: format!("Write latency vs offered rate: {}", sweep.label),
        x_label: "offered rows/s".into(),
        y_label: "latency, ms (log)".into(),
        series: vec![
            pick("p50", |r| r.outcome.latency_ms.p50, true),
            pick("p90", |r| r.outcome.latency_ms.p90, true),
            pick("p99", |r| r.outcome.latency_ms.p99, false),
            pick("max", |r| r.outcome.latency_ms.max, false),
        ],
        log_x: true,
        log_y: true,
        hlines: vec![(
            "p99 limit".into(),
            report.settings.limits.latency_p99_ms_max,
        )],
        ..LineChart::default()
    })
}

/// CPU over time of one run: the node(s), the generator, and the whole machine.
pub fn cpu_over_time(run: &WriteRun, cores: u32) -> LineChart {
    let t = |s: &crate::resources::sampler::Sample| s.t_s;
    let mut series = vec![Series {
        name: "node(s)".into(),
        points: run
            .samples
            .iter()
            .filter_map(|s| {
                let v: Vec<f64> = s.nodes.iter().filter_map(|n| n.cpu_cores).collect();
                (!v.is_empty()).then(|| (t(s), v.iter().sum()))
            })
            .collect(),
        dashed: false,
    }];
    series.push(Series {
        name: "generator".into(),
        points: run
            .samples
            .iter()
            .filter_map(|s| Some((t(s), s.generator_cpu_cores?)))
            .collect(),
        dashed: false,
    });
    series.push(Series {
        name: "machine (all processes)".into(),
        points: run
            .samples
            .iter()
            .filter_map(|s| Some((t(s), s.machine_cpu_busy? * cores as f64)))
            .collect(),
        dashed: true,
    });
    LineChart {
        title: format!("CPU over time: {} ({})", run.id, kind(run.kind)),
        x_label: "seconds".into(),
        y_label: "cores busy".into(),
        series,
        hlines: vec![(format!("{cores} cores"), cores as f64)],
        y_from_zero: true,
        ..LineChart::default()
    }
}

/// Disk over time of one run: each volume's write MB/s and flushes/s, and the WAL's
/// fsyncs/s from `/metrics`.
pub fn disk_over_time(run: &WriteRun) -> LineChart {
    let roles: Vec<String> = run
        .samples
        .first()
        .map(|s| s.volumes.iter().map(|v| v.role.clone()).collect())
        .unwrap_or_default();
    let mut series = vec![Series {
        name: "node writes MB/s".into(),
        points: run
            .samples
            .iter()
            .filter_map(|s| {
                let v: Vec<f64> = s.nodes.iter().filter_map(|n| n.io_write_mb_per_s).collect();
                (!v.is_empty()).then(|| (s.t_s, v.iter().sum()))
            })
            .collect(),
        dashed: false,
    }];
    for role in &roles {
        series.push(Series {
            name: format!("{role} device MB/s"),
            points: run
                .samples
                .iter()
                .filter_map(|s| {
                    Some((
                        s.t_s,
                        s.volumes.iter().find(|v| &v.role == role)?.write_mb_per_s?,
                    ))
                })
                .collect(),
            dashed: false,
        });
        series.push(Series {
            name: format!("{role} device flushes/s"),
            points: run
                .samples
                .iter()
                .filter_map(|s| {
                    Some((
                        s.t_s,
                        s.volumes.iter().find(|v| &v.role == role)?.flushes_per_s?,
                    ))
                })
                .collect(),
            dashed: true,
        });
    }
    series.push(Series {
        name: "WAL fsyncs/s (/metrics)".into(),
        points: run
            .samples
            .iter()
            .filter_map(|s| {
                Some((
                    s.t_s,
                    s.nodes
                        .iter()
                        .filter_map(|n| n.wal_fsyncs_per_s)
                        .reduce(f64::max)?,
                ))
            })
            .collect(),
        dashed: true,
    });
    LineChart {
        title: format!(
            "Disk over time: {} (device counters include every process)",
            run.id
        ),
        x_label: "seconds".into(),
        y_label: "MB/s, or operations/s (dashed)".into(),
        series,
        y_from_zero: true,
        ..LineChart::default()
    }
}

/// Query p95 vs concurrency, one line per query type (the worst repeat), per dataset.
pub fn query_p95(report: &Report) -> Vec<LineChart> {
    let Some(profile) = &report.query_profile else {
        return Vec::new();
    };
    profile
        .datasets
        .iter()
        .map(|d| {
            let names: Vec<String> = profile.mix.iter().map(|m| m.0.clone()).collect();
            let series = names
                .iter()
                .enumerate()
                .map(|(i, name)| Series {
                    name: name.clone(),
                    points: d
                        .levels
                        .iter()
                        .filter_map(|l| {
                            let worst = l
                                .repeats
                                .iter()
                                .filter_map(|r| r.get(i).map(|t| t.latency_ms.p95))
                                .fold(f64::NAN, f64::max);
                            Some((l.concurrency as f64, worst)).filter(|p| p.1.is_finite())
                        })
                        .collect(),
                    dashed: false,
                })
                .collect();
            LineChart {
                title: format!(
                    "Query p95 vs concurrency: {} rows, {} hosts",
                    super::sections::n(d.rows as f64),
                    super::sections::n(d.hosts as f64)
                ),
                x_label: "concurrent clients".into(),
                y_label: "p95 latency, ms (log)".into(),
                series,
                log_y: true,
                hlines: vec![("p95 target".into(), profile.p95_target_ms)],
                ..LineChart::default()
            }
        })
        .collect()
}

/// Mixed: slowest query p95 and write p99 vs query clients.
pub fn mixed(report: &Report) -> Option<LineChart> {
    let m = report.mixed.as_ref()?;
    let write_p99 = m
        .levels
        .iter()
        .filter_map(|l| {
            let run = report.runs.iter().find(|r| r.id == l.write_run)?;
            Some((l.concurrency as f64, run.outcome.latency_ms.p99))
        })
        .collect();
    Some(LineChart {
        title: format!(
            "Mixed: {} rows/s of writes under the query mix",
            super::sections::n(m.write_rate_rows_per_s)
        ),
        x_label: "concurrent query clients".into(),
        y_label: "ms (log)".into(),
        series: vec![
            Series {
                name: "slowest query p95".into(),
                points: m
                    .levels
                    .iter()
                    .map(|l| {
                        (
                            l.concurrency as f64,
                            l.queries
                                .slowest_p95_ms
                                .first()
                                .copied()
                                .unwrap_or(f64::NAN),
                        )
                    })
                    .collect(),
                dashed: false,
            },
            Series {
                name: "write p99".into(),
                points: write_p99,
                dashed: true,
            },
        ],
        log_y: true,
        hlines: vec![("p95 target".into(), report.settings.query_p95_target_ms)],
        ..LineChart::default()
    })
}

/// Bytes per row: on the wire, in the WAL, in Parquet.
pub fn bytes_per_row(report: &Report) -> BarChart {
    let b = &report.bytes_per_row;
    BarChart {
        title: "Bytes per row".into(),
        y_label: "bytes".into(),
        categories: b.iter().map(|r| short_label(&r.label)).collect(),
        series: vec![
            (
                "request body".into(),
                b.iter().map(|r| Some(r.wire)).collect(),
            ),
            ("WAL".into(), b.iter().map(|r| r.wal).collect()),
            ("Parquet".into(), b.iter().map(|r| r.parquet).collect()),
        ],
    }
}

/// `msgpack · fsync · WAL on data volume` → `msgpack · fsync` when the placement is
/// the only one.
fn short_label(label: &str) -> String {
    label
        .replace(" · WAL on data volume", "")
        .replace(" · external nodes", "")
}

fn kind(kind: RunKind) -> &'static str {
    match kind {
        RunKind::Sweep => "sweep step",
        RunKind::Confirm => "confirmed",
        RunKind::Mixed => "mixed",
    }
}

fn points(report: &Report, ids: &[String], f: impl Fn(&WriteRun) -> (f64, f64)) -> Vec<(f64, f64)> {
    let mut p: Vec<(f64, f64)> = ids
        .iter()
        .filter_map(|id| report.runs.iter().find(|r| &r.id == id))
        .map(f)
        .collect();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    p
}
