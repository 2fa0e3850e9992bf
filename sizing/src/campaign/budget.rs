//! Resources per 1,000 rows/s of a confirmed run: the numbers an operator multiplies
//! by the rate they expect.

use crate::report::model::{Budget, WriteRun};

/// The budget of `run` (None when it acknowledged nothing).
pub fn budget(run: &WriteRun, nodes: u32, parquet_bytes_per_row: Option<f64>) -> Option<Budget> {
    let rate = run.acked_rate_rows_per_s;
    if rate.is_nan() || rate <= 0.0 {
        return None;
    }
    let per_krows = rate / 1_000.0;
    let n = nodes.max(1) as f64;
    let r = &run.resources;
    // Entries a follower appended are what it was sent over the network.
    let follower_mb_per_s = (nodes > 1).then(|| {
        let steady = if run.samples.len() > 2 {
            &run.samples[1..]
        } else {
            &run.samples[..]
        };
        let per_sample: Vec<f64> = steady
            .iter()
            .map(|s| {
                let mut appended: Vec<f64> = s
                    .nodes
                    .iter()
                    .filter_map(|n| n.log_append_mb_per_s)
                    .collect();
                // The leader appends everything too: the biggest appender is taken as it.
                appended.sort_by(|a, b| b.total_cmp(a));
                appended.iter().skip(1).sum()
            })
            .collect();
        per_sample.iter().sum::<f64>() / per_sample.len().max(1) as f64
    });
    Some(Budget {
        run: run.id.clone(),
        nodes,
        rows_per_s: rate,
        cpu_ms_per_s_per_node: r.node_cpu_cores_mean.map(|c| c / n * 1_000.0 / per_krows),
        resident_mb_per_node: r.node_rss_mb_max,
        wal_bytes_per_s: r.wal_bytes_per_row.map(|b| b * 1_000.0),
        parquet_bytes_per_s: parquet_bytes_per_row.map(|b| b * 1_000.0),
        network_bytes_per_s: follower_mb_per_s.map(|mb| mb * 1e6 / per_krows),
    })
}
