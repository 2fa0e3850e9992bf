//! The planner's arithmetic: a workload and a calibration in, a machine size out, every
//! step a product an operator can redo by hand. Pure (no I/O), so each formula is
//! pinned by a hand-computed test.
//!
//! Two properties hold by construction and are tested: every output is a
//! non-decreasing function of the rate (more rows never ask for a smaller machine), and
//! the disk measurements (`wal_volume_*`, `data_volume_*`) feed only the outputs the
//! disks limit (`*_busy_fraction`, `clusters_for_disks`).

use serde::Serialize;

use super::calibration::Calibration;

/// What the operator expects to run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workload {
    /// Rows written per second, cluster-wide.
    pub rows_per_s: f64,
    /// Fields per row (besides `time` and tags).
    pub fields: u32,
    /// Distinct series (tag sets).
    pub series: u64,
    /// How long rows are kept, in seconds.
    pub retention_s: f64,
    /// Replicas (= voters; each holds all the data).
    pub replicas: u32,
    /// Query clients running at once, each sending its next query when the last answers.
    pub query_concurrency: u32,
}

/// The planner's own assumptions, each a flag with a default.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assumptions {
    /// Fraction of every measured capacity kept free (0.5: plan for half).
    pub headroom_fraction: f64,
    /// Fraction of each node's disk kept free.
    pub disk_free_fraction: f64,
    /// Rows per write request; the worst case is one WAL `fdatasync` per request.
    pub rows_per_request: f64,
    /// Rows one query reads (the campaign's mix reads whole datasets of this size).
    pub query_rows_scanned: f64,
    /// Slowest query type's p95 target, in seconds.
    pub query_p95_target_s: f64,
    /// Times Parquet bytes are written again by compaction (hour merge, day merge).
    pub compaction_rewrites: f64,
    /// Seconds of data compaction may hold twice on disk while a day file is merged.
    pub compaction_room_s: f64,
}

impl Default for Assumptions {
    fn default() -> Self {
        Assumptions {
            headroom_fraction: 0.5,
            disk_free_fraction: 0.2,
            rows_per_request: 5_000.0,
            query_rows_scanned: 20_000_000.0,
            query_p95_target_s: 2.0,
            compaction_rewrites: 2.0,
            compaction_room_s: 86_400.0,
        }
    }
}

/// The size of one node (every replica is sized like the leader, which does the most).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeSize {
    /// Cores, with headroom.
    pub cores: u32,
    /// Memory in GB, with headroom.
    pub memory_gb: f64,
    /// Disk in GB: data for the retention, WAL, compaction room, free-space headroom.
    pub disk_gb: f64,
    /// `fdatasync` calls per second the WAL volume must sustain (worst case).
    pub wal_fdatasync_per_s: f64,
    /// MB/s written to the WAL volume.
    pub wal_write_mb_per_s: f64,
    /// MB/s the leader moves over the network: client bodies in, log entries out to
    /// each follower.
    pub network_mb_per_s: f64,
}

/// The parts of a plan, so the table can show where a total came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Breakdown {
    /// Cores of ingest work before headroom.
    pub ingest_cores: f64,
    /// Cores of query work before headroom.
    pub query_cores: f64,
    /// Memory before headroom, in MB.
    pub memory_mb: f64,
    /// Parquet for the retention, in GB.
    pub data_gb: f64,
    /// WAL held on disk, in GB.
    pub wal_gb: f64,
    /// Compaction room, in GB.
    pub compaction_gb: f64,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Each node.
    pub per_node: NodeSize,
    /// Nodes of one cluster (= replicas).
    pub nodes: u32,
    /// Disk of all nodes together, in GB.
    pub cluster_disk_gb: f64,
    /// Share of the calibrated WAL volume's limit (`fdatasync`/s or MB/s) this load needs.
    pub wal_volume_busy_fraction: f64,
    /// Share of the calibrated data volume's write MB/s this load needs.
    pub data_volume_busy_fraction: f64,
    /// Clusters (each with its own volumes) needed so no volume runs above the headroom:
    /// 1 unless the disks, not the cores, limit this load.
    pub clusters_for_disks: u32,
    /// How each total was made.
    pub breakdown: Breakdown,
}

/// Sizes a node for `workload` from `calibration` under `assumptions`.
pub fn plan(workload: &Workload, calibration: &Calibration, assumptions: &Assumptions) -> Plan {
    let c = calibration;
    let rate = workload.rows_per_s.max(0.0);
    let usable = (1.0 - assumptions.headroom_fraction).clamp(0.05, 1.0);
    // A row of F fields costs (F + 2)/(F_cal + 2) of a measured row: `time` and the tag
    // count as columns.
    let columns = (workload.fields as f64 + 2.0) / (c.fields as f64 + 2.0);

    let ingest_cores = rate * c.node_cpu_us_per_row * columns / 1e6;
    let query_cpu_s = assumptions.query_rows_scanned / 1e6 * c.query_cpu_ms_per_mrows / 1e3;
    let query_cores =
        workload.query_concurrency as f64 * query_cpu_s / assumptions.query_p95_target_s.max(0.001);
    let cores = (((ingest_cores + query_cores) / usable).ceil() as u32).max(2);

    let memory_mb = c.memory_base_mb
        + rate * c.memory_bytes_per_row_per_s * columns / 1e6
        + workload.series as f64 * c.memory_bytes_per_series / 1e6
        + workload.query_concurrency as f64 * c.query_memory_mb_per_client;
    let memory_gb = round_up(memory_mb / usable / 1e3, 0.5);

    let parquet_bytes_per_s = rate * c.parquet_bytes_per_row * columns;
    let wal_bytes_per_s = rate * c.wal_bytes_per_row * columns;
    let data_gb = parquet_bytes_per_s * workload.retention_s / 1e9;
    let wal_gb = wal_bytes_per_s * c.wal_held_s / 1e9;
    let compaction_gb =
        parquet_bytes_per_s * assumptions.compaction_room_s.min(workload.retention_s) / 1e9;
    let free = (1.0 - assumptions.disk_free_fraction).clamp(0.05, 1.0);
    let disk_gb = round_up((data_gb + wal_gb + compaction_gb) / free, 1.0);

    let wal_fdatasync_per_s = rate / assumptions.rows_per_request.max(1.0);
    let wal_write_mb_per_s = wal_bytes_per_s / 1e6;
    let followers = workload.replicas.saturating_sub(1) as f64;
    let network_mb_per_s =
        (rate * c.wire_bytes_per_row * columns + followers * wal_bytes_per_s) / 1e6;

    let wal_volume_busy_fraction = (wal_fdatasync_per_s / c.wal_volume_fdatasync_per_s)
        .max(wal_write_mb_per_s / c.wal_volume_write_mb_per_s);
    let data_write_mb_per_s = parquet_bytes_per_s * (1.0 + assumptions.compaction_rewrites) / 1e6;
    let data_volume_busy_fraction = data_write_mb_per_s / c.data_volume_write_mb_per_s;
    let clusters_for_disks =
        ((wal_volume_busy_fraction.max(data_volume_busy_fraction) / usable).ceil() as u32).max(1);

    let nodes = workload.replicas.max(1);
    Plan {
        per_node: NodeSize {
            cores,
            memory_gb,
            disk_gb,
            wal_fdatasync_per_s,
            wal_write_mb_per_s,
            network_mb_per_s,
        },
        nodes,
        cluster_disk_gb: disk_gb * nodes as f64,
        wal_volume_busy_fraction,
        data_volume_busy_fraction,
        clusters_for_disks,
        breakdown: Breakdown {
            ingest_cores,
            query_cores,
            memory_mb,
            data_gb,
            wal_gb,
            compaction_gb,
        },
    }
}

/// `value` rounded up to a multiple of `step` (sizes are bought in steps).
fn round_up(value: f64, step: f64) -> f64 {
    (value / step).ceil() * step
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round numbers, so every expected value below can be checked by hand.
    fn calibration() -> Calibration {
        Calibration {
            source: "test".into(),
            cores: 2,
            fields: 3,
            node_cpu_us_per_row: 2.0,
            parquet_bytes_per_row: 5.0,
            wal_bytes_per_row: 40.0,
            wire_bytes_per_row: 50.0,
            memory_base_mb: 100.0,
            memory_bytes_per_row_per_s: 1_000.0,
            memory_bytes_per_series: 1_000.0,
            query_cpu_ms_per_mrows: 10.0,
            query_memory_mb_per_client: 50.0,
            wal_held_s: 100.0,
            wal_volume_fdatasync_per_s: 1_000.0,
            wal_volume_write_mb_per_s: 200.0,
            data_volume_write_mb_per_s: 200.0,
        }
    }

    fn workload(rows_per_s: f64) -> Workload {
        Workload {
            rows_per_s,
            fields: 3,
            series: 100_000,
            retention_s: 30.0 * 86_400.0,
            replicas: 3,
            query_concurrency: 10,
        }
    }

    #[test]
    fn a_hand_computed_plan() {
        let p = plan(
            &workload(500_000.0),
            &calibration(),
            &Assumptions::default(),
        );
        // Ingest: 500,000 rows/s × 2 µs = 1.0 core. Queries: 20 M rows × 10 ms/M rows =
        // 0.2 CPU-s per query; 10 clients within 2 s: 10 × 0.2 / 2 = 1.0 core.
        // (1 + 1) / 0.5 headroom = 4 cores.
        assert!((p.breakdown.ingest_cores - 1.0).abs() < 1e-9);
        assert!((p.breakdown.query_cores - 1.0).abs() < 1e-9);
        assert_eq!(p.per_node.cores, 4);
        // Memory: 100 + 500,000 × 1,000 B = 500 MB + 100,000 × 1,000 B = 100 MB
        // + 10 × 50 = 500 MB: 1,200 MB; / 0.5 = 2.4 GB, rounded up to 2.5 GB.
        assert!((p.breakdown.memory_mb - 1_200.0).abs() < 1e-6);
        assert_eq!(p.per_node.memory_gb, 2.5);
        // Disk: Parquet 2.5 MB/s × 30 d (2,592,000 s) = 6,480 GB; WAL 20 MB/s × 100 s =
        // 2 GB; compaction room one day: 2.5 MB/s × 86,400 s = 216 GB.
        // (6,480 + 2 + 216) / 0.8 = 8,372.5 → 8,373 GB.
        assert!((p.breakdown.data_gb - 6_480.0).abs() < 1e-6);
        assert!((p.breakdown.wal_gb - 2.0).abs() < 1e-9);
        assert!((p.breakdown.compaction_gb - 216.0).abs() < 1e-6);
        assert_eq!(p.per_node.disk_gb, 8_373.0);
        assert_eq!(p.cluster_disk_gb, 3.0 * 8_373.0);
        // WAL: 500,000 / 5,000 rows per request = 100 fdatasync/s; 20 MB/s.
        assert!((p.per_node.wal_fdatasync_per_s - 100.0).abs() < 1e-9);
        assert!((p.per_node.wal_write_mb_per_s - 20.0).abs() < 1e-9);
        // Network at the leader: 25 MB/s of bodies in + 2 followers × 20 MB/s out.
        assert!((p.per_node.network_mb_per_s - 65.0).abs() < 1e-9);
        // Disks: WAL max(100/1000, 20/200) = 0.1; data 2.5 MB/s × 3 writes / 200 = 0.0375.
        assert!((p.wal_volume_busy_fraction - 0.1).abs() < 1e-9);
        assert!((p.data_volume_busy_fraction - 0.0375).abs() < 1e-9);
        assert_eq!(p.clusters_for_disks, 1);
    }

    #[test]
    fn more_fields_cost_more_per_row_by_column_count() {
        let mut w = workload(500_000.0);
        w.fields = 8; // (8 + 2) / (3 + 2) = 2× the measured row
        let p = plan(&w, &calibration(), &Assumptions::default());
        assert!((p.breakdown.ingest_cores - 2.0).abs() < 1e-9);
        assert!((p.per_node.wal_write_mb_per_s - 40.0).abs() < 1e-9);
    }

    #[test]
    fn a_slow_wal_volume_asks_for_more_clusters_not_more_cores() {
        let mut slow = calibration();
        slow.wal_volume_fdatasync_per_s = 100.0; // 100 needed: busy 1.0, / 0.5 → 2
        let p = plan(&workload(500_000.0), &slow, &Assumptions::default());
        assert!((p.wal_volume_busy_fraction - 1.0).abs() < 1e-9);
        assert_eq!(p.clusters_for_disks, 2);
        assert_eq!(p.per_node.cores, 4);
    }

    /// Every output, as numbers, in a fixed order.
    fn outputs(p: &Plan) -> Vec<f64> {
        vec![
            p.per_node.cores as f64,
            p.per_node.memory_gb,
            p.per_node.disk_gb,
            p.per_node.wal_fdatasync_per_s,
            p.per_node.wal_write_mb_per_s,
            p.per_node.network_mb_per_s,
            p.cluster_disk_gb,
            p.wal_volume_busy_fraction,
            p.data_volume_busy_fraction,
            p.clusters_for_disks as f64,
        ]
    }

    #[test]
    fn doubling_the_rate_never_lowers_any_output() {
        let c = calibration();
        let mut rate = 1.0;
        while rate < 1e9 {
            for fields in [1, 3, 10, 50] {
                for concurrency in [0, 1, 10] {
                    let mut w = workload(rate);
                    w.fields = fields;
                    w.query_concurrency = concurrency;
                    let mut w2 = w.clone();
                    w2.rows_per_s = rate * 2.0;
                    let a = outputs(&plan(&w, &c, &Assumptions::default()));
                    let b = outputs(&plan(&w2, &c, &Assumptions::default()));
                    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                        assert!(y >= x, "output {i} fell from {x} to {y} at {rate} rows/s");
                    }
                }
            }
            rate *= 3.7;
        }
    }

    #[test]
    fn a_faster_disk_lowers_only_what_the_disk_limits() {
        let slow = calibration();
        let mut fast = slow.clone();
        fast.wal_volume_fdatasync_per_s *= 10.0;
        fast.wal_volume_write_mb_per_s *= 4.0;
        fast.data_volume_write_mb_per_s *= 3.0;
        let mut rate = 1_000.0;
        while rate < 1e9 {
            let w = workload(rate);
            let a = plan(&w, &slow, &Assumptions::default());
            let b = plan(&w, &fast, &Assumptions::default());
            // Not limited by the disk: identical.
            assert_eq!(a.per_node, b.per_node);
            assert_eq!(a.breakdown, b.breakdown);
            assert_eq!(a.cluster_disk_gb, b.cluster_disk_gb);
            // Limited by the disk: never higher, and lower somewhere.
            assert!(b.wal_volume_busy_fraction < a.wal_volume_busy_fraction);
            assert!(b.data_volume_busy_fraction < a.data_volume_busy_fraction);
            assert!(b.clusters_for_disks <= a.clusters_for_disks);
            rate *= 4.3;
        }
        let huge = workload(1e8);
        assert!(
            plan(&huge, &fast, &Assumptions::default()).clusters_for_disks
                < plan(&huge, &slow, &Assumptions::default()).clusters_for_disks
        );
    }
}
