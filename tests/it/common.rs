//! A real `quiver` process on a loopback port, and the HTTP calls tests make to it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The admin token every test node is started with.
pub const TOKEN: &str = "test-token";

/// Longest a node may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

/// How a node is started; directories survive restarts.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// Data directory.
    pub data_dir: PathBuf,
    /// WAL directory, when not inside the data directory.
    pub wal_dir: Option<PathBuf>,
    /// Extra `QUIVER_*` environment.
    pub env: Vec<(String, String)>,
    /// Port (kept across restarts).
    pub port: u16,
    /// CA (PEM) of the node's certificate when it serves HTTPS; tests then reach it
    /// over https, trusting only this CA.
    pub ca: Option<PathBuf>,
}

impl NodeSpec {
    /// A node in `dir` with default settings.
    pub fn new(dir: &Path) -> Self {
        NodeSpec {
            data_dir: dir.join("data"),
            wal_dir: None,
            env: Vec::new(),
            port: free_port(),
            ca: None,
        }
    }

    /// Adds an environment setting.
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }
}

/// A running node; killed (SIGKILL) when dropped.
pub struct Node {
    pub spec: NodeSpec,
    child: Option<Child>,
    pub url: String,
    pub client: reqwest::Client,
}

impl Node {
    /// Starts a node and waits until `/ready` answers 200.
    pub async fn start(spec: NodeSpec) -> Node {
        let node = Node::spawn(spec);
        node.wait_ready().await;
        node
    }

    /// Starts the process without waiting.
    pub fn spawn(spec: NodeSpec) -> Node {
        let child = spawn_child(&spec);
        let scheme = if spec.ca.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{}", spec.port);
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(60));
        if let Some(ca) = &spec.ca {
            let pem = std::fs::read(ca).expect("read the test CA");
            builder = builder
                .use_rustls_tls()
                .tls_built_in_root_certs(false)
                .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("a PEM CA"));
        }
        let client = builder.build().expect("client");
        Node {
            spec,
            child: Some(child),
            url,
            client,
        }
    }

    /// Polls `/ready` until 200 or the deadline.
    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(r) = self.client.get(format!("{}/ready", self.url)).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "node not ready in {READY_TIMEOUT:?}; log:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and wait for a clean exit; returns the exit status code.
    pub fn terminate(&mut self) -> Option<i32> {
        let child = self.child.take()?;
        let pid = child.id() as i32;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status();
        let mut child = child;
        let status = child.wait().ok()?;
        status.code()
    }

    /// Waits (polling, up to `timeout`) for the process to exit by itself; returns its
    /// exit code (`None` for a signal), or panics with the log tail at the deadline.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut().expect("the node was started");
        loop {
            if let Some(status) = child.try_wait().expect("poll the node process") {
                self.child = None;
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "node still running after {timeout:?}; log:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts the process again without waiting for it to be ready.
    pub fn respawn(&mut self) {
        self.kill();
        self.child = Some(spawn_child(&self.spec));
    }

    /// Sends a signal (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(child.id().to_string())
                .status()
                .expect("run kill");
            assert!(status.success(), "kill -{signal} failed");
        }
    }

    /// `GET /api/v1/cluster/status`, or `Null` if the node does not answer.
    pub async fn status(&self) -> Value {
        let r = self
            .client
            .get(format!("{}/api/v1/cluster/status", self.url))
            .bearer_auth(TOKEN)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match r {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    }

    /// Starts the same node again (after kill or terminate).
    pub async fn restart(&mut self) {
        self.kill();
        self.child = Some(spawn_child(&self.spec));
        self.wait_ready().await;
    }

    /// The end of the node's log, for assertion messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(log_path(&self.spec.data_dir)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// The whole log of the node (all starts).
    pub fn log(&self) -> String {
        std::fs::read_to_string(log_path(&self.spec.data_dir)).unwrap_or_default()
    }

    /// Posts a MessagePack body; returns status and body text.
    pub async fn write_msgpack(&self, database: &str, body: Vec<u8>) -> (u16, String) {
        let r = self
            .client
            .post(format!("{}/api/v1/write/msgpack", self.url))
            .bearer_auth(TOKEN)
            .header("x-arc-database", database)
            .header("content-type", "application/msgpack")
            .body(body)
            .send()
            .await;
        match r {
            Ok(r) => {
                let status = r.status().as_u16();
                (status, r.text().await.unwrap_or_default())
            }
            Err(e) => (0, e.to_string()),
        }
    }

    /// Posts `body` to `path` (with query string) with the test token and extra
    /// headers; returns status, body text and the response headers.
    pub async fn post(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, String, reqwest::header::HeaderMap) {
        let mut request = self
            .client
            .post(format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let r = request.send().await.expect("request sent");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        (status, r.text().await.unwrap_or_default(), headers)
    }

    /// Posts line protocol to `path`; returns status and the parsed JSON body (`Null`
    /// for an empty 204).
    pub async fn write_lp(&self, path: &str, body: &str) -> (u16, Value) {
        let (status, text, _) = self.post(path, &[], body.as_bytes().to_vec()).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Runs SQL; returns status and the parsed JSON answer.
    pub async fn query(&self, database: &str, sql: &str) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}/api/v1/query", self.url))
            .bearer_auth(TOKEN)
            .header("x-arc-database", database)
            .json(&json!({"sql": sql}))
            .send()
            .await
            .expect("query request");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Runs SQL that must succeed; returns the `data` rows.
    pub async fn rows(&self, database: &str, sql: &str) -> Vec<Vec<Value>> {
        let (status, body) = self.query(database, sql).await;
        assert_eq!(status, 200, "{sql}: {body}\nlog:\n{}", self.log_tail());
        body["data"]
            .as_array()
            .expect("data array")
            .iter()
            .map(|r| r.as_array().expect("row array").clone())
            .collect()
    }

    /// Reads `/metrics` and returns one gauge or counter value (summed over labels).
    pub async fn metric(&self, name: &str) -> f64 {
        metric(&self.client, &self.url, name)
            .await
            .unwrap_or(f64::NAN)
    }

    /// Polls until `check` holds or the deadline passes.
    pub async fn wait_for<F, Fut>(&self, what: &str, timeout: Duration, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        while !check().await {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; log:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits for a snapshot of everything applied so far, so it lists every file
    /// written before: the files a restart opens with.
    pub async fn wait_for_snapshot_of_everything(&self) {
        let applied = self.status().await["applied_index"].as_u64().unwrap();
        let dir = self.spec.data_dir.join("snapshots");
        self.wait_for(
            "a snapshot of the files",
            Duration::from_secs(60),
            || async {
                std::fs::read_dir(&dir).is_ok_and(|entries| {
                    entries.flatten().any(|e| {
                        let name = e.file_name().to_string_lossy().to_string();
                        name.ends_with(".snap")
                            && name
                                .split('-')
                                .next()
                                .and_then(|i| i.parse::<u64>().ok())
                                .is_some_and(|i| i >= applied)
                    })
                })
            },
        )
        .await;
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `quiver {subcommand}` with the flags and environment `spec` serves with (what an
/// operator does with `quiver restore`), to its end: its exit code and its output.
pub fn run_with_node_settings(spec: &NodeSpec, subcommand: &str) -> (Option<i32>, String) {
    let mut cmd = node_command(spec, subcommand);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = cmd.output().expect("run quiver");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn spawn_child(spec: &NodeSpec) -> Child {
    let mut cmd = node_command(spec, "serve");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log_file(&spec.data_dir)));
    cmd.spawn().expect("start quiver")
}

fn node_command(spec: &NodeSpec, subcommand: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quiver"));
    cmd.arg(subcommand)
        .arg("--http-addr")
        .arg(format!("127.0.0.1:{}", spec.port))
        .arg("--data-dir")
        .arg(&spec.data_dir)
        .env("QUIVER_BOOTSTRAP_TOKEN", TOKEN)
        .env("QUIVER_LOG_LEVEL", "info");
    if let Some(wal) = &spec.wal_dir {
        cmd.arg("--wal-dir").arg(wal);
    }
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    cmd
}

fn log_path(data_dir: &Path) -> PathBuf {
    data_dir.parent().unwrap_or(data_dir).join("node.log")
}

fn log_file(data_dir: &Path) -> std::fs::File {
    let path = log_path(data_dir);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("open node log")
}

/// A columnar MessagePack batch: `rows` rows of measurement `m`, each with a `host` tag,
/// a `batch` integer field (the batch id), `seq` (row within batch) and `value` f64.
pub fn batch_payload(
    m: &str,
    batch_id: i64,
    rows: usize,
    time_base_ns: i64,
    hosts: usize,
) -> Vec<u8> {
    let time: Vec<i64> = (0..rows).map(|i| time_base_ns + i as i64 * 1_000).collect();
    let host: Vec<String> = (0..rows).map(|i| format!("h{}", i % hosts)).collect();
    let batch: Vec<i64> = vec![batch_id; rows];
    let seq: Vec<i64> = (0..rows as i64).collect();
    let value: Vec<f64> = (0..rows)
        .map(|i| (batch_id as f64) + i as f64 / 1000.0)
        .collect();
    rmp_serde::to_vec_named(&json!({"m": m, "columns": {
        "time": time, "host": host, "batch": batch, "seq": seq, "value": value
    }}))
    .expect("encode msgpack")
}

/// One metric of the node at `url`, summed over labels; `None` if unreachable.
pub async fn metric(client: &reqwest::Client, url: &str, name: &str) -> Option<f64> {
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(
        text.lines()
            .filter(|l| {
                l.starts_with(name)
                    && matches!(l.as_bytes().get(name.len()), Some(b' ') | Some(b'{'))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}
