//! Which resource limited a run, from its per-second samples: node CPU, the WAL or data
//! volume (against what the probe measured they can do), the memory budget, the
//! generator itself, or other processes on a shared machine. Pure, so the rule is
//! testable; each run of the report carries the answer and a sentence an operator can
//! act on.

use serde::{Deserialize, Serialize};

use super::probe::VolumeProbe;
use super::sampler::{NodeSample, Sample, VolumeSample};
use crate::units::percent;

/// Share of the machine's cores busy at which the CPU counts as saturated.
const CPU_SATURATED: f64 = 0.9;
/// Share of a volume's probed limit at which it counts as saturated.
const VOLUME_SATURATED: f64 = 0.8;
/// Share of the memory budget at which memory counts as saturated.
const MEMORY_SATURATED: f64 = 0.9;
/// Share of sends the generator itself made late at which it counts as saturated.
const GENERATOR_LATE_SATURATED: f64 = 0.05;

/// A resource that can limit a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// The node processes' CPU.
    NodeCpu,
    /// The load generator (this process).
    Generator,
    /// Other processes took the cores (a shared machine).
    OtherProcesses,
    /// The WAL volume.
    WalVolume,
    /// The data volume.
    DataVolume,
    /// One volume holding both data and WAL.
    SharedVolume,
    /// Resident memory against its budget.
    MemoryBudget,
}

impl Resource {
    /// How the report names it.
    pub fn label(self) -> &'static str {
        match self {
            Resource::NodeCpu => "node CPU",
            Resource::Generator => "generator",
            Resource::OtherProcesses => "other processes",
            Resource::WalVolume => "WAL volume",
            Resource::DataVolume => "data volume",
            Resource::SharedVolume => "data+WAL volume",
            Resource::MemoryBudget => "memory budget",
        }
    }
}

/// What the rule needs besides the samples.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// Cores of the machine.
    pub cores: u32,
    /// The probed volumes (matched to samples by role).
    pub volumes: &'a [VolumeProbe],
    /// Resident memory budget per node, MB.
    pub memory_budget_mb: f64,
    /// Share of sends that found no encoded body ready (the encoder was behind).
    pub encoder_wait_fraction: f64,
    /// Share of sends late because the sender woke late. On a machine whose cores are
    /// all busy that is the CPU's limit (charged to whoever used most of it); with
    /// cores to spare it is the generator's own.
    pub late_timer_fraction: f64,
    /// The run kept pace with its offered rate (it qualified): a saturated resource
    /// was then a warning, not the limit.
    pub kept_pace: bool,
}

/// The answer for one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bottleneck {
    /// The limiting resource, or the busiest one when none was saturated.
    pub resource: Resource,
    /// Its use, as a share of what it can do.
    pub utilization: f64,
    /// Whether it was at its limit.
    pub saturated: bool,
    /// One sentence for the operator.
    pub sentence: String,
    /// Every resource's use, for the report.
    pub utilizations: Vec<(Resource, f64)>,
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Names the bottleneck of a run from its samples (the first second, a ramp, is left
/// out when there are more than two).
pub fn bottleneck(samples: &[Sample], ctx: &Context<'_>) -> Bottleneck {
    let steady = if samples.len() > 2 {
        &samples[1..]
    } else {
        samples
    };
    let cores = ctx.cores.max(1) as f64;
    let node_cores = mean(steady.iter().filter_map(|s| {
        let v: Vec<f64> = s.nodes.iter().filter_map(|n| n.cpu_cores).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    }));
    let generator_cores = mean(steady.iter().filter_map(|s| s.generator_cpu_cores)).unwrap_or(0.0);
    let machine = mean(steady.iter().filter_map(|s| s.machine_cpu_busy));
    let node_share = node_cores.unwrap_or(0.0) / cores;
    let generator_share = generator_cores / cores;
    let machine_busy = machine.unwrap_or(node_share + generator_share);
    let other_share = (machine_busy - node_share - generator_share).max(0.0);

    let mut uses: Vec<(Resource, f64, bool)> = Vec::new();
    // The cores are one pool: when it is full, whoever used most of it is the limit.
    let cpu_full = machine_busy >= CPU_SATURATED;
    let biggest = [
        (Resource::NodeCpu, node_share),
        (Resource::Generator, generator_share),
        (Resource::OtherProcesses, other_share),
    ]
    .into_iter()
    .fold(
        (Resource::NodeCpu, f64::MIN),
        |a, b| if b.1 > a.1 { b } else { a },
    )
    .0;
    uses.push((
        Resource::NodeCpu,
        node_share,
        cpu_full && biggest == Resource::NodeCpu,
    ));
    let generator_late = ctx.encoder_wait_fraction >= GENERATOR_LATE_SATURATED
        || (!cpu_full && ctx.late_timer_fraction >= GENERATOR_LATE_SATURATED);
    uses.push((
        Resource::Generator,
        if generator_late { 1.0 } else { generator_share },
        generator_late || (cpu_full && biggest == Resource::Generator),
    ));
    uses.push((
        Resource::OtherProcesses,
        other_share,
        cpu_full && biggest == Resource::OtherProcesses,
    ));
    let mut volume_detail = String::new();
    for probe in ctx.volumes {
        let resource = match probe.role.as_str() {
            "wal" => Resource::WalVolume,
            "data" => Resource::DataVolume,
            _ => Resource::SharedVolume,
        };
        // What our nodes did, from their own counters: the device's counters also
        // hold every other process on a shared machine. The device's are the
        // fallback when the nodes' are missing.
        let nodes_sum = |f: fn(&NodeSample) -> Option<f64>| {
            mean(steady.iter().filter_map(|s| {
                let v: Vec<f64> = s.nodes.iter().filter_map(f).collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>())
            }))
        };
        let device = |f: fn(&VolumeSample) -> Option<f64>| {
            mean(
                steady
                    .iter()
                    .filter_map(|s| s.volumes.iter().find(|v| v.role == probe.role).and_then(f)),
            )
        };
        let wal_fsyncs = nodes_sum(|n| n.wal_fsyncs_per_s);
        let (flushes, write_mb) = match resource {
            Resource::WalVolume => (wal_fsyncs, nodes_sum(|n| n.wal_write_mb_per_s)),
            Resource::DataVolume => (
                Some(0.0),
                nodes_sum(|n| {
                    Some((n.io_write_mb_per_s? - n.wal_write_mb_per_s.unwrap_or(0.0)).max(0.0))
                }),
            ),
            _ => (wal_fsyncs, nodes_sum(|n| n.io_write_mb_per_s)),
        };
        let flushes = flushes
            .or_else(|| device(|v| v.flushes_per_s))
            .unwrap_or(0.0);
        let write_mb = write_mb
            .or_else(|| device(|v| v.write_mb_per_s))
            .unwrap_or(0.0);
        let sync_use = flushes / probe.fdatasync_per_s.max(1e-9);
        let write_use = write_mb / probe.sequential_write_mb_per_s.max(1e-9);
        let use_ = sync_use.max(write_use);
        if volume_detail.is_empty()
            || matches!(resource, Resource::WalVolume | Resource::SharedVolume)
        {
            volume_detail = if sync_use >= write_use {
                format!(
                    "{} at {} of its fsync limit ({:.0} of {:.0} fdatasync/s)",
                    resource.label(),
                    percent(sync_use),
                    flushes,
                    probe.fdatasync_per_s
                )
            } else {
                format!(
                    "{} at {} of its write rate ({:.0} of {:.0} MB/s)",
                    resource.label(),
                    percent(write_use),
                    write_mb,
                    probe.sequential_write_mb_per_s
                )
            };
        }
        uses.push((resource, use_, use_ >= VOLUME_SATURATED));
    }
    let rss_max = steady
        .iter()
        .flat_map(|s| s.nodes.iter().filter_map(|n| n.rss_mb))
        .fold(0.0, f64::max);
    let memory_use = rss_max / ctx.memory_budget_mb.max(1.0);
    uses.push((
        Resource::MemoryBudget,
        memory_use,
        memory_use >= MEMORY_SATURATED,
    ));

    // Saturated resources first, then the busiest.
    let (resource, utilization, saturated) = uses
        .iter()
        .copied()
        .max_by(|a, b| {
            (a.2, a.1)
                .partial_cmp(&(b.2, b.1))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .unwrap_or((Resource::NodeCpu, 0.0, false));
    let cpu = format!("node CPU at {} of {} cores", percent(node_share), ctx.cores);
    let limit = match (resource, saturated) {
        (Resource::NodeCpu, true) => format!(
            "all cores were busy, most of them with the node ({cpu}; {volume_detail}): more cores help here"
        ),
        (Resource::Generator, true) => format!(
            "the generator was the limit (it used {} of the cores{}): this run measures the client, not the server; run the generator on another machine (--url)",
            percent(generator_share),
            if generator_late { ", and fell behind its schedule" } else { "" }
        ),
        (Resource::OtherProcesses, true) => format!(
            "all cores were busy, {} of them with other processes ({cpu}): the machine was shared, so this rate is a floor",
            percent(other_share)
        ),
        (Resource::WalVolume, true) | (Resource::SharedVolume, true) => format!(
            "ingest stopped scaling while {cpu}: the {volume_detail}; a separate, faster WAL volume (or wal.sync = batch) helps here"
        ),
        (Resource::DataVolume, true) => format!(
            "the data volume was at {} of what it can write while {cpu}: a faster data volume helps here",
            percent(utilization)
        ),
        (Resource::MemoryBudget, true) => format!(
            "resident memory reached {} of the budget ({rss_max:.0} MB): more memory, or smaller flush thresholds, help here",
            percent(utilization)
        ),
        (_, false) if ctx.kept_pace => format!(
            "nothing was saturated (busiest: {} at {}; {cpu}): the offered rate, not the machine, set this run's pace",
            resource.label(),
            percent(utilization)
        ),
        // A run that failed with every resource below its mark was not paced by the
        // offered rate: something stalled it between samples, or outside them.
        (_, false) => format!(
            "nothing was saturated (busiest: {} at {}; {cpu}), yet the run failed: a stall the once-a-second samples do not show (a burst of other work, a slow disk write, a pause); run it again on a quiet machine before reading this as a limit",
            resource.label(),
            percent(utilization)
        ),
    };
    let sentence = if ctx.kept_pace && saturated {
        format!("kept pace with the offered rate, but {limit}")
    } else {
        limit
    };
    Bottleneck {
        resource,
        utilization,
        saturated,
        sentence,
        utilizations: uses.iter().map(|(r, u, _)| (*r, *u)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(role: &str) -> VolumeProbe {
        VolumeProbe {
            role: role.into(),
            path: "/tmp".into(),
            device: None,
            device_id: None,
            sequential_write_mb_per_s: 500.0,
            fdatasync_per_s: 1_000.0,
        }
    }

    fn samples(node: f64, generator: f64, machine: f64, flushes: f64, rss: f64) -> Vec<Sample> {
        (0..5)
            .map(|t| Sample {
                t_s: t as f64,
                machine_cpu_busy: Some(machine),
                generator_cpu_cores: Some(generator),
                nodes: vec![NodeSample {
                    cpu_cores: Some(node),
                    rss_mb: Some(rss),
                    wal_fsyncs_per_s: Some(flushes),
                    io_write_mb_per_s: Some(50.0),
                    ..NodeSample::default()
                }],
                // The device also carries other processes' writes: not ours to count.
                volumes: vec![VolumeSample {
                    role: "data+wal".into(),
                    write_mb_per_s: Some(450.0),
                    flushes_per_s: Some(5_000.0),
                }],
            })
            .collect()
    }

    fn ctx(volumes: &[VolumeProbe]) -> Context<'_> {
        Context {
            cores: 2,
            volumes,
            memory_budget_mb: 4_000.0,
            encoder_wait_fraction: 0.0,
            late_timer_fraction: 0.0,
            kept_pace: false,
        }
    }

    #[test]
    fn a_volume_at_its_fsync_limit_is_named_with_cpu_to_spare() {
        let volumes = [probe("data+wal")];
        let b = bottleneck(&samples(1.2, 0.2, 0.75, 950.0, 500.0), &ctx(&volumes));
        assert_eq!(b.resource, Resource::SharedVolume);
        assert!(b.saturated);
        assert!(
            b.sentence.contains("node CPU at 60 % of 2 cores"),
            "{}",
            b.sentence
        );
        assert!(b.sentence.contains("fsync limit"), "{}", b.sentence);
        assert!(b.sentence.contains("separate"), "{}", b.sentence);
    }

    #[test]
    fn full_cores_used_by_the_node_name_node_cpu() {
        let volumes = [probe("data+wal")];
        let b = bottleneck(&samples(1.7, 0.2, 0.97, 100.0, 500.0), &ctx(&volumes));
        assert_eq!((b.resource, b.saturated), (Resource::NodeCpu, true));
    }

    #[test]
    fn a_generator_behind_schedule_is_named_even_with_cpu_left() {
        let volumes = [probe("data+wal")];
        let mut c = ctx(&volumes);
        c.late_timer_fraction = 0.2;
        let b = bottleneck(&samples(0.5, 0.3, 0.5, 100.0, 500.0), &c);
        assert_eq!((b.resource, b.saturated), (Resource::Generator, true));
        assert!(b.sentence.contains("not the server"));
        // The same late wake-ups on a machine with every core busy are the CPU's limit.
        let b = bottleneck(&samples(1.7, 0.2, 0.97, 100.0, 500.0), &c);
        assert_eq!((b.resource, b.saturated), (Resource::NodeCpu, true));
        let mut c = ctx(&volumes);
        c.encoder_wait_fraction = 0.1;
        let b = bottleneck(&samples(1.7, 0.2, 0.97, 100.0, 500.0), &c);
        assert_eq!(
            b.resource,
            Resource::Generator,
            "an encoder behind is always ours"
        );
    }

    #[test]
    fn cores_taken_by_others_say_the_machine_was_shared() {
        let volumes = [probe("data+wal")];
        let b = bottleneck(&samples(0.4, 0.1, 0.95, 100.0, 500.0), &ctx(&volumes));
        assert_eq!(b.resource, Resource::OtherProcesses);
        assert!(b.sentence.contains("shared"));
    }

    #[test]
    fn memory_near_its_budget_is_named() {
        let volumes = [probe("data+wal")];
        let b = bottleneck(&samples(0.4, 0.1, 0.3, 100.0, 3_900.0), &ctx(&volumes));
        assert_eq!((b.resource, b.saturated), (Resource::MemoryBudget, true));
    }

    #[test]
    fn an_idle_run_names_its_busiest_resource_unsaturated() {
        let volumes = [probe("data+wal")];
        let mut c = ctx(&volumes);
        c.kept_pace = true;
        let b = bottleneck(&samples(0.6, 0.1, 0.4, 100.0, 500.0), &c);
        assert!(!b.saturated);
        assert_eq!(b.resource, Resource::NodeCpu);
        assert!(
            b.sentence.starts_with("nothing was saturated")
                && b.sentence
                    .ends_with("the offered rate, not the machine, set this run's pace"),
            "{}",
            b.sentence
        );
    }

    #[test]
    fn a_failed_run_with_nothing_saturated_is_not_blamed_on_the_offered_rate() {
        // Seen on the shared sandbox: a 40,000 rows/s line-protocol step failed its p99
        // with the node at 7 % CPU; the report said the offered rate set the pace.
        let volumes = [probe("data+wal")];
        let b = bottleneck(&samples(0.14, 0.02, 0.5, 50.0, 500.0), &ctx(&volumes));
        assert!(!b.saturated);
        assert!(
            b.sentence.contains("yet the run failed")
                && !b.sentence.contains("the offered rate, not the machine"),
            "{}",
            b.sentence
        );
    }

    #[test]
    fn a_run_that_kept_pace_calls_a_saturated_resource_a_warning() {
        let volumes = [probe("data+wal")];
        let mut c = ctx(&volumes);
        c.kept_pace = true;
        let b = bottleneck(&samples(0.4, 0.1, 0.95, 100.0, 500.0), &c);
        assert_eq!(b.resource, Resource::OtherProcesses);
        assert!(
            b.sentence
                .starts_with("kept pace with the offered rate, but all cores were busy"),
            "{}",
            b.sentence
        );
    }
}
