//! What the campaign's steps found, gathered in one place, and the coefficients the
//! planner needs derived from it. A coefficient the campaign could not measure (its
//! step failed) keeps the reference machine's value, and the calibration's `source`
//! says which.

use super::settings::{Placement, Settings};
use crate::load::WireFormat;
use crate::plan::Calibration;
use crate::report::model::{Budget, BytesPerRow, Cluster, Mixed, QueryProfile, Sweep, WriteRun};
use crate::resources::probe::Machine;

/// Everything measured.
#[derive(Debug, Clone)]
pub struct Findings {
    /// The machine and its probed volumes.
    pub machine: Machine,
    /// Every write run.
    pub runs: Vec<WriteRun>,
    /// Every sweep.
    pub sweeps: Vec<Sweep>,
    /// Bytes per row per configuration.
    pub bytes_per_row: Vec<BytesPerRow>,
    /// The query profile.
    pub query_profile: Option<QueryProfile>,
    /// The mixed run.
    pub mixed: Option<Mixed>,
    /// The replicated step.
    pub cluster: Option<Cluster>,
    /// Budget of the default configuration's confirmed run.
    pub budget: Option<Budget>,
    /// Resident memory of an idle node, MB.
    pub memory_base_mb: Option<f64>,
    /// Steps that could not run, with why.
    pub step_errors: Vec<(String, String)>,
}

impl Findings {
    /// The sweep of the default configuration: MessagePack, the first `wal.sync` mode
    /// (`fsync`), WAL on the data volume, one node.
    pub fn default_sweep(&self) -> Option<&Sweep> {
        self.sweeps.iter().find(|s| {
            s.configuration.format == WireFormat::Msgpack
                && s.configuration.nodes == 1
                && matches!(
                    s.configuration.placement,
                    Placement::DataVolume | Placement::External
                )
        })
    }

    /// A run by id.
    pub fn run(&self, id: &str) -> Option<&WriteRun> {
        self.runs.iter().find(|r| r.id == id)
    }

    /// The default configuration's confirmed run.
    pub fn default_confirmed(&self) -> Option<&WriteRun> {
        self.default_sweep()
            .and_then(|s| s.confirmed_run.as_deref())
            .and_then(|id| self.run(id))
    }

    /// The planner's coefficients from this campaign.
    pub fn calibration(&self, settings: &Settings) -> Calibration {
        let reference = Calibration::reference();
        let mut missing: Vec<&str> = Vec::new();
        let mut pick = |name: &'static str, value: Option<f64>, fallback: f64| match value {
            Some(v) if v.is_finite() && v >= 0.0 => v,
            _ => {
                missing.push(name);
                fallback
            }
        };
        let confirmed = self.default_confirmed();
        let rate = confirmed.map(|r| r.acked_rate_rows_per_s);
        let base = self.memory_base_mb;
        let node_cpu_us_per_row = pick(
            "node_cpu_us_per_row",
            confirmed.and_then(|r| r.resources.node_cpu_us_per_row),
            reference.node_cpu_us_per_row,
        );
        let parquet_bytes_per_row = pick(
            "parquet_bytes_per_row",
            self.bytes_per_row.first().and_then(|b| b.parquet),
            reference.parquet_bytes_per_row,
        );
        let wal_bytes_per_row = pick(
            "wal_bytes_per_row",
            confirmed.and_then(|r| r.resources.wal_bytes_per_row),
            reference.wal_bytes_per_row,
        );
        let wire_bytes_per_row = pick(
            "wire_bytes_per_row",
            confirmed.map(|r| r.outcome.generator.wire_bytes_per_row),
            reference.wire_bytes_per_row,
        );
        let memory_base_mb = pick("memory_base_mb", base, reference.memory_base_mb);
        let memory_bytes_per_row_per_s = pick(
            "memory_bytes_per_row_per_s",
            confirmed
                .and_then(|r| r.resources.node_rss_mb_max)
                .zip(rate)
                .map(|(rss, rate)| (rss - memory_base_mb).max(0.0) * 1e6 / rate.max(1.0)),
            reference.memory_bytes_per_row_per_s,
        );
        let datasets = self
            .query_profile
            .as_ref()
            .map(|q| &q.datasets[..])
            .unwrap_or(&[]);
        let single = |i: usize| {
            datasets
                .get(i)
                .and_then(|d| d.levels.first())
                .and_then(|l| l.node_rss_mb_max)
        };
        let series = |i: usize| datasets.get(i).map(|d| d.hosts as f64);
        let memory_bytes_per_series = pick(
            "memory_bytes_per_series",
            match (single(0), single(1), series(0), series(1)) {
                (Some(a), Some(b), Some(sa), Some(sb)) if sb > sa => {
                    Some((b - a).max(0.0) * 1e6 / (sb - sa))
                }
                _ => None,
            },
            reference.memory_bytes_per_series,
        );
        let query_cpu_ms_per_mrows = pick(
            "query_cpu_ms_per_mrows",
            datasets.first().and_then(|d| {
                Some(d.cpu_ms_per_query_single_client? / (d.rows as f64 / 1e6).max(1e-9))
            }),
            reference.query_cpu_ms_per_mrows,
        );
        let query_memory_mb_per_client = pick(
            "query_memory_mb_per_client",
            datasets.first().and_then(|d| {
                let top = d.levels.last()?;
                Some(
                    (top.node_rss_mb_max? - d.node_rss_mb_seeded?).max(0.0)
                        / top.concurrency.max(1) as f64,
                )
            }),
            reference.query_memory_mb_per_client,
        );
        let wal_held_s = pick(
            "wal_held_s",
            confirmed.and_then(|r| {
                let peak = r
                    .samples
                    .iter()
                    .flat_map(|s| s.nodes.iter().filter_map(|n| n.wal_on_disk_mb))
                    .reduce(f64::max)?;
                let rate = r.resources.wal_write_mb_per_s_mean?;
                (rate > 0.0).then(|| peak / rate)
            }),
            reference.wal_held_s,
        );
        let volume = |roles: &[&str]| {
            roles
                .iter()
                .find_map(|role| self.machine.volumes.iter().find(|v| v.role == *role))
        };
        let wal_volume = volume(&["wal", "data+wal", "data"]);
        let data_volume = volume(&["data", "data+wal"]);
        let wal_volume_fdatasync_per_s = pick(
            "wal_volume_fdatasync_per_s",
            wal_volume.map(|v| v.fdatasync_per_s).filter(|v| *v > 0.0),
            reference.wal_volume_fdatasync_per_s,
        );
        let wal_volume_write_mb_per_s = pick(
            "wal_volume_write_mb_per_s",
            wal_volume
                .map(|v| v.sequential_write_mb_per_s)
                .filter(|v| *v > 0.0),
            reference.wal_volume_write_mb_per_s,
        );
        let data_volume_write_mb_per_s = pick(
            "data_volume_write_mb_per_s",
            data_volume
                .map(|v| v.sequential_write_mb_per_s)
                .filter(|v| *v > 0.0),
            reference.data_volume_write_mb_per_s,
        );
        let mut source = format!(
            "quiver sizing run {} on {} ({} cores), {}{}",
            env!("CARGO_PKG_VERSION"),
            if self.machine.hostname.is_empty() {
                "this machine"
            } else {
                &self.machine.hostname
            },
            self.machine.cores,
            chrono::Utc::now().format("%Y-%m-%d"),
            if settings.quick { ", --quick" } else { "" }
        );
        if !missing.is_empty() {
            source.push_str(&format!("; reference values for {}", missing.join(", ")));
        }
        Calibration {
            source,
            cores: self.machine.cores,
            fields: 3,
            node_cpu_us_per_row,
            parquet_bytes_per_row,
            wal_bytes_per_row,
            wire_bytes_per_row,
            memory_base_mb,
            memory_bytes_per_row_per_s,
            memory_bytes_per_series,
            query_cpu_ms_per_mrows,
            query_memory_mb_per_client,
            wal_held_s,
            wal_volume_fdatasync_per_s,
            wal_volume_write_mb_per_s,
            data_volume_write_mb_per_s,
        }
    }
}
