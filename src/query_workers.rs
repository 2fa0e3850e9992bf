//! The cluster's query workers, as `cluster.query_workers` lists them, and this node's
//! own worker listener (`cluster.query_worker_addr`).

use anyhow::{bail, Context, Result};
use quiver_query::{Distribution, QueryEngine, WorkerDirectory};
use std::sync::Arc;
use url::Url;

use crate::config::Config;

/// Node id → worker address, fixed by the configuration.
struct ListedWorkers {
    by_node: Vec<(u64, Url)>,
}

impl WorkerDirectory for ListedWorkers {
    fn url(&self, node: u64) -> Option<Url> {
        self.by_node
            .iter()
            .find(|(id, _)| *id == node)
            .map(|(_, url)| url.clone())
    }

    fn all(&self) -> Vec<Url> {
        self.by_node.iter().map(|(_, url)| url.clone()).collect()
    }
}

/// What the query engine needs to run scans on other nodes, or `None` when
/// `cluster.query_workers` is empty. Refuses a list without a cluster secret (the
/// workers would refuse every call) or without this node's listen address.
pub fn distribution(config: &Config) -> Result<Option<Distribution>> {
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
        let with_scheme = match addr.contains("://") {
            true => addr,
            false => format!("http://{addr}"),
        };
        let url = Url::parse(&with_scheme)
            .with_context(|| format!("cluster.query_workers: node {id}'s address {with_scheme}"))?;
        by_node.push((id, url));
    }
    Ok(Some(Distribution::new(
        Arc::new(ListedWorkers { by_node }),
        config.cluster.secret.clone(),
    )))
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
