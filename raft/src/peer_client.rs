//! Calls from one node to another over the peers' HTTP port, under `/internal/`.
//!
//! Every call carries the cluster secret; bodies and answers are MessagePack (the same
//! encoding as log entries, so Arrow payloads travel as raw bytes, not as JSON arrays).
//!
//! With TLS on ([`PeerTls::https`]), every peer is reached over https whatever scheme
//! its address was written with (membership may hold addresses from before TLS was
//! turned on), and its certificate must chain to the configured CA and name the host
//! of its address. Only those CA certificates are trusted, never a system root store.

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;

/// Header that carries the shared cluster secret on `/internal/` requests.
pub const SECRET_HEADER: &str = "x-quiver-cluster-secret";

/// Content type of `/internal/` bodies.
pub const INTERNAL_CONTENT_TYPE: &str = "application/vnd.quiver.rmp";

/// Why a call to a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// No connection could be made: the request never reached the peer, so retrying it
    /// elsewhere cannot duplicate it.
    #[error("{addr}: cannot connect: {message}")]
    Refused {
        /// The peer's address.
        addr: String,
        /// What the transport said.
        message: String,
    },
    /// The connection broke after the request may have been sent: its outcome is
    /// unknown.
    #[error("{addr}: unreachable: {message}")]
    Unreachable {
        /// The peer's address.
        addr: String,
        /// What the transport said.
        message: String,
    },
    /// The call took longer than allowed.
    #[error("{addr}: timed out after {ms} ms")]
    Timeout {
        /// The peer's address.
        addr: String,
        /// The limit.
        ms: u64,
    },
    /// The peer answered, but not with what was asked (wrong secret, bug, version skew).
    #[error("{addr}: {message}")]
    Protocol {
        /// The peer's address.
        addr: String,
        /// The HTTP status of the answer, when the peer sent one.
        status: Option<u16>,
        /// What went wrong.
        message: String,
    },
}

impl PeerError {
    /// Whether the peer provably did nothing with the request: it never arrived, or the
    /// peer refused it before acting (authentication, an undecodable or oversized
    /// request, an unknown path). Anything else may have been acted on.
    pub fn refused_before_acting(&self) -> bool {
        match self {
            PeerError::Refused { .. } => true,
            PeerError::Protocol {
                status: Some(status),
                ..
            } => matches!(status, 400 | 401 | 403 | 404 | 405 | 413 | 415),
            _ => false,
        }
    }
}

/// How peers are reached: plain HTTP, or HTTPS verified against a CA.
#[derive(Debug, Clone, Default)]
pub struct PeerTls {
    /// Reach every peer over https (this node's own listener speaks TLS, and so do its
    /// peers').
    pub https: bool,
    /// CA certificates a peer's certificate must chain to. Used for any https peer;
    /// empty, no https peer can be verified.
    pub roots: Vec<reqwest::Certificate>,
}

/// A client for `/internal/` calls. Cheap to clone.
#[derive(Clone)]
pub struct PeerClient {
    http: reqwest::Client,
    secret: Arc<str>,
    https: bool,
}

impl PeerClient {
    /// A client that presents `secret` and reaches peers as `tls` says.
    pub fn new(secret: &str, tls: &PeerTls) -> Result<Self, Error> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .https_only(tls.https);
        for root in &tls.roots {
            builder = builder.add_root_certificate(root.clone());
        }
        let http = builder
            .build()
            .map_err(|e| Error::Config(format!("peer HTTP client: {e}")))?;
        Ok(PeerClient {
            http,
            secret: Arc::from(secret),
            https: tls.https,
        })
    }

    /// The URL of `path` on the peer at `addr`, over https when TLS is on.
    pub fn url(&self, addr: &str, path: &str) -> String {
        format!("{}{path}", peer_base_url(addr, self.https))
    }

    /// The underlying HTTP client (for streaming calls).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The secret to present.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// GETs `addr` + `path` and decodes the MessagePack answer.
    pub async fn get<Resp: DeserializeOwned>(
        &self,
        addr: &str,
        path: &str,
        timeout: Duration,
    ) -> Result<Resp, PeerError> {
        let response = self
            .http
            .get(self.url(addr, path))
            .header(SECRET_HEADER, &*self.secret)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| transport_error(addr, timeout, e))?;
        self.decode_answer(addr, timeout, response).await
    }

    async fn decode_answer<Resp: DeserializeOwned>(
        &self,
        addr: &str,
        timeout: Duration,
        response: reqwest::Response,
    ) -> Result<Resp, PeerError> {
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| transport_error(addr, timeout, e))?;
        if !status.is_success() {
            return Err(PeerError::Protocol {
                addr: addr.to_string(),
                status: Some(status.as_u16()),
                message: format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
                ),
            });
        }
        rmp_serde::from_slice(&bytes).map_err(|e| PeerError::Protocol {
            addr: addr.to_string(),
            status: Some(status.as_u16()),
            message: format!("decoding the answer: {e}"),
        })
    }

    /// POSTs `request` to `addr` + `path` and decodes the answer.
    pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: &str,
        path: &str,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, PeerError> {
        let body = rmp_serde::to_vec_named(request).map_err(|e| PeerError::Protocol {
            addr: addr.to_string(),
            status: None,
            message: format!("encoding the request: {e}"),
        })?;
        let response = self
            .http
            .post(self.url(addr, path))
            .header(SECRET_HEADER, &*self.secret)
            .header(reqwest::header::CONTENT_TYPE, INTERNAL_CONTENT_TYPE)
            .timeout(timeout)
            .body(body)
            .send()
            .await
            .map_err(|e| transport_error(addr, timeout, e))?;
        self.decode_answer(addr, timeout, response).await
    }
}

fn transport_error(addr: &str, timeout: Duration, e: reqwest::Error) -> PeerError {
    if e.is_timeout() {
        PeerError::Timeout {
            addr: addr.to_string(),
            ms: timeout.as_millis() as u64,
        }
    } else if e.is_connect() {
        PeerError::Refused {
            addr: addr.to_string(),
            message: e.to_string(),
        }
    } else {
        PeerError::Unreachable {
            addr: addr.to_string(),
            message: e.to_string(),
        }
    }
}

/// A peer's address as a base URL: `host:port` becomes `http://host:port`.
pub fn base_url(addr: &str) -> String {
    let addr = addr.trim_end_matches('/');
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

/// A peer's address as a base URL; with `https`, always an https URL (a scheme the
/// address names is replaced), otherwise as [`base_url`].
pub fn peer_base_url(addr: &str, https: bool) -> String {
    if !https {
        return base_url(addr);
    }
    let addr = addr.trim_end_matches('/');
    let host_port = addr
        .strip_prefix("http://")
        .or_else(|| addr.strip_prefix("https://"))
        .unwrap_or(addr);
    format!("https://{host_port}")
}

/// Compares secrets in time independent of where they differ.
pub fn secret_matches(expected: &str, presented: &str) -> bool {
    let (a, b) = (expected.as_bytes(), presented.as_bytes());
    if a.is_empty() || a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_exactly_and_empty_never_matches() {
        assert!(secret_matches("abc", "abc"));
        assert!(!secret_matches("abc", "abd"));
        assert!(!secret_matches("abc", "ab"));
        assert!(!secret_matches("", ""));
    }

    #[test]
    fn addresses_become_urls() {
        assert_eq!(base_url("127.0.0.1:8000"), "http://127.0.0.1:8000");
        assert_eq!(base_url("https://q1:8000/"), "https://q1:8000");
        assert_eq!(peer_base_url("http://q1:8000", false), "http://q1:8000");
        assert_eq!(peer_base_url("http://q1:8000/", true), "https://q1:8000");
        assert_eq!(peer_base_url("q1:8000", true), "https://q1:8000");
        assert_eq!(peer_base_url("https://q1:8000", true), "https://q1:8000");
    }
}
