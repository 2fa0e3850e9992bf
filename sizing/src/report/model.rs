//! `report.json`: everything a campaign measured (every run with every sample, the
//! machine, the version and the settings) and what it concluded. The Markdown and HTML
//! reports are rendered from this one structure, and the planner reads its
//! `calibration`.

use serde::Serialize;

use crate::audit::Audit;
use crate::campaign::settings::{Configuration, Settings};
use crate::open_loop::Outcome;
use crate::plan::Calibration;
use crate::qualify::{FailureCounters, Gate};
use crate::resources::bottleneck::Bottleneck;
use crate::resources::probe::Machine;
use crate::resources::sampler::Sample;
use crate::stats::Percentiles;

/// Version of this file's layout; raised when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Quiver's version.
    pub version: String,
    /// The command line.
    pub command: Vec<String>,
    /// RFC 3339 start time.
    pub started_at: String,
    /// RFC 3339 end time.
    pub finished_at: String,
    /// Seconds the campaign took.
    pub duration_s: f64,
    /// What the campaign was set to do.
    pub settings: Settings,
    /// Settings the nodes were started with (`QUIVER_*`), beyond the defaults.
    pub node_config: Vec<(String, String)>,
    /// The machine and its volumes.
    pub machine: Machine,
    /// Every write run (sweep steps, confirmations, mixed and cluster runs).
    pub runs: Vec<WriteRun>,
    /// One per configuration swept.
    pub sweeps: Vec<Sweep>,
    /// Bytes per row by format.
    pub bytes_per_row: Vec<BytesPerRow>,
    /// The query profile.
    pub query_profile: Option<QueryProfile>,
    /// The mixed run.
    pub mixed: Option<Mixed>,
    /// The replicated step (`--nodes 3`).
    pub cluster: Option<Cluster>,
    /// Per 1,000 rows/s at the confirmed single-node MessagePack rate.
    pub budget: Option<Budget>,
    /// The coefficients `quiver sizing plan --calibration` reads.
    pub calibration: Calibration,
    /// Sizes with headroom, retention, bottleneck sentences.
    pub recommendation: Recommendation,
    /// Gates on the chosen operating points, and any durability failure.
    pub gates: Vec<GateOutcome>,
}

/// What a write run was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// A step of a sweep.
    Sweep,
    /// The confirmation of a sweep's best rate, for `--duration`.
    Confirm,
    /// Writes under the query mix.
    Mixed,
}

/// Resource use over a run (the first second, a ramp, left out).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ResourceSummary {
    /// Node CPU, cores, mean (summed over nodes).
    pub node_cpu_cores_mean: Option<f64>,
    /// Generator CPU, cores, mean.
    pub generator_cpu_cores_mean: Option<f64>,
    /// Machine busy share, mean.
    pub machine_cpu_busy_mean: Option<f64>,
    /// Highest resident memory of a node, MB.
    pub node_rss_mb_max: Option<f64>,
    /// WAL MB/s written (summed over nodes), mean.
    pub wal_write_mb_per_s_mean: Option<f64>,
    /// WAL fsyncs per second (the busiest node), mean.
    pub wal_fsyncs_per_s_mean: Option<f64>,
    /// Each volume: role, write MB/s mean, flushes/s mean.
    pub volumes: Vec<(String, Option<f64>, Option<f64>)>,
    /// Node CPU-µs per acknowledged row (all nodes summed).
    pub node_cpu_us_per_row: Option<f64>,
    /// WAL bytes written per acknowledged row, per node.
    pub wal_bytes_per_row: Option<f64>,
}

/// One write run.
#[derive(Debug, Clone, Serialize)]
pub struct WriteRun {
    /// Unique name: `msgpack-fsync-data-s3`.
    pub id: String,
    /// What it was for.
    pub kind: RunKind,
    /// The write path's configuration.
    pub configuration: Configuration,
    /// `configuration.label()`.
    pub label: String,
    /// Offered rate.
    pub offered_rate_rows_per_s: f64,
    /// Acknowledged rows per second of wall time.
    pub acked_rate_rows_per_s: f64,
    /// Scheduled seconds.
    pub duration_s: f64,
    /// Measurement written.
    pub measurement: String,
    /// What the generator saw.
    pub outcome: Outcome,
    /// Per-batch count by the server.
    pub audit: Option<Audit>,
    /// Whether the audit found every acknowledged batch whole and once.
    pub persisted_equals_acked: bool,
    /// Failure counters during the run.
    pub failures: FailureCounters,
    /// Gates failed (empty: qualified).
    pub gates_failed: Vec<Gate>,
    /// Whether every gate held.
    pub qualified: bool,
    /// What limited it.
    pub bottleneck: Bottleneck,
    /// Means and peaks of the samples.
    pub resources: ResourceSummary,
    /// One per second.
    pub samples: Vec<Sample>,
}

/// One configuration's sweep.
#[derive(Debug, Clone, Serialize)]
pub struct Sweep {
    /// The configuration.
    pub configuration: Configuration,
    /// Its label.
    pub label: String,
    /// Run ids of the steps, in order.
    pub steps: Vec<String>,
    /// Highest offered rate that qualified in the sweep.
    pub best_qualified_rows_per_s: Option<f64>,
    /// The confirmation runs tried, in order.
    pub confirms: Vec<String>,
    /// The rate confirmed for `--duration` (the operating point), if any.
    pub confirmed_rows_per_s: Option<f64>,
    /// The run that confirmed it.
    pub confirmed_run: Option<String>,
    /// Why the sweep stopped going up (the first failing step's gates and bottleneck).
    pub stopped_because: Option<String>,
}

/// Bytes a row costs, per format, at the confirmed rate.
#[derive(Debug, Clone, Serialize)]
pub struct BytesPerRow {
    /// Configuration label.
    pub label: String,
    /// Request body bytes per row.
    pub wire: f64,
    /// WAL bytes per row.
    pub wal: Option<f64>,
    /// Parquet bytes per row once flushed.
    pub parquet: Option<f64>,
}

/// One query type's numbers in one repeat of one level.
#[derive(Debug, Clone, Serialize)]
pub struct QueryTypeStats {
    /// Query type.
    pub name: String,
    /// Answers.
    pub count: u64,
    /// Failed queries (any non-200).
    pub errors: u64,
    /// Latency.
    pub latency_ms: Percentiles,
}

/// One concurrency level of the query profile (or of the mixed run).
#[derive(Debug, Clone, Serialize)]
pub struct QueryLevel {
    /// Concurrent clients.
    pub concurrency: u32,
    /// Queries per second over all clients, per repeat.
    pub qps: Vec<f64>,
    /// Per repeat, per query type.
    pub repeats: Vec<Vec<QueryTypeStats>>,
    /// Slowest type's p95 per repeat, ms.
    pub slowest_p95_ms: Vec<f64>,
    /// Every repeat under the target with no errors.
    pub held: bool,
    /// Node CPU cores, mean over the level.
    pub node_cpu_cores_mean: Option<f64>,
    /// Highest node RSS during the level, MB.
    pub node_rss_mb_max: Option<f64>,
}

/// One seeded dataset and its levels.
#[derive(Debug, Clone, Serialize)]
pub struct QueryDataset {
    /// Measurement.
    pub measurement: String,
    /// Distinct hosts.
    pub hosts: u64,
    /// Rows seeded (each acknowledged and counted back).
    pub rows: u64,
    /// Seconds seeding took.
    pub seed_s: f64,
    /// Parquet bytes per row.
    pub parquet_bytes_per_row: Option<f64>,
    /// Node RSS once seeded and flushed, MB.
    pub node_rss_mb_seeded: Option<f64>,
    /// Node CPU-ms per query at one client.
    pub cpu_ms_per_query_single_client: Option<f64>,
    /// The levels.
    pub levels: Vec<QueryLevel>,
    /// Highest concurrency that held (0: none).
    pub qualified_concurrency: u32,
}

/// The query profile.
#[derive(Debug, Clone, Serialize)]
pub struct QueryProfile {
    /// p95 target, ms.
    pub p95_target_ms: f64,
    /// The mix: name and SQL (with `{table}`).
    pub mix: Vec<(String, String)>,
    /// Each dataset.
    pub datasets: Vec<QueryDataset>,
}

/// One mixed level.
#[derive(Debug, Clone, Serialize)]
pub struct MixedLevel {
    /// Query clients.
    pub concurrency: u32,
    /// The write run (in `runs`).
    pub write_run: String,
    /// Whether the writes qualified.
    pub write_held: bool,
    /// The queries.
    pub queries: QueryLevel,
}

/// The mixed run.
#[derive(Debug, Clone, Serialize)]
pub struct Mixed {
    /// Offered write rate.
    pub write_rate_rows_per_s: f64,
    /// Levels.
    pub levels: Vec<MixedLevel>,
    /// Highest concurrency at which both held (0: none).
    pub held_concurrency: u32,
}

/// Resources per 1,000 rows/s, the form an operator can multiply.
#[derive(Debug, Clone, Serialize)]
pub struct Budget {
    /// The run it was measured on.
    pub run: String,
    /// Nodes.
    pub nodes: u32,
    /// Rate it was measured at.
    pub rows_per_s: f64,
    /// CPU-ms per second per node, per 1,000 rows/s.
    pub cpu_ms_per_s_per_node: Option<f64>,
    /// Resident MB per node at that rate (not per 1,000: memory does not scale linearly).
    pub resident_mb_per_node: Option<f64>,
    /// WAL bytes/s per node, per 1,000 rows/s.
    pub wal_bytes_per_s: Option<f64>,
    /// Parquet bytes/s per node, per 1,000 rows/s.
    pub parquet_bytes_per_s: Option<f64>,
    /// Bytes/s between nodes (log entries sent to followers), per 1,000 rows/s.
    pub network_bytes_per_s: Option<f64>,
}

/// The failover drill, summarised.
#[derive(Debug, Clone, Serialize)]
pub struct DrillSummary {
    /// Drills run.
    pub drills: usize,
    /// Kill to a new leader, median, ms.
    pub detection_ms_median: f64,
    /// First acknowledged write sent after the kill, median, ms.
    pub first_write_ms_median: f64,
    /// Acknowledged rows lost (must be 0).
    pub acked_rows_lost: u64,
}

/// The replicated step.
#[derive(Debug, Clone, Serialize)]
pub struct Cluster {
    /// Nodes.
    pub nodes: u32,
    /// The sweep (also in `sweeps`).
    pub confirmed_rows_per_s: Option<f64>,
    /// The failover drill.
    pub drill: Option<DrillSummary>,
    /// The drill's error, if it could not run.
    pub drill_error: Option<String>,
    /// Per 1,000 rows/s.
    pub budget: Option<Budget>,
}

/// One row of the starting-size table.
#[derive(Debug, Clone, Serialize)]
pub struct SizeRow {
    /// What (a configuration, queries, mixed).
    pub what: String,
    /// Measured on this machine.
    pub measured: String,
    /// Recommended with headroom.
    pub recommended: String,
    /// The limit behind it.
    pub limit: String,
}

/// One row of the retention table.
#[derive(Debug, Clone, Serialize)]
pub struct RetentionRow {
    /// Retention, days.
    pub days: u32,
    /// Rows/s assumed (the recommended rate).
    pub rows_per_s: f64,
    /// Replicas.
    pub replicas: u32,
    /// Parquet, GB per node.
    pub parquet_gb: f64,
    /// WAL, GB per node.
    pub wal_gb: f64,
    /// Compaction room, GB per node.
    pub compaction_gb: f64,
    /// With 20 % free-space headroom, GB per node.
    pub disk_gb_per_node: f64,
    /// All replicas, GB.
    pub disk_gb_total: f64,
}

/// The conclusion.
#[derive(Debug, Clone, Serialize)]
pub struct Recommendation {
    /// Share kept free below measured rates.
    pub headroom_fraction: f64,
    /// Starting sizes.
    pub sizes: Vec<SizeRow>,
    /// Disk by retention.
    pub retention: Vec<RetentionRow>,
    /// What limited each configuration, in words.
    pub sentences: Vec<String>,
}

/// A gate on an operating point.
#[derive(Debug, Clone, Serialize)]
pub struct GateOutcome {
    /// What it checks.
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// The numbers.
    pub detail: String,
}
