//! The open-loop, constant-rate generator (`quiver sizing load --rate`).
//!
//! Batch `i` is *due* at `t0 + i × batch_rows / rate`, whatever happened to the
//! batches before it, and its latency counts from that due time, not from when it was
//! actually sent: a stalled server makes later batches late, and their latency shows
//! it, instead of the generator politely waiting (coordinated omission). Requests in
//! flight are bounded (`in_flight_max`); a send delayed by that bound is the server's
//! delay, a send delayed by the generator itself (encoder behind, timer starved of
//! CPU) is counted separately so a generator-bound run is reported as one. Refusals
//! (429/503) are not retried: retrying would turn the open loop back into a closed one;
//! they count as offered and not acknowledged.

mod encoder;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::audit::BatchOutcome;
use crate::batch::{host_names, BatchShape};
use crate::error::{Error, Result};
use crate::load::WireFormat;
use crate::resources::procfs;
use crate::stats::Percentiles;
use crate::target::Target;

/// A send this late counts as late.
const LATE: Duration = Duration::from_millis(10);
/// Error messages kept per run.
const ERRORS_KEPT_MAX: usize = 10;

/// What to send, how fast.
#[derive(Debug, Clone, Serialize)]
pub struct Spec {
    /// Wire format.
    pub format: WireFormat,
    /// Measurement written.
    pub measurement: String,
    /// Offered rows per second.
    pub rate_rows_per_s: f64,
    /// Seconds of schedule.
    pub duration_s: f64,
    /// Rows per request.
    pub batch_rows: u64,
    /// Distinct `host` values.
    pub hosts: u64,
    /// Time of row 0, ns.
    pub start_ns: i64,
    /// Time step between a host's rows, ns.
    pub interval_ns: i64,
    /// Requests in flight at most.
    pub in_flight_max: usize,
    /// Per-request timeout, ms.
    pub request_timeout_ms: u64,
    /// Stop sending when this far behind schedule, ms (the rest is "not sent").
    pub behind_give_up_ms: u64,
    /// Most bytes encoded ahead of the schedule.
    pub ahead_bytes_max: u64,
}

impl Spec {
    /// Batches in the schedule.
    pub fn batches(&self) -> u64 {
        ((self.rate_rows_per_s * self.duration_s) / self.batch_rows as f64)
            .ceil()
            .max(1.0) as u64
    }

    /// The rows' shape (which host and time row `seq` has).
    pub fn shape(&self) -> BatchShape {
        BatchShape {
            measurement: self.measurement.clone(),
            hosts: self.hosts,
            start_ns: self.start_ns,
            interval_ns: self.interval_ns,
            kind: crate::batch::RowKind::Arc,
        }
    }
}

/// What the generator itself cost and how well it kept the schedule.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GeneratorStats {
    /// CPU of the encoder thread, s.
    pub encode_cpu_s: f64,
    /// CPU of this whole process while the clock ran (sender, encoder, sampler), s.
    pub process_cpu_s: f64,
    /// Batches encoded before the clock started.
    pub encoded_ahead_batches: u64,
    /// Body bytes sent per row.
    pub wire_bytes_per_row: f64,
    /// Sends that found no body ready (the encoder was behind).
    pub encoder_waits: u64,
    /// Sends late because every in-flight slot was taken (the server was slow).
    pub late_in_flight_full: u64,
    /// Sends late although a body and a slot were ready: the sender woke late (its
    /// threads did not get a core in time).
    pub late_timer: u64,
    /// Share of sends that found no body ready.
    pub encoder_wait_fraction: f64,
    /// Share of sends late because the sender woke late.
    pub late_timer_fraction: f64,
}

/// One run's result.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// Rows the schedule offered.
    pub offered_rows: u64,
    /// Rows in 2xx answers.
    pub acked_rows: u64,
    /// Rows refused (429/503).
    pub refused_rows: u64,
    /// Rows in other 4xx answers.
    pub rejected_rows: u64,
    /// Rows of requests without an answer, or with a 5xx other than 503.
    pub unanswered_rows: u64,
    /// Rows never sent (the generator gave up on a stalled server).
    pub not_sent_rows: u64,
    /// Answers by status (`"204"`, `"429"`, `"transport"`).
    pub statuses: BTreeMap<String, u64>,
    /// 5xx answers other than 503.
    pub server_errors: u64,
    /// Requests without an answer.
    pub transport_errors: u64,
    /// Latency from the due time to the answer, acknowledged requests.
    pub latency_ms: Percentiles,
    /// Latency from the actual send to the answer (what a closed-loop tool reports).
    pub service_latency_ms: Percentiles,
    /// Seconds from the first due time until the last answer.
    pub wall_s: f64,
    /// Acknowledged rows per second of the run (by answer time).
    pub acked_rows_per_s_timeline: Vec<u64>,
    /// The generator's own cost.
    pub generator: GeneratorStats,
    /// The first few errors.
    pub errors: Vec<String>,
    /// Per batch: what the client was told (for the audit; not in the report).
    #[serde(skip)]
    pub batch_outcomes: Vec<BatchOutcome>,
}

fn outcome_code(o: BatchOutcome) -> u8 {
    match o {
        BatchOutcome::NotSent => 0,
        BatchOutcome::Acked => 1,
        BatchOutcome::Refused => 2,
        BatchOutcome::Rejected => 3,
        BatchOutcome::Unanswered => 4,
    }
}

fn outcome_of(code: u8) -> BatchOutcome {
    match code {
        1 => BatchOutcome::Acked,
        2 => BatchOutcome::Refused,
        3 => BatchOutcome::Rejected,
        4 => BatchOutcome::Unanswered,
        _ => BatchOutcome::NotSent,
    }
}

/// State the request tasks share with the dispatcher.
struct Shared {
    t0: Instant,
    outcomes: Vec<AtomicU8>,
    acked_by_second: Vec<AtomicU64>,
    latencies_us: Mutex<Vec<u32>>,
    service_us: Mutex<Vec<u32>>,
    statuses: Mutex<BTreeMap<String, u64>>,
    errors: Mutex<Vec<String>>,
}

impl Shared {
    fn count(&self, status: String) {
        if let Ok(mut s) = self.statuses.lock() {
            *s.entry(status).or_insert(0) += 1;
        }
    }

    fn note(&self, message: String) {
        if let Ok(mut e) = self.errors.lock() {
            if e.len() < ERRORS_KEPT_MAX {
                e.push(message);
            }
        }
    }
}

/// Runs the schedule against `target` and returns what happened (no audit: see
/// [`crate::batch_counts`]).
pub async fn run(spec: &Spec, target: &Target) -> Result<Outcome> {
    if spec.rate_rows_per_s.is_nan()
        || spec.rate_rows_per_s <= 0.0
        || spec.batch_rows == 0
        || spec.hosts == 0
    {
        return Err(Error::InvalidArgs(
            "--rate, --batch-size and --hosts must be more than 0".into(),
        ));
    }
    if target.urls.is_empty() {
        return Err(Error::InvalidArgs("no node to write to".into()));
    }
    let batches = spec.batches();
    let body_bytes_guess = spec.batch_rows
        * match spec.format {
            WireFormat::Msgpack => 48,
            WireFormat::Lp => 100,
        };
    // At least a few bodies ahead, at most the whole run.
    let queue_max = (spec.ahead_bytes_max / body_bytes_guess.max(1))
        .max(4)
        .min(batches) as usize;
    let shape = Arc::new(spec.shape());
    let names = Arc::new(host_names(spec.hosts));
    let mut encoder = encoder::start(
        spec.format,
        shape,
        names,
        spec.batch_rows,
        batches,
        queue_max,
    )
    .map_err(|e| Error::io("encoder thread", e))?;
    let _ = (&mut encoder.primed).await;

    let (path, content_type) = match spec.format {
        WireFormat::Msgpack => ("/api/v1/write/msgpack".to_string(), "application/msgpack"),
        WireFormat::Lp => (
            format!("/write?db={}&precision=ns", target.database),
            "text/plain; charset=utf-8",
        ),
    };
    let urls: Vec<String> = target
        .urls
        .iter()
        .map(|u| format!("{}{path}", u.trim_end_matches('/')))
        .collect();
    let period = Duration::from_secs_f64(spec.batch_rows as f64 / spec.rate_rows_per_s);
    let timeout = Duration::from_millis(spec.request_timeout_ms);
    let give_up = Duration::from_millis(spec.behind_give_up_ms);
    let seconds = (spec.duration_s
        + (spec.behind_give_up_ms + spec.request_timeout_ms) as f64 / 1e3)
        .ceil() as usize
        + 2;
    let cpu_start = procfs::process_stat(std::process::id()).map(|s| s.cpu_s);
    let t0 = Instant::now();
    let shared = Arc::new(Shared {
        t0,
        outcomes: (0..batches).map(|_| AtomicU8::new(0)).collect(),
        acked_by_second: (0..seconds).map(|_| AtomicU64::new(0)).collect(),
        latencies_us: Mutex::new(Vec::with_capacity(batches as usize)),
        service_us: Mutex::new(Vec::with_capacity(batches as usize)),
        statuses: Mutex::new(BTreeMap::new()),
        errors: Mutex::new(Vec::new()),
    });
    let slots = Arc::new(Semaphore::new(spec.in_flight_max.max(1)));
    let mut stats = GeneratorStats {
        encoded_ahead_batches: queue_max as u64,
        ..GeneratorStats::default()
    };
    let mut sent = 0u64;
    for i in 0..batches {
        let due = t0 + period.mul_f64(i as f64);
        tokio::time::sleep_until(due).await;
        if due.elapsed() > give_up {
            shared.note(format!(
                "stopped sending {} s behind schedule: the server held every in-flight slot",
                give_up.as_secs()
            ));
            break;
        }
        let (body, waited_for_body) = match encoder.bodies.try_recv() {
            Ok(body) => (body, false),
            Err(_) => {
                stats.encoder_waits += 1;
                match encoder.bodies.recv().await {
                    Some(body) => (body, true),
                    None => break,
                }
            }
        };
        let (permit, waited_for_slot) = match slots.clone().try_acquire_owned() {
            Ok(p) => (p, false),
            Err(_) => match slots.clone().acquire_owned().await {
                Ok(p) => (p, true),
                Err(_) => break,
            },
        };
        if due.elapsed() > LATE {
            if waited_for_slot {
                stats.late_in_flight_full += 1;
            } else if !waited_for_body {
                stats.late_timer += 1;
            }
        }
        sent += 1;
        let request = target
            .post(&urls[i as usize % urls.len()])
            .header("content-type", content_type)
            .timeout(timeout)
            .body(body);
        let shared = shared.clone();
        let rows = spec.batch_rows;
        tokio::spawn(async move {
            let _permit = permit;
            let started = Instant::now();
            let result = request.send().await;
            let answered = Instant::now();
            let outcome = match result {
                Ok(response) => {
                    let status = response.status().as_u16();
                    shared.count(status.to_string());
                    if response.status().is_success() {
                        BatchOutcome::Acked
                    } else {
                        let text = response.text().await.unwrap_or_default();
                        shared.note(format!(
                            "HTTP {status}: {}",
                            text.chars().take(200).collect::<String>()
                        ));
                        match status {
                            429 | 503 => BatchOutcome::Refused,
                            400..=499 => BatchOutcome::Rejected,
                            _ => BatchOutcome::Unanswered,
                        }
                    }
                }
                Err(e) => {
                    shared.count("transport".into());
                    shared.note(format!("transport: {e}"));
                    BatchOutcome::Unanswered
                }
            };
            if outcome == BatchOutcome::Acked {
                let micros = |d: Duration| d.as_micros().min(u32::MAX as u128) as u32;
                if let Ok(mut l) = shared.latencies_us.lock() {
                    l.push(micros(answered.duration_since(due)));
                }
                if let Ok(mut l) = shared.service_us.lock() {
                    l.push(micros(answered.duration_since(started)));
                }
                let second = answered.duration_since(shared.t0).as_secs() as usize;
                if let Some(slot) = shared.acked_by_second.get(second) {
                    slot.fetch_add(rows, Ordering::Relaxed);
                }
            }
            shared.outcomes[i as usize].store(outcome_code(outcome), Ordering::Relaxed);
        });
    }
    // Every request finishes (answered or timed out) before its permit comes back.
    let _all = slots
        .acquire_many(spec.in_flight_max.max(1) as u32)
        .await
        .map_err(|_| Error::InvalidArgs("in-flight slots closed".into()))?;
    let wall_s = t0.elapsed().as_secs_f64();
    drop(encoder.bodies);
    let encoder_stats = encoder.thread.join().unwrap_or_default();
    let cpu_end = procfs::process_stat(std::process::id()).map(|s| s.cpu_s);
    stats.encode_cpu_s = encoder_stats.cpu_s;
    stats.process_cpu_s = cpu_start.zip(cpu_end).map(|(a, b)| b - a).unwrap_or(0.0);
    stats.wire_bytes_per_row = encoder_stats.bytes as f64 / (batches * spec.batch_rows) as f64;
    stats.encoder_wait_fraction = stats.encoder_waits as f64 / sent.max(1) as f64;
    stats.late_timer_fraction = stats.late_timer as f64 / sent.max(1) as f64;

    let batch_outcomes: Vec<BatchOutcome> = shared
        .outcomes
        .iter()
        .map(|o| outcome_of(o.load(Ordering::Relaxed)))
        .collect();
    let rows_with = |wanted: BatchOutcome| {
        batch_outcomes.iter().filter(|o| **o == wanted).count() as u64 * spec.batch_rows
    };
    let statuses = shared
        .statuses
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default();
    let server_errors = statuses
        .iter()
        .filter(|(k, _)| k.starts_with('5') && k.as_str() != "503")
        .map(|(_, v)| *v)
        .sum();
    let mut timeline: Vec<u64> = shared
        .acked_by_second
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .collect();
    let used = (wall_s.ceil() as usize).min(timeline.len());
    timeline.truncate(used.max(1));
    Ok(Outcome {
        offered_rows: batches * spec.batch_rows,
        acked_rows: rows_with(BatchOutcome::Acked),
        refused_rows: rows_with(BatchOutcome::Refused),
        rejected_rows: rows_with(BatchOutcome::Rejected),
        unanswered_rows: rows_with(BatchOutcome::Unanswered),
        not_sent_rows: rows_with(BatchOutcome::NotSent),
        transport_errors: statuses.get("transport").copied().unwrap_or(0),
        server_errors,
        statuses,
        latency_ms: Percentiles::from_micros(take(&shared.latencies_us)),
        service_latency_ms: Percentiles::from_micros(take(&shared.service_us)),
        wall_s,
        acked_rows_per_s_timeline: timeline,
        generator: stats,
        errors: shared.errors.lock().map(|e| e.clone()).unwrap_or_default(),
        batch_outcomes,
    })
}

fn take(samples: &Mutex<Vec<u32>>) -> Vec<u32> {
    samples
        .lock()
        .map(|mut s| std::mem::take(&mut *s))
        .unwrap_or_default()
}
