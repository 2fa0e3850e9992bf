//! The campaign's flags and the settings they resolve to (`--quick` or the full
//! campaign), with the time estimate printed before anything starts.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::load::WireFormat;
use crate::qualify::Limits;
use crate::resources::probe::ProbeBudget;
use crate::units::parse_duration;

/// Flags of `quiver sizing run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Directory for report.json, report.md and report.html (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// The whole campaign in about two minutes: short runs, 2 M rows of query data.
    #[arg(long)]
    pub quick: bool,
    /// How long the highest qualifying rate of each sweep is confirmed (`10m`, `90s`).
    #[arg(long)]
    pub duration: Option<String>,
    /// Volume (directory) for the nodes' data (default: OUT/nodes, removed afterwards).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Volume (directory) for the WAL; on another device than --data-dir, every sweep
    /// also runs with the WAL there.
    #[arg(long)]
    pub wal_dir: Option<PathBuf>,
    /// Nodes: 1, or 3 to add the replicated step (cluster sweep, failover drill,
    /// budget per 1,000 rows/s).
    #[arg(long, default_value_t = 1)]
    pub nodes: u32,
    /// Run against nodes already running instead of starting them (repeat for each
    /// node); their processes and volumes are then not sampled.
    #[arg(long = "url")]
    pub urls: Vec<String>,
    /// Token for --url nodes (or QUIVER_TOKEN).
    #[arg(long, env = "QUIVER_TOKEN")]
    pub token: Option<String>,
    /// p99 write latency a run must stay under, in milliseconds.
    #[arg(long, default_value_t = 1000.0)]
    pub p99_ms_max: f64,
    /// p95 target of the slowest query type, in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub query_p95_target_s: f64,
    /// Rows of each query dataset (default 20,000,000; 1,000,000 with --quick).
    #[arg(long)]
    pub query_rows: Option<u64>,
    /// Resident memory budget per node, in MB (default: the node's own memory budgets
    /// plus 512 MB, at most 80 % of the machine's memory shared by the nodes).
    #[arg(long)]
    pub memory_budget_mb: Option<f64>,
    /// First offered rate of each sweep, in rows per second.
    #[arg(long)]
    pub start_rate: Option<f64>,
    /// Highest rate a sweep offers, in rows per second: a sweep that holds it stops
    /// there (the limit is higher). For a machine that must not be saturated (a shared
    /// host, or nodes given with --url that serve others).
    #[arg(long)]
    pub rate_max: Option<f64>,
    /// Keep the nodes' directories (data, WAL, logs) afterwards.
    #[arg(long)]
    pub keep_data: bool,
}

/// One configuration of the write path: what a sweep varies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Configuration {
    /// Wire format.
    pub format: WireFormat,
    /// `wal.sync` of the node(s).
    pub wal_sync: String,
    /// Where the WAL is.
    pub placement: Placement,
    /// Nodes (1, or 3 replicated).
    pub nodes: u32,
}

impl Configuration {
    /// `msgpack · fsync · WAL on data volume`.
    pub fn label(&self) -> String {
        let mut label = format!(
            "{} · {} · {}",
            self.format.name(),
            self.wal_sync,
            self.placement.label()
        );
        if self.nodes > 1 {
            label.push_str(&format!(" · {} nodes", self.nodes));
        }
        label
    }

    /// A short id for run names and measurements: `msgpack-fsync-data`.
    pub fn slug(&self) -> String {
        let placement = match self.placement {
            Placement::DataVolume => "data",
            Placement::OwnVolume => "walvol",
            Placement::External => "ext",
        };
        let sync = self.wal_sync.replace(' ', "");
        let mut slug = format!("{}-{sync}-{placement}", self.format.name());
        if self.nodes > 1 {
            slug.push_str(&format!("-{}n", self.nodes));
        }
        slug
    }
}

/// Where the WAL is during a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// Inside the data directory (or in --wal-dir on the same device).
    DataVolume,
    /// In --wal-dir, on a device of its own.
    OwnVolume,
    /// Nodes the campaign did not start: unknown.
    External,
}

impl Placement {
    /// How the report names it.
    pub fn label(self) -> &'static str {
        match self {
            Placement::DataVolume => "WAL on data volume",
            Placement::OwnVolume => "WAL on own volume",
            Placement::External => "external nodes",
        }
    }
}

/// Everything the campaign will do, resolved from the flags.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// `--quick`.
    pub quick: bool,
    /// Nodes per cluster in the replicated step (1: none).
    pub nodes: u32,
    /// Nodes given with --url (then nothing is started).
    pub external_urls: Vec<String>,
    /// Parent of the nodes' data directories.
    pub data_root: PathBuf,
    /// Parent of the nodes' WAL directories, when given.
    pub wal_root: Option<PathBuf>,
    /// The configurations swept, grouped by node (`wal.sync` and placement), the
    /// default (`fsync`, WAL on the data volume, MessagePack) first.
    pub sweeps: Vec<Configuration>,
    /// Rows per write request.
    pub batch_rows: u64,
    /// Distinct hosts of the ingest runs.
    pub hosts: u64,
    /// Seconds of each sweep step.
    pub step_s: f64,
    /// Seconds of each confirmation run.
    pub confirm_s: f64,
    /// First offered rate of a sweep.
    pub start_rate_rows_per_s: f64,
    /// Each step offers this many times the last.
    pub rate_factor: f64,
    /// Highest rate a sweep offers (`--rate-max`; unbounded by default).
    pub rate_max_rows_per_s: f64,
    /// Most steps of one sweep (upward).
    pub sweep_steps_max: u32,
    /// Steps between the last qualifying and the first failing rate.
    pub refine_steps: u32,
    /// Confirmations tried before a sweep counts as failed (see `confirm_rates`).
    pub confirm_attempts_max: u32,
    /// Requests in flight at most.
    pub in_flight_max: usize,
    /// Per-request timeout, ms.
    pub request_timeout_ms: u64,
    /// The qualification limits.
    pub limits: Limits,
    /// The machine probe's budget.
    pub probe: ProbeBudget,
    /// Rows per query dataset.
    pub query_rows: u64,
    /// Hosts of each query dataset.
    pub query_hosts: Vec<u64>,
    /// Concurrent query clients per level.
    pub query_concurrency: Vec<u32>,
    /// Repeats of each level.
    pub query_repeats: u32,
    /// Rounds of the whole mix each client runs per repeat.
    pub query_rounds: u32,
    /// p95 target of the slowest query type, ms.
    pub query_p95_target_ms: f64,
    /// Mixed run: write rate as a share of the qualified MessagePack rate.
    pub mixed_write_fraction: f64,
    /// Seconds of each mixed level.
    pub mixed_level_s: f64,
    /// Failover drills in the replicated step.
    pub drills: usize,
    /// `storage.flush_age_ms` of the campaign's nodes (so each run reaches Parquet).
    pub flush_age_ms: u64,
    /// Keep node directories.
    pub keep_data: bool,
}

/// The nodes' own memory budgets with their defaults (deploy/quiver.toml):
/// storage.memory_bytes_max + http.write_bytes_in_flight_max +
/// query.node_memory_bytes_max, plus 512 MB for everything else.
const NODE_BUDGETS_MB: f64 = (2048.0 + 1024.0 + 2048.0 + 512.0) * 1.048_576;

impl Settings {
    /// Resolves the flags; `memory_total_mb` bounds the default memory budget.
    pub fn from_args(args: &RunArgs, memory_total_mb: f64) -> Result<Settings> {
        if !(args.nodes == 1 || args.nodes == 3) {
            return Err(Error::InvalidArgs("--nodes must be 1 or 3".into()));
        }
        for (flag, rate) in [
            ("--start-rate", args.start_rate),
            ("--rate-max", args.rate_max),
        ] {
            if rate.is_some_and(|r| !(r.is_finite() && r >= 1.0)) {
                return Err(Error::InvalidArgs(format!(
                    "{flag} must be at least 1 row per second"
                )));
            }
        }
        let quick = args.quick;
        let confirm_s = match &args.duration {
            Some(text) => parse_duration(text)
                .map_err(|e| Error::InvalidArgs(format!("--duration {e}")))?
                .as_secs_f64(),
            None if quick => 4.0,
            None => 600.0,
        };
        let external = !args.urls.is_empty();
        let nodes_on_machine = if external { 0.0 } else { args.nodes as f64 };
        let memory_budget_mb = args.memory_budget_mb.unwrap_or_else(|| {
            let share = 0.8 * memory_total_mb / nodes_on_machine.max(1.0);
            if share > 0.0 {
                NODE_BUDGETS_MB.min(share)
            } else {
                NODE_BUDGETS_MB
            }
        });
        let data_root = args
            .data_dir
            .clone()
            .unwrap_or_else(|| args.out.join("nodes"));
        let own_volume = match &args.wal_dir {
            Some(wal) => {
                std::fs::create_dir_all(wal).map_err(|e| Error::io(wal, e))?;
                std::fs::create_dir_all(&data_root).map_err(|e| Error::io(&data_root, e))?;
                let a = crate::resources::procfs::device_of(wal);
                let b = crate::resources::procfs::device_of(&data_root);
                a.is_some() && a != b
            }
            None => false,
        };
        let placements = if external {
            vec![Placement::External]
        } else if own_volume {
            vec![Placement::DataVolume, Placement::OwnVolume]
        } else {
            vec![Placement::DataVolume]
        };
        let wal_syncs: Vec<&str> = if external {
            vec!["as configured"]
        } else {
            vec!["fsync", "batch", "none"]
        };
        let mut sweeps = Vec::new();
        for wal_sync in &wal_syncs {
            for placement in &placements {
                for format in [WireFormat::Msgpack, WireFormat::Lp] {
                    // --quick sweeps line protocol in the default mode only.
                    if quick && format == WireFormat::Lp && *wal_sync != wal_syncs[0] {
                        continue;
                    }
                    sweeps.push(Configuration {
                        format,
                        wal_sync: wal_sync.to_string(),
                        placement: *placement,
                        nodes: 1,
                    });
                }
            }
        }
        Ok(Settings {
            quick,
            nodes: args.nodes,
            external_urls: args.urls.clone(),
            data_root,
            wal_root: args.wal_dir.clone(),
            sweeps,
            batch_rows: 5_000,
            hosts: 1_000,
            step_s: if quick { 2.0 } else { 20.0 },
            confirm_s,
            start_rate_rows_per_s: args.start_rate.unwrap_or(if quick {
                40_000.0
            } else {
                50_000.0
            }),
            rate_factor: if quick { 3.0 } else { 2.0 },
            rate_max_rows_per_s: args.rate_max.unwrap_or(f64::INFINITY),
            // --quick climbs until a gate fails too (×3 from 40,000: the seventh step
            // offers 29 M rows/s, past any machine), then narrows: four steps that all
            // held used to end at 1.08 M rows/s without finding a limit.
            sweep_steps_max: if quick { 7 } else { 10 },
            refine_steps: 2,
            confirm_attempts_max: 4,
            in_flight_max: 64,
            request_timeout_ms: if quick { 10_000 } else { 30_000 },
            limits: Limits {
                acked_fraction_min: 0.999,
                latency_p99_ms_max: args.p99_ms_max,
                memory_budget_mb,
            },
            probe: if quick {
                ProbeBudget {
                    sequential_bytes_max: 64 << 20,
                    sequential_s_max: 1.0,
                    sync_s: 0.5,
                }
            } else {
                ProbeBudget {
                    sequential_bytes_max: 1 << 30,
                    sequential_s_max: 5.0,
                    sync_s: 3.0,
                }
            },
            query_rows: args
                .query_rows
                .unwrap_or(if quick { 1_000_000 } else { 20_000_000 }),
            query_hosts: vec![10_000, 100_000],
            query_concurrency: vec![1, 5, 10, 20],
            query_repeats: if quick { 1 } else { 3 },
            query_rounds: if quick { 1 } else { 2 },
            query_p95_target_ms: args.query_p95_target_s * 1000.0,
            mixed_write_fraction: 0.1,
            mixed_level_s: if quick { 2.0 } else { 30.0 },
            drills: if quick { 1 } else { 3 },
            flush_age_ms: if quick { 3_000 } else { 10_000 },
            keep_data: args.keep_data,
        })
    }

    /// Whether the campaign starts its own nodes.
    pub fn own_nodes(&self) -> bool {
        self.external_urls.is_empty()
    }

    /// A rough length of the whole campaign, printed before it starts.
    pub fn estimate(&self) -> Duration {
        let per_run_overhead_s = 2.0;
        let steps = (self.sweep_steps_max.min(5) + self.refine_steps) as f64;
        let sweep_s = steps * (self.step_s + per_run_overhead_s)
            + 1.5 * (self.confirm_s + per_run_overhead_s);
        let mut total = 10.0 + self.sweeps.len() as f64 * sweep_s;
        // Seeding near 250,000 rows/s, one pass of the levels per repeat.
        let seed_s = self.query_rows as f64 * self.query_hosts.len() as f64 / 250_000.0;
        let query_s = self.query_hosts.len() as f64
            * self.query_repeats as f64
            * self.query_concurrency.len() as f64
            * if self.quick { 3.0 } else { 30.0 };
        total += seed_s + query_s + self.flush_age_ms as f64 / 1e3 * 2.0;
        total += self.query_concurrency.len() as f64 * (self.mixed_level_s + per_run_overhead_s);
        if self.nodes == 3 {
            total += sweep_s + self.drills as f64 * 8.0;
        }
        Duration::from_secs_f64(total)
    }
}
