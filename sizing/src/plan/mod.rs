//! `quiver sizing plan`: a machine size for a workload, from a calibration campaign's
//! measurements (or the reference machine's), with every assumption printed.

mod calibration;
mod model;
mod render;

use std::path::PathBuf;

pub use calibration::Calibration;
pub use model::{plan, Assumptions, Workload};
pub use render::{assumptions, table, PlanOutput};

use crate::error::{Error, Result};
use crate::units::parse_duration;

/// Flags of `quiver sizing plan`.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    /// Rows written per second, cluster-wide.
    #[arg(long)]
    pub rows_per_s: f64,
    /// Fields per row (besides `time` and tags).
    #[arg(long, default_value_t = 10)]
    pub fields: u32,
    /// Distinct series (tag sets).
    #[arg(long, default_value_t = 100_000)]
    pub series: u64,
    /// How long rows are kept (`30d`, `12h`, `2w`).
    #[arg(long, default_value = "30d")]
    pub retention: String,
    /// Replicas (voters); each holds all the data.
    #[arg(long, default_value_t = 3)]
    pub replicas: u32,
    /// Query clients at once.
    #[arg(long, default_value_t = 10)]
    pub query_concurrency: u32,
    /// A campaign's `report.json` (`quiver sizing run`): its measured coefficients
    /// replace the reference machine's.
    #[arg(long)]
    pub calibration: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Share of every measured capacity kept free, in percent.
    #[arg(long, default_value_t = 50.0)]
    pub headroom_percent: f64,
    /// Share of each disk kept free, in percent.
    #[arg(long, default_value_t = 20.0)]
    pub disk_free_percent: f64,
    /// Rows per write request (worst case: one WAL fdatasync per request).
    #[arg(long, default_value_t = 5_000.0)]
    pub rows_per_request: f64,
    /// Rows a typical query reads (the campaign's mix reads whole datasets).
    #[arg(long, default_value_t = 20_000_000.0)]
    pub query_rows_scanned: f64,
    /// p95 target of the slowest query type, in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub query_p95_target_s: f64,
}

impl PlanArgs {
    /// The workload and assumptions the flags describe, checked.
    pub fn to_model(&self) -> Result<(Workload, Assumptions)> {
        let finite_positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(Error::InvalidArgs(format!("--{name} must be more than 0")))
            }
        };
        let percent = |name: &str, v: f64| {
            if (0.0..100.0).contains(&v) {
                Ok(v / 100.0)
            } else {
                Err(Error::InvalidArgs(format!("--{name} must be in [0, 100)")))
            }
        };
        let workload = Workload {
            rows_per_s: finite_positive("rows-per-s", self.rows_per_s)?,
            fields: self.fields.max(1),
            series: self.series,
            retention_s: parse_duration(&self.retention)
                .map_err(|e| Error::InvalidArgs(format!("--retention {e}")))?
                .as_secs_f64(),
            replicas: self.replicas.max(1),
            query_concurrency: self.query_concurrency,
        };
        let assumptions = Assumptions {
            headroom_fraction: percent("headroom-percent", self.headroom_percent)?,
            disk_free_fraction: percent("disk-free-percent", self.disk_free_percent)?,
            rows_per_request: finite_positive("rows-per-request", self.rows_per_request)?,
            query_rows_scanned: finite_positive("query-rows-scanned", self.query_rows_scanned)?,
            query_p95_target_s: finite_positive("query-p95-target-s", self.query_p95_target_s)?,
            ..Assumptions::default()
        };
        Ok((workload, assumptions))
    }
}

/// Computes the plan the flags ask for.
pub fn plan_output(args: &PlanArgs) -> Result<PlanOutput> {
    let (workload, model_assumptions) = args.to_model()?;
    let (calibration, source) = match &args.calibration {
        Some(path) => {
            let c = Calibration::from_report_file(path)?;
            let source = format!("calibration {} ({})", path.display(), c.source);
            (c, source)
        }
        None => (
            Calibration::reference(),
            "reference machine default (docs/sizing.md lists how each was chosen)".to_string(),
        ),
    };
    let plan = plan(&workload, &calibration, &model_assumptions);
    Ok(PlanOutput {
        workload,
        plan,
        assumptions: assumptions(&calibration, &source, &model_assumptions),
    })
}

/// Runs `quiver sizing plan`: prints the table or the JSON.
pub fn run_plan(args: &PlanArgs) -> Result<()> {
    use std::io::Write;
    let output = plan_output(args)?;
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&output)
            .map_err(|e| Error::malformed("plan as JSON", e))?;
        text.push('\n');
        text
    } else {
        table(&output)
    };
    // A reader that stopped early (`| head`) is not an error of the planner.
    let _ = std::io::stdout().write_all(text.as_bytes());
    Ok(())
}
