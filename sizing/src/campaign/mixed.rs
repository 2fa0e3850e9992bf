//! The mixed run: a fixed write rate (a share of the qualified MessagePack rate) into
//! the seeded dataset while the query mix runs at rising concurrency, so the data grows
//! under the queries. Each level reports whether the writes qualified and whether the
//! slowest query type held its p95 target.

use std::time::{Duration, Instant};

use super::progress::Progress;
use super::query::{run_clients, slowest_p95, type_stats};
use super::settings::{Configuration, Placement, Settings};
use super::write_run::{settle, write_run, RunContext, RunRequest};
use crate::error::Result;
use crate::load::{now_ns, WireFormat};
use crate::report::model::{Mixed, MixedLevel, QueryLevel, RunKind, WriteRun};
use crate::units::thousands;

/// Runs the levels; write runs are appended to `runs`.
#[allow(clippy::too_many_arguments)]
pub async fn mixed(
    ctx: &RunContext,
    settings: &Settings,
    progress: &Progress,
    table: &str,
    hosts: u64,
    queries: &[(String, String)],
    write_rate_rows_per_s: f64,
    runs: &mut Vec<WriteRun>,
) -> Result<Mixed> {
    let configuration = Configuration {
        format: WireFormat::Msgpack,
        wal_sync: settings
            .sweeps
            .first()
            .map(|c| c.wal_sync.clone())
            .unwrap_or_else(|| "fsync".into()),
        placement: if settings.own_nodes() {
            Placement::DataVolume
        } else {
            Placement::External
        },
        nodes: 1,
    };
    let mut levels = Vec::new();
    let mut next_start_ns = now_ns()?;
    for &clients in &settings.query_concurrency {
        progress.step(&format!(
            "mixed: {} rows/s of writes with {clients} query clients for {} s",
            thousands(write_rate_rows_per_s),
            settings.mixed_level_s
        ));
        let start_ns = now_ns()?.max(next_start_ns);
        let until = Instant::now() + Duration::from_secs_f64(settings.mixed_level_s);
        let request = RunRequest {
            id: format!("mixed-c{clients}"),
            kind: RunKind::Mixed,
            configuration: configuration.clone(),
            rate_rows_per_s: write_rate_rows_per_s,
            duration_s: settings.mixed_level_s,
            measurement: table.to_string(),
            hosts,
            start_ns: Some(start_ns),
        };
        let (run, (answers, wall_s)) = tokio::join!(
            write_run(ctx, settings, request),
            run_clients(&ctx.target, queries, clients, 1, Some(until))
        );
        let run = run?;
        next_start_ns = now_ns()?.max(start_ns + (settings.mixed_level_s * 1e9) as i64 + 1);
        let stats = type_stats(queries, &answers);
        let slowest = slowest_p95(&stats);
        let errors: u64 = stats.iter().map(|s| s.errors).sum();
        let p95_held = errors == 0 && slowest <= settings.query_p95_target_ms;
        progress.line(&format!(
            "mixed with {clients} clients: writes {} (p99 {:.0} ms), slowest query p95 {:.0} ms ({})",
            if run.qualified { "held" } else { "did not hold" },
            run.outcome.latency_ms.p99,
            slowest,
            if p95_held { "held" } else { "over the target" }
        ));
        levels.push(MixedLevel {
            concurrency: clients,
            write_run: run.id.clone(),
            write_held: run.qualified,
            queries: QueryLevel {
                concurrency: clients,
                qps: vec![answers.len() as f64 / wall_s.max(1e-9)],
                repeats: vec![stats],
                slowest_p95_ms: vec![slowest],
                held: p95_held,
                node_cpu_cores_mean: run.resources.node_cpu_cores_mean,
                node_rss_mb_max: run.resources.node_rss_mb_max,
            },
        });
        runs.push(run);
        settle(&ctx.target).await;
    }
    let held_concurrency = levels
        .iter()
        .filter(|l| l.write_held && l.queries.held)
        .map(|l| l.concurrency)
        .max()
        .unwrap_or(0);
    Ok(Mixed {
        write_rate_rows_per_s,
        levels,
        held_concurrency,
    })
}
