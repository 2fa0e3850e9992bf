//! The measured sections of the report: ingest sweeps, confirmed runs over time, bytes
//! per row, the query profile, the mixed run, and the per-1,000-rows/s budgets.

use super::charts;
use super::document::Block;
use super::model::{Report, RunKind};
use super::sections::{n, opt, row};
use crate::units::{percent, sig3};

pub(super) fn ingest(r: &Report, b: &mut Vec<Block>) {
    b.push(Block::Heading(2, "Ingest sweeps".into()));
    b.push(Block::Para(
        "Open loop: each batch is due at a fixed time and its latency counts from then, so a stalled server cannot hide behind a slow client. A run qualifies when ≥ 99.9 % of offered rows are acknowledged, no 5xx but refusals, p99 under the limit, persisted == acknowledged per batch (counted by the server), no failure counter moved, and memory stayed under budget.".into(),
    ));
    b.push(Block::Chart(
        "offered vs acknowledged".into(),
        charts::offered_vs_acked(r).to_svg(),
    ));
    b.push(Block::Table(
        row(&[
            "configuration",
            "best qualifying step, rows/s",
            "confirmed rows/s",
            "stopped because",
        ]),
        r.sweeps
            .iter()
            .map(|s| {
                vec![
                    s.label.clone(),
                    opt(s.best_qualified_rows_per_s, n),
                    opt(s.confirmed_rows_per_s, n),
                    s.stopped_because
                        .clone()
                        .unwrap_or_else(|| "no step failed".into()),
                ]
            })
            .collect(),
    ));
    for i in 0..r.sweeps.len() {
        if let Some(chart) = charts::latency_vs_offered(r, i) {
            b.push(Block::Chart(chart.title.clone(), chart.to_svg()));
        }
    }
    b.push(Block::Heading(3, "Every run".into()));
    b.push(Block::Table(
        row(&[
            "run",
            "offered rows/s",
            "acked rows/s",
            "p50 ms",
            "p99 ms",
            "persisted == acked",
            "qualified",
            "bottleneck",
            "node CPU cores",
            "generator CPU cores",
        ]),
        r.runs
            .iter()
            .map(|run| {
                vec![
                    run.id.clone(),
                    n(run.offered_rate_rows_per_s),
                    n(run.acked_rate_rows_per_s),
                    sig3(run.outcome.latency_ms.p50),
                    sig3(run.outcome.latency_ms.p99),
                    if run.persisted_equals_acked {
                        "yes"
                    } else {
                        "**no**"
                    }
                    .into(),
                    if run.qualified {
                        "yes".into()
                    } else {
                        format!(
                            "no: {}",
                            run.gates_failed
                                .iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join("; ")
                        )
                    },
                    format!(
                        "{} {}{}",
                        run.bottleneck.resource.label(),
                        percent(run.bottleneck.utilization),
                        if run.bottleneck.saturated {
                            " (saturated)"
                        } else {
                            ""
                        }
                    ),
                    opt(run.resources.node_cpu_cores_mean, sig3),
                    opt(run.resources.generator_cpu_cores_mean, sig3),
                ]
            })
            .collect(),
    ));
}

pub(super) fn confirmed(r: &Report, b: &mut Vec<Block>) {
    b.push(Block::Heading(
        2,
        "Confirmed runs: CPU and disk over time".into(),
    ));
    for run in r
        .runs
        .iter()
        .filter(|x| x.kind == RunKind::Confirm && x.qualified)
    {
        b.push(Block::Heading(
            3,
            format!("{} at {} rows/s", run.label, n(run.offered_rate_rows_per_s)),
        ));
        b.push(Block::Para(format!(
            "Bottleneck: {}. Node CPU {} µs/row, WAL {} bytes/row, generator CPU {} cores (encoding {} s, done before the clock started).",
            run.bottleneck.sentence,
            opt(run.resources.node_cpu_us_per_row, sig3),
            opt(run.resources.wal_bytes_per_row, sig3),
            opt(run.resources.generator_cpu_cores_mean, sig3),
            sig3(run.outcome.generator.encode_cpu_s)
        )));
        b.push(Block::Chart(
            format!("CPU over time: {}", run.id),
            charts::cpu_over_time(run, r.machine.cores).to_svg(),
        ));
        b.push(Block::Chart(
            format!("Disk over time: {}", run.id),
            charts::disk_over_time(run).to_svg(),
        ));
    }
}

pub(super) fn bytes(r: &Report, b: &mut Vec<Block>) {
    b.push(Block::Heading(2, "Bytes per row".into()));
    b.push(Block::Chart(
        "bytes per row".into(),
        charts::bytes_per_row(r).to_svg(),
    ));
    b.push(Block::Table(
        row(&["configuration", "request body", "WAL", "Parquet"]),
        r.bytes_per_row
            .iter()
            .map(|x| {
                vec![
                    x.label.clone(),
                    sig3(x.wire),
                    opt(x.wal, sig3),
                    opt(x.parquet, sig3),
                ]
            })
            .collect(),
    ));
}

pub(super) fn queries(r: &Report, b: &mut Vec<Block>) {
    let Some(p) = &r.query_profile else { return };
    b.push(Block::Heading(2, "Query profile".into()));
    b.push(Block::Para(format!(
        "Each client runs the mix ({}) back to back; a level holds when, in every repeat, the slowest query type's p95 stays under {} ms with no error.",
        p.mix.iter().map(|m| format!("`{}`", m.0)).collect::<Vec<_>>().join(", "),
        n(p.p95_target_ms)
    )));
    for chart in charts::query_p95(r) {
        b.push(Block::Chart(chart.title.clone(), chart.to_svg()));
    }
    for d in &p.datasets {
        b.push(Block::Heading(
            3,
            format!("{} rows, {} hosts", n(d.rows as f64), n(d.hosts as f64)),
        ));
        b.push(Block::Para(format!(
            "Seeded in {} s; Parquet {} bytes/row; node CPU per query at one client {} ms; highest concurrency held: {}.",
            sig3(d.seed_s),
            opt(d.parquet_bytes_per_row, sig3),
            opt(d.cpu_ms_per_query_single_client, sig3),
            d.qualified_concurrency
        )));
        let mut head = row(&["clients", "queries/s", "slowest p95 ms", "held"]);
        head.extend(p.mix.iter().map(|m| format!("{} p95 ms", m.0)));
        head.push("node CPU cores".into());
        head.push("node RSS MB".into());
        b.push(Block::Table(
            head,
            d.levels
                .iter()
                .map(|l| {
                    let mut cells = vec![
                        l.concurrency.to_string(),
                        l.qps
                            .iter()
                            .map(|q| sig3(*q))
                            .collect::<Vec<_>>()
                            .join(" / "),
                        l.slowest_p95_ms
                            .iter()
                            .map(|q| n(*q))
                            .collect::<Vec<_>>()
                            .join(" / "),
                        if l.held { "yes" } else { "no" }.into(),
                    ];
                    for i in 0..p.mix.len() {
                        let worst = l
                            .repeats
                            .iter()
                            .filter_map(|x| x.get(i))
                            .map(|t| t.latency_ms.p95)
                            .fold(f64::NAN, f64::max);
                        cells.push(opt(Some(worst), n));
                    }
                    cells.push(opt(l.node_cpu_cores_mean, sig3));
                    cells.push(opt(l.node_rss_mb_max, n));
                    cells
                })
                .collect(),
        ));
    }
}

pub(super) fn mixed(r: &Report, b: &mut Vec<Block>) {
    let Some(m) = &r.mixed else { return };
    b.push(Block::Heading(2, "Mixed writes and queries".into()));
    if let Some(chart) = charts::mixed(r) {
        b.push(Block::Chart(chart.title.clone(), chart.to_svg()));
    }
    b.push(Block::Table(
        row(&[
            "query clients",
            "writes held",
            "write p99 ms",
            "slowest query p95 ms",
            "p95 held",
            "queries/s",
        ]),
        m.levels
            .iter()
            .map(|l| {
                let run = r.runs.iter().find(|x| x.id == l.write_run);
                vec![
                    l.concurrency.to_string(),
                    if l.write_held { "yes" } else { "no" }.into(),
                    opt(run.map(|x| x.outcome.latency_ms.p99), sig3),
                    opt(l.queries.slowest_p95_ms.first().copied(), n),
                    if l.queries.held { "yes" } else { "no" }.into(),
                    opt(l.queries.qps.first().copied(), sig3),
                ]
            })
            .collect(),
    ));
}

pub(super) fn cluster(r: &Report, b: &mut Vec<Block>) {
    b.push(Block::Heading(2, "Per 1,000 rows/s".into()));
    let budgets: Vec<_> = r
        .budget
        .iter()
        .chain(r.cluster.iter().flat_map(|c| c.budget.iter()))
        .collect();
    if budgets.is_empty() {
        b.push(Block::Para(
            "No confirmed run to measure a budget on.".into(),
        ));
    } else {
        b.push(Block::Para("Multiply by the expected rate in thousands of rows per second (resident memory is at the measured rate, not per 1,000).".into()));
        b.push(Block::Table(
            row(&[
                "run",
                "nodes",
                "at rows/s",
                "CPU-ms/s per node",
                "resident MB per node",
                "WAL bytes/s",
                "Parquet bytes/s",
                "bytes/s between nodes",
            ]),
            budgets
                .iter()
                .map(|x| {
                    vec![
                        x.run.clone(),
                        x.nodes.to_string(),
                        n(x.rows_per_s),
                        opt(x.cpu_ms_per_s_per_node, sig3),
                        opt(x.resident_mb_per_node, n),
                        opt(x.wal_bytes_per_s, n),
                        opt(x.parquet_bytes_per_s, n),
                        opt(x.network_bytes_per_s, n),
                    ]
                })
                .collect(),
        ));
    }
    if let Some(c) = &r.cluster {
        b.push(Block::Heading(2, "Cluster".into()));
        b.push(Block::Para(format!(
            "{} nodes on this one machine (each fsyncs its own WAL, all share the cores): replicated rate confirmed: {} rows/s.",
            c.nodes,
            opt(c.confirmed_rows_per_s, n)
        )));
        if let Some(d) = &c.drill {
            b.push(Block::Para(format!(
                "Failover drill ({} kill -9 of the leader under load): new leader after {} ms (median), first acknowledged write sent after the kill at {} ms (median), {} acknowledged rows lost.",
                d.drills,
                n(d.detection_ms_median),
                n(d.first_write_ms_median),
                d.acked_rows_lost
            )));
        }
        if let Some(e) = &c.drill_error {
            b.push(Block::Para(format!("The failover drill failed: {e}")));
        }
    }
}
