//! `quiver cluster ...`: thin HTTP calls to `/api/v1/cluster/...` on any node.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::cli::{ClusterCommand, ClusterTarget};

/// Runs one cluster command and prints the node's JSON answer.
pub async fn run(command: ClusterCommand) -> Result<()> {
    let (target, path, body) = match command {
        ClusterCommand::Status(target) => (target, "status", None),
        ClusterCommand::AddLearner {
            target,
            node_id,
            addr,
        } => (
            target,
            "add-learner",
            Some(json!({"node_id": node_id, "addr": addr})),
        ),
        ClusterCommand::Promote { target, node_ids } => {
            (target, "promote", Some(json!({"node_ids": node_ids})))
        }
        ClusterCommand::Remove { target, node_ids } => {
            (target, "remove", Some(json!({"node_ids": node_ids})))
        }
    };
    let answer = call(&target, path, body).await?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}

async fn call(target: &ClusterTarget, path: &str, body: Option<Value>) -> Result<Value> {
    let client = crate::tls::client_builder("--ca", target.ca.as_deref())?
        .timeout(Duration::from_secs(600))
        .build()?;
    let url = format!(
        "{}/api/v1/cluster/{path}",
        crate::tls::node_base_url(&target.url, target.ca.is_some())
    );
    let mut request = match &body {
        Some(body) => client.post(&url).json(body),
        None => client.get(&url),
    };
    if let Some(token) = &target.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.with_context(|| url.clone())?;
    let status = response.status();
    let answer: Value = response
        .json()
        .await
        .with_context(|| format!("{url}: answer is not JSON"))?;
    if !status.is_success() {
        bail!("{url}: HTTP {status}: {answer}");
    }
    Ok(answer)
}
