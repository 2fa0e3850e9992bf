//! `quiver cluster ...`: thin HTTP calls to `/api/v1/cluster/...` on any node.

use anyhow::Result;
use serde_json::json;

use crate::admin_client::{self, Call};
use crate::cli::ClusterCommand;

/// Runs one cluster command and prints the node's JSON answer.
pub async fn run(command: ClusterCommand) -> Result<()> {
    let (target, path, body) = match command {
        ClusterCommand::Status(target) => (target, "status".to_string(), None),
        ClusterCommand::Groups { target, json } => return groups(&target, json).await,
        ClusterCommand::AddLearner {
            target,
            node_id,
            addr,
        } => (
            target,
            "add-learner".to_string(),
            Some(json!({"node_id": node_id, "addr": addr})),
        ),
        ClusterCommand::Promote { target, node_ids } => (
            target,
            "promote".to_string(),
            Some(json!({"node_ids": node_ids})),
        ),
        ClusterCommand::Remove { target, node_ids } => (
            target,
            "remove".to_string(),
            Some(json!({"node_ids": node_ids})),
        ),
        ClusterCommand::Move {
            target,
            group,
            from,
            to,
        } => (
            target,
            format!("groups/{group}/move"),
            Some(json!({"from": from, "to": to})),
        ),
        ClusterCommand::Rebalance(target) => (target, "rebalance".to_string(), Some(json!({}))),
        ClusterCommand::Drain { target, node_id } => (
            target,
            "drain".to_string(),
            Some(json!({"node_id": node_id})),
        ),
    };
    let call = match body {
        Some(body) => Call::Post(body),
        None => Call::Get,
    };
    let answer = admin_client::call(&target, &format!("/api/v1/cluster/{path}"), call).await?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}

/// `quiver cluster groups`: one line per group, or the JSON list.
async fn groups(target: &crate::cli::ClusterTarget, as_json: bool) -> Result<()> {
    let answer = admin_client::call(target, "/api/v1/cluster/groups", Call::Get).await?;
    let groups = answer
        .get("groups")
        .and_then(|g| g.as_array())
        .cloned()
        .unwrap_or_default();
    if as_json {
        println!("{}", serde_json::to_string_pretty(&groups)?);
        return Ok(());
    }
    println!(
        "{:>5}  {:<8}  {:<16}  {:>6}  {:>12}  {:>14}",
        "group", "role", "members", "leader", "rows", "bytes"
    );
    for g in &groups {
        let members: Vec<String> = g["members"]
            .as_array()
            .map(|m| m.iter().map(|v| v.to_string()).collect())
            .unwrap_or_default();
        println!(
            "{:>5}  {:<8}  {:<16}  {:>6}  {:>12}  {:>14}",
            g["id"],
            g["role"].as_str().unwrap_or("?"),
            members.join(","),
            g["leader"],
            g["rows"],
            g["bytes"]
        );
    }
    Ok(())
}
