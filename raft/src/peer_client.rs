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

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;
use crate::group::{group_path, GroupId, FIRST_GROUP};

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

/// How `/internal/` calls travel when not over HTTP: an in-process network a test or
/// the simulation provides (it can drop, delay and partition), handed to
/// [`PeerClient::over`]. Everything nodes say to each other goes through one client,
/// so one seam covers Raft RPCs, forwarded writes, peer state and file transfers.
pub trait PeerTransport: Send + Sync + 'static {
    /// Delivers a call to `path` on the peer at `addr`: a POST of `body` (MessagePack),
    /// or a GET when `body` is `None`. Returns the answer's body, or the failure as the
    /// HTTP wire would report it (a non-2xx answer is [`PeerError::Protocol`] with its
    /// status).
    fn send(
        &self,
        addr: &str,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Vec<u8>, PeerError>>;
}

#[derive(Clone)]
enum Wire {
    Http { http: reqwest::Client, https: bool },
    Custom(Arc<dyn PeerTransport>),
}

/// A client for `/internal/` calls. Cheap to clone.
#[derive(Clone)]
pub struct PeerClient {
    wire: Wire,
    secret: Arc<str>,
    /// The group whose routes this client calls (see [`crate::group_path`]).
    group: GroupId,
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
            wire: Wire::Http {
                http,
                https: tls.https,
            },
            secret: Arc::from(secret),
            group: FIRST_GROUP,
        })
    }

    /// A client whose calls travel over `transport` instead of HTTP.
    pub fn over(transport: Arc<dyn PeerTransport>, secret: &str) -> Self {
        PeerClient {
            wire: Wire::Custom(transport),
            secret: Arc::from(secret),
            group: FIRST_GROUP,
        }
    }

    /// The same client, calling `group`'s routes on the peers.
    pub fn for_group(&self, group: GroupId) -> Self {
        PeerClient {
            group,
            ..self.clone()
        }
    }

    /// The group whose routes this client calls.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// The URL of `path` on the peer at `addr`, over https when TLS is on.
    pub fn url(&self, addr: &str, path: &str) -> String {
        let https = matches!(self.wire, Wire::Http { https: true, .. });
        format!(
            "{}{}",
            peer_base_url(addr, https),
            group_path(self.group, path)
        )
    }

    /// The HTTP client, when calls travel over HTTP (streaming file transfers).
    pub(crate) fn http(&self) -> Option<&reqwest::Client> {
        match &self.wire {
            Wire::Http { http, .. } => Some(http),
            Wire::Custom(_) => None,
        }
    }

    /// The custom transport, when calls do not travel over HTTP.
    pub(crate) fn transport(&self) -> Option<&Arc<dyn PeerTransport>> {
        match &self.wire {
            Wire::Http { .. } => None,
            Wire::Custom(t) => Some(t),
        }
    }

    /// The secret to present.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Whether `path` on the peer at `addr` answers 2xx within `timeout` (a health
    /// probe; no secret is sent).
    pub async fn probe(&self, addr: &str, path: &str, timeout: Duration) -> bool {
        match &self.wire {
            Wire::Http { http, .. } => http
                .get(self.url(addr, path))
                .timeout(timeout)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success()),
            Wire::Custom(t) => t
                .send(addr, &group_path(self.group, path), None, timeout)
                .await
                .is_ok(),
        }
    }

    /// GETs `addr` + `path` and decodes the MessagePack answer.
    pub async fn get<Resp: DeserializeOwned>(
        &self,
        addr: &str,
        path: &str,
        timeout: Duration,
    ) -> Result<Resp, PeerError> {
        let http = match &self.wire {
            Wire::Http { http, .. } => http,
            Wire::Custom(t) => {
                let bytes = t
                    .send(addr, &group_path(self.group, path), None, timeout)
                    .await?;
                return decode_body(addr, None, &bytes);
            }
        };
        let response = http
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
        decode_body(addr, Some(status.as_u16()), &bytes)
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
        let http = match &self.wire {
            Wire::Http { http, .. } => http,
            Wire::Custom(t) => {
                let bytes = t
                    .send(addr, &group_path(self.group, path), Some(body), timeout)
                    .await?;
                return decode_body(addr, None, &bytes);
            }
        };
        let response = http
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

fn decode_body<Resp: DeserializeOwned>(
    addr: &str,
    status: Option<u16>,
    bytes: &[u8],
) -> Result<Resp, PeerError> {
    rmp_serde::from_slice(bytes).map_err(|e| PeerError::Protocol {
        addr: addr.to_string(),
        status,
        message: format!("decoding the answer: {e}"),
    })
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
