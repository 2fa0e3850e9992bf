//! Steps 3 and 4: seed the query datasets, profile the query mix on them, then the
//! mixed run on the same node (so the data keeps growing under the queries).

use std::time::Duration;

use super::findings::Findings;
use super::mixed::mixed;
use super::progress::Progress;
use super::query::{mix, mix_for, profile_levels};
use super::seed::{parquet_bytes_per_row, seed, wait_flushed};
use super::settings::Placement;
use super::steps::Campaign;
use super::write_run::RunContext;
use crate::error::Result;
use crate::load::now_ns;
use crate::nodes::NodeProcess;
use crate::report::model::{QueryDataset, QueryProfile};
use crate::resources::procfs;

impl Campaign<'_> {
    /// Steps 3 and 4: seed the datasets, profile the queries, then the mixed run.
    pub async fn queries_and_mixed(&self, findings: &mut Findings, progress: &Progress) {
        let default_sync = self
            .settings
            .sweeps
            .first()
            .map(|c| c.wal_sync.clone())
            .unwrap_or_else(|| "fsync".into());
        let placement = if self.settings.own_nodes() {
            Placement::DataVolume
        } else {
            Placement::External
        };
        progress.step(if self.settings.own_nodes() {
            "starting a node for the query profile"
        } else {
            "query profile on the --url nodes"
        });
        let volumes = findings.machine.volumes.clone();
        let (nodes, ctx) = match self
            .nodes("query", 1, &default_sync, placement, &volumes)
            .await
        {
            Ok(x) => x,
            Err(e) => {
                findings
                    .step_errors
                    .push(("query profile node".into(), e.to_string()));
                return;
            }
        };
        let s = self.settings;
        let mut profile = QueryProfile {
            p95_target_ms: s.query_p95_target_ms,
            mix: mix(),
            datasets: Vec::new(),
        };
        let mut first_table = None;
        for &hosts in &s.query_hosts {
            let table = format!("query_{hosts}_hosts");
            match self.dataset(&ctx, &nodes, &table, hosts, progress).await {
                Ok((d, end_ns)) => {
                    progress.line(&format!(
                        "queries over {} hosts: highest concurrency under {:.0} ms p95: {}",
                        hosts, s.query_p95_target_ms, d.qualified_concurrency
                    ));
                    first_table.get_or_insert((table, hosts, end_ns));
                    profile.datasets.push(d);
                }
                Err(e) => findings
                    .step_errors
                    .push((format!("query dataset {table}"), e.to_string())),
            }
        }
        findings.query_profile = Some(profile);
        if let Some((table, hosts, end_ns)) = first_table {
            let rate = findings
                .default_sweep()
                .and_then(|w| w.confirmed_rows_per_s)
                .unwrap_or(s.start_rate_rows_per_s)
                * s.mixed_write_fraction;
            let queries = mix_for(&table, end_ns);
            match mixed(
                &ctx,
                s,
                progress,
                &table,
                hosts,
                &queries,
                rate,
                &mut findings.runs,
            )
            .await
            {
                Ok(m) => findings.mixed = Some(m),
                Err(e) => findings
                    .step_errors
                    .push(("mixed run".into(), e.to_string())),
            }
        }
        self.remove(nodes);
    }

    async fn dataset(
        &self,
        ctx: &RunContext,
        nodes: &[NodeProcess],
        table: &str,
        hosts: u64,
        progress: &Progress,
    ) -> Result<(QueryDataset, i64)> {
        let s = self.settings;
        progress.step(&format!(
            "seeding {} rows over 24 h from {hosts} hosts",
            crate::units::thousands(s.query_rows as f64)
        ));
        let end_ns = now_ns()?;
        let seed_s = seed(&ctx.target, table, hosts, s.query_rows, end_ns).await?;
        progress.step(&format!("waiting for {table} to reach Parquet"));
        let flushed = wait_flushed(
            &ctx.target,
            table,
            Duration::from_millis(s.flush_age_ms) + Duration::from_secs(60),
        )
        .await;
        let rss = nodes
            .first()
            .and_then(NodeProcess::pid)
            .and_then(procfs::process_stat)
            .map(|p| p.rss_bytes as f64 / 1e6);
        let queries = mix_for(table, end_ns);
        progress.step(&format!(
            "query profile over {hosts} hosts: {:?} clients",
            s.query_concurrency
        ));
        let (levels, cpu_ms) = profile_levels(
            &ctx.target,
            &ctx.sampled,
            &queries,
            &s.query_concurrency,
            s.query_repeats,
            s.query_rounds,
            s.query_p95_target_ms,
        )
        .await;
        let qualified_concurrency = levels
            .iter()
            .filter(|l| l.held)
            .map(|l| l.concurrency)
            .max()
            .unwrap_or(0);
        Ok((
            QueryDataset {
                measurement: table.to_string(),
                hosts,
                rows: s.query_rows,
                seed_s,
                parquet_bytes_per_row: if flushed {
                    parquet_bytes_per_row(&ctx.target, table).await
                } else {
                    None
                },
                node_rss_mb_seeded: rss,
                cpu_ms_per_query_single_client: cpu_ms,
                levels,
                qualified_concurrency,
            },
            end_ns,
        ))
    }
}
