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

/// Sets gauges from current state (called on every scrape).
pub fn refresh_gauges(app: &AppState) {
    let s = app.storage.stats();
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
    let w = app.node.log.wal().stats();
    metrics::gauge!("quiver_wal_bytes_on_disk").set(w.bytes_on_disk as f64);
    metrics::gauge!("quiver_wal_segments").set(w.segments as f64);
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
}
