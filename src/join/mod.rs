//! `quiver serve --join URL` (`cluster.join`): a node added to a running cluster by one
//! command. At its first start the node asks the node at URL for the cluster's settings
//! (static peers, data groups, replication, each group's members) and records them;
//! once it serves, it asks to be added to the metadata group (a learner that catches
//! up, then a voter), and, with several data groups, rebalances so that replicas move
//! to it. Every step can be asked again: a node killed half way finishes on restart.

mod settings;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use quiver_raft::{PeerClient, PeerError, RaftNode};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::groups::moves::Mover;
pub use settings::ClusterSettings;
use settings::Progress;

/// Where a node of the cluster answers a joining node's questions.
pub const SETTINGS_PATH: &str = "/internal/cluster/settings";
/// Where a node of the cluster adds a joining node to the metadata group.
pub const JOIN_PATH: &str = "/internal/cluster/join";

/// How long a first start keeps asking for the cluster's settings before it gives up
/// (a cluster still starting, a name not yet resolvable in a container).
const SETTINGS_WAIT: Duration = Duration::from_secs(120);
/// One request for the settings.
const SETTINGS_TIMEOUT: Duration = Duration::from_secs(10);
/// One request to be added: the learner catches up before it is promoted.
const JOIN_TIMEOUT: Duration =
    Duration::from_millis(2 * quiver_raft::MEMBERSHIP_TIMEOUT_MS + 10_000);
/// Longest pause between two requests to be added.
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(10);

/// A joining node's request: add me, reachable at `addr`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    /// The joining node's id.
    pub node_id: u64,
    /// Its advertised address.
    pub addr: String,
}

/// The answer: the metadata group's voters once the node is one of them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinAnswer {
    /// Voter ids.
    pub voters: Vec<u64>,
}

/// Refuses settings a join cannot work with, at load time, naming the setting.
pub fn check_config(config: &Config, peers: &[(u64, String)]) -> Result<()> {
    let url = config.cluster.join.trim();
    if url.is_empty() {
        return Ok(());
    }
    if !peers.is_empty() {
        bail!(
            "cluster.join ({url}) and cluster.peers are both set: a joining node takes the \
             cluster's peers from the node it joins; unset cluster.peers (--peers)"
        );
    }
    if config.cluster.secret.trim().len() < 16 {
        bail!("cluster.secret (QUIVER_CLUSTER_SECRET) must be set to the cluster's secret (at least 16 characters) with cluster.join");
    }
    let host_port = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url)
        .trim_end_matches('/');
    if host_port.is_empty() || !host_port.contains(':') || host_port.contains('/') {
        bail!("cluster.join {url:?} must be a node's address, http://host:port");
    }
    let tls = config.http.tls_cert.is_some() || url.starts_with("https://");
    if tls && config.cluster.tls_ca.is_none() {
        bail!(
            "cluster.tls_ca (--tls-ca) must name the CA that signed the cluster's certificates \
             when cluster.join reaches a cluster over https"
        );
    }
    let advertised = crate::config_nodes::advertised_addr(config, &[]);
    if advertised.starts_with("0.0.0.0:") || advertised.starts_with("[::]:") {
        bail!(
            "cluster.join: this node would tell the cluster to reach it at {advertised}, which \
             no other node can; set cluster.advertise_addr (QUIVER_CLUSTER_ADVERTISE_ADDR)"
        );
    }
    Ok(())
}

/// Before anything starts: a joining node takes the cluster's settings (recorded at
/// its first start, asked of the node at `cluster.join` then) into `config`. Returns
/// whether the node joins. Called with the data directory locked.
pub async fn adopt_settings(config: &mut Config, client: &PeerClient) -> Result<bool> {
    let url = config.cluster.join.trim().to_string();
    if url.is_empty() {
        return Ok(false);
    }
    let data_dir = config.storage.dir.clone();
    let settings = match settings::load(&data_dir)? {
        Some(recorded) => recorded,
        None => {
            refuse_earlier_state(config)?;
            let fetched = fetch_settings(client, &url).await?;
            fetched.check(&url)?;
            fetched.check_id(
                &url,
                config.cluster.node_id,
                &crate::config_nodes::advertised_addr(config, &[]),
            )?;
            settings::record(&data_dir, &fetched)?;
            tracing::info!(
                %url,
                peers = %fetched.peers_setting(),
                data_groups = fetched.data_groups,
                replication = fetched.replication,
                "took the cluster's settings to join it"
            );
            fetched
        }
    };
    if config.cluster.data_groups != settings.data_groups
        || config.cluster.replication != settings.replication
    {
        tracing::warn!(
            configured_data_groups = config.cluster.data_groups,
            configured_replication = config.cluster.replication,
            data_groups = settings.data_groups,
            replication = settings.replication,
            "cluster.join: the cluster's data groups and replication are used, not this node's settings"
        );
    }
    apply(config, &settings);
    Ok(true)
}

/// For commands run on a stopped node (`quiver restore`): a node that joined takes the
/// cluster's settings it recorded, as `serve` does; one that never started keeps its
/// own (nothing is fetched).
pub fn apply_recorded(config: &mut Config) -> Result<()> {
    if config.cluster.join.trim().is_empty() {
        return Ok(());
    }
    if let Some(settings) = settings::load(&config.storage.dir)? {
        apply(config, &settings);
    }
    Ok(())
}

fn apply(config: &mut Config, settings: &ClusterSettings) {
    if config.cluster.query_workers.trim().is_empty() && config.cluster.query_worker_addr.is_some()
    {
        config.cluster.query_workers = settings.query_workers.clone();
    }
    config.cluster.peers = settings.peers_setting();
    config.cluster.data_groups = settings.data_groups;
    config.cluster.replication = settings.replication;
}

/// A node joins empty: one that already ran (its own log, a cluster of its own) would
/// bring a history the cluster does not share.
fn refuse_earlier_state(config: &Config) -> Result<()> {
    let wal = config.wal_dir();
    let holds_log = std::fs::read_dir(&wal)
        .map(|entries| {
            entries.flatten().any(|e| {
                e.file_name() != crate::dir_lock::LOCK_FILE && e.file_name() != "lost+found"
            })
        })
        .unwrap_or(false);
    if holds_log {
        bail!(
            "cluster.join: {} already holds a node's log, from a start without cluster.join; \
             a node joins a cluster empty (move or remove that directory, or start without \
             cluster.join with the settings it was started with)",
            wal.display()
        );
    }
    Ok(())
}

async fn fetch_settings(client: &PeerClient, url: &str) -> Result<ClusterSettings> {
    let deadline = Instant::now() + SETTINGS_WAIT;
    let mut pause = Duration::from_millis(200);
    loop {
        match client.get::<ClusterSettings>(url, SETTINGS_PATH, SETTINGS_TIMEOUT).await {
            Ok(settings) => return Ok(settings),
            Err(e @ PeerError::Protocol { status: Some(401), .. }) => {
                return Err(e).with_context(|| {
                    format!("cluster.join {url}: the node refused this node's cluster.secret (it must be the cluster's)")
                })
            }
            Err(e) if e.refused_before_acting() && !matches!(e, PeerError::Refused { .. }) => {
                return Err(e).with_context(|| {
                    format!("cluster.join {url}: the node did not give the cluster's settings (is it a Quiver node of a cluster, of this version?)")
                })
            }
            Err(e) if Instant::now() + pause < deadline => {
                tracing::warn!(%url, error = %e, "cluster.join: asking for the cluster's settings again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_PAUSE_MAX);
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "cluster.join {url}: no answer with the cluster's settings within {} s",
                        SETTINGS_WAIT.as_secs()
                    )
                })
            }
        }
    }
}

/// Once the node serves: asks to be added to the metadata group until it is a voter
/// (through the node at `cluster.join`, else any static peer), then, with several
/// data groups, rebalances so that replicas come to it. Each step is recorded
/// (`joined.progress`): a restart finishes what is left, and a node that was added
/// once and is no voter now (removed since) does not ask again. Runs in the
/// background; every failure is logged and retried.
pub async fn complete(
    config: Config,
    metadata: RaftNode,
    mover: Option<Arc<Mover>>,
    client: PeerClient,
) {
    let data_dir = config.storage.dir.clone();
    let me = config.cluster.node_id;
    let is_voter = || metadata.voters().iter().any(|(id, _)| *id == me);
    let progress = match settings::progress(&data_dir) {
        Ok(progress) => progress,
        Err(e) => {
            tracing::error!(error = %e, "cluster.join: cannot read how far the join got; not asking to join");
            return;
        }
    };
    if progress == Progress::Asking {
        ask_until_added(&config, &metadata, &client).await;
        note_progress(&data_dir, Progress::Added);
    } else if !is_voter() {
        // Wait for the membership to come with the leader's entries, then look again.
        tokio::time::sleep(Duration::from_secs(10)).await;
        if !is_voter() {
            tracing::warn!(
                "this node joined the cluster once and is no voter now (removed since?): it \
                 does not ask to join again; start it with an empty data directory to join anew"
            );
            return;
        }
    }
    if progress < Progress::Done {
        if let Some(mover) = mover {
            if config.cluster.balance_replicas {
                rebalance_after_joining(&mover).await;
            } else {
                tracing::info!(
                    "cluster.balance_replicas = false: no replicas asked for after joining"
                );
            }
        }
        note_progress(&data_dir, Progress::Done);
    }
}

fn note_progress(data_dir: &std::path::Path, progress: Progress) {
    if let Err(e) = settings::record_progress(data_dir, progress) {
        tracing::warn!(error = %e, ?progress, "cluster.join: cannot record how far the join got");
    }
}

/// Asks to be added until this node is a voter of the metadata group.
async fn ask_until_added(config: &Config, metadata: &RaftNode, client: &PeerClient) {
    let me = config.cluster.node_id;
    let is_voter = || metadata.voters().iter().any(|(id, _)| *id == me);
    let peers = config.peers().unwrap_or_default();
    let request = JoinRequest {
        node_id: me,
        addr: quiver_raft::base_url(&crate::config_nodes::advertised_addr(config, &peers)),
    };
    let mut asked: Vec<String> = vec![config.cluster.join.trim().to_string()];
    asked.extend(peers.iter().map(|(_, addr)| addr.clone()));
    let mut pause = Duration::from_millis(200);
    for attempt in 0usize.. {
        if is_voter() {
            break;
        }
        let url = &asked[attempt % asked.len()];
        match client
            .call::<JoinRequest, JoinAnswer>(url, JOIN_PATH, &request, JOIN_TIMEOUT)
            .await
        {
            Ok(answer) => {
                tracing::info!(%url, voters = ?answer.voters, "added to the cluster");
                // The membership reaches this node with the leader's next entries.
                let deadline = Instant::now() + Duration::from_secs(30);
                while Instant::now() < deadline && !is_voter() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                continue;
            }
            Err(e) => {
                tracing::warn!(%url, error = %e, "cluster.join: asking to be added again");
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_PAUSE_MAX);
    }
    metrics::counter!("quiver_cluster_joins_total").increment(1);
}

/// Moves replicas to the new node (`rebalance`), again after a failure, a few times.
async fn rebalance_after_joining(mover: &Mover) {
    let mut pause = Duration::from_secs(1);
    for _ in 0..8 {
        match mover.rebalance().await {
            Ok(moves) => {
                tracing::info!(moves = moves.len(), "rebalanced the replicas after joining");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "rebalancing after joining failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_PAUSE_MAX);
            }
        }
    }
    tracing::error!("gave up rebalancing after joining: run quiver cluster rebalance");
}
