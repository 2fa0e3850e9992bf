//! `quiver verify --nodes URL,URL,...`: proof that replicas agree.
//!
//! 1. Writes sentinel rows through the first node and reads them back from every other
//!    node (with a deadline), reporting how long each took to see them.
//! 2. Waits until every node has applied the leader's commit index, then compares every
//!    measurement across nodes: row counts and content hashes per hour partition
//!    (`/api/v1/cluster/digest`). Any difference is reported with its table, hour and
//!    the node's values. Exit status 1 on any mismatch or unreachable node.
//!
//! Compare a quiet cluster: rows written while the digests are taken can make a
//! partition differ for a moment (run it again to tell lag from divergence).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

/// Database the sentinel rows go to.
const SENTINEL_DATABASE: &str = "quiver_verify";
/// Measurement of the sentinel rows.
const SENTINEL_MEASUREMENT: &str = "sentinel";
/// How long a node may take to show the sentinels or to catch up.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Flags of `quiver verify`.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// Every node of the cluster, comma separated; sentinels are written to the first.
    #[arg(long, value_delimiter = ',', required = true)]
    pub nodes: Vec<String>,
    /// Token with read and write permission (or QUIVER_TOKEN).
    #[arg(long, env = "QUIVER_TOKEN")]
    pub token: Option<String>,
    /// Sentinel rows to write.
    #[arg(long, default_value_t = 100)]
    pub sentinels: u64,
    /// CA (PEM) the nodes' certificates must chain to; addresses without a scheme are
    /// then reached over https (or QUIVER_CA).
    #[arg(long, env = "QUIVER_CA")]
    pub ca: Option<PathBuf>,
}

struct Client {
    http: reqwest::Client,
    token: Option<String>,
    https: bool,
}

impl Client {
    fn url(&self, node: &str, path: &str) -> String {
        format!("{}{path}", crate::tls::node_base_url(node, self.https))
    }

    fn request(&self, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
        let r = self.http.request(method, url);
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    async fn json(&self, r: reqwest::RequestBuilder, what: &str) -> Result<Value> {
        let response = r.send().await.with_context(|| what.to_string())?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .with_context(|| format!("{what}: answer is not JSON"))?;
        if !status.is_success() {
            bail!("{what}: HTTP {status}: {body}");
        }
        Ok(body)
    }

    async fn status(&self, node: &str) -> Result<Value> {
        let url = self.url(node, "/api/v1/cluster/status");
        self.json(self.request(reqwest::Method::GET, url), node)
            .await
    }

    async fn count_sentinels(&self, node: &str, run: &str) -> Result<u64> {
        let url = self.url(node, "/api/v1/query");
        let sql = format!("SELECT count(*) FROM {SENTINEL_MEASUREMENT} WHERE run = '{run}'");
        let body = self
            .json(
                self.request(reqwest::Method::POST, url)
                    .header("x-arc-database", SENTINEL_DATABASE)
                    .json(&json!({ "sql": sql })),
                node,
            )
            .await?;
        body["data"][0][0]
            .as_u64()
            .ok_or_else(|| anyhow!("{node}: count answered {body}"))
    }
}

/// Runs the verification and prints the verdict as JSON.
pub async fn run(args: VerifyArgs) -> Result<()> {
    if args.nodes.is_empty() {
        bail!("--nodes needs at least one node");
    }
    let client = Client {
        http: crate::tls::client_builder("--ca", args.ca.as_deref())?
            .timeout(Duration::from_secs(120))
            .build()?,
        token: args.token.clone(),
        https: args.ca.is_some(),
    };
    let run_id = format!("{:016x}", rand::random::<u64>());
    let sentinels = write_sentinels(&client, &args.nodes[0], &run_id, args.sentinels).await?;
    let mut visible = Vec::new();
    let mut problems: Vec<Value> = Vec::new();
    for node in &args.nodes {
        let started = Instant::now();
        loop {
            let seen = client.count_sentinels(node, &run_id).await.unwrap_or(0);
            if seen == sentinels {
                visible.push(json!({"node": node, "ms": started.elapsed().as_millis() as u64}));
                break;
            }
            if started.elapsed() > CONVERGE_TIMEOUT {
                problems.push(json!({"node": node, "problem": format!("sees {seen} of {sentinels} sentinel rows")}));
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let target = commit_index(&client, &args.nodes).await?;
    let mut digests = BTreeMap::new();
    for node in &args.nodes {
        wait_applied(&client, node, target).await?;
        let url = client.url(node, "/api/v1/cluster/digest");
        let digest = client
            .json(client.request(reqwest::Method::GET, url), node)
            .await?;
        digests.insert(node.clone(), digest_of(&digest));
    }
    let (tables, mismatches) = compare_by_group(&digests);
    problems.extend(mismatches);
    let ok = problems.is_empty();
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "ok": ok,
            "nodes": args.nodes,
            "sentinel_rows": sentinels,
            "sentinels_visible": visible,
            "applied_index_compared": target,
            "tables_compared": tables,
            "mismatches": problems,
        }))?
    );
    if !ok {
        bail!("replicas differ");
    }
    Ok(())
}

async fn write_sentinels(client: &Client, node: &str, run: &str, rows: u64) -> Result<u64> {
    let now = chrono::Utc::now()
        .timestamp_nanos_opt()
        .ok_or_else(|| anyhow!("clock out of range"))?;
    let time: Vec<i64> = (0..rows as i64).map(|i| now + i * 1_000).collect();
    let seq: Vec<i64> = (0..rows as i64).collect();
    let body = rmp_serde::to_vec_named(&json!({
        "m": SENTINEL_MEASUREMENT,
        "tags": ["run"],
        "columns": {"time": time, "run": vec![run; rows as usize], "seq": seq},
    }))?;
    let url = client.url(node, "/api/v1/write/msgpack");
    let response = client
        .request(reqwest::Method::POST, url)
        .header("x-arc-database", SENTINEL_DATABASE)
        .header("content-type", "application/msgpack")
        .body(body)
        .send()
        .await
        .with_context(|| format!("{node}: writing sentinels"))?;
    if response.status().as_u16() != 204 {
        bail!(
            "{node}: writing sentinels: HTTP {}: {}",
            response.status(),
            response.text().await.unwrap_or_default()
        );
    }
    Ok(rows)
}

/// The highest commit index any node reports (the leader's, or close to it).
async fn commit_index(client: &Client, nodes: &[String]) -> Result<u64> {
    let mut best = 0;
    for node in nodes {
        let status = client.status(node).await?;
        best = best.max(status["commit_index"].as_u64().unwrap_or(0));
    }
    Ok(best)
}

async fn wait_applied(client: &Client, node: &str, index: u64) -> Result<()> {
    let started = Instant::now();
    loop {
        let applied = client.status(node).await?["applied_index"]
            .as_u64()
            .unwrap_or(0);
        if applied >= index {
            return Ok(());
        }
        if started.elapsed() > CONVERGE_TIMEOUT {
            bail!("{node}: applied {applied}, still short of the commit index {index}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(database.measurement, hour) -> (rows, hash)` from a digest answer.
type Partitions = BTreeMap<(String, i64), (u64, String)>;

/// One node's digest: its partitions, the group of each table, and the groups it holds
/// (`None` from a node that does not say: it holds every table).
#[derive(Default)]
struct NodeDigest {
    partitions: Partitions,
    group_of: BTreeMap<String, u64>,
    groups_held: Option<BTreeSet<u64>>,
}

fn digest_of(digest: &Value) -> NodeDigest {
    let mut group_of = BTreeMap::new();
    for table in digest["tables"].as_array().into_iter().flatten() {
        if let Some(group) = table["group"].as_u64() {
            group_of.insert(
                format!(
                    "{}.{}",
                    table["database"].as_str().unwrap_or_default(),
                    table["measurement"].as_str().unwrap_or_default()
                ),
                group,
            );
        }
    }
    NodeDigest {
        partitions: partitions_of(digest),
        group_of,
        groups_held: digest["groups_held"]
            .as_array()
            .map(|ids| ids.iter().filter_map(Value::as_u64).collect()),
    }
}

/// Keeps, for each node, only the tables of groups every node compared holds: a table
/// is compared between the members of its group.
fn compare_by_group(digests: &BTreeMap<String, NodeDigest>) -> (usize, Vec<Value>) {
    let mut group_of: BTreeMap<&String, u64> = BTreeMap::new();
    for d in digests.values() {
        group_of.extend(d.group_of.iter().map(|(t, g)| (t, *g)));
    }
    let groups: BTreeSet<Option<u64>> = group_of
        .values()
        .map(|g| Some(*g))
        .chain(std::iter::once(None))
        .collect();
    let (mut tables, mut mismatches) = (0, Vec::new());
    for group in groups {
        let members: BTreeMap<String, Partitions> = digests
            .iter()
            .filter(|(_, d)| match (group, &d.groups_held) {
                (Some(g), Some(held)) => held.contains(&g),
                _ => true,
            })
            .map(|(node, d)| {
                let mine = d
                    .partitions
                    .iter()
                    .filter(|((t, _), _)| group_of.get(t).copied() == group)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                (node.clone(), mine)
            })
            .collect();
        let (t, m) = compare(&members);
        tables += t;
        mismatches.extend(m);
    }
    (tables, mismatches)
}

fn partitions_of(digest: &Value) -> Partitions {
    let mut out = Partitions::new();
    for table in digest["tables"].as_array().into_iter().flatten() {
        let name = format!(
            "{}.{}",
            table["database"].as_str().unwrap_or_default(),
            table["measurement"].as_str().unwrap_or_default()
        );
        for p in table["partitions"].as_array().into_iter().flatten() {
            out.insert(
                (
                    name.clone(),
                    p["hour_start_ns"].as_i64().unwrap_or_default(),
                ),
                (
                    p["rows"].as_u64().unwrap_or_default(),
                    p["hash"].as_str().unwrap_or_default().to_string(),
                ),
            );
        }
    }
    out
}

/// Compares every node's partitions with the first node's.
fn compare(digests: &BTreeMap<String, Partitions>) -> (usize, Vec<Value>) {
    let keys: BTreeSet<&(String, i64)> = digests.values().flat_map(|p| p.keys()).collect();
    let tables: BTreeSet<&String> = keys.iter().map(|(t, _)| t).collect();
    let mut mismatches = Vec::new();
    for key in keys {
        let seen: BTreeMap<&String, Option<&(u64, String)>> =
            digests.iter().map(|(node, p)| (node, p.get(key))).collect();
        let distinct: BTreeSet<Option<&(u64, String)>> = seen.values().copied().collect();
        if distinct.len() > 1 {
            let hour = chrono::DateTime::from_timestamp_nanos(key.1).to_rfc3339();
            mismatches.push(json!({
                "table": key.0,
                "hour": hour,
                "per_node": seen
                    .iter()
                    .map(|(node, v)| json!({
                        "node": node,
                        "rows": v.map(|(r, _)| *r),
                        "hash": v.map(|(_, h)| h.clone()),
                    }))
                    .collect::<Vec<_>>(),
            }));
        }
    }
    (tables.len(), mismatches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_differing_partition_is_located() {
        let mut a = Partitions::new();
        a.insert(("db.cpu".into(), 0), (10, "aa".into()));
        a.insert(("db.cpu".into(), 3_600), (5, "bb".into()));
        let mut b = a.clone();
        b.insert(("db.cpu".into(), 3_600), (5, "bc".into()));
        let mut digests = BTreeMap::new();
        digests.insert("n1".to_string(), a.clone());
        digests.insert("n2".to_string(), a);
        assert_eq!(compare(&digests).1.len(), 0);
        digests.insert("n3".to_string(), b);
        let (tables, mismatches) = compare(&digests);
        assert_eq!(tables, 1);
        assert_eq!(mismatches.len(), 1);
        assert_eq!(mismatches[0]["table"], json!("db.cpu"));
    }
}
