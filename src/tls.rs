//! TLS material read from PEM files: the listener's certificate and key
//! (`http.tls_cert`, `http.tls_key`) and the CA that peers and command-line clients
//! trust (`cluster.tls_ca`, `--ca`).
//!
//! Everything uses rustls with the `ring` provider. Nothing trusts the system's root
//! store: a Quiver cluster is expected to run on its own CA, and a client that trusts
//! every public CA would accept any certificate for a peer's name.
//!
//! Every error names the setting and the file, because it ends up as the one line the
//! node prints before exiting at start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Largest PEM file read (a certificate chain or a CA bundle is a few KiB).
const PEM_FILE_BYTES_MAX: u64 = 1024 * 1024;

/// Why TLS material could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("{setting} {}: cannot read: {source}", path.display())]
    Read {
        /// The setting that names the file.
        setting: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is larger than any PEM file Quiver expects.
    #[error("{setting} {}: larger than {PEM_FILE_BYTES_MAX} bytes; not a PEM file", path.display())]
    TooLarge {
        /// The setting that names the file.
        setting: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The file holds no usable PEM item of the kind the setting needs.
    #[error("{setting} {}: {message}", path.display())]
    Invalid {
        /// The setting that names the file.
        setting: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// rustls refused the certificate and key together (the key does not match the
    /// certificate, or its algorithm is unsupported).
    #[error("http.tls_cert {} with http.tls_key {}: {message}", cert.display(), key.display())]
    Rejected {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        message: String,
    },
}

/// The crypto provider every TLS endpoint of this process uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes `ring` the process-wide default provider, so that every client reqwest builds
/// uses it too. Called once at start; a second call is harmless.
pub fn install_default_provider() {
    // Fails only when a provider is already installed, which is the outcome wanted.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The TLS configurations of a node's listeners, all from the one certificate chain
/// and key of `http.tls_cert`/`http.tls_key`: a node has one identity, whichever door
/// a client uses. Each door offers its own protocol through ALPN.
#[derive(Clone)]
pub struct DoorsTls {
    /// The HTTP listener (HTTP/1.1).
    pub http: Arc<ServerConfig>,
    /// The Postgres door (`postgresql`, which PostgreSQL 17's direct TLS requires).
    pub pg: Arc<ServerConfig>,
    /// The Flight SQL door (HTTP/2, as gRPC requires).
    pub flight: Arc<ServerConfig>,
    /// The certificate's `tls-server-end-point` value, which SCRAM-SHA-256-PLUS logins
    /// on the Postgres door bind to; `None` when its signature defines no hash.
    pub pg_end_point: Option<Arc<[u8]>>,
}

impl DoorsTls {
    /// Reads the certificate chain and key; any error names the file.
    pub fn load(cert: &Path, key: &Path) -> Result<DoorsTls, TlsError> {
        let http = server_config(cert, key, b"http/1.1")?;
        let offering = |alpn: &[u8]| {
            let mut config = ServerConfig::clone(&http);
            config.alpn_protocols = vec![alpn.to_vec()];
            Arc::new(config)
        };
        let chain = certificates("http.tls_cert", cert)?;
        let pg_end_point = match crate::pg::end_point_hash(&chain[0]) {
            Ok(hash) => Some(Arc::from(hash)),
            Err(why) => {
                tracing::warn!(cert = %cert.display(), "the Postgres door offers SCRAM-SHA-256 without channel binding (no SCRAM-SHA-256-PLUS): {why}");
                None
            }
        };
        Ok(DoorsTls {
            pg: offering(b"postgresql"),
            flight: offering(b"h2"),
            http,
            pg_end_point,
        })
    }
}

/// A listener's TLS configuration from its certificate chain and private key (PEM),
/// offering `alpn` as its one application protocol.
pub fn server_config(cert: &Path, key: &Path, alpn: &[u8]) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certificates("http.tls_cert", cert)?;
    let key_bytes = read_pem("http.tls_key", key)?;
    let private_key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| TlsError::Invalid {
        setting: "http.tls_key",
        path: key.to_path_buf(),
        message: format!("no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
    })?;
    let rejected = |message: String| TlsError::Rejected {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        message,
    };
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| rejected(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(|e| rejected(e.to_string()))?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// The certificates of a PEM file (a chain, or a CA bundle); at least one.
pub fn certificates(
    setting: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_pem(setting, path)?;
    let invalid = |message: String| TlsError::Invalid {
        setting,
        path: path.to_path_buf(),
        message,
    };
    let chain = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("not a PEM certificate file: {e}")))?;
    if chain.is_empty() {
        return Err(invalid("no CERTIFICATE block in the file".into()));
    }
    Ok(chain)
}

/// A reqwest client builder that speaks HTTPS trusting only the CA certificates in
/// `ca` (named by `setting` in errors), or plain HTTP builder when `ca` is `None`.
pub fn client_builder(
    setting: &'static str,
    ca: Option<&Path>,
) -> Result<reqwest::ClientBuilder, TlsError> {
    let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
    let Some(ca) = ca else {
        return Ok(builder);
    };
    let roots = reqwest_roots(setting, ca)?;
    Ok(roots.into_iter().fold(
        builder.use_rustls_tls().tls_built_in_root_certs(false),
        reqwest::ClientBuilder::add_root_certificate,
    ))
}

/// A node's address as typed on the command line, as a base URL: an explicit scheme is
/// kept; without one, https when a CA was given (`https`), http otherwise.
pub fn node_base_url(addr: &str, https: bool) -> String {
    if https && !addr.contains("://") {
        quiver_raft::peer_base_url(addr, true)
    } else {
        quiver_raft::base_url(addr)
    }
}

/// The CA certificates of `path` as reqwest trust anchors.
pub fn reqwest_roots(
    setting: &'static str,
    path: &Path,
) -> Result<Vec<reqwest::Certificate>, TlsError> {
    certificates(setting, path)?
        .iter()
        .map(|der| {
            reqwest::Certificate::from_der(der.as_ref()).map_err(|e| TlsError::Invalid {
                setting,
                path: path.to_path_buf(),
                message: format!("not a usable CA certificate: {e}"),
            })
        })
        .collect()
}

fn read_pem(setting: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let read = |source| TlsError::Read {
        setting,
        path: path.to_path_buf(),
        source,
    };
    let len = std::fs::metadata(path).map_err(read)?.len();
    if len > PEM_FILE_BYTES_MAX {
        return Err(TlsError::TooLarge {
            setting,
            path: path.to_path_buf(),
        });
    }
    std::fs::read(path).map_err(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }

    #[test]
    fn command_line_addresses_use_https_with_a_ca() {
        assert_eq!(node_base_url("127.0.0.1:1", true), "https://127.0.0.1:1");
        assert_eq!(node_base_url("127.0.0.1:1", false), "http://127.0.0.1:1");
        assert_eq!(node_base_url("http://h:1/", true), "http://h:1");
    }

    #[test]
    fn a_matching_certificate_and_key_load() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed(dir.path());
        let config = server_config(&cert, &key, b"http/1.1").unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert_eq!(certificates("cluster.tls_ca", &cert).unwrap().len(), 1);
    }

    #[test]
    fn every_door_offers_its_own_protocol_on_the_one_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed(dir.path());
        let doors = DoorsTls::load(&cert, &key).unwrap();
        assert_eq!(doors.http.alpn_protocols, vec![b"http/1.1".to_vec()]);
        // libpq 17's direct TLS refuses a server that does not select `postgresql`.
        assert_eq!(doors.pg.alpn_protocols, vec![b"postgresql".to_vec()]);
        // gRPC clients refuse a TLS connection that did not select `h2`.
        assert_eq!(doors.flight.alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn errors_name_the_setting_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed(dir.path());
        let missing = dir.path().join("missing.pem");
        let err = server_config(&missing, &key, b"http/1.1")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("http.tls_cert") && err.contains("missing.pem"),
            "{err}"
        );
        // A key file given as the certificate: no CERTIFICATE block.
        let err = server_config(&key, &key, b"http/1.1")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("http.tls_cert") && err.contains("key.pem"),
            "{err}"
        );
        // A certificate given as the key: no private key.
        let err = server_config(&cert, &cert, b"http/1.1")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("http.tls_key") && err.contains("cert.pem"),
            "{err}"
        );
        // A key that does not match the certificate.
        let other = tempfile::tempdir().unwrap();
        let (_, other_key) = self_signed(other.path());
        let err = server_config(&cert, &other_key, b"http/1.1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("http.tls_key"), "{err}");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not pem at all").unwrap();
        let err = certificates("cluster.tls_ca", &garbage)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cluster.tls_ca") && err.contains("garbage.pem"),
            "{err}"
        );
    }
}
