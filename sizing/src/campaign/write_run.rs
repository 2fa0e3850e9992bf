//! One write run, start to verdict: the open-loop schedule with the sampler running,
//! then the server's per-batch count, the qualification rule, and the bottleneck.

use std::time::{Duration, Instant};

use crate::audit::audit;
use crate::batch_counts::count_batches;
use crate::campaign::settings::{Configuration, Settings};
use crate::error::Result;
use crate::load::now_ns;
use crate::open_loop::{self, Spec};
use crate::qualify::{qualify, Evidence};
use crate::report::model::{ResourceSummary, RunKind, WriteRun};
use crate::resources::bottleneck::{self, bottleneck};
use crate::resources::probe::VolumeProbe;
use crate::resources::prometheus;
use crate::resources::sampler::{Sample, Sampled, Sampler, Targets};
use crate::stats::mean;
use crate::target::Target;

/// Longest the tool waits for a node's flush backlog to drain between runs.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);

/// Where runs go and what is watched while they do.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The node(s).
    pub target: Target,
    /// What the sampler reads.
    pub sampled: Targets,
    /// The probed volumes in use (for the bottleneck rule).
    pub volumes: Vec<VolumeProbe>,
    /// Cores of the machine.
    pub cores: u32,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// Run id.
    pub id: String,
    /// What it is for.
    pub kind: RunKind,
    /// The configuration.
    pub configuration: Configuration,
    /// Offered rows per second.
    pub rate_rows_per_s: f64,
    /// Seconds of schedule.
    pub duration_s: f64,
    /// Measurement to write.
    pub measurement: String,
    /// Distinct hosts.
    pub hosts: u64,
    /// Time of the first row, ns (later than anything already in the measurement).
    pub start_ns: Option<i64>,
}

/// Runs `request` and judges it.
pub async fn write_run(
    ctx: &RunContext,
    settings: &Settings,
    request: RunRequest,
) -> Result<WriteRun> {
    let rate = request.rate_rows_per_s;
    // One step per host every hosts/rate seconds: data time keeps pace with wall time.
    let interval_ns = ((request.hosts as f64 / rate) * 1e9).max(1.0) as i64;
    let spec = Spec {
        format: request.configuration.format,
        measurement: request.measurement.clone(),
        rate_rows_per_s: rate,
        duration_s: request.duration_s,
        batch_rows: settings.batch_rows,
        hosts: request.hosts,
        start_ns: match request.start_ns {
            Some(ns) => ns,
            None => now_ns()?,
        },
        interval_ns,
        in_flight_max: settings.in_flight_max,
        request_timeout_ms: settings.request_timeout_ms,
        behind_give_up_ms: (request.duration_s * 500.0).max(1_000.0) as u64,
        ahead_bytes_max: crate::rate_load::AHEAD_BYTES_MAX,
    };
    let sampler = Sampler::start(ctx.sampled.clone(), ctx.target.client.clone());
    let outcome = open_loop::run(&spec, &ctx.target).await;
    let sampled = sampler.stop().await;
    let outcome = outcome?;
    let audit = count_batches(&ctx.target, &spec.shape(), spec.batch_rows, spec.batches())
        .await
        .map(|stored| audit(&outcome.batch_outcomes, spec.batch_rows, &stored))
        .ok();
    let resources = summarize(&sampled, outcome.acked_rows);
    let evidence = Evidence {
        offered_rows: outcome.offered_rows,
        acked_rows: outcome.acked_rows,
        server_errors: outcome.server_errors,
        unanswered: outcome.transport_errors,
        latency_p99_ms: outcome.latency_ms.p99,
        audit: audit.clone(),
        counters: sampled.failures.clone(),
        node_rss_mb_max: resources.node_rss_mb_max,
    };
    let gates_failed = qualify(&evidence, &settings.limits);
    let bottleneck = bottleneck(
        &sampled.samples,
        &bottleneck::Context {
            cores: ctx.cores,
            volumes: &ctx.volumes,
            memory_budget_mb: settings.limits.memory_budget_mb,
            encoder_wait_fraction: outcome.generator.encoder_wait_fraction,
            late_timer_fraction: outcome.generator.late_timer_fraction,
            kept_pace: gates_failed.is_empty(),
        },
    );
    Ok(WriteRun {
        id: request.id,
        kind: request.kind,
        label: request.configuration.label(),
        configuration: request.configuration,
        offered_rate_rows_per_s: rate,
        // Over the schedule's length at least (whole batches: offered rows ÷ rate), as
        // the last batch is due just before the schedule ends.
        acked_rate_rows_per_s: outcome.acked_rows as f64
            / outcome
                .wall_s
                .max(outcome.offered_rows as f64 / rate)
                .max(1e-9),
        duration_s: request.duration_s,
        measurement: request.measurement,
        persisted_equals_acked: audit.as_ref().is_some_and(|a| a.persisted_equals_acked()),
        audit,
        failures: sampled.failures.clone(),
        qualified: gates_failed.is_empty(),
        gates_failed,
        bottleneck,
        resources,
        samples: sampled.samples,
        outcome,
    })
}

/// One unrecorded second of writes on fresh nodes (connections, the first table, the
/// first WAL segment), so the first measured step does not pay for them.
pub async fn warm_up(ctx: &RunContext, settings: &Settings) {
    let spec = Spec {
        format: crate::load::WireFormat::Msgpack,
        measurement: "warm_up".into(),
        rate_rows_per_s: settings.start_rate_rows_per_s,
        duration_s: 1.0,
        batch_rows: settings.batch_rows,
        hosts: settings.hosts,
        start_ns: now_ns().unwrap_or(0),
        interval_ns: 1_000_000,
        in_flight_max: settings.in_flight_max,
        request_timeout_ms: settings.request_timeout_ms,
        behind_give_up_ms: 1_000,
        ahead_bytes_max: crate::rate_load::AHEAD_BYTES_MAX,
    };
    let _ = open_loop::run(&spec, &ctx.target).await;
    settle(&ctx.target).await;
}

/// Means and peaks of a run's samples; per-row costs from the counters.
pub fn summarize(sampled: &Sampled, acked_rows: u64) -> ResourceSummary {
    let steady: &[Sample] = if sampled.samples.len() > 2 {
        &sampled.samples[1..]
    } else {
        &sampled.samples
    };
    let node_sum = |f: fn(&crate::resources::sampler::NodeSample) -> Option<f64>| {
        mean(steady.iter().filter_map(|s| {
            let v: Vec<f64> = s.nodes.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>())
        }))
    };
    let node_max = |f: fn(&crate::resources::sampler::NodeSample) -> Option<f64>| {
        mean(
            steady
                .iter()
                .filter_map(|s| s.nodes.iter().filter_map(f).reduce(f64::max)),
        )
    };
    let rss_max = sampled
        .samples
        .iter()
        .flat_map(|s| s.nodes.iter().filter_map(|n| n.rss_mb))
        .reduce(f64::max);
    let nodes = sampled.metrics_last.len().max(1) as f64;
    let rows = acked_rows.max(1) as f64;
    // Node CPU-seconds over the run: each sample's cores × the time it covers.
    let (mut previous_t, mut cpu_s, mut sampled_cpu) = (0.0, 0.0, false);
    for s in &sampled.samples {
        let cores: Vec<f64> = s.nodes.iter().filter_map(|n| n.cpu_cores).collect();
        if !cores.is_empty() {
            cpu_s += cores.iter().sum::<f64>() * (s.t_s - previous_t);
            sampled_cpu = true;
        }
        previous_t = s.t_s;
    }
    let cpu_us_per_row = sampled_cpu.then(|| cpu_s * 1e6 / rows);
    let roles: Vec<String> = steady
        .first()
        .map(|s| s.volumes.iter().map(|v| v.role.clone()).collect())
        .unwrap_or_default();
    ResourceSummary {
        node_cpu_cores_mean: node_sum(|n| n.cpu_cores),
        generator_cpu_cores_mean: mean(steady.iter().filter_map(|s| s.generator_cpu_cores)),
        machine_cpu_busy_mean: mean(steady.iter().filter_map(|s| s.machine_cpu_busy)),
        node_rss_mb_max: rss_max,
        wal_write_mb_per_s_mean: node_sum(|n| n.wal_write_mb_per_s),
        wal_fsyncs_per_s_mean: node_max(|n| n.wal_fsyncs_per_s),
        volumes: roles
            .into_iter()
            .map(|role| {
                let pick = |f: fn(&crate::resources::sampler::VolumeSample) -> Option<f64>| {
                    mean(
                        steady
                            .iter()
                            .filter_map(|s| s.volumes.iter().find(|v| v.role == role).and_then(f)),
                    )
                };
                let w = pick(|v| v.write_mb_per_s);
                let f = pick(|v| v.flushes_per_s);
                (role, w, f)
            })
            .collect(),
        node_cpu_us_per_row: cpu_us_per_row,
        wal_bytes_per_row: sampled
            .counter_increase("quiver_wal_bytes_written_total")
            .map(|b| b / nodes / rows),
    }
}

/// Waits until every node's flush backlog and in-flight writes are gone, so one run's
/// leftovers do not land on the next (bounded by [`SETTLE_TIMEOUT`]).
pub async fn settle(target: &Target) {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    while Instant::now() < deadline {
        let mut busy = false;
        for url in &target.urls {
            match prometheus::fetch(&target.client, url).await {
                Some(m) => {
                    let backlog = m.get("quiver_frozen_segments").copied().unwrap_or(0.0)
                        + m.get("quiver_write_bytes_in_flight")
                            .copied()
                            .unwrap_or(0.0);
                    busy |= backlog > 0.0;
                }
                None => busy = true,
            }
        }
        if !busy {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
