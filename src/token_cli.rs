//! `quiver token create|list|revoke`: token management over `/api/v1/tokens` on any
//! node (tokens are replicated settings, so one created anywhere works everywhere).

use anyhow::{Context, Result};
use serde_json::{json, Value};

use crate::admin_client::{self, Call};
use crate::cli::TokenCommand;

/// Runs one token command, printing what an operator needs: the secret once at
/// creation, a table for the list.
pub async fn run(command: TokenCommand) -> Result<()> {
    match command {
        TokenCommand::Create {
            target,
            name,
            scope,
            database,
        } => {
            let mut body = json!({"name": name, "scopes": scope});
            if !database.is_empty() {
                body["databases"] = json!(database);
            }
            let answer = admin_client::call(&target, "/api/v1/tokens", Call::Post(body)).await?;
            let token = answer["token"]
                .as_str()
                .context("the node's answer holds no token")?;
            let id = answer["id"].as_str().unwrap_or("?");
            // The secret alone on stdout, so `$(quiver token create ...)` captures it.
            println!("{token}");
            eprintln!(
                "token {id} ({name}) created with scopes {} for {}; the secret above is shown \
                 once and stored nowhere",
                answer["scopes"],
                describe_databases(&answer["databases"])
            );
        }
        TokenCommand::List(target) => {
            let answer = admin_client::call(&target, "/api/v1/tokens", Call::Get).await?;
            let tokens = answer["tokens"].as_array().cloned().unwrap_or_default();
            println!(
                "{:<16}  {:<20}  {:<20}  {:<24}  databases",
                "id", "name", "scopes", "created"
            );
            for t in &tokens {
                let scopes: Vec<&str> = t["scopes"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                println!(
                    "{:<16}  {:<20}  {:<20}  {:<24}  {}",
                    t["id"].as_str().unwrap_or("?"),
                    t["name"].as_str().unwrap_or(""),
                    scopes.join(","),
                    t["created_at"].as_str().unwrap_or(""),
                    describe_databases(&t["databases"])
                );
            }
        }
        TokenCommand::Revoke { target, id } => {
            admin_client::call(&target, &format!("/api/v1/tokens/{id}"), Call::Delete).await?;
            println!("token {id} revoked: it is refused on every node from now on");
        }
    }
    Ok(())
}

/// "every database", or the names a token is limited to.
fn describe_databases(databases: &Value) -> String {
    match databases.as_array() {
        Some(list) if !list.is_empty() => list
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(","),
        _ => "every database".to_string(),
    }
}
