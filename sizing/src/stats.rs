//! Percentiles and means, the way every table of the report uses them.

use serde::{Deserialize, Serialize};

/// Latency percentiles, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Slowest.
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of samples in microseconds; all `NaN` when there are
    /// none (an empty run has no latency, not a latency of zero).
    pub fn from_micros(mut samples: Vec<u32>) -> Percentiles {
        if samples.is_empty() {
            return Percentiles {
                count: 0,
                p50: f64::NAN,
                p90: f64::NAN,
                p95: f64::NAN,
                p99: f64::NAN,
                p999: f64::NAN,
                max: f64::NAN,
            };
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let rank = (q * samples.len() as f64).ceil() as usize;
            samples[rank.clamp(1, samples.len()) - 1] as f64 / 1000.0
        };
        Percentiles {
            count: samples.len() as u64,
            p50: at(0.50),
            p90: at(0.90),
            p95: at(0.95),
            p99: at(0.99),
            p999: at(0.999),
            max: at(1.0),
        }
    }

    /// Percentiles of durations in milliseconds.
    pub fn from_ms(samples: &[f64]) -> Percentiles {
        Percentiles::from_micros(
            samples
                .iter()
                .map(|ms| (ms * 1000.0).round().clamp(0.0, u32::MAX as f64) as u32)
                .collect(),
        )
    }
}

/// Mean of the values, `None` for none.
pub fn mean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let p = Percentiles::from_micros((1..=100).map(|ms| ms * 1000).collect());
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(p.count, 100);
        let one = Percentiles::from_micros(vec![7000]);
        assert_eq!((one.p50, one.p999), (7.0, 7.0));
        assert!(Percentiles::from_micros(vec![]).p99.is_nan());
    }
}
