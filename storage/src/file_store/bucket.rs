//! The S3 client behind `storage.object_store = "s3://bucket/prefix"`.
//!
//! Credentials, region and endpoint come from the usual `AWS_*` environment variables
//! first; the `storage.object_store_*` settings override them. Requests are bounded in
//! time and retried only briefly inside the client: a store that stays unreachable is
//! the caller's to wait out (flushes and merges back off and try again; nothing that
//! was acknowledged lives only in the store until it has accepted the file).

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, RetryConfig};

use crate::error::{Error, Result};

/// Settings of a bucket (the `storage.object_store*` settings of the node).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketSettings {
    /// `s3://bucket` or `s3://bucket/prefix`.
    pub url: String,
    /// Endpoint of an S3-compatible service (MinIO, moto, R2...); AWS's when unset.
    pub endpoint: Option<String>,
    /// Region; `AWS_REGION`/`AWS_DEFAULT_REGION` when unset, else `us-east-1`.
    pub region: Option<String>,
    /// Access key; `AWS_ACCESS_KEY_ID` when unset.
    pub access_key_id: Option<String>,
    /// Secret key; `AWS_SECRET_ACCESS_KEY` when unset.
    pub secret_access_key: Option<String>,
    /// Allow `http://` endpoints (a local test server); off by default.
    pub allow_http: bool,
    /// Longest one request to the store may take, retries included.
    pub timeout_ms: u64,
    /// This node's id: its files go under `{prefix}/node-{id}/`.
    pub node_id: u64,
    /// Bytes of whole files queries may keep on local disk (0 = none; footers are
    /// cached by the query engine either way).
    pub cache_bytes_max: u64,
    /// The node has peers to catch up from: it may take over the prefix of a writer
    /// that stopped (see `owner`).
    pub clustered: bool,
    /// How often the owner marker is rewritten (`storage.object_store_owner_beat_ms`).
    pub owner_beat_ms: u64,
    /// Take over a stopped writer's files even as a single node (`quiver restore`).
    pub adopt: bool,
}

/// The owner marker's beat when none is set.
pub const OWNER_BEAT_MS_DEFAULT: u64 = 10_000;

/// The bucket and prefix of an `s3://bucket/prefix` URL.
fn parse_url(url: &str) -> Result<(String, String)> {
    let bad = |reason: &str| {
        Error::InvalidConfig(format!(
            "storage.object_store {url:?}: {reason}; expected s3://bucket or s3://bucket/prefix"
        ))
    };
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| bad("only s3:// URLs are supported"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(bad("no bucket"));
    }
    let prefix = prefix.trim_matches('/').to_string();
    if prefix.split('/').any(|p| p == "." || p == "..") {
        return Err(bad("the prefix may not hold . or .. parts"));
    }
    Ok((bucket.to_string(), prefix))
}

/// The store under this node's prefix, and its URL for messages.
pub(super) fn open(settings: &BucketSettings) -> Result<(Arc<dyn ObjectStore>, String)> {
    let (bucket, prefix) = parse_url(&settings.url)?;
    let s3 = s3_client(&bucket, settings, "storage.object_store")?;
    let node_prefix = if prefix.is_empty() {
        format!("node-{}", settings.node_id)
    } else {
        format!("{prefix}/node-{}", settings.node_id)
    };
    let url = format!("s3://{bucket}/{node_prefix}");
    Ok((Arc::new(PrefixStore::new(s3, node_prefix.as_str())), url))
}

/// The store under `settings.url`'s own prefix (no node part), for tools that keep
/// their own layout there (`quiver backup --to s3://...`). `node_id` is not used.
pub fn open_at_url(settings: &BucketSettings, what: &str) -> Result<Arc<dyn ObjectStore>> {
    let (bucket, prefix) = parse_url(&settings.url)?;
    let s3 = s3_client(&bucket, settings, what)?;
    if prefix.is_empty() {
        return Ok(Arc::new(s3));
    }
    Ok(Arc::new(PrefixStore::new(s3, prefix.as_str())))
}

/// An S3 client for `bucket`: the `AWS_*` environment, then `settings`; errors name
/// `what` (the setting or flag the URL came from).
fn s3_client(
    bucket: &str,
    settings: &BucketSettings,
    what: &str,
) -> Result<object_store::aws::AmazonS3> {
    let timeout = Duration::from_millis(settings.timeout_ms.max(1));
    // Set key by key: replacing the client options would drop what `from_env` read
    // into them (`AWS_ALLOW_HTTP`, proxies...).
    let client = |key| AmazonS3ConfigKey::Client(key);
    let connect_timeout = timeout.min(Duration::from_secs(5));
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_config(
            client(ClientConfigKey::Timeout),
            format!("{}ms", timeout.as_millis()),
        )
        .with_config(
            client(ClientConfigKey::ConnectTimeout),
            format!("{}ms", connect_timeout.as_millis()),
        )
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: 3,
            retry_timeout: timeout,
        });
    if settings.allow_http {
        builder = builder.with_allow_http(true);
    }
    if let Some(endpoint) = &settings.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(region) = &settings.region {
        builder = builder.with_region(region);
    }
    if let Some(key) = &settings.access_key_id {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &settings.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    builder
        .build()
        .map_err(|e| Error::InvalidConfig(format!("{what} {}: {e}", settings.url)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_bucket_and_an_optional_prefix() {
        assert_eq!(parse_url("s3://b").unwrap(), ("b".into(), "".into()));
        assert_eq!(parse_url("s3://b/").unwrap(), ("b".into(), "".into()));
        assert_eq!(
            parse_url("s3://b/x/y/").unwrap(),
            ("b".into(), "x/y".into())
        );
        for bad in ["b/x", "gs://b", "s3://", "s3:///x", "s3://b/../x"] {
            let e = parse_url(bad).unwrap_err().to_string();
            assert!(e.contains("storage.object_store"), "{bad}: {e}");
        }
    }
}
