use arrow::array::{Array, AsArray};
use arrow::datatypes::{Float64Type, Int32Type, TimestampNanosecondType};
use prost::Message;

use crate::schema::{canonical_schema, ColumnKind, FieldType};

use super::proto::{Label, Sample, TimeSeries, WriteRequest};
use super::*;

fn series(labels: &[(&str, &str)], samples: &[(f64, i64)]) -> TimeSeries {
    TimeSeries {
        labels: labels
            .iter()
            .map(|(n, v)| Label {
                name: n.to_string(),
                value: v.to_string(),
            })
            .collect(),
        samples: samples
            .iter()
            .map(|&(value, timestamp)| Sample { value, timestamp })
            .collect(),
    }
}

fn decode(request: &WriteRequest) -> Result<PromWrite> {
    decode_prom_write(&request.encode_to_vec(), &WriteLimits::default(), &|_| None)
}

/// The one refused series of `request` (which must have exactly one): its message.
fn error(request: &WriteRequest) -> String {
    let out = decode(request).unwrap();
    assert_eq!(out.rejected.len(), 1, "{:?}", out.rejected);
    let r = &out.rejected[0];
    format!("series {} ({:?}): {}", r.series, r.metric, r.error)
}

#[test]
fn series_become_rows_of_their_metric_with_labels_as_tags() {
    let request = WriteRequest {
        timeseries: vec![
            series(
                &[("__name__", "up"), ("job", "prom"), ("instance", "a:9090")],
                &[(1.0, 1_700_000_000_000), (0.0, 1_700_000_015_000)],
            ),
            series(
                &[("__name__", "temp"), ("room", "k")],
                &[(21.5, 1_700_000_000_123)],
            ),
            series(
                &[("job", "q"), ("__name__", "up")],
                &[(1.0, 1_700_000_000_000)],
            ),
        ],
    };
    let out = decode(&request).unwrap();
    assert_eq!(out.stale_samples_skipped, 0);
    let names: Vec<&str> = out.tables.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(names, ["up", "temp"]);
    let up = &out.tables[0].1;
    assert_eq!(up.num_rows(), 3);
    let time = up["time"].as_primitive::<TimestampNanosecondType>();
    assert_eq!(time.value(1), 1_700_000_015_000_000_000);
    let value = up["value"].as_primitive::<Float64Type>();
    assert_eq!(value.values().to_vec(), vec![1.0, 0.0, 1.0]);
    let instance = up["instance"].as_dictionary::<Int32Type>();
    assert!(
        instance.is_valid(0) && instance.is_null(2),
        "missing label is null"
    );
    let temp = &out.tables[1].1;
    assert_eq!(
        temp["time"]
            .as_primitive::<TimestampNanosecondType>()
            .value(0),
        1_700_000_000_123_000_000
    );
}

#[test]
fn stale_markers_are_skipped_and_counted_but_other_nans_are_values() {
    let stale = f64::from_bits(STALE_NAN_BITS);
    let request = WriteRequest {
        timeseries: vec![series(
            &[("__name__", "m")],
            &[
                (1.0, 1_000),
                (stale, 2_000),
                (f64::NAN, 3_000),
                (stale, 4_000),
            ],
        )],
    };
    let out = decode(&request).unwrap();
    assert_eq!(out.stale_samples_skipped, 2);
    let batch = &out.tables[0].1;
    assert_eq!(batch.num_rows(), 2);
    assert!(batch["value"]
        .as_primitive::<Float64Type>()
        .value(1)
        .is_nan());
}

#[test]
fn a_request_without_samples_decodes_to_nothing() {
    // Prometheus sends metadata-only requests (field 3) every minute.
    let mut body = WriteRequest::default().encode_to_vec();
    body.extend_from_slice(&[0x1a, 0x02, 0x08, 0x01]);
    let out = decode_prom_write(&body, &WriteLimits::default(), &|_| None).unwrap();
    assert!(out.tables.is_empty());
    let only_stale = WriteRequest {
        timeseries: vec![series(
            &[("__name__", "m")],
            &[(f64::from_bits(STALE_NAN_BITS), 1)],
        )],
    };
    let out = decode(&only_stale).unwrap();
    assert!(out.tables.is_empty());
    assert_eq!(out.stale_samples_skipped, 1);
}

#[test]
fn malformed_series_are_refused_alone_naming_the_series() {
    let no_name = WriteRequest {
        timeseries: vec![
            series(&[("__name__", "ok")], &[(1.0, 1)]),
            series(&[("job", "x")], &[(1.0, 1)]),
            series(&[("__name__", "ok"), ("job", "y")], &[(2.0, 2)]),
        ],
    };
    let out = decode(&no_name).unwrap();
    assert_eq!(out.series_total, 3);
    assert_eq!(
        out.rejected,
        vec![RejectedSeries {
            series: 2,
            metric: None,
            error: "no __name__ label (the metric name)".into()
        }]
    );
    assert_eq!(
        out.tables[0].1.num_rows(),
        2,
        "the series around it are written"
    );
    let value_label = WriteRequest {
        timeseries: vec![series(&[("__name__", "m"), ("value", "x")], &[(1.0, 1)])],
    };
    let message = error(&value_label);
    assert!(
        message.contains("series 1 (Some(\"m\"))") && message.contains("\"value\""),
        "{message}"
    );
    // One bad timestamp refuses its whole series, the earlier samples included.
    let overflow = WriteRequest {
        timeseries: vec![series(
            &[("__name__", "m")],
            &[(1.0, 1), (1.0, i64::MAX / 10)],
        )],
    };
    assert!(error(&overflow).contains("outside"), "{}", error(&overflow));
    assert!(decode(&overflow).unwrap().tables.is_empty());
    let duplicate = WriteRequest {
        timeseries: vec![series(
            &[("__name__", "m"), ("a", "1"), ("a", "2")],
            &[(1.0, 1)],
        )],
    };
    assert!(
        error(&duplicate).contains("duplicate"),
        "{}",
        error(&duplicate)
    );
}

#[test]
fn bytes_that_are_not_a_write_request_are_refused() {
    for body in [
        &b"\xff\xff\xff"[..],
        b"\x0a\x10short",
        b"hello world",
        b"\x0b",
    ] {
        let err = decode_prom_write(body, &WriteLimits::default(), &|_| None).unwrap_err();
        assert!(matches!(err, Error::InvalidPayload(_)), "{err}");
    }
    // Invalid UTF-8 in a label value refuses that series.
    let body = [0x0a, 0x08, 0x0a, 0x06, 0x0a, 0x01, b'a', 0x12, 0x01, 0xff];
    let out = decode_prom_write(&body, &WriteLimits::default(), &|_| None).unwrap();
    assert!(
        out.rejected[0].error.contains("UTF-8"),
        "{:?}",
        out.rejected
    );
}

#[test]
fn limits_are_checked_while_decoding() {
    let limits = WriteLimits {
        measurements_per_write_max: 1,
        ..WriteLimits::default()
    };
    let request = WriteRequest {
        timeseries: vec![
            series(&[("__name__", "a")], &[(1.0, 1)]),
            series(&[("__name__", "b")], &[(1.0, 1)]),
        ],
    };
    let err = decode_prom_write(&request.encode_to_vec(), &limits, &|_| None).unwrap_err();
    assert!(
        err.to_string().contains("measurements_per_write_max"),
        "{err}"
    );
    let limits = WriteLimits {
        write_files_max: 1,
        ..WriteLimits::default()
    };
    let request = WriteRequest {
        timeseries: vec![series(&[("__name__", "a")], &[(1.0, 0), (1.0, 3_600_000)])],
    };
    let err = decode_prom_write(&request.encode_to_vec(), &limits, &|_| None).unwrap_err();
    assert!(err.to_string().contains("write_files_max"), "{err}");
}

#[test]
fn a_value_stored_as_integer_is_a_conflict() {
    let integer = canonical_schema([("value", ColumnKind::Field(FieldType::Integer))]);
    let stored = MeasurementSchema::default()
        .merge("m", &integer)
        .unwrap()
        .unwrap();
    let request = WriteRequest {
        timeseries: vec![series(&[("__name__", "m")], &[(1.0, 1)])],
    };
    let out = decode_prom_write(&request.encode_to_vec(), &WriteLimits::default(), &|_| {
        Some(stored.clone())
    })
    .unwrap();
    assert!(out.tables.is_empty());
    assert_eq!(out.rejected[0].metric.as_deref(), Some("m"));
    assert!(
        out.rejected[0].error.contains("\"value\""),
        "{:?}",
        out.rejected
    );
}
