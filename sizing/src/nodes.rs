//! Nodes the campaign starts itself: this same binary (`std::env::current_exe`) running
//! `quiver serve` on a loopback port, on the volumes the operator named, with its log
//! in a file beside its data. One node, or three forming a static cluster.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Longest a node may take to answer `/ready` after it starts.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a node may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// How to start one node.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// Node id (1 for a single node).
    pub id: u64,
    /// Loopback port.
    pub port: u16,
    /// `--data-dir`.
    pub data_dir: PathBuf,
    /// `--wal-dir`, when not inside the data directory.
    pub wal_dir: Option<PathBuf>,
    /// `QUIVER_*` settings.
    pub env: Vec<(String, String)>,
    /// Where its stderr goes.
    pub log: PathBuf,
}

/// A running node, killed when dropped.
pub struct NodeProcess {
    /// How it was started.
    pub spec: NodeSpec,
    /// `http://127.0.0.1:port`.
    pub url: String,
    child: Option<Child>,
}

impl NodeProcess {
    /// Starts `exe serve` as `spec` says, without waiting for it to be ready.
    pub fn spawn(exe: &Path, spec: NodeSpec) -> Result<NodeProcess> {
        if let Some(dir) = spec.log.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .map_err(|e| Error::io(&spec.log, e))?;
        let mut command = Command::new(exe);
        command
            .arg("serve")
            .arg("--http-addr")
            .arg(format!("127.0.0.1:{}", spec.port))
            .arg("--data-dir")
            .arg(&spec.data_dir)
            .arg("--node-id")
            .arg(spec.id.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        if let Some(wal) = &spec.wal_dir {
            command.arg("--wal-dir").arg(wal);
        }
        for (key, value) in &spec.env {
            command.env(key, value);
        }
        let child = command.spawn().map_err(|e| Error::io(exe, e))?;
        Ok(NodeProcess {
            url: format!("http://127.0.0.1:{}", spec.port),
            spec,
            child: Some(child),
        })
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Polls `/ready` until 200; fails with the end of the node's log.
    pub async fn wait_ready(&mut self, client: &reqwest::Client) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(r) = client.get(format!("{}/ready", self.url)).send().await {
                if r.status().is_success() {
                    return Ok(());
                }
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(self.failed(format!("exited with {status} before it was ready")));
                }
            }
            if Instant::now() > deadline {
                return Err(self.failed(format!("not ready after {READY_TIMEOUT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn failed(&self, what: String) -> Error {
        let log = std::fs::read_to_string(&self.spec.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        Error::Node {
            what: self.url.clone(),
            detail: format!(
                "{what}; log {}:\n{}",
                self.spec.log.display(),
                lines[lines.len().saturating_sub(20)..].join("\n")
            ),
        }
    }

    /// SIGKILL, and wait until it is gone (the failover drill's kind of stop).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit (killed after [`STOP_TIMEOUT`]).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: kill(2) on our own child's pid, which we have not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free loopback port (bound, then released for the node to take).
pub fn free_port() -> Result<u16> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("127.0.0.1:0", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("127.0.0.1:0", e))
}

/// Where and how the campaign starts its nodes.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// The quiver binary.
    pub exe: PathBuf,
    /// Parent of every node's data directory.
    pub data_root: PathBuf,
    /// Parent of every node's WAL directory, when the WAL has its own volume.
    pub wal_root: Option<PathBuf>,
    /// Admin token the nodes are started with.
    pub token: String,
    /// Settings every node gets.
    pub env: Vec<(String, String)>,
}

impl Deployment {
    /// Starts `count` nodes (1, or a static cluster of 3) named `name` with `extra`
    /// settings, and waits until every one is ready.
    pub async fn start(
        &self,
        name: &str,
        count: usize,
        wal_on_own_volume: bool,
        extra: &[(String, String)],
        client: &reqwest::Client,
    ) -> Result<Vec<NodeProcess>> {
        let ports = (0..count)
            .map(|_| free_port())
            .collect::<Result<Vec<_>>>()?;
        let mut env = self.env.clone();
        env.push(("QUIVER_BOOTSTRAP_TOKEN".into(), self.token.clone()));
        env.extend(extra.iter().cloned());
        if count > 1 {
            let peers = ports
                .iter()
                .enumerate()
                .map(|(i, p)| format!("{}=http://127.0.0.1:{p}", i + 1))
                .collect::<Vec<_>>()
                .join(",");
            env.push(("QUIVER_CLUSTER_PEERS".into(), peers));
            env.push(("QUIVER_CLUSTER_SECRET".into(), self.token.clone()));
        }
        let mut nodes = Vec::with_capacity(count);
        for (i, port) in ports.iter().enumerate() {
            let dir = self.data_root.join(format!("{name}-n{}", i + 1));
            let wal_dir = match (&self.wal_root, wal_on_own_volume) {
                (Some(root), true) => Some(root.join(format!("{name}-n{}", i + 1))),
                _ => None,
            };
            let spec = NodeSpec {
                id: i as u64 + 1,
                port: *port,
                data_dir: dir.join("data"),
                wal_dir,
                env: env.clone(),
                log: dir.join("node.log"),
            };
            nodes.push(NodeProcess::spawn(&self.exe, spec)?);
        }
        for node in &mut nodes {
            node.wait_ready(client).await?;
        }
        Ok(nodes)
    }

    /// Stops `nodes` and removes their directories (keeping the logs of failed runs is
    /// the caller's choice: it passes `keep`).
    pub fn remove(&self, mut nodes: Vec<NodeProcess>, keep: bool) {
        for node in &mut nodes {
            node.stop();
        }
        if keep {
            return;
        }
        for node in &nodes {
            if let Some(dir) = node.spec.data_dir.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
            if let Some(wal) = &node.spec.wal_dir {
                let _ = std::fs::remove_dir_all(wal);
            }
        }
    }
}
