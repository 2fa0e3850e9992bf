//! Command-line interface: `quiver serve | sizing ...`.

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
    /// `none` turns authentication off (local development only).
    #[arg(long)]
    pub auth: Option<String>,
}

/// `quiver sizing ...`
#[derive(Debug, Subcommand)]
pub enum SizingCommand {
    /// Post Arc-shaped MessagePack batches and check persisted == acked.
    Load(quiver_sizing::LoadArgs),
}
