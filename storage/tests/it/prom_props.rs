//! Property: random remote-write requests, encoded by prost from Prometheus's message
//! definitions, decode to exactly the samples sent (stale markers skipped and counted),
//! one measurement per metric with each series' labels as its tags.

use std::collections::BTreeMap;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Float64Type, Int32Type, TimestampNanosecondType};
use proptest::prelude::*;
use prost::Message;
use quiver_storage::prom_remote::proto::{Label, Sample, TimeSeries, WriteRequest};
use quiver_storage::prom_remote::STALE_NAN_BITS;
use quiver_storage::{decode_prom_write, WriteLimits};

const METRICS: [&str; 3] = ["up", "http_requests_total", "node_load1"];
const LABELS: [&str; 4] = ["job", "instance", "code", "le"];
const START_MS: i64 = 1_700_000_000_000;

#[derive(Debug, Clone)]
struct Series {
    metric: usize,
    labels: BTreeMap<usize, String>,
    samples: Vec<(f64, i64)>,
}

fn sample_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => -1e12f64..1e12,
        1 => Just(f64::from_bits(STALE_NAN_BITS)),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
    ]
}

fn series() -> impl Strategy<Value = Series> {
    (
        0..METRICS.len(),
        proptest::collection::btree_map(0..LABELS.len(), "[a-z0-9:/._-]{0,12}", 0..4),
        proptest::collection::vec((sample_value(), 0i64..3 * 3_600_000), 0..6),
    )
        .prop_map(|(metric, labels, samples)| Series {
            metric,
            labels,
            samples: samples
                .into_iter()
                .map(|(v, offset)| (v, START_MS + offset))
                .collect(),
        })
}

fn encode(all: &[Series]) -> Vec<u8> {
    let request = WriteRequest {
        timeseries: all
            .iter()
            .map(|s| {
                let mut labels = vec![Label {
                    name: "__name__".into(),
                    value: METRICS[s.metric].into(),
                }];
                labels.extend(s.labels.iter().map(|(k, v)| Label {
                    name: LABELS[*k].into(),
                    value: v.clone(),
                }));
                TimeSeries {
                    labels,
                    samples: s
                        .samples
                        .iter()
                        .map(|&(value, timestamp)| Sample { value, timestamp })
                        .collect(),
                }
            })
            .collect(),
    };
    request.encode_to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn requests_decode_to_exactly_the_samples_sent(all in proptest::collection::vec(series(), 0..12)) {
        let out = decode_prom_write(&encode(&all), &WriteLimits::default(), &|_| None).unwrap();
        prop_assert!(out.rejected.is_empty(), "{:?}", out.rejected);
        prop_assert_eq!(out.series_total, all.len());
        let stale = all.iter().flat_map(|s| &s.samples).filter(|(v, _)| v.to_bits() == STALE_NAN_BITS).count();
        prop_assert_eq!(out.stale_samples_skipped as usize, stale);
        for (m, metric) in METRICS.iter().enumerate() {
            // What this metric's rows must be: its series in order, their samples in
            // order, stale markers left out.
            let expected: Vec<(&Series, f64, i64)> = all
                .iter()
                .filter(|s| s.metric == m)
                .flat_map(|s| s.samples.iter().map(move |&(v, t)| (s, v, t)))
                .filter(|(_, v, _)| v.to_bits() != STALE_NAN_BITS)
                .collect();
            let batch = out.tables.iter().find(|(name, _)| name == metric).map(|(_, b)| b);
            let Some(batch) = batch else {
                prop_assert!(expected.is_empty(), "{metric} missing");
                continue;
            };
            prop_assert_eq!(batch.num_rows(), expected.len());
            let time = batch["time"].as_primitive::<TimestampNanosecondType>();
            let value = batch["value"].as_primitive::<Float64Type>();
            for (row, (series, v, t)) in expected.iter().enumerate() {
                prop_assert_eq!(time.value(row), t * 1_000_000);
                prop_assert_eq!(value.value(row).to_bits(), v.to_bits());
                for (k, label) in LABELS.iter().enumerate() {
                    let got = batch.column_by_name(label).map(|c| {
                        let dict = c.as_dictionary::<Int32Type>();
                        dict.is_valid(row).then(|| {
                            let key = dict.keys().value(row) as usize;
                            dict.values().as_string::<i32>().value(key).to_string()
                        })
                    });
                    prop_assert_eq!(got.flatten(), series.labels.get(&k).cloned(), "{} row {}", label, row);
                }
            }
        }
    }

    #[test]
    fn corrupted_requests_never_panic(all in proptest::collection::vec(series(), 1..4), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = encode(&all);
        for (at, byte) in flips {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let _ = decode_prom_write(&bytes, &WriteLimits::default(), &|_| None);
        bytes.truncate(bytes.len() / 2);
        let _ = decode_prom_write(&bytes, &WriteLimits::default(), &|_| None);
    }
}
