//! Lists of nodes in the configuration (`cluster.peers`, `cluster.query_workers`).

use anyhow::{anyhow, bail, Result};

use crate::config::Config;

/// A list of nodes, `1=http://host:port,2=...`, parsed and checked (ids unique and at
/// least 1, addresses `host:port` or `http(s)://host:port`); `key` names it in errors.
pub fn node_list(key: &str, text: &str) -> Result<Vec<(u64, String)>> {
    let mut out: Vec<(u64, String)> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| anyhow!("{key} entry {part:?} must look like 1=http://10.0.0.1:8000"))?;
        let id: u64 = id
            .trim()
            .parse()
            .ok()
            .filter(|id| *id >= 1)
            .ok_or_else(|| anyhow!("{key} entry {part:?}: the id must be a number >= 1"))?;
        let addr = addr.trim().trim_end_matches('/');
        let host_port = addr
            .strip_prefix("http://")
            .or_else(|| addr.strip_prefix("https://"))
            .unwrap_or(addr);
        if host_port.is_empty() || !host_port.contains(':') || host_port.contains('/') {
            bail!("{key} entry {part:?}: the address must be host:port or http://host:port");
        }
        if out.iter().any(|(other, _)| *other == id) {
            bail!("{key} lists node {id} twice");
        }
        out.push((id, addr.to_string()));
    }
    Ok(out)
}

/// The address other nodes reach this node at: `cluster.advertise_addr`, else this
/// node's entry in `peers`, else `http.addr`.
pub fn advertised_addr(config: &Config, peers: &[(u64, String)]) -> String {
    config
        .cluster
        .advertise_addr
        .clone()
        .or_else(|| {
            peers
                .iter()
                .find(|(id, _)| *id == config.cluster.node_id)
                .map(|(_, addr)| addr.clone())
        })
        .unwrap_or_else(|| config.http.addr.clone())
}

impl Config {
    /// The static voter set: `1=http://host:port,2=...` parsed and checked (ids unique
    /// and at least 1, addresses `host:port` or `http(s)://host:port`).
    pub fn peers(&self) -> Result<Vec<(u64, String)>> {
        node_list("cluster.peers", &self.cluster.peers)
    }

    /// The query workers, `cluster.query_workers` parsed and checked like the peers.
    pub fn query_workers(&self) -> Result<Vec<(u64, String)>> {
        node_list("cluster.query_workers", &self.cluster.query_workers)
    }
}
