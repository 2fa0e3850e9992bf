//! `quiver sizing load --rate ROWS_PER_S`: one open-loop run from the command line,
//! audited per batch by the server afterwards, printed as JSON.

use serde::Serialize;

use crate::audit::{audit, Audit};
use crate::batch_counts::count_batches;
use crate::error::{Error, Result};
use crate::load::{client_for, now_ns, LoadArgs};
use crate::open_loop::{self, Outcome, Spec};
use crate::target::Target;

/// Seconds an open-loop run lasts when neither `--duration-s` nor `--rows` is given.
const DEFAULT_DURATION_S: f64 = 10.0;
/// Bytes encoded ahead of the schedule at most (the rest is encoded while it runs).
pub const AHEAD_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// The JSON `load --rate` prints.
#[derive(Debug, Serialize)]
pub struct RateReport {
    /// Node URL.
    pub url: String,
    /// Database written.
    pub database: String,
    /// What was offered.
    pub spec: Spec,
    /// What happened.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Acknowledged rows per second over the run.
    pub rows_per_s: f64,
    /// Per-batch count by the server, unless `--no-verify`.
    pub audit: Option<Audit>,
    /// Whether every acknowledged batch is stored whole, once (and nothing refused is).
    pub persisted_equals_acked: Option<bool>,
}

/// Runs `load --rate` and prints its report; fails when persisted ≠ acknowledged.
pub async fn run_rate_load(args: LoadArgs) -> Result<()> {
    let report = rate_load(&args).await?;
    let text =
        serde_json::to_string_pretty(&report).map_err(|e| Error::malformed("load report", e))?;
    println!("{text}");
    if report.persisted_equals_acked == Some(false) {
        return Err(Error::GateFailed(
            "persisted rows differ from acknowledged rows (see \"audit\")".into(),
        ));
    }
    Ok(())
}

/// One open-loop run as the flags describe it.
pub async fn rate_load(args: &LoadArgs) -> Result<RateReport> {
    let rate = args.rate.unwrap_or(0.0);
    if rate.is_nan()
        || rate <= 0.0
        || args.batch_size == 0
        || args.hosts == 0
        || args.interval_ms == 0
    {
        return Err(Error::InvalidArgs(
            "--rate, --batch-size, --hosts and --interval-ms must be more than 0".into(),
        ));
    }
    let duration_s = match (args.duration_s, args.rows) {
        (Some(s), _) => s,
        (None, Some(rows)) => rows as f64 / rate,
        (None, None) => DEFAULT_DURATION_S,
    };
    let spec = Spec {
        format: args.format,
        measurement: args.measurement.clone(),
        rate_rows_per_s: rate,
        duration_s,
        batch_rows: args.batch_size,
        hosts: args.hosts,
        start_ns: now_ns()?,
        interval_ns: args.interval_ms as i64 * 1_000_000,
        in_flight_max: args.in_flight_max.max(1),
        request_timeout_ms: args.timeout_s * 1000,
        behind_give_up_ms: (duration_s * 1000.0) as u64 + 5_000,
        ahead_bytes_max: AHEAD_BYTES_MAX,
    };
    let target = Target {
        urls: vec![args.url.clone()],
        token: args.token.clone(),
        database: args.database.clone(),
        client: client_for(args, args.in_flight_max.min(1024))?,
    };
    let outcome = open_loop::run(&spec, &target).await?;
    let audit = if args.no_verify {
        None
    } else {
        let stored = count_batches(&target, &spec.shape(), spec.batch_rows, spec.batches()).await?;
        Some(audit(&outcome.batch_outcomes, spec.batch_rows, &stored))
    };
    Ok(RateReport {
        url: args.url.clone(),
        database: args.database.clone(),
        rows_per_s: outcome.acked_rows as f64
            / outcome
                .wall_s
                .max(outcome.offered_rows as f64 / spec.rate_rows_per_s)
                .max(1e-9),
        persisted_equals_acked: audit.as_ref().map(Audit::persisted_equals_acked),
        audit,
        spec,
        outcome,
    })
}
