//! The command-line tools' calls to a node's admin API: one request, its JSON answer,
//! and an error naming the URL and the node's message when it refuses.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::cli::ClusterTarget;

/// How a tool calls: the method and whether it sends a JSON body.
pub enum Call {
    /// `GET`.
    Get,
    /// `POST` with a JSON body.
    Post(Value),
    /// `DELETE`.
    Delete,
}

/// Sends `call` to `path` (from the node's root, `/api/v1/...`) on `target` and returns
/// its JSON answer (`null` for an empty one, as `204 No Content`).
pub async fn call(target: &ClusterTarget, path: &str, call: Call) -> Result<Value> {
    let client = crate::tls::client_builder("--ca", target.ca.as_deref())?
        .timeout(Duration::from_secs(600))
        .build()?;
    let url = format!(
        "{}{path}",
        crate::tls::node_base_url(&target.url, target.ca.is_some())
    );
    let mut request = match &call {
        Call::Get => client.get(&url),
        Call::Post(body) => client.post(&url).json(body),
        Call::Delete => client.delete(&url),
    };
    if let Some(token) = &target.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.with_context(|| url.clone())?;
    let status = response.status();
    let text = response
        .text()
        .await
        .with_context(|| format!("{url}: reading the answer"))?;
    let answer: Value = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).with_context(|| format!("{url}: answer is not JSON"))?
    };
    if !status.is_success() {
        bail!("{url}: HTTP {status}: {answer}");
    }
    Ok(answer)
}
