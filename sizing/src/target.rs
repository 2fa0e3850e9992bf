//! The node(s) a run talks to, and the few HTTP calls every part of the campaign makes:
//! SQL through `/api/v1/query` and the per-table storage listing.

use std::time::Duration;

use serde_json::{json, Value};

use crate::error::{Error, Result};

/// Longest the tool waits for a SQL answer (above the node's own `query.timeout_ms`).
const SQL_TIMEOUT: Duration = Duration::from_secs(120);

/// Nodes, credentials and database of a run.
#[derive(Debug, Clone)]
pub struct Target {
    /// Base URLs; writes go round-robin over them, reads go to the first.
    pub urls: Vec<String>,
    /// Bearer token, if the nodes check one.
    pub token: Option<String>,
    /// Database written and read (`x-arc-database`).
    pub database: String,
    /// The shared HTTP client.
    pub client: reqwest::Client,
}

impl Target {
    /// The first node's URL without a trailing slash.
    pub fn first_url(&self) -> &str {
        self.urls
            .first()
            .map(|u| u.trim_end_matches('/'))
            .unwrap_or("")
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => request.bearer_auth(t),
            None => request,
        }
    }

    /// A POST to `url` with the token and the database header.
    pub fn post(&self, url: &str) -> reqwest::RequestBuilder {
        self.authorized(self.client.post(url))
            .header("x-arc-database", &self.database)
    }

    /// Runs `sql` on the first node (linearizable: it sees every acknowledged write)
    /// and returns the `data` rows.
    pub async fn sql(&self, sql: &str) -> Result<Vec<Vec<Value>>> {
        let url = format!("{}/api/v1/query", self.first_url());
        let response = self
            .post(&url)
            .timeout(SQL_TIMEOUT)
            .json(&json!({"sql": sql, "consistency": "linearizable"}))
            .send()
            .await
            .map_err(|e| Error::http(format!("query {sql}"), e))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| Error::http(format!("query {sql}"), e))?;
        if !status.is_success() {
            return Err(Error::Server {
                what: format!("query {sql}"),
                status: status.as_u16(),
                body: text.chars().take(300).collect(),
            });
        }
        let body: Value =
            serde_json::from_str(&text).map_err(|e| Error::malformed(format!("query {sql}"), e))?;
        Ok(body["data"]
            .as_array()
            .map(|rows| rows.iter().filter_map(|r| r.as_array().cloned()).collect())
            .unwrap_or_default())
    }

    /// `GET /api/v1/storage?database=` on `url`: the measurement entries.
    pub async fn storage(&self, url: &str) -> Result<Vec<Value>> {
        let what = format!("{url}/api/v1/storage");
        let response = self
            .authorized(self.client.get(format!(
                "{}/api/v1/storage?database={}",
                url.trim_end_matches('/'),
                self.database
            )))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| Error::http(&what, e))?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| Error::http(&what, e))?;
        if !status.is_success() {
            return Err(Error::Server {
                what,
                status: status.as_u16(),
                body: body.to_string(),
            });
        }
        Ok(body["databases"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["database"] == self.database.as_str())
            .flat_map(|d| d["measurements"].as_array().cloned().unwrap_or_default())
            .collect())
    }
}

/// A client for a campaign: bounded connection pool per host, no proxy surprises.
pub fn http_client(idle_per_host: usize) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(idle_per_host)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| Error::http("building the HTTP client", e))
}
