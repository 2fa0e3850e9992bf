//! Step 5 (`--nodes 3`): the replicated sweep on a 3-node cluster of this binary, its
//! budget per 1,000 rows/s, and the failover drill.

use super::budget::budget;
use super::findings::Findings;
use super::ingest::sweep;
use super::progress::Progress;
use super::settings::{Configuration, Placement};
use super::steps::Campaign;
use crate::drill::{drill, DrillArgs};
use crate::load::WireFormat;
use crate::report::model::{Cluster, DrillSummary};

impl Campaign<'_> {
    /// Step 5: the replicated sweep, its budget, and the failover drill.
    pub async fn cluster(&self, findings: &mut Findings, progress: &Progress) {
        let configuration = Configuration {
            format: WireFormat::Msgpack,
            wal_sync: "fsync".into(),
            placement: Placement::DataVolume,
            nodes: 3,
        };
        progress.step("starting a 3-node cluster");
        let volumes = findings.machine.volumes.clone();
        let mut result = Cluster {
            nodes: 3,
            confirmed_rows_per_s: None,
            drill: None,
            drill_error: None,
            budget: None,
        };
        match self
            .nodes("cluster", 3, "fsync", Placement::DataVolume, &volumes)
            .await
        {
            Ok((nodes, ctx)) => {
                match sweep(
                    &ctx,
                    self.settings,
                    &configuration,
                    progress,
                    &mut findings.runs,
                )
                .await
                {
                    Ok(s) => {
                        result.confirmed_rows_per_s = s.confirmed_rows_per_s;
                        let parquet = findings.bytes_per_row.first().and_then(|b| b.parquet);
                        result.budget = s
                            .confirmed_run
                            .as_deref()
                            .and_then(|id| findings.run(id))
                            .and_then(|run| budget(run, 3, parquet));
                        findings.sweeps.push(s);
                    }
                    Err(e) => findings
                        .step_errors
                        .push(("cluster sweep".into(), e.to_string())),
                }
                self.remove(nodes);
            }
            Err(e) => findings
                .step_errors
                .push(("cluster nodes".into(), e.to_string())),
        }
        progress.step(&format!(
            "failover drill: kill -9 the leader {} time(s)",
            self.settings.drills
        ));
        let args = DrillArgs {
            drills: self.settings.drills,
            workers: 4,
            batch_size: 1000,
            warmup_s: if self.settings.quick { 1.0 } else { 2.0 },
            wal_sync: "fsync".into(),
            keep_dir: false,
        };
        match drill(args).await {
            Ok(r) => {
                progress.line(&format!(
                    "failover: new leader after {:.0} ms (median), {} acknowledged rows lost",
                    r.detection_ms_median, r.acked_rows_lost_total
                ));
                result.drill = Some(DrillSummary {
                    drills: r.drills,
                    detection_ms_median: r.detection_ms_median,
                    first_write_ms_median: r.first_write_ms_median,
                    acked_rows_lost: r.acked_rows_lost_total,
                });
            }
            Err(e) => {
                result.drill_error = Some(format!("{e:#}"));
                findings
                    .step_errors
                    .push(("failover drill".into(), format!("{e:#}")));
            }
        }
        findings.cluster = Some(result);
    }
}
