//! `quiver cluster ...`: thin HTTP calls to `/api/v1/cluster/...` on any node.

use anyhow::Result;
use serde_json::json;

use crate::admin_client::{self, Call};
use crate::cli::ClusterCommand;

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
    let call = match body {
        Some(body) => Call::Post(body),
        None => Call::Get,
    };
    let answer = admin_client::call(&target, &format!("/api/v1/cluster/{path}"), call).await?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}
