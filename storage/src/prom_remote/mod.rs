//! Prometheus remote write 1.0, decoded straight into Arrow.
//!
//! A request is a protobuf `WriteRequest` (the HTTP layer has already undone its snappy
//! compression). Each series becomes rows of the measurement named by its `__name__`
//! label: its other labels are tags, each sample is one row with the sample in a float
//! column `value` and its millisecond timestamp as `time`. Series of one metric with
//! different label sets share the measurement; a label a series lacks is null there.
//!
//! Stale markers (the NaN Prometheus writes when a series disappears, bits
//! [`STALE_NAN_BITS`]) say "no value", not a value: they are skipped and counted in
//! [`PromWrite::stale_samples_skipped`]. Any other NaN is a value and is stored. Native
//! histograms (sent only when `send_native_histograms` is on) have no column to go to:
//! they are skipped and counted too. Metadata is ignored.
//!
//! A malformed series (no `__name__`, a label called `value` or `time`, a label that is
//! not UTF-8, a type conflict with the stored schema, a timestamp out of range) is
//! refused alone and listed in [`PromWrite::rejected`], naming the series (1-based, in
//! request order) and its metric; the other series are written, as line protocol
//! writes the valid lines. Prometheus drops a request answered 4xx instead of resending
//! it, so refusing the whole request would lose every good series batched with a bad
//! one, at every send. A body that is not a `WriteRequest` at all, and a write past
//! one of its [`WriteLimits`] (checked while decoding), refuse the whole request.

pub mod proto;
mod wire;

use std::collections::{HashMap, HashSet};

use arrow::record_batch::RecordBatch;

use crate::error::{Error, Result};
use crate::ids::validate_measurement_name;
use crate::limits::{ByteBudget, FileBuckets, WriteLimits};
use crate::rows::{FieldValue, RowBatchBuilder};
use crate::schema::{MeasurementSchema, TIME_COLUMN};
use wire::{Reader, Value};

/// The bits of Prometheus's stale marker (`value.StaleNaN` in its source): a signalling
/// NaN distinct from the NaN a computation produces.
pub const STALE_NAN_BITS: u64 = 0x7ff0_0000_0000_0002;

/// The label that names the metric, and so the measurement.
pub const METRIC_NAME_LABEL: &str = "__name__";

/// The float column each sample is stored in.
pub const VALUE_COLUMN: &str = "value";

/// Nanoseconds per millisecond: remote write's timestamps are milliseconds.
const NS_PER_MS: i64 = 1_000_000;

/// Bytes charged per refused series besides its message: the report's entry.
const REJECTION_BYTES_FIXED: usize = 64;

/// A series that was not written, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedSeries {
    /// 1-based position of the series in the request.
    pub series: usize,
    /// Its metric name, when it has a readable one.
    pub metric: Option<String>,
    /// Why it was refused.
    pub error: String,
}

/// What one remote-write request decoded to.
#[derive(Debug, Default)]
pub struct PromWrite {
    /// One batch per metric, in the order the metrics first appear.
    pub tables: Vec<(String, RecordBatch)>,
    /// Series in the request.
    pub series_total: usize,
    /// Series refused, in request order; the other series are in `tables`.
    pub rejected: Vec<RejectedSeries>,
    /// Stale markers skipped (not rows).
    pub stale_samples_skipped: u64,
    /// Native-histogram samples skipped (Quiver stores float samples only).
    pub histograms_skipped: u64,
}

/// Decodes a `WriteRequest` (protobuf, already decompressed). `stored` gives a
/// measurement's current schema: a `value` column stored as anything but float, or a
/// label stored as a field, refuses that series naming the column. A request with no
/// samples (Prometheus sends metadata-only requests) decodes to no tables.
pub fn decode_prom_write(
    payload: &[u8],
    limits: &WriteLimits,
    stored: &dyn Fn(&str) -> Option<MeasurementSchema>,
) -> Result<PromWrite> {
    let mut decoder = Decoder {
        limits: *limits,
        stored,
        files: FileBuckets::new(limits),
        budget: ByteBudget::new(limits),
        builders: HashMap::new(),
        order: Vec::new(),
        measurements: HashSet::new(),
        out: PromWrite::default(),
    };
    let mut request = Reader::new(payload);
    while let Some((field, value)) = request
        .next_field()
        .map_err(|e| invalid(format!("the body is not a WriteRequest protobuf: {e}")))?
    {
        if field != 1 {
            continue; // metadata (3) and fields of later versions
        }
        decoder.out.series_total += 1;
        let series_number = decoder.out.series_total;
        let Value::Bytes(series) = value else {
            return Err(invalid(format!(
                "series {series_number}: expected a message, got {}",
                value.wire_name()
            )));
        };
        match decoder.series(series) {
            Ok(()) => {}
            Err(Refusal::Request(e)) => return Err(e),
            Err(Refusal::Series(error, metric)) => {
                // The report is part of what the write holds in memory.
                decoder.budget.charge(
                    REJECTION_BYTES_FIXED + error.len() + metric.as_ref().map_or(0, String::len),
                )?;
                decoder.out.rejected.push(RejectedSeries {
                    series: series_number,
                    metric,
                    error,
                });
            }
        }
    }
    for name in std::mem::take(&mut decoder.order) {
        if let Some(builder) = decoder.builders.remove(&name) {
            if let Some(batch) = builder.finish()? {
                decoder.out.tables.push((name, batch));
            }
        }
    }
    decoder.files.finish()?;
    Ok(decoder.out)
}

fn invalid(message: String) -> Error {
    Error::InvalidPayload(format!("prometheus remote write: {message}"))
}

struct Decoder<'s> {
    limits: WriteLimits,
    stored: &'s dyn Fn(&str) -> Option<MeasurementSchema>,
    files: FileBuckets,
    budget: ByteBudget,
    builders: HashMap<String, RowBatchBuilder>,
    order: Vec<String>,
    measurements: HashSet<String>,
    out: PromWrite,
}

/// Why a series was not written: the series alone, or the whole request.
enum Refusal {
    /// This series is refused (why, and its metric when known); the others go on.
    Series(String, Option<String>),
    /// The request is refused: a limit, or a bug.
    Request(Error),
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Self {
        Refusal::Request(e)
    }
}

impl Decoder<'_> {
    /// One `TimeSeries`, refused as a whole or written as a whole: its labels first
    /// (wherever they are in the message), then every sample's time is checked, then
    /// each sample becomes a row (the builder validates a row before it touches a
    /// column, and every sample of a series has the same labels).
    fn series(&mut self, series: &[u8]) -> std::result::Result<(), Refusal> {
        let refuse = |name: Option<&str>, message: String| {
            Refusal::Series(message, name.map(str::to_string))
        };
        let mut name: Option<&str> = None;
        let mut tags: Vec<(&str, &str)> = Vec::new();
        let mut reader = Reader::new(series);
        while let Some((field, value)) = reader.next_field().map_err(|e| refuse(None, e))? {
            match (field, value) {
                (1, Value::Bytes(label)) => {
                    let (key, value) = label_of(label).map_err(|e| refuse(name, e))?;
                    if key == METRIC_NAME_LABEL {
                        if name.replace(value).is_some() {
                            return Err(refuse(name, "two __name__ labels".into()));
                        }
                        continue;
                    }
                    if tags.len() >= self.limits.columns_per_table_max {
                        return Err(refuse(
                            name,
                            format!(
                                "more labels than a measurement may have columns \
                                 (columns_per_table_max = {}); drop labels with relabelling",
                                self.limits.columns_per_table_max
                            ),
                        ));
                    }
                    tags.push((key, value));
                }
                (2, Value::Bytes(_)) => {} // samples: the next passes
                (1 | 2, other) => {
                    return Err(refuse(
                        name,
                        format!("field {field} must be a message, got {}", other.wire_name()),
                    ))
                }
                (4, _) => self.out.histograms_skipped += 1,
                _ => {} // exemplars (3) and fields of later versions
            }
        }
        let Some(metric) = name else {
            return Err(refuse(None, "no __name__ label (the metric name)".into()));
        };
        validate_measurement_name(metric).map_err(|e| refuse(name, e.to_string()))?;
        for (key, _) in &tags {
            if *key == VALUE_COLUMN || *key == TIME_COLUMN {
                return Err(refuse(
                    name,
                    format!(
                        "label {key:?} collides with the column Quiver stores the sample's \
                         {key} in; rename it with write_relabel_configs"
                    ),
                ));
            }
        }
        for sample in samples(series) {
            let (_, time_ms) = sample_of(sample).map_err(|e| refuse(name, e))?;
            time_ms.checked_mul(NS_PER_MS).ok_or_else(|| {
                refuse(
                    name,
                    format!("timestamp {time_ms} ms is outside 1677..2262"),
                )
            })?;
        }
        for sample in samples(series) {
            let (value, time_ms) = sample_of(sample).map_err(|e| refuse(name, e))?;
            if value.to_bits() == STALE_NAN_BITS {
                self.out.stale_samples_skipped += 1;
                continue;
            }
            let time_ns = time_ms.saturating_mul(NS_PER_MS);
            self.files.insert(time_ns)?;
            self.push(metric, time_ns, &tags, value)
                .map_err(|e| match e {
                    Error::InvalidPayload(message) => refuse(name, message),
                    other => Refusal::Request(other),
                })?;
        }
        Ok(())
    }

    /// Appends one sample to its metric's builder, charging the write's byte budget.
    fn push(
        &mut self,
        metric: &str,
        time_ns: i64,
        tags: &[(&str, &str)],
        value: f64,
    ) -> Result<()> {
        if !self.builders.contains_key(metric) {
            if self.measurements.len() >= self.limits.measurements_per_write_max {
                return Err(self.limits.too_many_measurements(metric));
            }
            self.measurements.insert(metric.to_string());
            let mut builder = RowBatchBuilder::new(metric, false)
                .with_columns_max(self.limits.columns_per_table_max);
            if let Some(schema) = (self.stored)(metric) {
                builder = builder.with_stored_schema(schema);
            }
            self.order.push(metric.to_string());
            self.builders.insert(metric.to_string(), builder);
        }
        let Some(builder) = self.builders.get_mut(metric) else {
            return Err(Error::InvalidPayload(format!(
                "builder for {metric:?} lost"
            )));
        };
        let before = builder.bytes_when_finished();
        builder
            .push_row(time_ns, tags, &[(VALUE_COLUMN, FieldValue::Float(value))])
            .map_err(|e| Error::InvalidPayload(e.to_string()))?;
        self.budget.recharge(before, builder.bytes_when_finished())
    }
}

/// The `Sample` messages of a series already read once (so well-formed).
fn samples(series: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut reader = Reader::new(series);
    std::iter::from_fn(move || loop {
        match reader.next_field() {
            Ok(Some((2, Value::Bytes(sample)))) => return Some(sample),
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => return None,
        }
    })
}

/// A `Label` message: its name and value, both UTF-8.
fn label_of(label: &[u8]) -> std::result::Result<(&str, &str), String> {
    let mut name: &[u8] = &[];
    let mut value: &[u8] = &[];
    let mut reader = Reader::new(label);
    while let Some((field, v)) = reader.next_field()? {
        match (field, v) {
            (1, Value::Bytes(b)) => name = b,
            (2, Value::Bytes(b)) => value = b,
            (1 | 2, other) => {
                return Err(format!(
                    "a label's field {field} must be a string, got {}",
                    other.wire_name()
                ))
            }
            _ => {}
        }
    }
    let name = std::str::from_utf8(name).map_err(|_| "a label name is not UTF-8".to_string())?;
    if name.is_empty() {
        return Err("a label has an empty name".into());
    }
    let value = std::str::from_utf8(value)
        .map_err(|_| format!("the value of label {name:?} is not UTF-8"))?;
    Ok((name, value))
}

/// A `Sample` message: its value and its timestamp in milliseconds (both 0 when
/// absent, as protobuf defaults say).
fn sample_of(sample: &[u8]) -> std::result::Result<(f64, i64), String> {
    let mut value = 0.0;
    let mut time_ms = 0i64;
    let mut reader = Reader::new(sample);
    while let Some((field, v)) = reader.next_field()? {
        match (field, v) {
            (1, Value::Fixed64(bits)) => value = f64::from_bits(bits),
            // int64 travels as its two's-complement bits in a varint.
            (2, Value::Varint(raw)) => time_ms = raw as i64,
            (1 | 2, other) => {
                return Err(format!(
                    "a sample's field {field} has the wrong wire type ({})",
                    other.wire_name()
                ))
            }
            _ => {}
        }
    }
    Ok((value, time_ms))
}

#[cfg(test)]
mod tests;
