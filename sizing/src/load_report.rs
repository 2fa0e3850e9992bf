//! The JSON summary a load run prints.

use serde::Serialize;

/// Latency percentiles of acknowledged requests, in milliseconds.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest.
    pub max: f64,
}

impl Latency {
    /// Percentiles of request latencies given in microseconds.
    pub fn from_micros(mut samples: Vec<u32>) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        let at =
            |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
        Latency {
            p50: at(0.50),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// What a load run did.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Node URL.
    pub url: String,
    /// Wire format.
    pub format: String,
    /// Database written.
    pub database: String,
    /// Measurement written.
    pub measurement: String,
    /// Concurrent workers.
    pub workers: usize,
    /// Rows per request.
    pub batch_size: u64,
    /// Distinct hosts.
    pub hosts: u64,
    /// Wall time of the write phase.
    pub duration_s: f64,
    /// Rows sent (acked + failed).
    pub offered_rows: u64,
    /// Rows in 2xx answers.
    pub acked_rows: u64,
    /// Rows in requests that failed (error status or transport error).
    pub failed_rows: u64,
    /// Requests that failed.
    pub failed_requests: u64,
    /// 429/503 answers (nothing written): each was retried after its `Retry-After`
    /// (or a backoff) until `--retry-refused-s` ran out, only then counted as failed.
    pub refused_requests: u64,
    /// Acknowledged rows per second.
    pub rows_per_s: f64,
    /// Request latency of acknowledged requests.
    pub latency_ms: Latency,
    /// Rows a `count(*)` finds in the run's time range, if checked.
    pub persisted_rows: Option<u64>,
    /// Whether persisted == acked.
    pub persisted_equals_acked: Option<bool>,
    /// The first few errors seen.
    pub errors: Vec<String>,
}
