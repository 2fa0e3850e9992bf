//! Once a second during a run: CPU and resident memory of every node process and of
//! the generator (this process) separately, the machine's CPU, per-volume write MB/s
//! and flushes/s from `/proc/diskstats`, and each node's `/metrics` (WAL bytes and
//! fsyncs, Parquet bytes, flush backlog, failure counters). A generator-bound run must
//! show as such, so the generator is always measured on its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::procfs::{self, CpuTimes, DeviceId, DiskCounters, ProcessIo, ProcessStat};
use super::prometheus::{self, MetricValues};
use crate::qualify::FailureCounters;

/// How often the sampler reads.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// A node to sample: its process when it runs on this machine, and its URL.
#[derive(Debug, Clone)]
pub struct NodeTarget {
    /// Process id, when the node is a child of this process.
    pub pid: Option<u32>,
    /// Base URL, for `/metrics`.
    pub url: String,
}

/// A volume to sample.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VolumeTarget {
    /// `data`, `wal`, or `data+wal` when both are on one device.
    pub role: String,
    /// The block device, when `/proc/diskstats` lists it.
    #[serde(skip)]
    pub device: Option<DeviceId>,
}

/// What the sampler watches.
#[derive(Debug, Clone)]
pub struct Targets {
    /// Node processes.
    pub nodes: Vec<NodeTarget>,
    /// Volumes.
    pub volumes: Vec<VolumeTarget>,
}

/// One node in one second.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NodeSample {
    /// CPU used, in cores (1.0 = one core busy all second).
    pub cpu_cores: Option<f64>,
    /// Resident memory, MB.
    pub rss_mb: Option<f64>,
    /// MB/s the process sent to storage (`/proc/PID/io` `write_bytes`), whichever
    /// volume: the per-process view when a device is not in `/proc/diskstats`.
    pub io_write_mb_per_s: Option<f64>,
    /// WAL MB written per second (`quiver_wal_bytes_written_total`).
    pub wal_write_mb_per_s: Option<f64>,
    /// WAL fsyncs per second (`quiver_wal_fsyncs_total`).
    pub wal_fsyncs_per_s: Option<f64>,
    /// Parquet MB written per second (`quiver_parquet_bytes_written_total`).
    pub parquet_write_mb_per_s: Option<f64>,
    /// Raft log MB appended per second (a follower's share is what it was sent).
    pub log_append_mb_per_s: Option<f64>,
    /// Rows in memory buffers (`quiver_buffer_rows`).
    pub buffer_rows: Option<f64>,
    /// Frozen segments waiting for Parquet (the flush backlog).
    pub frozen_segments: Option<f64>,
    /// WAL bytes on disk, MB.
    pub wal_on_disk_mb: Option<f64>,
}

/// One volume in one second.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct VolumeSample {
    /// `data`, `wal` or `data+wal`.
    pub role: String,
    /// MB written per second (all processes: the device's counter).
    pub write_mb_per_s: Option<f64>,
    /// Flush requests per second (what fdatasync sends the device).
    pub flushes_per_s: Option<f64>,
}

/// One second of a run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Sample {
    /// Seconds since the run's sampler started.
    pub t_s: f64,
    /// Share of all the machine's cores busy (every process, ours or not).
    pub machine_cpu_busy: Option<f64>,
    /// CPU of the generator (this process), in cores.
    pub generator_cpu_cores: Option<f64>,
    /// Each node.
    pub nodes: Vec<NodeSample>,
    /// Each volume.
    pub volumes: Vec<VolumeSample>,
}

/// What a finished sampler hands back.
#[derive(Debug, Clone, Default)]
pub struct Sampled {
    /// One per second.
    pub samples: Vec<Sample>,
    /// Failure counters: increase of counters, highest gauges, summed over nodes.
    pub failures: FailureCounters,
    /// Each node's metrics at the start and at the end, for totals over the run.
    pub metrics_first: Vec<Option<MetricValues>>,
    /// See `metrics_first`.
    pub metrics_last: Vec<Option<MetricValues>>,
}

impl Sampled {
    /// Increase of a counter over the run, summed over nodes that answered both times.
    pub fn counter_increase(&self, name: &str) -> Option<f64> {
        let mut total = None;
        for (first, last) in self.metrics_first.iter().zip(&self.metrics_last) {
            if let (Some(a), Some(b)) = (first, last) {
                let delta =
                    b.get(name).copied().unwrap_or(0.0) - a.get(name).copied().unwrap_or(0.0);
                *total.get_or_insert(0.0) += delta.max(0.0);
            }
        }
        total
    }
}

/// A running sampler; [`Sampler::stop`] ends it and returns what it saw.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Sampled>,
}

/// Raw readings at one instant, to difference with the next.
struct Reading {
    at: Instant,
    machine: Option<CpuTimes>,
    generator: Option<ProcessStat>,
    nodes: Vec<Option<ProcessStat>>,
    node_io: Vec<Option<ProcessIo>>,
    metrics: Vec<Option<MetricValues>>,
    disks: Vec<Option<DiskCounters>>,
}

async fn read(targets: &Targets, client: &reqwest::Client) -> Reading {
    let mut metrics = Vec::with_capacity(targets.nodes.len());
    for node in &targets.nodes {
        metrics.push(prometheus::fetch(client, &node.url).await);
    }
    Reading {
        at: Instant::now(),
        machine: procfs::cpu_times(),
        generator: procfs::process_stat(std::process::id()),
        nodes: targets
            .nodes
            .iter()
            .map(|n| n.pid.and_then(procfs::process_stat))
            .collect(),
        node_io: targets
            .nodes
            .iter()
            .map(|n| n.pid.and_then(procfs::process_io))
            .collect(),
        metrics,
        disks: targets
            .volumes
            .iter()
            .map(|v| v.device.and_then(procfs::disk_counters))
            .collect(),
    }
}

impl Sampler {
    /// Starts sampling `targets` every [`SAMPLE_INTERVAL`].
    pub fn start(targets: Targets, client: reqwest::Client) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let first = read(&targets, &client).await;
            let mut sampled = Sampled {
                metrics_first: first.metrics.clone(),
                ..Sampled::default()
            };
            let mut previous = first;
            let mut ticker = tokio::time::interval_at(
                tokio::time::Instant::now() + SAMPLE_INTERVAL,
                SAMPLE_INTERVAL,
            );
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // Wake at the next tick, or soon after a stop, whichever comes first.
                let mut stopped = false;
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = wait_for(&flag) => { stopped = true; }
                }
                let now = read(&targets, &client).await;
                note_gauges(&mut sampled.failures, &now.metrics);
                // A stop right after a tick leaves a sliver of a second: its rates would
                // be noise, so it only updates the final counters.
                if !stopped || now.at.duration_since(previous.at) >= SAMPLE_INTERVAL / 2 {
                    sampled
                        .samples
                        .push(sample(&targets, &previous, &now, started));
                    previous = now;
                } else {
                    previous.metrics = now.metrics;
                }
                if stopped {
                    break;
                }
            }
            sampled.metrics_last = previous.metrics;
            sampled.failures.flush_failures = sampled
                .counter_increase("quiver_flush_failures_total")
                .unwrap_or(0.0);
            sampled.failures.compaction_failures = sampled
                .counter_increase("quiver_compaction_failures_total")
                .unwrap_or(0.0);
            sampled
        });
        Sampler { stop, task }
    }

    /// Stops after one last reading and returns everything sampled.
    pub async fn stop(self) -> Sampled {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}

async fn wait_for(flag: &AtomicBool) {
    while !flag.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn note_gauges(failures: &mut FailureCounters, metrics: &[Option<MetricValues>]) {
    let sum = |name: &str| -> f64 {
        metrics
            .iter()
            .flatten()
            .map(|m| m.get(name).copied().unwrap_or(0.0))
            .sum()
    };
    failures.node_failed = failures.node_failed.max(sum("quiver_node_failed"));
    failures.tables_failing_to_flush = failures
        .tables_failing_to_flush
        .max(sum("quiver_tables_failing_to_flush"));
}

fn sample(targets: &Targets, a: &Reading, b: &Reading, started: Instant) -> Sample {
    let seconds = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
    let cpu = |x: Option<ProcessStat>, y: Option<ProcessStat>| -> Option<f64> {
        Some(((y?.cpu_s - x?.cpu_s) / seconds).max(0.0))
    };
    let rate = |m0: &Option<MetricValues>, m1: &Option<MetricValues>, name: &str, scale: f64| {
        let (m0, m1) = (m0.as_ref()?, m1.as_ref()?);
        // A counter appears at its first increment: absent means zero so far.
        let (v0, v1) = (m0.get(name).copied(), m1.get(name).copied());
        Some(((v1.unwrap_or(0.0) - v0.unwrap_or(0.0)) / seconds / scale).max(0.0))
    };
    let gauge = |m: &Option<MetricValues>, name: &str, scale: f64| -> Option<f64> {
        Some(m.as_ref()?.get(name)? / scale)
    };
    const MB: f64 = 1e6;
    let nodes = (0..targets.nodes.len())
        .map(|i| {
            let (m0, m1) = (&a.metrics[i], &b.metrics[i]);
            NodeSample {
                cpu_cores: cpu(a.nodes[i], b.nodes[i]),
                rss_mb: b.nodes[i].map(|s| s.rss_bytes as f64 / MB),
                io_write_mb_per_s: a.node_io[i].zip(b.node_io[i]).map(|(x, y)| {
                    y.write_bytes.saturating_sub(x.write_bytes) as f64 / seconds / MB
                }),
                wal_write_mb_per_s: rate(m0, m1, "quiver_wal_bytes_written_total", MB),
                wal_fsyncs_per_s: rate(m0, m1, "quiver_wal_fsyncs_total", 1.0),
                parquet_write_mb_per_s: rate(m0, m1, "quiver_parquet_bytes_written_total", MB),
                log_append_mb_per_s: rate(m0, m1, "quiver_raft_log_bytes_appended_total", MB),
                buffer_rows: gauge(m1, "quiver_buffer_rows", 1.0),
                frozen_segments: gauge(m1, "quiver_frozen_segments", 1.0),
                wal_on_disk_mb: gauge(m1, "quiver_wal_bytes_on_disk", MB),
            }
        })
        .collect();
    let volumes = targets
        .volumes
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let (x, y) = (a.disks[i], b.disks[i]);
            VolumeSample {
                role: v.role.clone(),
                write_mb_per_s: x.zip(y).map(|(x, y)| {
                    y.sectors_written.saturating_sub(x.sectors_written) as f64 * 512.0
                        / seconds
                        / MB
                }),
                flushes_per_s: x.zip(y).and_then(|(x, y)| {
                    Some(y.flushes?.saturating_sub(x.flushes?) as f64 / seconds)
                }),
            }
        })
        .collect();
    Sample {
        t_s: b.at.duration_since(started).as_secs_f64(),
        machine_cpu_busy: a.machine.zip(b.machine).and_then(|(x, y)| {
            let total = y.total.checked_sub(x.total)?;
            (total > 0).then(|| y.busy.saturating_sub(x.busy) as f64 / total as f64)
        }),
        generator_cpu_cores: cpu(a.generator, b.generator),
        nodes,
        volumes,
    }
}
