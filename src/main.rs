//! The `quiver` binary: parses flags and hands off. Errors become one line and exit 1.

mod admin_client;
mod auth;
mod backup;
mod cli;
mod cluster_cli;
mod config;
mod config_doors;
mod config_env;
mod config_nodes;
mod config_units;
mod continuous;
mod dir_lock;
mod flight;
mod gate;
mod groups;
mod http;
mod import;
mod join;
mod node;
mod pg;
mod query_workers;
mod restore_cli;
mod scram;
mod telemetry;
mod tls;
mod token_cli;
mod verify;

use clap::Parser;

use crate::cli::{Cli, Command, SizingCommand};
use crate::config::{Config, Overrides};

fn main() {
    let cli = Cli::parse();
    tls::install_default_provider();
    let result = match cli.command {
        Command::Serve(args) => run_serve(args),
        Command::Restore(args) => run_restore(args),
        Command::Backup(args) => run_async(backup::take::run(args)),
        Command::Cluster { command } => run_async(cluster_cli::run(command)),
        Command::Verify(args) => run_async(verify::run(args)),
        Command::Token { command } => run_async(token_cli::run(command)),
        Command::Import(args) => run_async(import::run(args)),
        Command::Sizing {
            command: SizingCommand::Load(args),
        } => run_async(async { Ok(quiver_sizing::run_load(args).await?) }),
        Command::Sizing {
            command: SizingCommand::Drill(args),
        } => run_async(quiver_sizing::run_drill(args)),
        Command::Sizing {
            command: SizingCommand::Run(args),
        } => run_async(async { Ok(quiver_sizing::run_campaign(args).await?) }),
        Command::Sizing {
            command: SizingCommand::Plan(args),
        } => quiver_sizing::run_plan(&args).map_err(anyhow::Error::from),
    };
    if let Err(e) = result {
        eprintln!("quiver: {e:#}");
        std::process::exit(1);
    }
}

/// Stack of every runtime thread: SQL planning recurses over the expression tree, and a
/// deep (but legal) expression must fail with an error, not overflow a 2 MiB stack.
const THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

fn run_async<F: std::future::Future<Output = anyhow::Result<()>>>(f: F) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(THREAD_STACK_BYTES)
        .build()?;
    runtime.block_on(f)
}

fn run_serve(args: cli::ServeArgs) -> anyhow::Result<()> {
    let config = load_config(args)?;
    telemetry::init_logging(&config.log.level);
    run_async(node::serve(config))
}

fn run_restore(args: cli::RestoreArgs) -> anyhow::Result<()> {
    let mut config = load_config(args.serve)?;
    join::apply_recorded(&mut config)?;
    telemetry::init_logging(&config.log.level);
    match args.from {
        Some(from) => run_async(backup::restore::run(config, from, args.manifest)),
        None => run_async(restore_cli::run(config)),
    }
}

/// The configuration `serve` and `restore` share: file, then environment, then flags.
fn load_config(args: cli::ServeArgs) -> anyhow::Result<Config> {
    // QUIVER_AUTH_ENABLED=false reaches auth.enabled through the environment layer.
    let auth_disabled = match args.auth.as_deref() {
        None => false,
        Some("none") => true,
        Some(other) => anyhow::bail!("--auth {other:?}: the only value is `none`"),
    };
    let overrides = Overrides {
        http_addr: args.http_addr,
        pg_addr: args.pg_addr,
        flight_addr: args.flight_addr,
        data_dir: args.data_dir,
        wal_dir: args.wal_dir,
        node_id: args.node_id,
        peers: args.peers,
        join: args.join,
        auth_disabled,
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
        tls_ca: args.tls_ca,
    };
    Config::load(args.config.as_deref(), std::env::vars(), &overrides)
}
