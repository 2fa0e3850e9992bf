//! The campaign's steps in order, each starting (and removing) the nodes it needs. A
//! step that cannot run (a node that does not start, a seeding that fails) is recorded
//! as a failed gate and the campaign goes on, so the report always gets written.

use std::time::Duration;

use super::budget::budget;
use super::findings::Findings;
use super::ingest::sweep;
use super::progress::Progress;
use super::seed::{parquet_bytes_per_row, wait_flushed};
use super::settings::{Configuration, Placement, Settings};
use super::write_run::{warm_up, RunContext};
use crate::error::{Error, Result};
use crate::load::WireFormat;
use crate::nodes::{Deployment, NodeProcess};
use crate::report::model::BytesPerRow;
use crate::resources::probe::{probe_volume, VolumeProbe};
use crate::resources::procfs;
use crate::resources::sampler::{NodeTarget, Targets, VolumeTarget};
use crate::target::{http_client, Target};

/// Database every campaign run writes.
const DATABASE: &str = "sizing";

/// State shared by the steps.
pub struct Campaign<'a> {
    pub(super) settings: &'a Settings,
    client: reqwest::Client,
    token: Option<String>,
    deployment: Option<Deployment>,
}

impl<'a> Campaign<'a> {
    /// Prepares the deployment (own nodes) or the external target.
    pub fn new(settings: &'a Settings, token: Option<String>) -> Result<Campaign<'a>> {
        let client = http_client(settings.in_flight_max)?;
        let deployment = if settings.own_nodes() {
            let exe = std::env::current_exe().map_err(|e| Error::io("the quiver binary", e))?;
            std::fs::create_dir_all(&settings.data_root)
                .map_err(|e| Error::io(&settings.data_root, e))?;
            Some(Deployment {
                exe,
                data_root: settings
                    .data_root
                    .join(format!("quiver-sizing-{:08x}", rand::random::<u32>())),
                wal_root: settings
                    .wal_root
                    .as_ref()
                    .map(|w| w.join(format!("quiver-sizing-{:08x}", rand::random::<u32>()))),
                token: format!("{:032x}", rand::random::<u128>()),
                env: vec![
                    ("QUIVER_LOG_LEVEL".into(), "warn".into()),
                    (
                        "QUIVER_STORAGE_FLUSH_AGE_MS".into(),
                        settings.flush_age_ms.to_string(),
                    ),
                ],
            })
        } else {
            None
        };
        let token = deployment.as_ref().map(|d| d.token.clone()).or(token);
        Ok(Campaign {
            settings,
            client,
            token,
            deployment,
        })
    }

    /// The settings nodes were started with (without the token).
    pub fn node_config(&self) -> Vec<(String, String)> {
        self.deployment
            .as_ref()
            .map(|d| d.env.clone())
            .unwrap_or_default()
    }

    /// Removes the campaign's node directories (unless `--keep-data`).
    pub fn finish(&self) {
        if let Some(d) = &self.deployment {
            if !self.settings.keep_data {
                let _ = std::fs::remove_dir_all(&d.data_root);
                if let Some(w) = &d.wal_root {
                    let _ = std::fs::remove_dir_all(w);
                }
            }
        }
    }

    pub(super) fn target(&self, urls: Vec<String>) -> Target {
        Target {
            urls,
            token: self.token.clone(),
            database: DATABASE.to_string(),
            client: self.client.clone(),
        }
    }

    /// Step 1: probe the volumes.
    pub async fn probe(&self, findings: &mut Findings, progress: &Progress) -> Result<()> {
        let Some(d) = &self.deployment else {
            return Ok(());
        };
        let mut dirs = vec![(
            if self.wal_own_volume() {
                "data"
            } else {
                "data+wal"
            },
            d.data_root.clone(),
        )];
        if let (true, Some(w)) = (self.wal_own_volume(), &d.wal_root) {
            dirs.push(("wal", w.clone()));
        }
        for (role, dir) in dirs {
            progress.step(&format!("probe: {role} volume at {}", dir.display()));
            let budget = self.settings.probe;
            let role_name = role.to_string();
            let probe = tokio::task::spawn_blocking(move || probe_volume(&role_name, &dir, budget))
                .await
                .map_err(|e| Error::malformed("probe thread", e))??;
            progress.line(&format!(
                "{role} volume ({}): {:.0} MB/s sequential, {:.0} fdatasync/s",
                probe
                    .device
                    .clone()
                    .unwrap_or_else(|| "device unknown".into()),
                probe.sequential_write_mb_per_s,
                probe.fdatasync_per_s
            ));
            findings.machine.volumes.push(probe);
        }
        Ok(())
    }

    fn wal_own_volume(&self) -> bool {
        self.settings
            .sweeps
            .iter()
            .any(|c| c.placement == Placement::OwnVolume)
    }

    /// Sampler targets and probes for nodes with the WAL at `placement`.
    fn watch(
        &self,
        nodes: &[NodeProcess],
        placement: Placement,
        volumes: &[VolumeProbe],
    ) -> (Targets, Vec<VolumeProbe>) {
        let device = |dir: &std::path::Path| procfs::device_of(dir);
        let (mut targets, mut probes) = (Vec::new(), Vec::new());
        let probe_with_role = |role: &str, from: &str| {
            volumes
                .iter()
                .find(|v| v.role == from)
                .map(|v| VolumeProbe {
                    role: role.into(),
                    ..v.clone()
                })
        };
        if let (Some(d), Some(first)) = (&self.deployment, nodes.first()) {
            let data_dev = device(&first.spec.data_dir).or_else(|| device(&d.data_root));
            match (placement, &first.spec.wal_dir) {
                (Placement::OwnVolume, Some(wal)) => {
                    targets.push(VolumeTarget {
                        role: "data".into(),
                        device: data_dev,
                    });
                    targets.push(VolumeTarget {
                        role: "wal".into(),
                        device: device(wal),
                    });
                    probes.extend(probe_with_role("data", "data"));
                    probes.extend(probe_with_role("wal", "wal"));
                }
                _ => {
                    targets.push(VolumeTarget {
                        role: "data+wal".into(),
                        device: data_dev,
                    });
                    probes.extend(
                        probe_with_role("data+wal", "data+wal")
                            .or_else(|| probe_with_role("data+wal", "data")),
                    );
                }
            }
        }
        let node_targets = nodes
            .iter()
            .map(|n| NodeTarget {
                pid: n.pid(),
                url: n.url.clone(),
            })
            .collect();
        (
            Targets {
                nodes: node_targets,
                volumes: targets,
            },
            probes,
        )
    }

    /// Starts `count` nodes (or uses the external ones) and the context to run on them.
    pub(super) async fn nodes(
        &self,
        name: &str,
        count: usize,
        wal_sync: &str,
        placement: Placement,
        volumes: &[VolumeProbe],
    ) -> Result<(Vec<NodeProcess>, RunContext)> {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        let Some(d) = &self.deployment else {
            let urls = self.settings.external_urls.clone();
            let sampled = Targets {
                nodes: urls
                    .iter()
                    .map(|u| NodeTarget {
                        pid: None,
                        url: u.clone(),
                    })
                    .collect(),
                volumes: Vec::new(),
            };
            let ctx = RunContext {
                target: self.target(urls),
                sampled,
                volumes: Vec::new(),
                cores,
            };
            return Ok((Vec::new(), ctx));
        };
        let env = vec![("QUIVER_WAL_SYNC".to_string(), wal_sync.to_string())];
        let nodes = d
            .start(
                name,
                count,
                placement == Placement::OwnVolume,
                &env,
                &self.client,
            )
            .await?;
        let (sampled, probes) = self.watch(&nodes, placement, volumes);
        let urls = nodes.iter().map(|n| n.url.clone()).collect();
        let ctx = RunContext {
            target: self.target(urls),
            sampled,
            volumes: probes,
            cores,
        };
        warm_up(&ctx, self.settings).await;
        Ok((nodes, ctx))
    }

    pub(super) fn remove(&self, nodes: Vec<NodeProcess>) {
        if let Some(d) = &self.deployment {
            d.remove(nodes, self.settings.keep_data);
        }
    }

    /// Step 2: every sweep, one node per `wal.sync` mode and placement.
    pub async fn ingest(&self, findings: &mut Findings, progress: &Progress) {
        let mut groups: Vec<(String, Placement, Vec<Configuration>)> = Vec::new();
        for c in &self.settings.sweeps {
            match groups.last_mut() {
                Some((sync, placement, list))
                    if *sync == c.wal_sync && *placement == c.placement =>
                {
                    list.push(c.clone())
                }
                _ => groups.push((c.wal_sync.clone(), c.placement, vec![c.clone()])),
            }
        }
        for (wal_sync, placement, configurations) in groups {
            let name = format!(
                "ingest-{}-{}",
                wal_sync.replace(' ', ""),
                configurations[0].slug()
            );
            progress.step(&format!(
                "starting a node: wal.sync = {wal_sync}, {}",
                placement.label()
            ));
            let volumes = findings.machine.volumes.clone();
            let (nodes, ctx) = match self.nodes(&name, 1, &wal_sync, placement, &volumes).await {
                Ok(x) => x,
                Err(e) => {
                    findings
                        .step_errors
                        .push((format!("ingest node {name}"), e.to_string()));
                    continue;
                }
            };
            if findings.memory_base_mb.is_none() {
                findings.memory_base_mb = nodes
                    .first()
                    .and_then(NodeProcess::pid)
                    .and_then(procfs::process_stat)
                    .map(|s| s.rss_bytes as f64 / 1e6);
            }
            for configuration in &configurations {
                match sweep(
                    &ctx,
                    self.settings,
                    configuration,
                    progress,
                    &mut findings.runs,
                )
                .await
                {
                    Ok(s) => findings.sweeps.push(s),
                    Err(e) => findings
                        .step_errors
                        .push((format!("sweep {}", configuration.label()), e.to_string())),
                }
            }
            self.bytes_per_row(findings, &ctx, &configurations, progress)
                .await;
            self.remove(nodes);
        }
    }

    /// Parquet bytes per row of each confirmed run once flushed, with wire and WAL bytes.
    async fn bytes_per_row(
        &self,
        findings: &mut Findings,
        ctx: &RunContext,
        configurations: &[Configuration],
        progress: &Progress,
    ) {
        let flush_wait =
            Duration::from_millis(self.settings.flush_age_ms) + Duration::from_secs(30);
        for configuration in configurations {
            let Some(run) = findings
                .sweeps
                .iter()
                .find(|s| s.configuration == *configuration)
                .and_then(|s| s.confirmed_run.as_deref())
                .and_then(|id| findings.run(id))
            else {
                continue;
            };
            progress.step(&format!("waiting for {} to reach Parquet", run.measurement));
            let parquet = if wait_flushed(&ctx.target, &run.measurement, flush_wait).await {
                parquet_bytes_per_row(&ctx.target, &run.measurement).await
            } else {
                None
            };
            let row = BytesPerRow {
                label: configuration.label(),
                wire: run.outcome.generator.wire_bytes_per_row,
                wal: run.resources.wal_bytes_per_row,
                parquet,
            };
            if configuration.format == WireFormat::Msgpack
                && findings.budget.is_none()
                && configuration.nodes == 1
            {
                findings.budget = budget(run, 1, parquet);
            }
            findings.bytes_per_row.push(row);
        }
    }
}
