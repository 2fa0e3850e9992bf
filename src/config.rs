//! The node's configuration: TOML file, then `QUIVER_<SECTION>_<KEY>` environment
//! variables, then command-line flags (each beats the one before). Unknown keys and bad
//! values fail at start with one line naming the setting.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

/// Bytes a log entry adds around its write payload (openraft's entry, MessagePack).
const ENTRY_ENVELOPE_BYTES: usize = 1 << 20;

/// The whole configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP listener and limits.
    pub http: HttpConfig,
    /// The Postgres wire protocol listener (off unless `pg.addr` is set).
    pub pg: PgSection,
    /// The Arrow Flight SQL listener (off unless `flight.addr` is set).
    pub flight: FlightSection,
    /// Data directory, buffers, flushes, Parquet.
    pub storage: StorageSection,
    /// Write-ahead log.
    pub wal: WalSection,
    /// Node identity and peers.
    pub cluster: ClusterSection,
    /// Raft timing.
    pub raft: RaftSection,
    /// Query limits.
    pub query: QuerySection,
    /// Authentication.
    pub auth: AuthSection,
    /// Logging.
    pub log: LogSection,
    /// What one write may ask of the node (columns, measurements, hours, bytes).
    pub limits: quiver_storage::WriteLimits,
    /// When and how Parquet files are merged.
    pub compaction: CompactionSection,
    /// Retention given to databases created from now on.
    pub retention: RetentionSection,
}

pub use crate::config_doors::{CompactionSection, FlightSection, PgSection, RetentionSection};

/// `[http]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Listen address.
    pub addr: String,
    /// Largest request body as sent.
    pub body_bytes_max: usize,
    /// Largest request body after decompression.
    pub decompressed_bytes_max: usize,
    /// Write requests being decoded or replicated at once; more get 429.
    pub writes_in_flight_max: usize,
    /// Bytes all writes in flight may hold (body, inflated body, Arrow, log entry);
    /// more get 429. The write path's memory ceiling.
    pub write_bytes_in_flight_max: usize,
    /// Longest a write may wait from proposal to commit; past it, 504 (outcome unknown)
    /// or 503 when nothing was proposed. Below Telegraf's 5 s client timeout, so a
    /// stuck write reaches the collector as a status, not as its own timeout.
    pub write_timeout_ms: u64,
    /// Longest a request body may take to arrive; past it, 408.
    pub body_timeout_ms: u64,
    /// Longest wait for a request's headers, and for the next request on an idle
    /// kept-alive connection.
    pub header_timeout_ms: u64,
    /// Connections open at once; more are answered 503 and closed.
    pub connections_max: usize,
    /// Connections open at once from one client address (the cluster's peers
    /// excepted); more are answered 429 and closed.
    pub connections_per_address_max: usize,
    /// Of `connections_max`, how many only the cluster's peers may use, so that
    /// replication and elections go on while clients fill the rest (at most a quarter
    /// of `connections_max`).
    pub connections_reserved_for_peers: usize,
    /// Longest a graceful stop (SIGTERM) waits for open requests.
    pub shutdown_timeout_ms: u64,
    /// Certificate chain (PEM) of the listener; with `tls_key`, the port speaks HTTPS
    /// only, and peers are reached over HTTPS too.
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of `tls_cert`.
    pub tls_key: Option<PathBuf>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            addr: "127.0.0.1:8000".into(),
            body_bytes_max: 64 * 1024 * 1024,
            decompressed_bytes_max: 512 * 1024 * 1024,
            writes_in_flight_max: 256,
            write_bytes_in_flight_max: 1024 * 1024 * 1024,
            write_timeout_ms: 4_000,
            body_timeout_ms: 60_000,
            header_timeout_ms: 30_000,
            connections_max: 1_024,
            connections_per_address_max: 256,
            connections_reserved_for_peers: 64,
            shutdown_timeout_ms: 30_000,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// `[storage]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageSection {
    /// Data directory (Parquet, catalog, snapshots; the WAL too unless `wal.dir` is set).
    pub dir: PathBuf,
    /// Flush a measurement's buffer at this many rows.
    pub flush_rows_max: usize,
    /// ... or this many bytes.
    pub flush_bytes_max: usize,
    /// ... or when its oldest row is this old.
    pub flush_age_ms: u64,
    /// ... or when no row has arrived for this long and it holds at least
    /// `flush_idle_bytes_min` (0 = never).
    pub flush_idle_ms: u64,
    /// The smallest buffer an idle flush writes.
    pub flush_idle_bytes_min: usize,
    /// Memory all buffers may hold before writes get 503.
    pub memory_bytes_max: usize,
    /// zstd level of Parquet files.
    pub parquet_zstd_level: i32,
    /// Rows per Parquet row group at most.
    pub parquet_row_group_rows_max: usize,
    /// Rows per Parquet data page at most (the page index prunes by pages).
    pub parquet_page_rows_max: usize,
    /// Below this many free bytes on the data volume, writes get 503 and flushes wait
    /// (0 = no watermark).
    pub free_bytes_min: u64,
    /// `s3://bucket/prefix`: Parquet files go to this S3-compatible bucket (under
    /// `node-{id}/`) instead of `dir/parquet`. The WAL, snapshots and catalog stay in
    /// `dir`. Unset: local disk.
    pub object_store: Option<String>,
    /// Endpoint of an S3-compatible service; `AWS_ENDPOINT` or AWS's when unset.
    pub object_store_endpoint: Option<String>,
    /// Region; `AWS_REGION` or `us-east-1` when unset.
    pub object_store_region: Option<String>,
    /// Access key; `AWS_ACCESS_KEY_ID` when unset.
    pub object_store_access_key_id: Option<String>,
    /// Secret key; `AWS_SECRET_ACCESS_KEY` when unset.
    pub object_store_secret_access_key: Option<String>,
    /// Allow a plain `http://` endpoint (a local test server).
    pub object_store_allow_http: bool,
    /// Longest one request to the bucket may take, its retries included.
    pub object_store_timeout_ms: u64,
    /// Local disk for whole files queries read from the bucket (0 = none; footers are
    /// cached in memory either way, `query.footer_cache_bytes_max`).
    pub cache_bytes_max: u64,
    /// How often a node rewrites the owner marker of its bucket prefix. A node that
    /// finds another data directory's marker watches it for 2.5 beats before deciding
    /// that writer stopped (docs/operations.md, "A lost disk").
    pub object_store_owner_beat_ms: u64,
}

impl Default for StorageSection {
    fn default() -> Self {
        let d = quiver_storage::StorageConfig::default();
        StorageSection {
            dir: PathBuf::from("quiver-data"),
            flush_rows_max: d.flush_rows_max,
            flush_bytes_max: d.flush_bytes_max,
            flush_age_ms: d.flush_age_ms,
            flush_idle_ms: d.flush_idle_ms,
            flush_idle_bytes_min: d.flush_idle_bytes_min,
            memory_bytes_max: d.memory_bytes_max,
            parquet_zstd_level: d.parquet.zstd_level,
            parquet_row_group_rows_max: d.parquet.row_group_rows_max,
            parquet_page_rows_max: d.parquet.page_rows_max,
            free_bytes_min: 128 * 1024 * 1024,
            object_store: None,
            object_store_endpoint: None,
            object_store_region: None,
            object_store_access_key_id: None,
            object_store_secret_access_key: None,
            object_store_allow_http: false,
            object_store_timeout_ms: 30_000,
            cache_bytes_max: 0,
            object_store_owner_beat_ms: quiver_storage::OWNER_BEAT_MS_DEFAULT,
        }
    }
}

/// `[wal]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WalSection {
    /// WAL directory; default `<storage.dir>/wal`.
    pub dir: Option<PathBuf>,
    /// `fsync`, `batch` or `none`.
    pub sync: String,
    /// fsync interval in `batch` mode.
    pub sync_interval_ms: u64,
    /// Segment size before rotation.
    pub segment_bytes_max: u64,
    /// Below this many free bytes on the WAL volume, writes get 503 before anything is
    /// appended (0 = no watermark).
    pub free_bytes_min: u64,
}

impl Default for WalSection {
    fn default() -> Self {
        WalSection {
            dir: None,
            sync: "fsync".into(),
            sync_interval_ms: 100,
            segment_bytes_max: 64 * 1024 * 1024,
            free_bytes_min: 128 * 1024 * 1024,
        }
    }
}

/// `[cluster]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    /// This node's id.
    pub node_id: u64,
    /// Static voters, `1=http://host:port,2=...`; empty: a single-voter cluster.
    pub peers: String,
    /// A running cluster's node to join (`http://host:port`): this node takes the
    /// cluster's settings from it at its first start, asks to be added, and is given
    /// replicas. Empty: the node's cluster is `peers`.
    pub join: String,
    /// Shared secret for `/internal/` traffic.
    pub secret: String,
    /// Address others reach this node at; default: `http.addr`.
    pub advertise_addr: Option<String>,
    /// CA certificates (PEM) that peers' certificates must chain to; needed when peers
    /// are reached over HTTPS.
    pub tls_ca: Option<PathBuf>,
    /// Raft groups holding rows, each measurement in one of them (1: the first group
    /// holds everything, as a single-group cluster does). Fixed once a node holds rows.
    pub data_groups: usize,
    /// Voters per data group, at most the node count.
    pub replication: usize,
    /// Every node's query worker, `1=http://host:port,2=...`: with data groups placed
    /// on some nodes, a query's scan of a measurement held elsewhere (and the filters
    /// and partial aggregates above it) runs on a member of its group, reached here.
    /// Empty: such rows are fetched and scanned on the node the query came to.
    pub query_workers: String,
    /// Where this node's query worker listens (Arrow Flight over HTTP/2, for the
    /// cluster's nodes only: calls carry the cluster secret). Needed with
    /// `query_workers`.
    pub query_worker_addr: Option<String>,
    /// Whether nodes hand data group leadership to each other until none leads more
    /// than its share (`ceil(groups / nodes)`); `false` pauses it, leaving leaders where
    /// elections put them.
    pub balance_leaders: bool,
    /// Whether the metadata leader moves data group replicas until every node stores
    /// within 10 % of the mean of the nodes' bytes; `false` pauses it.
    pub balance_replicas: bool,
    /// Below this much data (one replica of every group) replicas are not moved for
    /// balance: a young cluster's sizes say little.
    pub balance_bytes_min: u64,
    /// How long the metadata leader waits for a node that stopped answering before it
    /// moves that node's data group replicas to live nodes (0: never; a restart or a
    /// short partition should not copy a node's data).
    pub rereplicate_after_ms: u64,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            node_id: 1,
            peers: String::new(),
            join: String::new(),
            secret: String::new(),
            advertise_addr: None,
            tls_ca: None,
            data_groups: 1,
            replication: 3,
            query_workers: String::new(),
            query_worker_addr: None,
            balance_leaders: true,
            balance_replicas: true,
            balance_bytes_min: 1 << 30,
            rereplicate_after_ms: 300_000,
        }
    }
}

/// `[raft]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftSection {
    /// Leader heartbeat.
    pub heartbeat_interval_ms: u64,
    /// Election timeout, lower bound.
    pub election_timeout_ms_min: u64,
    /// Election timeout, upper bound.
    pub election_timeout_ms_max: u64,
    /// Least time between snapshots.
    pub snapshot_interval_ms_min: u64,
    /// How often the leader checks flush thresholds.
    pub flush_check_interval_ms: u64,
    /// How long a write waits for a leader before 503.
    pub leader_wait_ms: u64,
    /// Largest log entry one write may encode to; larger writes get 413 naming it.
    pub entry_bytes_max: usize,
    /// Most entry bytes in one AppendEntries to a follower.
    pub replication_bytes_max: usize,
    /// Longest one AppendEntries with entries may take (transfer and the follower's
    /// fsync), independent of the heartbeat interval.
    pub replication_timeout_ms: u64,
    /// How a write's rows are packed into its log entry: `zstd` (default) or `none`.
    pub entry_compression: quiver_storage::EntryCompression,
}

impl Default for RaftSection {
    fn default() -> Self {
        let d = quiver_raft::RaftConfig::default();
        RaftSection {
            heartbeat_interval_ms: d.heartbeat_interval_ms,
            election_timeout_ms_min: d.election_timeout_ms_min,
            election_timeout_ms_max: d.election_timeout_ms_max,
            snapshot_interval_ms_min: d.snapshot_interval_ms_min,
            flush_check_interval_ms: d.flush_check_interval_ms,
            leader_wait_ms: d.leader_wait_ms,
            entry_bytes_max: 32 * 1024 * 1024,
            replication_bytes_max: d.replication.bytes_max,
            replication_timeout_ms: d.replication.timeout_ms,
            entry_compression: quiver_storage::EntryCompression::default(),
        }
    }
}

/// `[query]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuerySection {
    /// Per-query timeout, queueing included.
    pub timeout_ms: u64,
    /// Memory one query may use.
    pub memory_bytes_max: usize,
    /// Memory all running queries together may use.
    pub node_memory_bytes_max: usize,
    /// Partitions (threads) per query; 0 = number of cores.
    pub target_partitions: usize,
    /// Queries running at once; 0 = twice the number of cores.
    pub concurrency_max: usize,
    /// Queries waiting for a slot; more get 429.
    pub queue_max: usize,
    /// Threads of the query runtime; 0 = number of cores.
    pub threads: usize,
    /// Nice value of the query threads (0 = same priority as ingest).
    pub thread_nice: i32,
    /// Row pairs a nested-loop or cross join may compare; larger ones get 400 (0 = no
    /// limit).
    pub join_pairs_max: u64,
    /// Memory for Parquet footers and page indexes kept across queries (files never
    /// change, so a repeated query reads none of them again; matters most when files
    /// are in a bucket).
    pub footer_cache_bytes_max: usize,
    /// Aggregate group keys that arrive in runs run by run (same answers; false only to
    /// measure the difference or rule the operators out).
    pub group_runs: bool,
}

impl Default for QuerySection {
    fn default() -> Self {
        QuerySection {
            timeout_ms: 30_000,
            memory_bytes_max: 1024 * 1024 * 1024,
            node_memory_bytes_max: 2 * 1024 * 1024 * 1024,
            target_partitions: 0,
            concurrency_max: 0,
            queue_max: 64,
            threads: 0,
            thread_nice: 10,
            join_pairs_max: quiver_query::JOIN_PAIRS_MAX_DEFAULT,
            footer_cache_bytes_max: 64 * 1024 * 1024,
            group_runs: true,
        }
    }
}

/// `[auth]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSection {
    /// Require tokens. Turn off for local development only.
    pub enabled: bool,
}

impl Config {
    /// The bucket Parquet files go to, if `storage.object_store` names one.
    pub fn bucket(&self) -> Option<quiver_storage::BucketSettings> {
        let s = &self.storage;
        s.object_store
            .as_ref()
            .map(|url| quiver_storage::BucketSettings {
                url: url.clone(),
                endpoint: s.object_store_endpoint.clone(),
                region: s.object_store_region.clone(),
                access_key_id: s.object_store_access_key_id.clone(),
                secret_access_key: s.object_store_secret_access_key.clone(),
                allow_http: s.object_store_allow_http,
                timeout_ms: s.object_store_timeout_ms,
                node_id: self.cluster.node_id,
                cache_bytes_max: s.cache_bytes_max,
                clustered: self.peers().is_ok_and(|p| p.len() > 1),
                owner_beat_ms: s.object_store_owner_beat_ms,
                adopt: false,
            })
    }
}

impl Default for AuthSection {
    fn default() -> Self {
        AuthSection { enabled: true }
    }
}

/// `[log]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// tracing filter, e.g. `info` or `quiver=debug,info`.
    pub level: String,
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            level: "info".into(),
        }
    }
}

/// Flags of `quiver serve` that override configuration keys.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--http-addr`
    pub http_addr: Option<String>,
    /// `--pg-addr`
    pub pg_addr: Option<String>,
    /// `--flight-addr`
    pub flight_addr: Option<String>,
    /// `--data-dir`
    pub data_dir: Option<PathBuf>,
    /// `--wal-dir`
    pub wal_dir: Option<PathBuf>,
    /// `--node-id`
    pub node_id: Option<u64>,
    /// `--peers`
    pub peers: Option<String>,
    /// `--join`
    pub join: Option<String>,
    /// `--auth none`
    pub auth_disabled: bool,
    /// `--tls-cert`
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`
    pub tls_key: Option<PathBuf>,
    /// `--tls-ca`
    pub tls_ca: Option<PathBuf>,
}

impl Config {
    /// Loads file → environment → flags, then validates.
    pub fn load(
        file: Option<&Path>,
        env: impl Iterator<Item = (String, String)>,
        flags: &Overrides,
    ) -> Result<Config> {
        let mut table: toml::Table = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("config file {}: cannot read", path.display()))?;
                text.parse()
                    .map_err(|e| anyhow!("config file {}: {e}", path.display()))?
            }
            None => toml::Table::new(),
        };
        // Where each value came from, for errors that name it.
        let mut sources: std::collections::HashMap<String, String> = Default::default();
        if let Some(path) = file {
            for (section, keys) in &table {
                let toml::Value::Table(keys) = keys else {
                    continue;
                };
                for key in keys.keys() {
                    sources.insert(
                        format!("{section}.{key}"),
                        format!("config file {}", path.display()),
                    );
                }
            }
        }
        crate::config_env::apply_env(&mut table, env, &mut sources)?;
        let source_of = |path: &str| {
            sources
                .get(path)
                .cloned()
                .unwrap_or_else(|| "default".to_string())
        };
        crate::config_units::normalize_units(&mut table, source_of)?;
        let mut config: Config = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| {
                let path = e.path().to_string();
                let why = e.inner().message().trim().to_string();
                if path == "." || path.is_empty() {
                    anyhow!("configuration: {why}")
                } else {
                    anyhow!("{path} ({}): {why}", source_of(&path))
                }
            })?;
        if let Some(a) = &flags.http_addr {
            config.http.addr = a.clone();
        }
        if let Some(a) = &flags.pg_addr {
            config.pg.addr = Some(a.clone());
        }
        if let Some(a) = &flags.flight_addr {
            config.flight.addr = Some(a.clone());
        }
        if let Some(d) = &flags.data_dir {
            config.storage.dir = d.clone();
        }
        if let Some(d) = &flags.wal_dir {
            config.wal.dir = Some(d.clone());
        }
        if let Some(n) = flags.node_id {
            config.cluster.node_id = n;
        }
        if let Some(p) = &flags.peers {
            config.cluster.peers = p.clone();
        }
        if let Some(url) = &flags.join {
            config.cluster.join = url.clone();
        }
        if flags.auth_disabled {
            config.auth.enabled = false;
        }
        if let Some(path) = &flags.tls_cert {
            config.http.tls_cert = Some(path.clone());
        }
        if let Some(path) = &flags.tls_key {
            config.http.tls_key = Some(path.clone());
        }
        if let Some(path) = &flags.tls_ca {
            config.cluster.tls_ca = Some(path.clone());
        }
        config.validate()?;
        Ok(config)
    }

    /// The WAL directory in effect.
    pub fn wal_dir(&self) -> PathBuf {
        self.wal
            .dir
            .clone()
            .unwrap_or_else(|| self.storage.dir.join("wal"))
    }

    /// The parsed listen address.
    pub fn http_addr(&self) -> Result<SocketAddr> {
        self.http.addr.parse().map_err(|_| {
            anyhow!(
                "http.addr {:?} is not an address like 127.0.0.1:8000",
                self.http.addr
            )
        })
    }

    /// The parsed Postgres listen address, if the door is on.
    pub fn pg_addr(&self) -> Result<Option<SocketAddr>> {
        let Some(addr) = &self.pg.addr else {
            return Ok(None);
        };
        addr.parse()
            .map(Some)
            .map_err(|_| anyhow!("pg.addr {addr:?} is not an address like 127.0.0.1:5433"))
    }

    /// The parsed Flight SQL listen address, if the door is on.
    pub fn flight_addr(&self) -> Result<Option<SocketAddr>> {
        let Some(addr) = &self.flight.addr else {
            return Ok(None);
        };
        addr.parse()
            .map(Some)
            .map_err(|_| anyhow!("flight.addr {addr:?} is not an address like 127.0.0.1:8082"))
    }

    /// The listener's certificate and key files when TLS is on: both set, or neither.
    pub fn tls_files(&self) -> Result<Option<(&Path, &Path)>> {
        match (&self.http.tls_cert, &self.http.tls_key) {
            (Some(cert), Some(key)) => Ok(Some((cert, key))),
            (None, None) => Ok(None),
            (Some(cert), None) => bail!(
                "http.tls_cert is set ({}) but http.tls_key is not: TLS needs both (--tls-key)",
                cert.display()
            ),
            (None, Some(key)) => bail!(
                "http.tls_key is set ({}) but http.tls_cert is not: TLS needs both (--tls-cert)",
                key.display()
            ),
        }
    }

    /// The WAL sync mode.
    pub fn wal_sync(&self) -> Result<quiver_wal::SyncMode> {
        self.wal
            .sync
            .parse()
            .map_err(|_| anyhow!("wal.sync {:?} must be fsync, batch or none", self.wal.sync))
    }

    /// `retention.default` in nanoseconds, if set.
    pub fn retention_default_ns(&self) -> Result<Option<i64>> {
        match &self.retention.default {
            None => Ok(None),
            Some(text) => {
                let ns = quiver_storage::lifecycle::parse_duration_ns(text)
                    .map_err(|e| anyhow!("retention.default: {e}"))?;
                if ns < quiver_storage::TimestampNs::HOUR_NS {
                    bail!("retention.default {text:?} is shorter than the shortest retention, 1h");
                }
                Ok(Some(ns))
            }
        }
    }

    fn validate(&self) -> Result<()> {
        self.http_addr()?;
        self.pg_addr()?;
        self.flight_addr()?;
        if self.pg.connections_max == 0 {
            bail!("pg.connections_max must be at least 1");
        }

        self.retention_default_ns()?;
        self.wal_sync()?;
        if self.cluster.node_id == 0 {
            bail!("cluster.node_id must be at least 1");
        }
        let peers = self.peers()?;
        if !peers.is_empty() && self.cluster.secret.trim().len() < 16 {
            bail!("cluster.secret (QUIVER_CLUSTER_SECRET) must be set to at least 16 characters when cluster.peers is");
        }
        crate::join::check_config(self, &peers)?;
        let tls = self.tls_files()?.is_some();
        let https_peers = peers.iter().any(|(_, addr)| addr.starts_with("https://"));
        let other_peers = peers.iter().any(|(id, _)| *id != self.cluster.node_id);
        if self.cluster.tls_ca.is_none() && ((tls && other_peers) || https_peers) {
            bail!("cluster.tls_ca (--tls-ca) must name the CA that signed the peers' certificates when peers are reached over https");
        }
        if self.raft.election_timeout_ms_min <= self.raft.heartbeat_interval_ms
            || self.raft.election_timeout_ms_max <= self.raft.election_timeout_ms_min
        {
            bail!("raft: need heartbeat_interval_ms < election_timeout_ms_min < election_timeout_ms_max");
        }
        if !(1..=22).contains(&self.storage.parquet_zstd_level) {
            bail!("storage.parquet_zstd_level must be 1 to 22");
        }
        for (name, value) in [
            ("storage.flush_rows_max", self.storage.flush_rows_max as u64),
            (
                "storage.parquet_page_rows_max",
                self.storage.parquet_page_rows_max as u64,
            ),
            (
                "storage.flush_bytes_max",
                self.storage.flush_bytes_max as u64,
            ),
            (
                "storage.memory_bytes_max",
                self.storage.memory_bytes_max as u64,
            ),
            ("http.body_bytes_max", self.http.body_bytes_max as u64),
            (
                "http.decompressed_bytes_max",
                self.http.decompressed_bytes_max as u64,
            ),
            (
                "http.writes_in_flight_max",
                self.http.writes_in_flight_max as u64,
            ),
            (
                "http.write_bytes_in_flight_max",
                self.http.write_bytes_in_flight_max as u64,
            ),
            ("http.write_timeout_ms", self.http.write_timeout_ms),
            ("http.body_timeout_ms", self.http.body_timeout_ms),
            ("http.header_timeout_ms", self.http.header_timeout_ms),
            ("http.connections_max", self.http.connections_max as u64),
            (
                "http.connections_per_address_max",
                self.http.connections_per_address_max as u64,
            ),
            ("flight.connections_max", self.flight.connections_max as u64),
            (
                "flight.connections_per_address_max",
                self.flight.connections_per_address_max as u64,
            ),
            (
                "pg.connections_per_address_max",
                self.pg.connections_per_address_max as u64,
            ),
            ("raft.entry_bytes_max", self.raft.entry_bytes_max as u64),
            (
                "raft.replication_bytes_max",
                self.raft.replication_bytes_max as u64,
            ),
            (
                "raft.replication_timeout_ms",
                self.raft.replication_timeout_ms,
            ),
            ("wal.segment_bytes_max", self.wal.segment_bytes_max),
            (
                "storage.object_store_timeout_ms",
                self.storage.object_store_timeout_ms,
            ),
            (
                "storage.object_store_owner_beat_ms",
                self.storage.object_store_owner_beat_ms,
            ),
            ("query.timeout_ms", self.query.timeout_ms),
            (
                "compaction.check_interval_ms",
                self.compaction.check_interval_ms,
            ),
            (
                "compaction.memory_bytes_max",
                self.compaction.memory_bytes_max,
            ),
            ("query.memory_bytes_max", self.query.memory_bytes_max as u64),
            (
                "query.node_memory_bytes_max",
                self.query.node_memory_bytes_max as u64,
            ),
        ] {
            if value == 0 {
                bail!("{name} must be greater than 0");
            }
        }
        let entry_limit = quiver_wal::format::PAYLOAD_BYTES_MAX as usize - ENTRY_ENVELOPE_BYTES;
        if self.raft.entry_bytes_max > entry_limit {
            bail!("raft.entry_bytes_max must be at most {entry_limit} (one WAL record, less its envelope)");
        }
        if self.raft.entry_bytes_max > self.http.write_bytes_in_flight_max {
            bail!("raft.entry_bytes_max must not exceed http.write_bytes_in_flight_max");
        }
        self.limits.validate().map_err(|e| anyhow!("limits: {e}"))?;
        if let Some(url) = &self.storage.object_store {
            if !url.starts_with("s3://") {
                bail!("storage.object_store must be an s3://bucket/prefix URL, not {url:?}");
            }
        }
        if self.compaction.hour_files_min < 2 {
            bail!("compaction.hour_files_min must be at least 2");
        }
        if self.compaction.input_grace_ms <= self.query.timeout_ms {
            bail!("compaction.input_grace_ms must exceed query.timeout_ms: a query may still read a file a merge replaced");
        }
        if !(0..=19).contains(&self.query.thread_nice) {
            bail!("query.thread_nice must be 0 to 19");
        }
        check_dir("storage.dir", &self.storage.dir, 0)?;
        check_dir("wal.dir", &self.wal_dir(), 2 * self.wal.segment_bytes_max)?;
        Ok(())
    }
}

/// Creates `dir` if needed and proves it writable with enough free space.
fn check_dir(setting: &str, dir: &Path, free_bytes_min: u64) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow!("{setting} {}: cannot create: {e}", dir.display()))?;
    let probe = dir.join(".quiver-write-probe");
    std::fs::write(&probe, b"probe")
        .map_err(|e| anyhow!("{setting} {}: not writable: {e}", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    if free_bytes_min > 0 {
        let free = fs2::available_space(dir)
            .map_err(|e| anyhow!("{setting} {}: cannot read free space: {e}", dir.display()))?;
        if free < free_bytes_min {
            bail!(
                "{setting} {}: only {free} bytes free, need at least {free_bytes_min} (disk full?)",
                dir.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
