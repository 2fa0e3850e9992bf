//! Logs (tracing) and metrics (the `metrics` crate, rendered for Prometheus).

use anyhow::{anyhow, Result};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::http::AppState;

/// Installs the log subscriber on stderr; `RUST_LOG` beats the configured level.
/// openraft's own info-level chatter is kept at warn unless the level names it.
pub fn init_logging(level: &str) {
    use std::io::IsTerminal;
    let directive = if level.contains("openraft") {
        level.to_string()
    } else {
        format!("{level},openraft=warn")
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(directive));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

/// Installs the Prometheus recorder and returns the handle that renders it.
pub fn init_metrics() -> Result<PrometheusHandle> {
    PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| anyhow!("metrics recorder: {e}"))
}

/// Sets gauges from current state (called on every scrape). Storage and log gauges add
/// up every group this node runs (with data groups, the first group holds no rows).
pub fn refresh_gauges(app: &AppState) {
    let s = rows_here(app);
    metrics::gauge!("quiver_buffer_rows").set(s.active_rows as f64);
    metrics::gauge!("quiver_buffer_bytes").set(s.memory_bytes as f64);
    metrics::gauge!("quiver_frozen_segments").set(s.frozen_segments as f64);
    metrics::gauge!("quiver_parquet_files").set(s.files as f64);
    metrics::gauge!("quiver_parquet_bytes").set(s.file_bytes as f64);
    metrics::gauge!("quiver_parquet_rows").set(s.file_rows as f64);
    // One series per table: operators size and alert per measurement (file count
    // creeping up means compaction is behind). Bounded by the number of tables.
    for t in app.groups.summaries(None) {
        let labels = [
            ("database", t.key.database.clone()),
            ("measurement", t.key.measurement.clone()),
        ];
        metrics::gauge!("quiver_table_files", &labels).set(t.file_count as f64);
        metrics::gauge!("quiver_table_bytes", &labels).set(t.file_bytes as f64);
        metrics::gauge!("quiver_table_rows", &labels).set(t.rows as f64);
        metrics::gauge!("quiver_table_compactions_pending", &labels)
            .set(t.compactions_pending as f64);
    }
    let q = app.query.stats();
    metrics::gauge!("quiver_queries_running").set(q.running as f64);
    metrics::gauge!("quiver_queries_queued").set(q.queued as f64);
    metrics::gauge!("quiver_query_memory_bytes").set(q.memory_bytes as f64);
    let (mut wal_bytes, mut wal_segments) = (0u64, 0usize);
    for group in app.groups.all() {
        let w = group.node.log.wal().stats();
        wal_bytes += w.bytes_on_disk;
        wal_segments += w.segments;
    }
    metrics::gauge!("quiver_wal_bytes_on_disk").set(wal_bytes as f64);
    metrics::gauge!("quiver_wal_segments").set(wal_segments as f64);
    metrics::gauge!("quiver_write_bytes_in_flight").set(app.write_budget.bytes_in_use() as f64);
    metrics::gauge!("quiver_wal_volume_free_bytes").set(app.wal_volume.free_bytes() as f64);
    metrics::gauge!("quiver_data_volume_free_bytes").set(app.data_volume.free_bytes() as f64);
    metrics::gauge!("quiver_node_ready").set(if app.groups.unready_reason().is_none() {
        1.0
    } else {
        0.0
    });
    metrics::gauge!("quiver_node_failed").set(if app.groups.fatal().is_some() {
        1.0
    } else {
        0.0
    });
    let m = app.node.raft.metrics().borrow().clone();
    metrics::gauge!("quiver_raft_term").set(m.current_term as f64);
    metrics::gauge!("quiver_raft_last_log_index").set(m.last_log_index.unwrap_or(0) as f64);
    metrics::gauge!("quiver_raft_applied_index")
        .set(m.last_applied.map(|l| l.index).unwrap_or(0) as f64);
    metrics::gauge!("quiver_raft_is_leader").set(if m.current_leader == Some(m.id) {
        1.0
    } else {
        0.0
    });
    for group in app.groups.all() {
        group_raft_gauges(&group);
    }
}

/// Rows, segments and files of every group on this node that holds rows.
fn rows_here(app: &AppState) -> quiver_storage::StorageStats {
    let mut all = quiver_storage::StorageStats::default();
    for group in app.groups.holding_rows() {
        let s = group.storage.stats();
        all.active_rows += s.active_rows;
        all.frozen_segments += s.frozen_segments;
        all.memory_bytes += s.memory_bytes;
        all.files += s.files;
        all.file_bytes += s.file_bytes;
        all.file_rows += s.file_rows;
    }
    all
}

/// One group's Raft state, labelled by group: which node leads it (0 when none is
/// known), its term, its log and what this node applied, and, where this node leads,
/// how far each follower's log is behind.
fn group_raft_gauges(group: &crate::groups::Group) {
    let m = group.node.raft.metrics().borrow().clone();
    let id = group.id.to_string();
    let labels = [("group", id.clone())];
    metrics::gauge!("quiver_group_leader_node", &labels).set(m.current_leader.unwrap_or(0) as f64);
    metrics::gauge!("quiver_group_is_leader", &labels).set(if m.current_leader == Some(m.id) {
        1.0
    } else {
        0.0
    });
    metrics::gauge!("quiver_group_term", &labels).set(m.current_term as f64);
    let last = m.last_log_index.unwrap_or(0);
    metrics::gauge!("quiver_group_last_log_index", &labels).set(last as f64);
    metrics::gauge!("quiver_group_applied_index", &labels)
        .set(m.last_applied.map(|l| l.index).unwrap_or(0) as f64);
    if let Some(replication) = &m.replication {
        for (follower, matched) in replication {
            if *follower == m.id {
                continue;
            }
            let behind = last.saturating_sub(matched.map(|l| l.index).unwrap_or(0));
            let labels = [("group", id.clone()), ("follower", follower.to_string())];
            metrics::gauge!("quiver_group_follower_lag_entries", &labels).set(behind as f64);
        }
    }
}
