//! `quiver import`: history from files into a running node, over the ordinary write
//! doors (line protocol as it is, CSV and Parquet as MessagePack columns), with a
//! progress bar, a resume point per file, and at the end a count of what the node
//! holds against what it acknowledged.
//!
//! Every request carries a write id made from the file and the chunk's place in it,
//! so a chunk sent again (after a 504, a lost answer or a restarted import) is stored
//! once by the node's write-id window. Refusals for load (429/503) are waited out and
//! sent again; a chunk the node refuses as bad input is reported with its lines and the
//! import goes on with the next.

mod arrow_rows;
mod check;
mod line_protocol;
mod remote;
mod resume;
mod send;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use check::Acked;

/// `quiver import` flags.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    #[command(flatten)]
    pub target: crate::cli::ClusterTarget,
    /// Database the rows go to.
    #[arg(long)]
    pub database: String,
    /// File format (default: from each file's extension: `.csv`, `.parquet`, else line
    /// protocol).
    #[arg(long, value_parser = ["lp", "csv", "parquet"])]
    pub format: Option<String>,
    /// Unit of line-protocol timestamps and of integer `time` columns: ns, us, ms, s.
    #[arg(long, default_value = "ns", value_parser = ["ns", "us", "ms", "s"])]
    pub precision: String,
    /// Measurement of CSV and Parquet rows (default: the file's name without extension).
    #[arg(long)]
    pub measurement: Option<String>,
    /// Bytes of line protocol (or rows of CSV/Parquet x 100) per request.
    #[arg(long, default_value_t = 4 * 1024 * 1024)]
    pub chunk_bytes: usize,
    /// Start every file from its beginning, ignoring resume points.
    #[arg(long)]
    pub restart: bool,
    /// Files to load: local paths, or objects in a bucket (`s3://bucket/path`,
    /// credentials from the `AWS_*` variables).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// A file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    LineProtocol,
    Csv,
    Parquet,
}

fn format_of(args: &ImportArgs, file: &Path) -> Format {
    let named = args.format.as_deref().or_else(|| {
        file.extension()
            .and_then(|e| e.to_str())
            .map(|e| match e.to_ascii_lowercase().as_str() {
                "csv" => "csv",
                "parquet" => "parquet",
                _ => "lp",
            })
    });
    match named {
        Some("csv") => Format::Csv,
        Some("parquet") => Format::Parquet,
        _ => Format::LineProtocol,
    }
}

/// Nanoseconds in one unit of `precision`.
fn unit_ns(precision: &str) -> i64 {
    match precision {
        "s" => 1_000_000_000,
        "ms" => 1_000_000,
        "us" => 1_000,
        _ => 1,
    }
}

/// Loads every file, then checks that the node holds at least what it acknowledged.
pub async fn run(args: ImportArgs) -> Result<()> {
    quiver_storage::validate_database_name(&args.database)
        .map_err(|e| anyhow::anyhow!("--database: {e}"))?;
    let sender = send::Sender::new(&args.target, &args.database)?;
    let mut acked = Acked::default();
    let mut rejected_total = 0u64;
    for named in &args.files {
        let remote = remote::is_remote(named);
        let copy = if remote {
            remote::local_copy(&named.to_string_lossy()).await?
        } else {
            named.clone()
        };
        let file = &copy;
        let format = format_of(&args, file);
        let outcome = match format {
            Format::LineProtocol => line_protocol::load(&args, &sender, file, &mut acked).await,
            Format::Csv | Format::Parquet => {
                let measurement = match &args.measurement {
                    Some(m) => m.clone(),
                    None => file
                        .file_stem()
                        .and_then(|s| s.to_str())
                        .map(str::to_string)
                        .with_context(|| format!("{}: no measurement name", file.display()))?,
                };
                arrow_rows::load(
                    &args,
                    &sender,
                    file,
                    format == Format::Csv,
                    &measurement,
                    &mut acked,
                )
                .await
            }
        }
        .with_context(|| format!("importing {}", named.display()))?;
        if remote {
            remote::remove_copy(&copy);
        }
        rejected_total += outcome.rejected;
    }
    let report = check::compare(&sender, &acked).await?;
    for line in &report.lines {
        eprintln!("{line}");
    }
    eprintln!(
        "{} rows acknowledged in all, from {} files",
        acked.rows(),
        args.files.len()
    );
    if !report.missing.is_empty() {
        bail!(
            "the node holds fewer rows than it acknowledged for {}",
            report.missing.join(", ")
        );
    }
    if rejected_total > 0 {
        bail!("{rejected_total} lines or rows were refused as bad input (listed above); every other row is stored");
    }
    Ok(())
}

/// What loading one file came to.
#[derive(Debug, Default)]
struct Outcome {
    /// Lines or rows the node refused as bad input.
    rejected: u64,
}
