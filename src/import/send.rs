//! One import request to the node: sent again while the node pushes back (429/503,
//! waiting its `Retry-After`) or while its outcome is unknown (504, a dropped
//! connection), always with the same write id, so a request is stored once however
//! often it is sent.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::cli::ClusterTarget;

/// Longest a request is retried before the import gives up on the node.
const RETRY_FOR: Duration = Duration::from_secs(600);
/// First wait after a failure without a `Retry-After`.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
/// Longest wait between two tries.
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The node, database and credentials every request of an import uses.
pub(super) struct Sender {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
    pub(super) database: String,
}

/// What the node answered a request it took.
pub(super) struct Answer {
    /// 204, or 400 for bad input (nothing else returns).
    pub(super) status: u16,
    /// The JSON body (`null` when empty).
    pub(super) body: Value,
}

impl Sender {
    pub(super) fn new(target: &ClusterTarget, database: &str) -> Result<Sender> {
        let client = crate::tls::client_builder("--ca", target.ca.as_deref())?
            .timeout(Duration::from_secs(120))
            .build()?;
        Ok(Sender {
            client,
            base: crate::tls::node_base_url(&target.url, target.ca.is_some()),
            token: target.token.clone(),
            database: database.to_string(),
        })
    }

    /// Posts `body` to `path` until the node answers 2xx or 400; `write_id` names the
    /// request for the node's exactly-once window.
    pub(super) async fn post(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
        write_id: &str,
    ) -> Result<Answer> {
        let url = format!("{}{path}", self.base);
        let started = std::time::Instant::now();
        let mut backoff = BACKOFF_MIN;
        loop {
            let mut request = self
                .client
                .post(&url)
                .header("content-type", content_type)
                .header("x-arc-database", &self.database)
                .header("idempotency-key", write_id)
                .body(body.clone());
            if let Some(token) = &self.token {
                request = request.bearer_auth(token);
            }
            let wait = match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let retry_after = response
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let text = response.text().await.unwrap_or_default();
                    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    match status {
                        200..=299 | 400 => return Ok(Answer { status, body }),
                        429 | 503 | 504 => {
                            tracing::debug!(status, "the node pushed back; sending again");
                            retry_after.unwrap_or(backoff)
                        }
                        _ => bail!("{url}: HTTP {status}: {text}"),
                    }
                }
                Err(e) if e.is_builder() => return Err(e).context(url),
                Err(e) => {
                    tracing::debug!(error = %e, "no answer; sending again");
                    backoff
                }
            };
            if started.elapsed() > RETRY_FOR {
                bail!("{url}: the node did not take a request in {RETRY_FOR:?}");
            }
            tokio::time::sleep(wait).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Runs SQL (linearizable: after every acknowledged write) and returns its rows.
    pub(super) async fn query(&self, sql: &str) -> Result<Vec<Vec<Value>>> {
        let url = format!("{}/api/v1/query", self.base);
        let mut request = self
            .client
            .post(&url)
            .header("x-arc-database", &self.database)
            .json(&serde_json::json!({"sql": sql, "consistency": "linearizable"}));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.with_context(|| url.clone())?;
        let status = response.status();
        let answer: Value = response.json().await.with_context(|| url.clone())?;
        if !status.is_success() {
            bail!("{url}: HTTP {status}: {answer}");
        }
        Ok(answer["data"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| r.as_array().cloned().unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default())
    }
}
