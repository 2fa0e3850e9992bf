//! `time_bucket(interval, timestamp [, origin])`, with DuckDB's argument order and origins.
//!
//! It is DataFusion's `date_bin` with a different default origin: DuckDB aligns buckets
//! of days, hours and smaller to Monday 2000-01-03 00:00:00 UTC (so week buckets start on
//! Mondays) and buckets of months or years to 2000-01-01. `date_bin` would use the Unix
//! epoch, a Thursday. An explicit third argument is the origin timestamp, as in both.
//! DuckDB's other three-argument form (an offset interval) is not supported.

use std::sync::Arc;

use arrow::array::{Array, AsArray, PrimitiveArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, TimeUnit, TimestampNanosecondType};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions::datetime::date_bin::DateBinFunc;
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// 2000-01-03T00:00:00Z, DuckDB's origin for buckets without months.
const ORIGIN_DAYS_NS: i64 = 946_857_600_000_000_000;
/// 2000-01-01T00:00:00Z, DuckDB's origin for month and year buckets.
const ORIGIN_MONTHS_NS: i64 = 946_684_800_000_000_000;

/// The `time_bucket` scalar function, ready to register.
pub(crate) fn time_bucket() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(TimeBucket {
        date_bin: DateBinFunc::new(),
    }))
}

#[derive(Debug)]
struct TimeBucket {
    date_bin: DateBinFunc,
}

// Every `TimeBucket` is the same function. The derived `Hash` hashed `date_bin`'s
// signature (dozens of type combinations) each time the planner hashed an expression
// using it: 2.6 % of a node's CPU in a `perf` profile of TSBS `single-groupby-1-1-1`.
impl PartialEq for TimeBucket {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for TimeBucket {}

impl std::hash::Hash for TimeBucket {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "time_bucket".hash(state);
    }
}

impl ScalarUDFImpl for TimeBucket {
    fn name(&self) -> &str {
        "time_bucket"
    }

    fn signature(&self) -> &Signature {
        self.date_bin.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.date_bin.return_type(arg_types)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if args.args.len() == 2 {
            // Time-of-day inputs keep date_bin's midnight origin; timestamps get DuckDB's.
            if let DataType::Timestamp(_, tz) = args.args[1].data_type() {
                let origin_ns = default_origin_ns(&args.args[0]);
                let origin_type = DataType::Timestamp(TimeUnit::Nanosecond, tz.clone());
                args.args
                    .push(ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(
                        Some(origin_ns),
                        tz,
                    )));
                args.arg_fields
                    .push(Arc::new(Field::new("origin", origin_type, false)));
            }
        }
        if let Some(binned) = bin_nanos_in_runs(&args.args) {
            return Ok(binned);
        }
        self.date_bin.invoke_with_args(args)
    }

    fn output_ordering(&self, input: &[ExprProperties]) -> Result<SortProperties> {
        self.date_bin.output_ordering(input)
    }
}

/// `date_bin` of a nanosecond timestamp column by a fixed width (no months), the
/// common case, computed without a division per row: rows arrive sorted by time
/// within each series, so most fall in the bucket of the row before, which is kept
/// with its bounds. Each new bucket is computed as `date_bin` does (rounding down,
/// NULL where the arithmetic overflows), so the answers are `date_bin`'s. `None`
/// when the arguments are not of that shape.
fn bin_nanos_in_runs(args: &[ColumnarValue]) -> Option<ColumnarValue> {
    let [ColumnarValue::Scalar(ScalarValue::IntervalMonthDayNano(Some(width))), ColumnarValue::Array(times), ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(Some(origin), _))] =
        args
    else {
        return None;
    };
    if width.months != 0 {
        return None;
    }
    let stride = i64::from(width.days)
        .checked_mul(86_400_000_000_000)?
        .checked_add(width.nanoseconds)?;
    if stride <= 0 {
        return None;
    }
    let DataType::Timestamp(TimeUnit::Nanosecond, tz) = times.data_type() else {
        return None;
    };
    let times = times.as_primitive_opt::<TimestampNanosecondType>()?;
    let origin = *origin;
    // The bucket of the previous row: [start, end), `end` exclusive.
    let mut bucket: Option<(i64, i64)> = None;
    // Rows whose bucket overflows i64: NULL, as in `date_bin`.
    let mut overflowed = Vec::new();
    let values: Vec<i64> = times
        .values()
        .iter()
        .enumerate()
        .map(|(row, &t)| {
            if let Some((start, end)) = bucket {
                if start <= t && t < end {
                    return start;
                }
            }
            let Some(start) = bin_down(t, origin, stride) else {
                overflowed.push(row);
                return 0;
            };
            // Cache the bucket only where every time in it bins without overflow.
            bucket = start
                .checked_add(stride)
                .filter(|end| (end - 1).checked_sub(origin).is_some())
                .map(|end| (start, end));
            start
        })
        .collect();
    let nulls = if overflowed.is_empty() {
        times.nulls().cloned()
    } else {
        let mut valid = vec![true; times.len()];
        for row in overflowed {
            valid[row] = false;
        }
        NullBuffer::union(times.nulls(), Some(&NullBuffer::from(valid)))
    };
    let binned = PrimitiveArray::<TimestampNanosecondType>::new(values.into(), nulls);
    Some(ColumnarValue::Array(Arc::new(
        binned.with_timezone_opt(tz.clone()),
    )))
}

/// `date_bin`'s arithmetic for a positive width: the start of `t`'s bucket, rounding
/// down, or `None` on overflow (where `date_bin` answers NULL).
fn bin_down(t: i64, origin: i64, stride: i64) -> Option<i64> {
    let diff = t.checked_sub(origin)?;
    let mut delta = diff.checked_sub(diff.checked_rem(stride)?)?;
    if diff < 0 && stride > 1 && delta != diff {
        delta = delta.checked_sub(stride)?;
    }
    origin.checked_add(delta)
}

/// DuckDB's origin for a bucket width: month-based widths align to 2000-01-01.
fn default_origin_ns(width: &ColumnarValue) -> i64 {
    let has_months = match width {
        ColumnarValue::Scalar(ScalarValue::IntervalMonthDayNano(Some(v))) => v.months != 0,
        ColumnarValue::Scalar(ScalarValue::IntervalYearMonth(Some(months))) => *months != 0,
        _ => false,
    };
    if has_months {
        ORIGIN_MONTHS_NS
    } else {
        ORIGIN_DAYS_NS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use arrow::array::{ArrayRef, TimestampNanosecondArray};
    use arrow::datatypes::IntervalMonthDayNano;
    use datafusion::config::ConfigOptions;
    use proptest::prelude::*;

    #[test]
    fn every_time_bucket_is_the_same_function_to_the_planner() {
        use std::hash::{BuildHasher, RandomState};
        let (a, b) = (time_bucket(), time_bucket());
        assert_eq!(a, b, "common subexpressions of two calls are found");
        let hasher = RandomState::new();
        assert_eq!(hasher.hash_one(&a), hasher.hash_one(&b));
        assert_ne!(a.as_ref(), &ScalarUDF::from(DateBinFunc::new()));
    }

    /// DataFusion's `date_bin` on the same arguments.
    fn date_bin(args: Vec<ColumnarValue>) -> ArrayRef {
        let arg_fields = args
            .iter()
            .enumerate()
            .map(|(i, a)| Arc::new(Field::new(format!("a{i}"), a.data_type(), true)))
            .collect();
        let return_field = Arc::new(Field::new("r", args[1].data_type(), true));
        let number_rows = match &args[1] {
            ColumnarValue::Array(a) => a.len(),
            ColumnarValue::Scalar(_) => 1,
        };
        let out = DateBinFunc::new()
            .invoke_with_args(ScalarFunctionArgs {
                args,
                arg_fields,
                number_rows,
                return_field,
                config_options: Arc::new(ConfigOptions::default()),
            })
            .expect("date_bin");
        match out {
            ColumnarValue::Array(a) => a,
            ColumnarValue::Scalar(_) => panic!("an array in, an array out"),
        }
    }

    fn times() -> impl Strategy<Value = Vec<Option<i64>>> {
        let time = prop_oneof![
            // Sorted-ish: near one instant, in runs.
            8 => (0i64..5_000_000_000_000).prop_map(|t| 1_451_606_400_000_000_000 + t),
            // On a 10 s grid, as TSBS writes: bucket edges are hit exactly.
            4 => (0i64..100_000).prop_map(|k| 1_451_606_400_000_000_000 + k * 10_000_000_000),
            // Before the origin, and anywhere at all (overflow: NULL).
            1 => -5_000_000_000_000_000_000i64..900_000_000_000_000_000,
            1 => any::<i64>(),
        ];
        proptest::collection::vec(proptest::option::weighted(0.95, time), 0..300).prop_map(
            |mut v| {
                // Half the time sorted, as files are.
                if v.len() % 2 == 0 {
                    v.sort();
                }
                v
            },
        )
    }

    proptest! {
        /// The run path answers what `date_bin` answers, NULLs and overflows included.
        #[test]
        fn binning_in_runs_equals_date_bin(
            values in times(),
            days in 0i32..3,
            nanos in prop_oneof![
                1i64..1_000,
                1i64..4_000_000_000_000,
                Just(60_000_000_000i64),
                Just(3_600_000_000_000i64),
            ],
            origin in prop_oneof![Just(ORIGIN_DAYS_NS), any::<i64>()],
        ) {
            let times = ColumnarValue::Array(Arc::new(
                TimestampNanosecondArray::from(values).with_timezone("UTC"),
            ));
            let args = vec![
                ColumnarValue::Scalar(ScalarValue::IntervalMonthDayNano(Some(
                    IntervalMonthDayNano::new(0, days, nanos),
                ))),
                times,
                ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(Some(origin), None)),
            ];
            let Some(ColumnarValue::Array(ours)) = bin_nanos_in_runs(&args) else {
                return Err(TestCaseError::fail("the run path declined"));
            };
            prop_assert_eq!(&ours, &date_bin(args));
        }
    }

    proptest! {
        /// A series every 10 s, as collectors write: rows land exactly on bucket edges.
        #[test]
        fn binning_a_series_equals_date_bin(
            start in 0i64..1_000_000,
            len in 0usize..500,
            step_s in prop_oneof![Just(1i64), Just(10)],
            width_s in prop_oneof![Just(10i64), Just(60), Just(300), Just(3600)],
        ) {
            let times: Vec<i64> = (0..len as i64)
                .map(|k| 1_451_606_400_000_000_000 + (start + k * step_s) * 1_000_000_000)
                .collect();
            let args = vec![
                ColumnarValue::Scalar(ScalarValue::IntervalMonthDayNano(Some(
                    IntervalMonthDayNano::new(0, 0, width_s * 1_000_000_000),
                ))),
                ColumnarValue::Array(Arc::new(TimestampNanosecondArray::from(times))),
                ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(Some(ORIGIN_DAYS_NS), None)),
            ];
            let Some(ColumnarValue::Array(ours)) = bin_nanos_in_runs(&args) else {
                return Err(TestCaseError::fail("the run path declined"));
            };
            prop_assert_eq!(&ours, &date_bin(args));
        }
    }

    /// A bucket that fits i64 can hold times whose distance to the origin does not:
    /// those are NULL in `date_bin`, so they must not take the cached bucket.
    #[test]
    fn times_whose_distance_to_the_origin_overflows_are_null() {
        let max = i64::MAX;
        let args = vec![
            ColumnarValue::Scalar(ScalarValue::IntervalMonthDayNano(Some(
                IntervalMonthDayNano::new(0, 0, 100),
            ))),
            ColumnarValue::Array(Arc::new(TimestampNanosecondArray::from(vec![
                max - 1000,
                max - 950,
            ]))),
            ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(Some(-1000), None)),
        ];
        let Some(ColumnarValue::Array(ours)) = bin_nanos_in_runs(&args) else {
            panic!("the run path declined");
        };
        let expected: ArrayRef =
            Arc::new(TimestampNanosecondArray::from(vec![Some(max - 1007), None]));
        assert_eq!(&ours, &expected);
        assert_eq!(&ours, &date_bin(args));
    }

    #[test]
    fn month_widths_are_left_to_date_bin() {
        let args = vec![
            ColumnarValue::Scalar(ScalarValue::IntervalMonthDayNano(Some(
                IntervalMonthDayNano::new(1, 0, 0),
            ))),
            ColumnarValue::Array(Arc::new(TimestampNanosecondArray::from(vec![0i64]))),
            ColumnarValue::Scalar(ScalarValue::TimestampNanosecond(
                Some(ORIGIN_MONTHS_NS),
                None,
            )),
        ];
        assert!(bin_nanos_in_runs(&args).is_none());
    }

    #[test]
    fn origins_are_duckdbs() {
        let monday = chrono::DateTime::parse_from_rfc3339("2000-01-03T00:00:00Z")
            .map(|t| t.timestamp_nanos_opt());
        assert_eq!(monday, Ok(Some(ORIGIN_DAYS_NS)));
        let new_year = chrono::DateTime::parse_from_rfc3339("2000-01-01T00:00:00Z")
            .map(|t| t.timestamp_nanos_opt());
        assert_eq!(new_year, Ok(Some(ORIGIN_MONTHS_NS)));
    }
}
