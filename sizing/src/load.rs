//! `quiver sizing load`: the load generator. Closed loop by default (`--workers`
//! requests in flight, each sent when the last one answered: how fast can it go?);
//! open loop with `--rate` (a fixed schedule: what happens at this rate?, see
//! [`crate::open_loop`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Mutex as StdMutex;

use crate::batch::{encode_columnar_batch, encode_lp_batch, BatchShape, RowKind};
use crate::error::{Error, Result};
use crate::load_report::{Latency, LoadReport};

/// Most error messages kept for the report.
const ERRORS_KEPT_MAX: usize = 10;

/// How batches are encoded and where they are posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WireFormat {
    /// Arc's columnar MessagePack.
    Msgpack,
    /// InfluxDB line protocol, nanosecond timestamps.
    Lp,
}

impl WireFormat {
    /// The name used in flags and reports.
    pub fn name(self) -> &'static str {
        match self {
            WireFormat::Msgpack => "msgpack",
            WireFormat::Lp => "lp",
        }
    }
}

/// Flags of `quiver sizing load`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Node to write to.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// API token (or QUIVER_TOKEN).
    #[arg(long, env = "QUIVER_TOKEN")]
    pub token: Option<String>,
    /// CA (PEM) an https node's certificate must chain to (or QUIVER_CA); only it is
    /// trusted.
    #[arg(long, env = "QUIVER_CA")]
    pub ca: Option<std::path::PathBuf>,
    /// Database (x-arc-database).
    #[arg(long, default_value = "sizing")]
    pub database: String,
    /// Measurement.
    #[arg(long, default_value = "cpu")]
    pub measurement: String,
    /// Wire format: `msgpack` (Arc's columnar, to `/api/v1/write/msgpack`) or `lp`
    /// (line protocol, to `/write?db=`, which InfluxDB and VictoriaMetrics also serve).
    #[arg(long, value_enum, default_value_t = WireFormat::Msgpack)]
    pub format: WireFormat,
    /// Rows per request.
    #[arg(long, default_value_t = 5000)]
    pub batch_size: u64,
    /// Concurrent requests.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Distinct `host` tag values.
    #[arg(long, default_value_t = 1000)]
    pub hosts: u64,
    /// Stop after this many seconds...
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// ... or after this many rows (default: 1,000,000 if neither is given).
    #[arg(long)]
    pub rows: Option<u64>,
    /// Open loop: offer this many rows per second on a fixed schedule (latency counts
    /// from each batch's scheduled send time; refusals are not retried). Runs for
    /// `--duration-s` (default 10).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open loop: requests in flight at most.
    #[arg(long, default_value_t = 256)]
    pub in_flight_max: usize,
    /// Which rows to send: Arc's (a `host` tag, three floats) or TSBS devops cpu-only's
    /// (ten tags, ten integers).
    #[arg(long, value_enum, default_value_t = RowKind::Arc)]
    pub shape: RowKind,
    /// Time step between a host's rows, in milliseconds.
    #[arg(long, default_value_t = 10)]
    pub interval_ms: u64,
    /// Encode every batch before the clock starts (needs `--rows`; holds every body in
    /// memory), so that during the run the sender spends no CPU on encoding, which on
    /// a machine shared with the node is CPU taken from it.
    #[arg(long)]
    pub prepared: bool,
    /// Skip the persisted == acked check.
    #[arg(long)]
    pub no_verify: bool,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_s: u64,
    /// How long one batch may keep being retried after 429/503 answers (which promise
    /// that nothing of it was written), in seconds; 0 counts a refusal as a failure.
    #[arg(long, default_value_t = 120)]
    pub retry_refused_s: u64,
}

/// First wait after a refusal that names no `Retry-After`; doubles up to the maximum.
const RETRY_BACKOFF_FIRST: Duration = Duration::from_millis(50);
/// Longest wait between two tries of one batch.
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);

struct Shared {
    next_seq: AtomicU64,
    rows_limit: Option<u64>,
    deadline: Option<Instant>,
    acked: AtomicU64,
    failed_rows: AtomicU64,
    failed_requests: AtomicU64,
    refused: AtomicU64,
    errors: StdMutex<Vec<String>>,
}

impl Shared {
    /// Claims the next batch of sequence numbers, or `None` when the run is over.
    fn claim(&self, batch: u64) -> Option<(u64, u64)> {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let first = self.next_seq.fetch_add(batch, Ordering::Relaxed);
        match self.rows_limit {
            Some(limit) if first >= limit => None,
            Some(limit) => Some((first, batch.min(limit - first))),
            None => Some((first, batch)),
        }
    }

    fn fail(&self, rows: u64, message: String) {
        self.failed_rows.fetch_add(rows, Ordering::Relaxed);
        self.failed_requests.fetch_add(1, Ordering::Relaxed);
        self.note(message);
    }

    fn note(&self, message: String) {
        if let Ok(mut errors) = self.errors.lock() {
            if errors.len() < ERRORS_KEPT_MAX {
                errors.push(message);
            }
        }
    }
}

/// Runs a load and prints the JSON report on stdout.
pub async fn run_load(args: LoadArgs) -> Result<()> {
    if args.rate.is_some() {
        return crate::rate_load::run_rate_load(args).await;
    }
    let report = load(args).await?;
    let text =
        serde_json::to_string_pretty(&report).map_err(|e| Error::malformed("load report", e))?;
    println!("{text}");
    if report.persisted_equals_acked == Some(false) {
        return Err(Error::GateFailed(
            "persisted rows differ from acknowledged rows".into(),
        ));
    }
    Ok(())
}

/// An HTTP client for `args` (trusting only `--ca` when given).
pub(crate) fn client_for(args: &LoadArgs, idle_per_host: usize) -> Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .timeout(Duration::from_secs(args.timeout_s))
        .pool_max_idle_per_host(idle_per_host);
    if let Some(ca) = &args.ca {
        let pem = std::fs::read(ca).map_err(|e| Error::io(ca, e))?;
        let roots = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            Error::InvalidArgs(format!(
                "--ca {}: not a PEM certificate file: {e}",
                ca.display()
            ))
        })?;
        if roots.is_empty() {
            return Err(Error::InvalidArgs(format!(
                "--ca {}: no CERTIFICATE block in the file",
                ca.display()
            )));
        }
        builder = roots.into_iter().fold(
            builder.use_rustls_tls().tls_built_in_root_certs(false),
            reqwest::ClientBuilder::add_root_certificate,
        );
    }
    builder
        .build()
        .map_err(|e| Error::http("building the HTTP client", e))
}

/// Runs a load and returns its report.
pub async fn load(args: LoadArgs) -> Result<LoadReport> {
    if args.batch_size == 0 || args.workers == 0 || args.hosts == 0 {
        return Err(Error::InvalidArgs(
            "--batch-size, --workers and --hosts must be at least 1".into(),
        ));
    }
    let rows_limit = match (args.rows, args.duration_s) {
        (None, None) => Some(1_000_000),
        (rows, _) => rows,
    };
    let start_ns = now_ns()?;
    let shape = Arc::new(BatchShape {
        measurement: args.measurement.clone(),
        hosts: args.hosts,
        start_ns,
        interval_ns: (args.interval_ms as i64) * 1_000_000,
        kind: args.shape,
    });
    let names = Arc::new(args.shape.host_names(args.hosts));
    let client = client_for(&args, args.workers)?;
    let prepared = match (args.prepared, rows_limit) {
        (false, _) => None,
        (true, Some(rows)) if args.duration_s.is_none() => Some(Arc::new(prepare_bodies(
            &shape,
            &names,
            args.format,
            rows,
            args.batch_size,
        )?)),
        (true, _) => {
            return Err(Error::InvalidArgs(
                "--prepared needs --rows (and no --duration-s): every body is encoded first".into(),
            ))
        }
    };
    let started = Instant::now();
    let shared = Arc::new(Shared {
        next_seq: AtomicU64::new(0),
        rows_limit,
        deadline: args
            .duration_s
            .map(|s| started + Duration::from_secs_f64(s)),
        acked: AtomicU64::new(0),
        failed_rows: AtomicU64::new(0),
        failed_requests: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        errors: StdMutex::new(Vec::new()),
    });
    let progress = match rows_limit {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new((args.duration_s.unwrap_or(0.0) * 1000.0) as u64),
    };
    progress.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {msg}")
            .map_err(|e| Error::malformed("progress style", e))?,
    );
    let base = args.url.trim_end_matches('/');
    let (url, content_type) = match args.format {
        WireFormat::Msgpack => (
            format!("{base}/api/v1/write/msgpack"),
            "application/msgpack",
        ),
        WireFormat::Lp => (
            format!("{base}/write?db={}&precision=ns", args.database),
            "text/plain; charset=utf-8",
        ),
    };
    let format = args.format;
    let mut tasks = Vec::with_capacity(args.workers);
    for _ in 0..args.workers {
        let (client, shared, shape, names, url, prepared) = (
            client.clone(),
            shared.clone(),
            shape.clone(),
            names.clone(),
            url.clone(),
            prepared.clone(),
        );
        let (token, database, batch_size, retry_refused_s) = (
            args.token.clone(),
            args.database.clone(),
            args.batch_size,
            args.retry_refused_s,
        );
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::new();
            while let Some((first, rows)) = shared.claim(batch_size) {
                // Shared by every try of this batch.
                let body = match prepared.as_ref().and_then(|p| p.get(&first)) {
                    Some(body) => body.clone(),
                    None => encode_body(format, &shape, &names, first, rows),
                };
                let sent = Instant::now();
                // No end if the budget overflows the clock: retry as long as the run lasts.
                let give_up_at = sent.checked_add(Duration::from_secs(retry_refused_s));
                let mut backoff = RETRY_BACKOFF_FIRST;
                loop {
                    let mut request = client
                        .post(&url)
                        .header("content-type", content_type)
                        .header("x-arc-database", &database)
                        .body(body.clone());
                    if let Some(t) = &token {
                        request = request.bearer_auth(t);
                    }
                    let response = match request.send().await {
                        Ok(response) => response,
                        // The outcome is unknown: retrying could write the rows twice.
                        Err(e) => {
                            shared.fail(rows, format!("transport: {e}"));
                            break;
                        }
                    };
                    let status = response.status();
                    if status.is_success() {
                        // Latency as the client lives it: first try to acknowledgement.
                        latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        shared.acked.fetch_add(rows, Ordering::Relaxed);
                        break;
                    }
                    let refused = status.as_u16() == 429 || status.as_u16() == 503;
                    let wait = retry_after(&response).unwrap_or(backoff);
                    let text = response.text().await.unwrap_or_default();
                    let message = format!(
                        "HTTP {status}: {}",
                        text.chars().take(200).collect::<String>()
                    );
                    if !refused {
                        shared.fail(rows, message);
                        break;
                    }
                    shared.refused.fetch_add(1, Ordering::Relaxed);
                    let resume_at = Instant::now() + wait;
                    if give_up_at.is_some_and(|end| resume_at > end) {
                        shared.fail(rows, format!("gave up after refusals: {message}"));
                        break;
                    }
                    if shared.deadline.is_some_and(|end| resume_at > end) {
                        shared.fail(rows, format!("refused as the run ended: {message}"));
                        break;
                    }
                    shared.note(message);
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
                }
            }
            latencies
        }));
    }
    let ticker = {
        let (shared, progress) = (shared.clone(), progress.clone());
        let by_time = rows_limit.is_none();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let acked = shared.acked.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64();
                progress.set_position(if by_time {
                    started.elapsed().as_millis() as u64
                } else {
                    acked
                });
                progress.set_message(format!(
                    "{acked} acked, {:.0} rows/s, {} failed",
                    acked as f64 / secs,
                    shared.failed_rows.load(Ordering::Relaxed)
                ));
            }
        })
    };
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.map_err(|e| Error::malformed("load worker", e))?);
    }
    ticker.abort();
    progress.finish_and_clear();
    let duration_s = started.elapsed().as_secs_f64();
    let acked = shared.acked.load(Ordering::Relaxed);
    let failed_rows = shared.failed_rows.load(Ordering::Relaxed);
    let rows_sent = acked + failed_rows;
    let mut report = LoadReport {
        url: args.url.clone(),
        format: args.format.name().to_string(),
        database: args.database.clone(),
        measurement: args.measurement.clone(),
        workers: args.workers,
        batch_size: args.batch_size,
        hosts: args.hosts,
        duration_s,
        offered_rows: rows_sent,
        acked_rows: acked,
        failed_rows,
        failed_requests: shared.failed_requests.load(Ordering::Relaxed),
        refused_requests: shared.refused.load(Ordering::Relaxed),
        rows_per_s: acked as f64 / duration_s,
        latency_ms: Latency::from_micros(latencies),
        persisted_rows: None,
        persisted_equals_acked: None,
        errors: shared.errors.lock().map(|e| e.clone()).unwrap_or_default(),
    };
    if !args.no_verify {
        let last_seq = shared.next_seq.load(Ordering::Relaxed);
        let end_ns = shape.time_of(last_seq) + shape.interval_ns;
        let persisted = count_rows(&client, &args, start_ns, end_ns).await?;
        report.persisted_rows = Some(persisted);
        report.persisted_equals_acked = Some(persisted == acked);
    }
    Ok(report)
}

fn encode_body(
    format: WireFormat,
    shape: &BatchShape,
    names: &[String],
    first: u64,
    rows: u64,
) -> bytes::Bytes {
    bytes::Bytes::from(match format {
        WireFormat::Msgpack => encode_columnar_batch(shape, names, first, rows),
        WireFormat::Lp => encode_lp_batch(shape, names, first, rows),
    })
}

/// Bodies prepared before a `--prepared` run, by the sequence number of their first row
/// (the batches [`Shared::claim`] hands out for `rows` rows).
type PreparedBodies = std::collections::HashMap<u64, bytes::Bytes>;

/// Encodes every batch of a `rows`-row run, on every core.
fn prepare_bodies(
    shape: &BatchShape,
    names: &[String],
    format: WireFormat,
    rows: u64,
    batch_size: u64,
) -> Result<PreparedBodies> {
    let firsts: Vec<u64> = (0..rows).step_by(batch_size as usize).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = firsts.len().div_ceil(threads).max(1);
    let bodies = std::thread::scope(|scope| {
        let parts: Vec<_> = firsts
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|&first| {
                            let n = batch_size.min(rows - first);
                            (first, encode_body(format, shape, names, first, n))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .map(|part| part.join())
            .collect::<std::result::Result<Vec<_>, _>>()
    })
    .map_err(|_| Error::malformed("preparing the bodies", "an encoding thread panicked"))?;
    Ok(bodies.into_iter().flatten().collect())
}

/// The wait a 429/503 asks for, capped at [`RETRY_BACKOFF_MAX`].
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let seconds: u64 = response
        .headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(RETRY_BACKOFF_MAX))
}

/// Counts the rows of the run's time range through the query API.
async fn count_rows(
    client: &reqwest::Client,
    args: &LoadArgs,
    start_ns: i64,
    end_ns: i64,
) -> Result<u64> {
    let sql = format!(
        "SELECT count(*) AS n FROM \"{}\" WHERE time >= to_timestamp_nanos({start_ns}) AND time < to_timestamp_nanos({end_ns})",
        args.measurement.replace('"', "\"\"")
    );
    let mut request = client
        .post(format!("{}/api/v1/query", args.url.trim_end_matches('/')))
        .header("x-arc-database", &args.database)
        .json(&serde_json::json!({"sql": sql}));
    if let Some(t) = &args.token {
        request = request.bearer_auth(t);
    }
    let response = request
        .send()
        .await
        .map_err(|e| Error::http("count query", e))?;
    let status = response.status();
    let body: serde_json::Value = response
        .json()
        .await
        .map_err(|e| Error::http("count query answer", e))?;
    if !status.is_success() {
        return Err(Error::Server {
            what: "count query".into(),
            status: status.as_u16(),
            body: body.to_string(),
        });
    }
    body["data"][0][0]
        .as_u64()
        .ok_or_else(|| Error::malformed("count query", body))
}

/// The wall clock in nanoseconds since the epoch.
pub(crate) fn now_ns() -> Result<i64> {
    chrono::Utc::now()
        .timestamp_nanos_opt()
        .ok_or_else(|| Error::InvalidArgs("the clock is out of the nanosecond range".into()))
}
