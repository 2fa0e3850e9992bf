//! `quiver sizing run`: the whole sizing campaign on the operator's own machine.
//!
//! 1. machine probe (cores, memory, each volume's write MB/s and fdatasync/s);
//! 2. ingest sweeps per format, `wal.sync` mode and WAL placement, each confirmed for
//!    `--duration` at its highest qualifying rate;
//! 3. query profile over seeded datasets at rising concurrency;
//! 4. mixed writes and queries;
//! 5. with `--nodes 3`, the same on a replicated cluster plus a failover drill;
//!
//! with the resources sampled every second throughout, and a report (JSON, Markdown,
//! HTML with charts) written before the command exits, non-zero when a gate failed.

mod budget;
mod cluster_step;
mod conclude;
mod findings;
mod ingest;
mod mixed;
mod progress;
mod query;
mod query_step;
mod seed;
pub(crate) mod settings;
mod steps;
mod write_run;

pub use settings::RunArgs;

use std::time::Instant;

use crate::error::{Error, Result};
use crate::report::model::{Report, SCHEMA_VERSION};
use crate::resources::probe::machine_basics;
use findings::Findings;
use progress::Progress;
use settings::Settings;

/// Runs the campaign and writes `OUT/report.{json,md,html}`; fails naming every gate
/// that did not hold.
pub async fn run_campaign(args: RunArgs) -> Result<()> {
    let machine = machine_basics();
    let settings = Settings::from_args(&args, machine.memory_total_mb)?;
    std::fs::create_dir_all(&args.out).map_err(|e| Error::io(&args.out, e))?;
    let started = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339();
    progress::say(&format!(
        "quiver sizing run{}: {} sweeps, query profile over {} rows × {} datasets, mixed run{}; estimated {}",
        if settings.quick { " --quick" } else { "" },
        settings.sweeps.len(),
        crate::units::thousands(settings.query_rows as f64),
        settings.query_hosts.len(),
        if settings.nodes == 3 { ", 3-node cluster and failover drill" } else { "" },
        crate::units::format_duration(settings.estimate()),
    ));
    let progress = Progress::new(settings.estimate());
    let mut findings = Findings {
        machine,
        runs: Vec::new(),
        sweeps: Vec::new(),
        bytes_per_row: Vec::new(),
        query_profile: None,
        mixed: None,
        cluster: None,
        budget: None,
        memory_base_mb: None,
        step_errors: Vec::new(),
    };
    let campaign = steps::Campaign::new(&settings, args.token.clone())?;
    campaign.probe(&mut findings, &progress).await?;
    campaign.ingest(&mut findings, &progress).await;
    campaign.queries_and_mixed(&mut findings, &progress).await;
    if settings.nodes == 3 && settings.own_nodes() {
        campaign.cluster(&mut findings, &progress).await;
    }
    campaign.finish();
    progress.finish();

    let calibration = findings.calibration(&settings);
    let recommendation = conclude::recommend(&findings, &settings, &calibration);
    let gates = conclude::gates(&findings, &settings);
    let report = Report {
        schema_version: SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION").to_string(),
        command: std::env::args().collect(),
        started_at,
        finished_at: chrono::Utc::now().to_rfc3339(),
        duration_s: started.elapsed().as_secs_f64(),
        node_config: campaign.node_config(),
        settings,
        machine: findings.machine,
        runs: findings.runs,
        sweeps: findings.sweeps,
        bytes_per_row: findings.bytes_per_row,
        query_profile: findings.query_profile,
        mixed: findings.mixed,
        cluster: findings.cluster,
        budget: findings.budget,
        calibration,
        recommendation,
        gates,
    };
    crate::report::write(&args.out, &report)?;
    progress::say(&format!(
        "report: {}, {}, {} ({:.0} s)",
        args.out.join("report.json").display(),
        args.out.join("report.md").display(),
        args.out.join("report.html").display(),
        report.duration_s
    ));
    let failed: Vec<String> = report
        .gates
        .iter()
        .filter(|g| !g.passed)
        .map(|g| format!("{} ({})", g.name, g.detail))
        .collect();
    if failed.is_empty() {
        progress::say("every gate held");
        Ok(())
    } else {
        Err(Error::GateFailed(failed.join("; ")))
    }
}
