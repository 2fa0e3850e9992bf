//! Command-line interface: `quiver serve | cluster ... | sizing ...`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Quiver: a clustered time-series ingest database.
#[derive(Debug, Parser)]
#[command(name = "quiver", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node (defaults: 127.0.0.1:8000, ./quiver-data, a single-voter cluster).
    Serve(ServeArgs),
    /// After a lost disk or WAL volume, with the node stopped and the settings it serves
    /// with: adopt the Parquet files under its directory or bucket prefix (a single
    /// node), or claim the prefix (a cluster member, whose peers send the rest). With
    /// `--from DIR`: make a new single node from a `quiver backup` directory.
    Restore(RestoreArgs),
    /// Online, consistent, incremental backup of a node into a directory: a snapshot of
    /// every group, the Parquet files it lists, a manifest with checksums.
    Backup(crate::backup::take::BackupArgs),
    /// Cluster membership and status.
    Cluster {
        /// What to do.
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Check that replicas agree: sentinel rows, then per-partition content hashes.
    Verify(crate::verify::VerifyArgs),
    /// API tokens: create (the secret is printed once), list, revoke.
    Token {
        /// What to do.
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Load line-protocol, CSV or Parquet files into a node: any time span, a progress
    /// bar, resumable, and a check at the end that the node holds what it acknowledged.
    Import(crate::import::ImportArgs),
    /// Load generation and sizing for operators.
    Sizing {
        /// What to run.
        #[command(subcommand)]
        command: SizingCommand,
    },
}

/// Flags of `quiver serve`; each beats the environment and the config file.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// TOML configuration file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Listen address (http.addr).
    #[arg(long)]
    pub http_addr: Option<String>,
    /// Postgres wire protocol listen address, e.g. 127.0.0.1:5433 (pg.addr; off unless
    /// set).
    #[arg(long)]
    pub pg_addr: Option<String>,
    /// Arrow Flight SQL listen address, e.g. 127.0.0.1:8082 (flight.addr; off unless
    /// set).
    #[arg(long)]
    pub flight_addr: Option<String>,
    /// Data directory (storage.dir).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// WAL directory (wal.dir; default <data-dir>/wal).
    #[arg(long)]
    pub wal_dir: Option<PathBuf>,
    /// This node's id (cluster.node_id).
    #[arg(long)]
    pub node_id: Option<u64>,
    /// Static voters, 1=URL,2=URL,3=URL (cluster.peers).
    #[arg(long)]
    pub peers: Option<String>,
    /// A running cluster's node (http://host:port) to join: the cluster's settings are
    /// taken from it at the first start, and the node is added and given replicas
    /// (cluster.join).
    #[arg(long)]
    pub join: Option<String>,
    /// `none` turns authentication off (local development only).
    #[arg(long)]
    pub auth: Option<String>,
    /// Certificate chain (PEM) of the listener; with --tls-key the port speaks HTTPS
    /// (http.tls_cert).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert (http.tls_key).
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) that peers' certificates chain to (cluster.tls_ca).
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
}

/// Flags of `quiver restore`: the node's settings, and a backup to restore from.
#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// A `quiver backup` directory or bucket (`s3://bucket/prefix`): restore its newest
    /// backup into a new single node (empty --data-dir and --wal-dir). Without it,
    /// rebuild the node from its own files.
    #[arg(long)]
    pub from: Option<String>,
    /// With --from: restore this manifest (a file name in manifests/) rather than the
    /// newest.
    #[arg(long, requires = "from")]
    pub manifest: Option<String>,
    /// The settings the node serves with.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// `quiver sizing ...`
#[derive(Debug, Subcommand)]
pub enum SizingCommand {
    /// Post Arc-shaped MessagePack or line-protocol batches and check persisted == acked.
    Load(quiver_sizing::LoadArgs),
    /// Failover drill: a 3-node cluster of this binary under load, its leader killed.
    Drill(quiver_sizing::DrillArgs),
    /// The sizing campaign on this machine: probe, ingest sweeps, query profile, mixed
    /// run (and a 3-node cluster), with a report and charts in --out.
    Run(quiver_sizing::RunArgs),
    /// A machine size for a workload: cores, memory, disk, fsync rate and network per
    /// node, with every assumption and where its number came from.
    Plan(quiver_sizing::PlanArgs),
}

/// Where a cluster command connects.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterTarget {
    /// Any node of the cluster; changes are forwarded to the leader.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// Admin token (or QUIVER_TOKEN).
    #[arg(long, env = "QUIVER_TOKEN")]
    pub token: Option<String>,
    /// CA (PEM) the node's certificate must chain to; an address without a scheme is
    /// then reached over https (or QUIVER_CA).
    #[arg(long, env = "QUIVER_CA")]
    pub ca: Option<PathBuf>,
}

/// `quiver token ...`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; prints its secret (once) on stdout.
    Create {
        #[command(flatten)]
        target: ClusterTarget,
        /// A name to tell it by (`telegraf`, `grafana`).
        #[arg(long)]
        name: String,
        /// What it may do (repeat for several).
        #[arg(long, required = true, value_parser = ["read", "write", "admin"])]
        scope: Vec<String>,
        /// Limit it to these databases (repeat for several; default every database).
        #[arg(long)]
        database: Vec<String>,
    },
    /// Every token: id, name, scopes, databases, creation time (never the secret).
    List(ClusterTarget),
    /// Revoke a token by id: every node refuses it from then on.
    Revoke {
        #[command(flatten)]
        target: ClusterTarget,
        /// The token's id (from `create` or `list`).
        id: String,
    },
}

/// `quiver cluster ...`
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Role, term, leader, log positions and per-follower lag, as JSON.
    Status(ClusterTarget),
    /// The Raft groups: members, leader, rows and bytes of each.
    Groups {
        #[command(flatten)]
        target: ClusterTarget,
        /// Print the list as JSON: `[{"id", "members", "leader", "bytes", ...}]`.
        #[arg(long)]
        json: bool,
    },
    /// Add a node as a learner; returns once it has caught up.
    AddLearner {
        #[command(flatten)]
        target: ClusterTarget,
        /// The new node's id.
        #[arg(long)]
        node_id: u64,
        /// The new node's address (`http://host:port`).
        #[arg(long)]
        addr: String,
    },
    /// Make learners voters.
    Promote {
        #[command(flatten)]
        target: ClusterTarget,
        /// Learner ids.
        #[arg(long = "node-id", required = true)]
        node_ids: Vec<u64>,
    },
    /// Remove members.
    Remove {
        #[command(flatten)]
        target: ClusterTarget,
        /// Member ids.
        #[arg(long = "node-id", required = true)]
        node_ids: Vec<u64>,
    },
    /// Move a data group's replica from one node to another, with its files; returns
    /// once the new replica votes and the old one has left. Ask again to finish a move
    /// that failed part way.
    Move {
        #[command(flatten)]
        target: ClusterTarget,
        /// The data group.
        #[arg(long)]
        group: u32,
        /// The node giving up its replica.
        #[arg(long)]
        from: u64,
        /// The node taking it.
        #[arg(long)]
        to: u64,
    },
    /// Move replicas from the nodes holding most to those holding fewest until no two
    /// differ by more than one (after a node was added).
    Rebalance(ClusterTarget),
    /// Move every data group replica off a node (before removing it), one at a time,
    /// to the nodes holding fewest.
    Drain {
        #[command(flatten)]
        target: ClusterTarget,
        /// The node to empty.
        #[arg(long)]
        node_id: u64,
    },
}
