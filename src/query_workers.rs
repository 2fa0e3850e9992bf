//! The cluster's query workers: those `cluster.query_workers` lists, and those of nodes
//! added since (a node joined with `--join` is in no other node's list), learned by
//! asking each member of the cluster where its worker listens; and this node's own
//! worker listener (`cluster.query_worker_addr`).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use quiver_query::{Distribution, QueryEngine, WorkerDirectory};
use quiver_raft::{PeerClient, RaftNode};
use url::Url;

use crate::config::Config;

/// Where a node says where its query worker listens.
pub const WORKER_PATH: &str = "/internal/query-worker";
/// How often the members not listed are asked for their workers.
const LEARN_EVERY: Duration = Duration::from_secs(5);
/// One such question.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// Node id → worker address: the configured list, then what members said.
pub struct KnownWorkers {
    listed: Vec<(u64, Url)>,
    learned: RwLock<BTreeMap<u64, Url>>,
}

impl KnownWorkers {
    /// Every worker known, by node id (listed ones win over learned ones).
    pub fn by_node(&self) -> BTreeMap<u64, Url> {
        let mut all = match self.learned.read() {
            Ok(learned) => learned.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        all.extend(self.listed.iter().cloned());
        all
    }

    fn is_listed(&self, node: u64) -> bool {
        self.listed.iter().any(|(id, _)| *id == node)
    }

    fn learn(&self, node: u64, url: Option<Url>) {
        let mut learned = match self.learned.write() {
            Ok(learned) => learned,
            Err(poisoned) => poisoned.into_inner(),
        };
        match url {
            Some(url) => {
                if learned.get(&node) != Some(&url) {
                    tracing::info!(node, %url, "learned a node's query worker");
                }
                learned.insert(node, url);
            }
            None => {
                learned.remove(&node);
            }
        }
    }

    fn forget_all_but(&self, members: &[u64]) {
        let mut learned = match self.learned.write() {
            Ok(learned) => learned,
            Err(poisoned) => poisoned.into_inner(),
        };
        learned.retain(|id, _| members.contains(id));
    }
}

impl WorkerDirectory for KnownWorkers {
    fn url(&self, node: u64) -> Option<Url> {
        self.listed
            .iter()
            .find(|(id, _)| *id == node)
            .map(|(_, url)| url.clone())
            .or_else(|| match self.learned.read() {
                Ok(learned) => learned.get(&node).cloned(),
                Err(poisoned) => poisoned.into_inner().get(&node).cloned(),
            })
    }

    fn all(&self) -> Vec<Url> {
        self.by_node().into_values().collect()
    }
}

/// What the query engine needs to run scans on other nodes, with the directory it
/// routes by, or `None` when `cluster.query_workers` is empty. Refuses a list without
/// a cluster secret (the workers would refuse every call) or without this node's
/// listen address.
pub fn distribution(config: &Config) -> Result<Option<(Distribution, Arc<KnownWorkers>)>> {
    let listed = config.query_workers()?;
    if listed.is_empty() {
        return Ok(None);
    }
    if config.cluster.secret.is_empty() {
        bail!("cluster.query_workers needs cluster.secret: workers refuse calls without it");
    }
    if config.cluster.query_worker_addr.is_none() {
        bail!(
            "cluster.query_workers is set but cluster.query_worker_addr is not: \
             where does this node's worker listen?"
        );
    }
    let mut by_node = Vec::with_capacity(listed.len());
    for (id, addr) in listed {
        let url = worker_url(&addr)
            .with_context(|| format!("cluster.query_workers: node {id}'s address {addr}"))?;
        by_node.push((id, url));
    }
    let me = config.cluster.node_id;
    if !by_node.iter().any(|(id, _)| *id == me) {
        if let Some(own) = own_worker(config) {
            by_node.push((me, worker_url(&own).context("this node's query worker")?));
        }
    }
    let known = Arc::new(KnownWorkers {
        listed: by_node,
        learned: RwLock::new(BTreeMap::new()),
    });
    let directory: Arc<dyn WorkerDirectory> = Arc::clone(&known) as Arc<dyn WorkerDirectory>;
    Ok(Some((
        Distribution::new(directory, config.cluster.secret.clone()),
        known,
    )))
}

fn worker_url(addr: &str) -> Result<Url> {
    let with_scheme = match addr.contains("://") {
        true => addr.to_string(),
        false => format!("http://{addr}"),
    };
    Ok(Url::parse(&with_scheme)?)
}

/// Where other nodes reach this node's worker: its entry in `cluster.query_workers`,
/// else `cluster.query_worker_addr`, with the host of the address this node advertises
/// when the worker listens on every interface (`0.0.0.0:8090`). `None` without a
/// worker.
pub fn own_worker(config: &Config) -> Option<String> {
    let me = config.cluster.node_id;
    if let Some((_, addr)) = config
        .query_workers()
        .ok()?
        .into_iter()
        .find(|(id, _)| *id == me)
    {
        return Some(addr);
    }
    let listen: std::net::SocketAddr = config.cluster.query_worker_addr.as_deref()?.parse().ok()?;
    if !listen.ip().is_unspecified() {
        return Some(format!("http://{listen}"));
    }
    let peers = config.peers().unwrap_or_default();
    let advertised = crate::config_nodes::advertised_addr(config, &peers);
    let host = Url::parse(&quiver_raft::base_url(&advertised))
        .ok()?
        .host_str()?
        .to_string();
    Some(format!("http://{host}:{}", listen.port()))
}

/// Every few seconds, asks each member of the cluster that `cluster.query_workers` does
/// not list where its worker listens, so stages can run on nodes added since this
/// node's configuration was written.
pub async fn learn_workers(known: Arc<KnownWorkers>, metadata: RaftNode, client: PeerClient) {
    let me = metadata.node_id();
    loop {
        let members = metadata.member_addrs_by_id();
        let ids: Vec<u64> = members.iter().map(|(id, _)| *id).collect();
        known.forget_all_but(&ids);
        for (id, addr) in members {
            if id == me || known.is_listed(id) {
                continue;
            }
            match client
                .get::<Option<String>>(&addr, WORKER_PATH, ASK_TIMEOUT)
                .await
            {
                Ok(answer) => known.learn(id, answer.and_then(|a| worker_url(&a).ok())),
                // Unreachable: keep what was learned (a restart keeps its address).
                Err(e) => tracing::debug!(node = id, error = %e, "no answer about a query worker"),
            }
        }
        tokio::time::sleep(LEARN_EVERY).await;
    }
}

/// Starts this node's worker when the cluster distributes queries.
pub fn serve(config: &Config, query: &QueryEngine) -> Result<()> {
    let Some(addr) = &config.cluster.query_worker_addr else {
        return Ok(());
    };
    if config.cluster.query_workers.trim().is_empty() {
        return Ok(());
    }
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("cluster.query_worker_addr {addr}: cannot listen"))?;
    tracing::info!(%addr, "query worker listening");
    query
        .serve_worker(listener)
        .context("starting the query worker")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_learned_worker_is_found_and_a_listed_one_wins() {
        let known = KnownWorkers {
            listed: vec![(1, worker_url("10.0.0.1:8090").expect("url"))],
            learned: RwLock::new(BTreeMap::new()),
        };
        assert_eq!(known.url(4), None);
        known.learn(4, Some(worker_url("10.0.0.4:8090").expect("url")));
        known.learn(1, Some(worker_url("10.9.9.9:8090").expect("url")));
        assert_eq!(
            known.url(4).map(|u| u.to_string()),
            Some("http://10.0.0.4:8090/".to_string())
        );
        assert_eq!(
            known.url(1).map(|u| u.to_string()),
            Some("http://10.0.0.1:8090/".to_string())
        );
        assert_eq!(known.all().len(), 2);
        known.forget_all_but(&[1]);
        assert_eq!(known.url(4), None);
    }

    #[test]
    fn a_worker_on_every_interface_is_reached_at_the_advertised_host() {
        let mut config = Config::default();
        config.cluster.node_id = 4;
        config.cluster.query_worker_addr = Some("0.0.0.0:8094".into());
        config.cluster.advertise_addr = Some("http://10.0.0.4:8000".into());
        assert_eq!(own_worker(&config).as_deref(), Some("http://10.0.0.4:8094"));
        config.cluster.query_worker_addr = Some("10.1.1.4:8094".into());
        assert_eq!(own_worker(&config).as_deref(), Some("http://10.1.1.4:8094"));
        config.cluster.query_workers = "4=http://q4:9000".into();
        assert_eq!(own_worker(&config).as_deref(), Some("http://q4:9000"));
        config.cluster.query_worker_addr = None;
        config.cluster.query_workers = String::new();
        assert_eq!(own_worker(&config), None);
    }
}
