//! TLS on the listener and between peers: a CA and node certificates made with rcgen
//! at test time, real processes serving HTTPS on loopback ports.

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

use crate::cluster_support;
use crate::common::{batch_payload, Node, NodeSpec};

/// PEM files of a test CA and of one certificate it signed for 127.0.0.1 and localhost.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Pki {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "quiver test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);
        let node_key = KeyPair::generate().expect("node key");
        let mut params = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("node params");
        params
            .distinguished_name
            .push(DnType::CommonName, "quiver test node");
        let node_cert = params.signed_by(&node_key, &issuer).expect("node cert");
        std::fs::create_dir_all(dir).expect("pki dir");
        let pki = Pki {
            ca: dir.join("ca.pem"),
            cert: dir.join("node.pem"),
            key: dir.join("node.key"),
        };
        std::fs::write(&pki.ca, ca_cert.pem()).expect("write CA");
        std::fs::write(&pki.cert, node_cert.pem()).expect("write cert");
        std::fs::write(&pki.key, node_key.serialize_pem()).expect("write key");
        pki
    }

    /// `spec` serving HTTPS with this certificate, reached by tests through the CA.
    fn apply(&self, spec: NodeSpec) -> NodeSpec {
        let mut spec = spec
            .with("QUIVER_HTTP_TLS_CERT", self.cert.display())
            .with("QUIVER_HTTP_TLS_KEY", self.key.display())
            .with("QUIVER_CLUSTER_TLS_CA", self.ca.display());
        spec.ca = Some(self.ca.clone());
        spec
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_node_takes_writes_over_https_and_refuses_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"));
    let node = Node::start(pki.apply(NodeSpec::new(dir.path()))).await;
    assert!(node.url.starts_with("https://"), "{}", node.url);

    let (status, text) = node
        .write_msgpack(
            "db",
            batch_payload("cpu", 1, 100, 1_700_000_000_000_000_000, 3),
        )
        .await;
    assert_eq!(status, 204, "{text}");
    let (status, _) = node
        .write_lp("/write?db=db&precision=s", "mem,host=a used=5i 1700000000")
        .await;
    assert_eq!(status, 204);
    let rows = node.rows("db", "SELECT count(*), sum(seq) FROM cpu").await;
    assert_eq!(
        rows,
        vec![vec![serde_json::json!(100), serde_json::json!(4950)]]
    );
    let rows = node.rows("db", "SELECT used FROM mem").await;
    assert_eq!(rows, vec![vec![serde_json::json!(5)]]);

    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let plain_url = node.url.replacen("https://", "http://", 1);
    let answer = plain.get(format!("{plain_url}/health")).send().await;
    assert!(answer.is_err(), "plain HTTP answered: {answer:?}");
    // A client that does not trust the CA refuses the node's certificate.
    let untrusting = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let answer = untrusting.get(format!("{}/health", node.url)).send().await;
    assert!(answer.is_err(), "an unverified certificate was accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_handshakes_holds_its_slot_only_until_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"));
    let node = Node::start(
        pki.apply(NodeSpec::new(dir.path()))
            .with("QUIVER_HTTP_HEADER_TIMEOUT_MS", 1_000)
            .with("QUIVER_HTTP_CONNECTIONS_MAX", 4)
            .with("QUIVER_HTTP_CONNECTIONS_RESERVED_FOR_PEERS", 0),
    )
    .await;
    let addr = node.url.trim_start_matches("https://").to_string();
    // A fresh client that keeps no connection, so none from start-up can serve the
    // request, and none of its own holds a slot between requests.
    let pem = std::fs::read(&pki.ca).unwrap();
    let fresh = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    // The harness's kept-alive connection from start-up holds a slot until the header
    // deadline closes it; were it to close while the stalled sockets below wait, the
    // request would take its slot at once. Wait until only the asking connection is
    // open (the gauge counts it); it asks the server to close it after answering, so
    // its own slot is free before the stalled sockets connect.
    let quiet = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = fresh
            .get(format!("{}/metrics", node.url))
            .header("connection", "close")
            .send()
            .await;
        let text = match answer {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let open = text
            .lines()
            .find_map(|l| l.strip_prefix("quiver_http_connections "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        if open == Some(1.0) {
            break;
        }
        assert!(
            Instant::now() < quiet,
            "connections from start-up never closed"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Every slot held by a socket that never starts a TLS handshake.
    let mut hogs: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(&addr).expect("connect"))
        .collect();
    let started = Instant::now();
    let r = fresh
        .get(format!("{}/health", node.url))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("served once the stalled handshakes time out");
    assert_eq!(r.status(), 200);
    let waited = started.elapsed();
    // It waited for a slot (the stalled sockets held them all), but not past their
    // handshake deadline by much.
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(10),
        "waited {waited:?} for a slot"
    );
    // The server closed each stalled socket: reads end (EOF or reset), not time out.
    for hog in &mut hogs {
        hog.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 16];
        match hog.read(&mut buf) {
            Ok(n) => assert_eq!(n, 0, "the server sent bytes to a silent client"),
            Err(e) => assert!(
                !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "a stalled handshake was never closed: {e}"
            ),
        }
    }
    // Each was closed by the deadline: as a handshake that did not finish, or, for one
    // that found every slot taken (the harness's kept-alive connection can hold one),
    // as a connection refused when its wait for a slot ran out.
    let timed_out = node
        .metric("quiver_http_tls_handshake_timeouts_total")
        .await;
    let refused = node.metric("quiver_http_connections_refused_total").await;
    assert!(
        timed_out >= 1.0 && timed_out + refused >= 4.0,
        "{timed_out} handshakes timed out, {refused} connections refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_replicates_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"));
    let specs = cluster_support::specs(dir.path(), 3, &[])
        .into_iter()
        .map(|spec| pki.apply(spec))
        .collect();
    let nodes = cluster_support::start(specs).await;
    let leader = cluster_support::leader(&nodes, &[0, 1, 2]).await;
    let follower = (leader + 1) % 3;
    cluster_support::write_batches(&nodes[leader], 0..3).await;
    // A write to a follower is forwarded to the leader over https, and read back there.
    cluster_support::write_batches(&nodes[follower], 3..5).await;
    let on_follower = cluster_support::content(&nodes[follower]).await;
    assert_eq!(
        on_follower[0][0],
        serde_json::json!(2_500),
        "{on_follower:?}"
    );
    let index = nodes[leader].status().await["applied_index"]
        .as_u64()
        .expect("leader status");
    for node in &nodes {
        cluster_support::applied(node, index).await;
        assert_eq!(cluster_support::content(node).await, on_follower);
    }
}

fn serve_with(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.join("d"))
        .arg("--http-addr")
        .arg("127.0.0.1:0")
        .args(args)
        .output()
        .expect("run quiver");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn tls_misconfiguration_fails_at_start_naming_the_setting_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"));
    let cert = pki.cert.to_str().unwrap();
    let key = pki.key.to_str().unwrap();
    let (code, err) = serve_with(dir.path(), &["--tls-cert", cert]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("http.tls_key"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    let (code, err) = serve_with(dir.path(), &["--tls-cert", key, "--tls-key", key]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("http.tls_cert") && err.contains("node.key"),
        "{err}"
    );

    let missing = dir.path().join("absent.pem");
    let (code, err) = serve_with(
        dir.path(),
        &["--tls-cert", cert, "--tls-key", missing.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("http.tls_key") && err.contains("absent.pem"),
        "{err}"
    );
}
